"""One module per `muster bench` command: each measures one thing and prints figures and a JSON
line. Benches drive the packages below (and a whole `muster run`); nothing below imports them."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence


def bench_main(
    prog: str,
    doc: str | None,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    run: Callable[[argparse.Namespace], int],
    argv: Sequence[str] | None = None,
) -> int:
    """A bench module run on its own (`python -m muster.bench.X`): the arguments `muster bench
    X` takes, the module's docstring as the help."""
    parser = argparse.ArgumentParser(
        prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))
