"""The operators muster admits workloads for, run for real beside the local control plane: the
JobSet controller and the Flux Operator (which makes a MiniCluster's Job).

Their Go modules are not served by the module proxy, so each is built from its source beside
the repository (`../shared/src/<folder>`, as CI and the development machines lay it out;
`$MUSTER_OPERATOR_SOURCES` names another folder holding `jobset/` and `flux-operator/`), once,
into `<cache>/<name>-<version>-<digest>/bin/<component>`: the version pinned in `versions.py`
and a digest of the source, so a changed source builds again and an unchanged one never does.
A checkout without the sources has no operators: `available()` says which are there, every
caller asks it first, and asking for one that is absent is an error that says where it looked.
The build copies the source into a temporary folder first: nothing is written beside it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from simulator.controlplane import versions
from simulator.controlplane.build import (
    BuildError,
    Log,
    cache_root,
    check_go,
    install_binaries,
    run_go,
)

REPO: Final = Path(__file__).resolve().parents[2]
SOURCES_ENV: Final = "MUSTER_OPERATOR_SOURCES"
"""Environment override of the folder holding the operators' sources (default: the `shared/src`
folder beside the repository)."""


@dataclass(frozen=True, slots=True)
class Operator:
    """One operator: what users call it, the process it runs as, where its source and CRDs are."""

    name: str
    """What `--operators` takes."""
    component: str
    """Its process (and binary, log and port) name in the cluster's state directory."""
    folder: str
    """Its source folder in the sources folder."""
    version: str
    crds: tuple[str, ...]
    """Its CRD files, relative to its source folder; installed from there at run time."""
    webhooks: str | None = None
    """Its admission webhooks' kustomize folder, relative to its source folder, if it has any."""
    ldflags: tuple[str, ...] = ()
    """Go linker flags beyond `-s -w` (what its Makefile stamps)."""
    config_api: str | None = None
    """The apiVersion of the controller-runtime Configuration file its manager reads its
    settings from (JobSet's); None for a manager that takes them as flags (the Flux Operator)."""


JOBSET: Final = Operator(
    name="jobset",
    component="jobset-controller",
    folder="jobset",
    version=versions.JOBSET,
    crds=("config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",),
    webhooks="config/components/webhook",
    ldflags=(f"-X sigs.k8s.io/jobset/pkg/version.GitVersion={versions.JOBSET}",),
    config_api="config.jobset.x-k8s.io/v1alpha1",
)
FLUX: Final = Operator(
    name="flux",
    component="flux-operator",
    folder="flux-operator",
    version=versions.FLUX_OPERATOR,
    crds=("config/crd/bases/flux-framework.org_miniclusters.yaml",),
)
OPERATORS: Final = {operator.name: operator for operator in (JOBSET, FLUX)}


def sources_root(environ: Mapping[str, str] | None = None, repo: Path = REPO) -> Path:
    """The folder holding every operator's source: `$MUSTER_OPERATOR_SOURCES`, else
    `shared/src` beside the repository."""
    environ = os.environ if environ is None else environ
    override = environ.get(SOURCES_ENV, "").strip()
    return Path(override).expanduser() if override else repo.parent / "shared" / "src"


def source_of(
    operator: Operator, environ: Mapping[str, str] | None = None, repo: Path = REPO
) -> Path:
    """Where `operator`'s source is (or would be)."""
    return sources_root(environ, repo) / operator.folder


def is_present(source: Path) -> bool:
    """A buildable Go main module: its go.mod and main.go are there."""
    return (source / "go.mod").is_file() and (source / "main.go").is_file()


def available(environ: Mapping[str, str] | None = None, repo: Path = REPO) -> list[Operator]:
    """The operators whose source is present, in catalogue order."""
    return [op for op in OPERATORS.values() if is_present(source_of(op, environ, repo))]


def parse_operators(text: str) -> list[Operator]:
    """`jobset,flux` (or `none`, or `available`: every operator whose source is present) as
    operators; raise ValueError naming what is not one."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if names in ([], ["none"]):
        return []
    if names == ["available"]:
        return available()
    unknown = [name for name in names if name not in OPERATORS]
    if unknown:
        raise ValueError(
            f"--operators {text!r}: {', '.join(map(repr, unknown))} is not an operator; "
            f"name any of {', '.join(OPERATORS)} (comma-separated), `available` or `none`"
        )
    return [OPERATORS[name] for name in dict.fromkeys(names)]


def absent_message(operator: Operator, source: Path) -> str:
    return (
        f"the {operator.name} operator's source is not at {source} (no go.mod and main.go): "
        f"lay it out beside the repository as ../shared/src/{operator.folder}, or set "
        f"${SOURCES_ENV} to the folder holding {operator.folder}/, or leave {operator.name} "
        "out of --operators"
    )


def source_digest(source: Path) -> str:
    """12 hex digits over every file's path and content under `source` (sorted): the cache key
    that makes a changed source build again."""
    digest = hashlib.sha256()
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(source)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def binary_path(operator: Operator, source: Path, root: Path | None = None) -> Path:
    """Where `operator`'s binary built from `source` is cached, whether or not it is there yet."""
    key = f"{operator.name}-{operator.version}-{source_digest(source)}"
    return (root or cache_root()) / key / "bin" / operator.component


def go_minimum(source: Path) -> tuple[int, int]:
    """The Go version the source's go.mod asks for (its `go` line)."""
    match = re.search(r"^go (\d+)\.(\d+)", (source / "go.mod").read_text(), flags=re.MULTILINE)
    if match is None:
        raise BuildError(f"{source / 'go.mod'} has no `go` line")
    return int(match.group(1)), int(match.group(2))


def build_operator(go: str, operator: Operator, source: Path, root: Path, log: Log) -> None:
    """`go build` of the source's main package, in a copy of the source (the module proxy
    supplies its dependencies, its go.sum pins them)."""
    final = binary_path(operator, source, root).parent.parent
    log_file = root / "logs" / f"build-{final.name}.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.write_text("")
    log(f"building {operator.component} {operator.version} from {source} (log: {log_file}) ...")
    with tempfile.TemporaryDirectory(prefix=f"muster-{operator.name}-build-") as tmp:
        work = Path(tmp) / "src"
        shutil.copytree(source, work)
        out = Path(tmp) / "out"
        out.mkdir()
        run_go(
            [
                go,
                "build",
                "-trimpath",
                "-ldflags",
                " ".join(["-s -w", *operator.ldflags]),
                "-o",
                str(out / operator.component),
                ".",
            ],
            cwd=work,
            log_file=log_file,
            step=f"go build of {operator.component} {operator.version}",
            extra_env={"CGO_ENABLED": "0"},
        )
        install_binaries(out, final, [operator.component])


def ensure_operator(operator: Operator, root: Path | None = None, log: Log | None = None) -> Path:
    """`operator`'s binary, built into the cache first if it is not there (a no-op when it is);
    a BuildError when its source is absent or the build fails."""
    root = root or cache_root()
    source = source_of(operator)
    if not is_present(source):
        raise BuildError(absent_message(operator, source))
    binary = binary_path(operator, source, root)
    if os.access(binary, os.X_OK):
        return binary
    go = check_go(go_minimum(source), f"{operator.component} {operator.version}")
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    say = log or (lambda message: print(message, flush=True))
    build_operator(go, operator, source, root, say)
    say(f"  done in {time.monotonic() - started:.0f}s")
    return binary


def ensure_operators(
    operators: Sequence[Operator], root: Path | None = None, log: Log | None = None
) -> dict[str, Path]:
    """Each operator's binary by name, built first where missing."""
    return {op.name: ensure_operator(op, root, log) for op in operators}
