"""The CLI wiring: every command resolves to a module with add_arguments and run."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator

import pytest

from muster import cli


@pytest.mark.parametrize("command", cli.COMMANDS, ids=lambda c: " ".join(c.words))
def test_every_command_has_help(command: cli.Command, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*command.words, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert command.help in out


def _walk(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """The parser and, depth first, every parser under it, each with its words."""
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, (*words, name))


# The root, every group and every leaf, found from the parser itself (not from cli.COMMANDS),
# so a command added any way at all is covered.
PARSERS = [words for words, _ in _walk(cli.build_parser())]


def _help(words: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> str:
    """What `muster WORDS --help` prints (a leaf with its real arguments and epilog)."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*words, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_walk_finds_root_groups_and_every_command() -> None:
    assert () in PARSERS
    assert {("cluster",), ("bench",), ("trace",)} <= set(PARSERS)
    leaves = {w for w, p in _walk(cli.build_parser()) if p._subparsers is None}
    assert leaves == {command.words for command in cli.COMMANDS}


@pytest.mark.parametrize("words", PARSERS, ids=lambda w: " ".join(("muster", *w)))
def test_every_parser_help_has_examples(
    words: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    out = _help(words, capsys)
    assert "example" in out, f"`muster {' '.join(words)} --help` shows no examples"
    # The epilog keeps its line breaks (RawDescriptionHelpFormatter): one example a line.
    assert "\nexample" in out
    assert "\n  muster " in out or "\n  kubectl muster " in out or '"$(muster ' in out


def _example_argvs(help_text: str) -> Iterator[list[str]]:
    """Each `muster ...` / `kubectl muster ...` line after "example(s):", as argv."""
    _, _, examples = help_text.partition("example")
    for line in examples.splitlines()[1:]:
        lexer = shlex.shlex(line.strip(), posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        tokens = list(lexer)
        if tokens[:2] == ["kubectl", "muster"]:
            tokens = tokens[1:]
        if tokens[:1] != ["muster"]:
            continue
        argv: list[str] = []
        for token in tokens[1:]:
            if token in {"|", "||", "&&", ";", ">", ">>", "&"}:
                break  # the rest of the line is the shell's, not muster's
            argv.append(token)
        yield argv


@pytest.mark.parametrize("words", PARSERS, ids=lambda w: " ".join(("muster", *w)))
def test_every_example_parses(words: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    """Examples use commands and flags that exist (unknown ones make argparse exit 2)."""
    argvs = list(_example_argvs(_help(words, capsys)))
    assert argvs or words == ("cluster", "env")  # its example is `eval "$(muster cluster env)"`
    for argv in argvs:
        try:
            args = cli.build_parser(argv).parse_args(argv)
        except SystemExit as exc:  # --help
            assert exc.code == 0, f"example `muster {shlex.join(argv)}` does not parse"
        else:
            assert getattr(args, "_command", None) is not None or argv == [], argv
        capsys.readouterr()


def test_group_without_subcommand_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["cluster"]) == 2
    assert "up" in capsys.readouterr().out


def test_unknown_option_is_an_error() -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["cluster", "up", "--no-such-flag"])
    assert exit_info.value.code == 2


def test_module_protocol() -> None:
    for command in cli.COMMANDS:
        module = cli._module(command)
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        assert callable(module.run)
