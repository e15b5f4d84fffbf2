"""Build the control-plane binaries from their Go modules, once, into a cache keyed by version.

Three builds, each into its own cache directory so that bumping one version rebuilds only it:

- `k8s-<version>/bin`: kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, built from
  a wrapper module that requires `k8s.io/kubernetes` and replaces every staging module
  `k8s.io/<m>` (the release's own go.mod points them at `./staging/...`, which a module download
  does not have) with `k8s.io/<m> v0.<minor>.<patch>`.
- `etcd-<version>/bin/etcd`: from a wrapper module requiring `go.etcd.io/etcd/server/v3` (its own
  go.mod replaces sibling modules with relative paths, so `go install ...@version` refuses it).
- `kwok-<version>/bin/kwok`: `go install sigs.k8s.io/kwok/cmd/kwok@<version>`.

And one tool that is not part of the control plane, built the same way for the chart's tests:
`helm-<version>/bin/helm` (`go install helm.sh/helm/v3/cmd/helm@<version>`, `ensure_helm`).

A build writes into a temporary directory and is renamed into place only when every binary is
there, so an interrupted build never leaves a cache that looks complete.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from simulator.controlplane import versions

KUBERNETES_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")


class BuildError(RuntimeError):
    """A control-plane build failed; the message says which step, why, and what to do."""


def cache_root() -> Path:
    """Where built binaries live: $MUSTER_CACHE, else $XDG_CACHE_HOME/muster or ~/.cache/muster."""
    if env := os.environ.get("MUSTER_CACHE"):
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "muster"


@dataclass(frozen=True)
class Binaries:
    """Paths of every binary the local control plane runs."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    kwok: Path

    @classmethod
    def at(cls, root: Path | None = None) -> Binaries:
        root = root or cache_root()
        k8s = root / f"k8s-{versions.KUBERNETES}" / "bin"
        etcd = root / f"etcd-{versions.ETCD}" / "bin" / "etcd"
        fallback = root / SYSTEM_ETCD / "bin" / "etcd"
        if not os.access(etcd, os.X_OK) and os.access(fallback, os.X_OK):
            etcd = fallback  # Debian's etcd-server, linked in when the etcd build failed
        return cls(
            etcd=etcd,
            kube_apiserver=k8s / "kube-apiserver",
            kube_controller_manager=k8s / "kube-controller-manager",
            kube_scheduler=k8s / "kube-scheduler",
            kubectl=k8s / "kubectl",
            kwok=root / f"kwok-{versions.KWOK}" / "bin" / "kwok",
        )

    def gated(self) -> dict[str, Path]:
        """The components that take `--feature-gates`, by name."""
        return {
            "kube-apiserver": self.kube_apiserver,
            "kube-controller-manager": self.kube_controller_manager,
            "kube-scheduler": self.kube_scheduler,
        }

    def missing(self) -> list[Path]:
        return [p for p in self.all() if not os.access(p, os.X_OK)]

    def all(self) -> list[Path]:
        return [
            self.etcd,
            self.kube_apiserver,
            self.kube_controller_manager,
            self.kube_scheduler,
            self.kubectl,
            self.kwok,
        ]


Log = Callable[[str], None]

SYSTEM_ETCD = "etcd-system"
"""Cache folder holding a link to the machine's own etcd (Debian's etcd-server, 3.4) when the
etcd build fails: the fallback the foundation issue allows. Delete it to try the build again."""


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def check_go(
    minimum: tuple[int, int] = versions.MIN_GO, needed_by: str = f"Kubernetes {versions.KUBERNETES}"
) -> str:
    """Return the `go` executable, or raise with what to install."""
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            "go not found on PATH: muster builds the local control plane from Go modules; "
            f"install Go >= {minimum[0]}.{minimum[1]} (https://go.dev/dl) "
            "or add it to PATH"
        )
    out = subprocess.run([go, "version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"go(\d+)\.(\d+)", out)
    if not match:
        raise BuildError(f"could not read the Go version from {out.strip()!r}")
    found = (int(match.group(1)), int(match.group(2)))
    if found < minimum:
        raise BuildError(
            f"Go {found[0]}.{found[1]} is too old: {needed_by} needs Go >= "
            f"{minimum[0]}.{minimum[1]}; install a newer Go and re-run"
        )
    return go


def _go_env(workdir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # The wrapper modules have no go.sum; let go record what it downloads. Never fetch another
    # toolchain: the machine's Go is what we checked.
    env["GOFLAGS"] = "-mod=mod"
    env["GOTOOLCHAIN"] = "local"
    env["PWD"] = str(workdir)
    env.update(extra or {})
    return env


def run_go(
    cmd: Sequence[str],
    *,
    cwd: Path,
    log_file: Path,
    step: str,
    extra_env: dict[str, str] | None = None,
) -> None:
    """Run one Go command of a build in `cwd`, its output appended to `log_file`; raise a
    BuildError naming `step`, with the log's last lines (and a hint when a download failed)."""
    with log_file.open("a") as log:
        log.write(f"$ {' '.join(cmd)}\n")
        log.flush()
        proc = subprocess.run(
            list(cmd),
            cwd=cwd,
            env=_go_env(cwd, extra_env),
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if proc.returncode != 0:
        tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-25:])
        hint = ""
        if re.search(r"dial tcp|proxy\.golang\.org|no such host|i/o timeout|403|404", tail):
            hint = (
                "\nhint: a module download failed; check that the Go module proxy is reachable "
                "(go env GOPROXY) and that the pinned versions in "
                "simulator/controlplane/versions.py exist"
            )
        raise BuildError(
            f"{step} failed (exit {proc.returncode}); full log: {log_file}\n"
            f"--- last lines ---\n{tail}{hint}"
        )


def _module_gomod(go: str, module: str, workdir: Path, log_file: Path) -> str:
    """The go.mod of `module` (path@version), downloaded through the module proxy."""
    proc = subprocess.run(
        [go, "mod", "download", "-json", module],
        cwd=workdir,
        env=_go_env(workdir),
        capture_output=True,
        text=True,
        check=False,
    )
    with log_file.open("a") as log:
        log.write(f"$ go mod download -json {module}\n{proc.stdout}{proc.stderr}")
    info = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    if proc.returncode != 0 or "GoMod" not in info:
        raise BuildError(
            f"downloading {module} failed: {info.get('Error') or proc.stderr.strip()}\n"
            "hint: check that the Go module proxy is reachable (go env GOPROXY) and that the "
            "version pinned in simulator/controlplane/versions.py exists"
        )
    return Path(info["GoMod"]).read_text()


def _staging_replaces(go: str, workdir: Path, log_file: Path) -> list[str]:
    """Every `k8s.io/<m>` the Kubernetes release replaces with a local staging path."""
    module = f"k8s.io/kubernetes@{versions.KUBERNETES}"
    gomod = _module_gomod(go, module, workdir, log_file)
    modules = re.findall(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/", gomod, flags=re.MULTILINE)
    if not modules:
        raise BuildError(
            f"{module} go.mod lists no staging replaces; "
            "the wrapper cannot be generated for this release"
        )
    return sorted(set(modules))


def kubernetes_wrapper_gomod(staging_modules: Sequence[str]) -> str:
    staging = versions.staging_version()
    lines = [
        "module muster.dev/build/kubernetes",
        "",
        f"go {versions.MIN_GO[0]}.{versions.MIN_GO[1]}.0",
        "",
        f"require k8s.io/kubernetes {versions.KUBERNETES}",
        "",
        "replace (",
        *(f"\t{m} => {m} {staging}" for m in staging_modules),
        ")",
        "",
    ]
    return "\n".join(lines)


def kubernetes_ldflags() -> str:
    minor = versions.KUBERNETES.lstrip("v").split(".")[1]
    pkg = "k8s.io/component-base/version"
    return " ".join(
        [
            "-s -w",
            f"-X {pkg}.gitVersion={versions.KUBERNETES}",
            f"-X {pkg}.gitMajor=1",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X k8s.io/client-go/pkg/version.gitVersion={versions.KUBERNETES}",
        ]
    )


def install_binaries(tmp_bin: Path, final_dir: Path, names: Sequence[str]) -> None:
    """Move a finished build's `names` from `tmp_bin` into `final_dir/bin` by one rename, so a
    cache directory that exists is complete."""
    for name in names:
        if not (tmp_bin / name).exists():
            raise BuildError(f"build finished but {name} is missing from {tmp_bin}")
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    staged = final_dir.parent / (final_dir.name + ".partial")
    shutil.rmtree(staged, ignore_errors=True)
    shutil.copytree(tmp_bin, staged / "bin")
    shutil.rmtree(final_dir, ignore_errors=True)
    staged.rename(final_dir)


def build_kubernetes(go: str, root: Path, log: Log) -> None:
    final = root / f"k8s-{versions.KUBERNETES}"
    with tempfile.TemporaryDirectory(prefix="muster-k8s-build-") as tmp:
        work = Path(tmp)
        log_file = root / "logs" / f"build-k8s-{versions.KUBERNETES}.log"
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.write_text("")
        log(f"building Kubernetes {versions.KUBERNETES} (log: {log_file}) ...")
        (work / "go.mod").write_text(
            f"module muster.dev/build/probe\n\ngo {versions.MIN_GO[0]}.{versions.MIN_GO[1]}.0\n"
        )
        modules = _staging_replaces(go, work, log_file)
        (work / "go.mod").write_text(kubernetes_wrapper_gomod(modules))
        out = work / "out"
        out.mkdir()
        run_go(
            [
                go,
                "build",
                "-ldflags",
                kubernetes_ldflags(),
                "-o",
                str(out) + "/",
                *(f"k8s.io/kubernetes/cmd/{name}" for name in KUBERNETES_BINARIES),
            ],
            cwd=work,
            log_file=log_file,
            step=f"go build of Kubernetes {versions.KUBERNETES}",
        )
        install_binaries(out, final, KUBERNETES_BINARIES)


def build_etcd(go: str, root: Path, log: Log) -> None:
    final = root / f"etcd-{versions.ETCD}"
    with tempfile.TemporaryDirectory(prefix="muster-etcd-build-") as tmp:
        work = Path(tmp)
        log_file = root / "logs" / f"build-etcd-{versions.ETCD}.log"
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.write_text("")
        log(f"building etcd {versions.ETCD} (log: {log_file}) ...")
        (work / "go.mod").write_text(
            f"module muster.dev/build/etcd\n\ngo 1.24\n\n"
            f"require go.etcd.io/etcd/server/v3 {versions.ETCD}\n"
        )
        out = work / "out"
        out.mkdir()
        run_go(
            [
                go,
                "build",
                "-ldflags",
                "-s -w",
                "-o",
                str(out / "etcd"),
                "go.etcd.io/etcd/server/v3",
            ],
            cwd=work,
            log_file=log_file,
            step=f"go build of etcd {versions.ETCD}",
        )
        install_binaries(out, final, ["etcd"])


def build_kwok(go: str, root: Path, log: Log) -> None:
    final = root / f"kwok-{versions.KWOK}"
    with tempfile.TemporaryDirectory(prefix="muster-kwok-build-") as tmp:
        work = Path(tmp)
        log_file = root / "logs" / f"build-kwok-{versions.KWOK}.log"
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.write_text("")
        log(f"building kwok {versions.KWOK} (log: {log_file}) ...")
        out = work / "out"
        out.mkdir()
        # `go install pkg@version` builds outside any module, so -mod=mod does not apply.
        run_go(
            [
                go,
                "install",
                "-ldflags",
                "-s -w",
                f"sigs.k8s.io/kwok/cmd/kwok@{versions.KWOK}",
            ],
            cwd=work,
            log_file=log_file,
            step=f"go install of kwok {versions.KWOK}",
            extra_env={"GOBIN": str(out), "GOFLAGS": ""},
        )
        install_binaries(out, final, ["kwok"])


def helm_path(root: Path | None = None) -> Path:
    """Where the built `helm` is cached, whether or not it is there yet."""
    return (root or cache_root()) / f"helm-{versions.HELM}" / "bin" / "helm"


def helm_ldflags(helm_gomod: str) -> str:
    """What Helm's Makefile sets: its version, and the Kubernetes version its client-go speaks
    (the default `.Capabilities.KubeVersion` of `helm template`, and what `helm lint` checks
    deprecated APIs against; without it both say Kubernetes 1.20)."""
    match = re.search(r"^\s*k8s\.io/client-go v0\.(\d+)\.", helm_gomod, flags=re.MULTILINE)
    if match is None:
        raise BuildError(f"helm {versions.HELM}'s go.mod requires no k8s.io/client-go v0.x")
    flags = ["-s -w", f"-X helm.sh/helm/v3/internal/version.version={versions.HELM}"]
    for pkg in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        flags += [f"-X {pkg}.k8sVersionMajor=1", f"-X {pkg}.k8sVersionMinor={match.group(1)}"]
    return " ".join(flags)


def build_helm(go: str, root: Path, log: Log) -> None:
    final = helm_path(root).parent.parent
    with tempfile.TemporaryDirectory(prefix="muster-helm-build-") as tmp:
        work = Path(tmp)
        log_file = root / "logs" / f"build-helm-{versions.HELM}.log"
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log_file.write_text("")
        log(f"building helm {versions.HELM} (log: {log_file}) ...")
        (work / "go.mod").write_text("module muster.dev/build/probe\n\ngo 1.26.0\n")
        gomod = _module_gomod(go, f"helm.sh/helm/v3@{versions.HELM}", work, log_file)
        out = work / "out"
        out.mkdir()
        # `go install pkg@version` builds outside any module, so -mod=mod does not apply.
        run_go(
            [
                go,
                "install",
                "-trimpath",
                "-ldflags",
                helm_ldflags(gomod),
                f"helm.sh/helm/v3/cmd/helm@{versions.HELM}",
            ],
            cwd=work,
            log_file=log_file,
            step=f"go install of helm {versions.HELM}",
            extra_env={"GOBIN": str(out), "GOFLAGS": "", "CGO_ENABLED": "0"},
        )
        install_binaries(out, final, ["helm"])


def ensure_helm(root: Path | None = None, log: Log = _stderr) -> Path:
    """`helm`, built into the cache first if it is not there (a no-op when it is)."""
    root = root or cache_root()
    helm = helm_path(root)
    if os.access(helm, os.X_OK):
        return helm
    go = check_go(versions.HELM_MIN_GO, f"helm {versions.HELM}")
    root.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    build_helm(go, root, log)
    log(f"  done in {time.monotonic() - started:.0f}s")
    return helm


def system_etcd() -> tuple[str, str] | None:
    """The machine's own etcd (e.g. Debian's etcd-server) if it is 3.4 or newer: (path, version)."""
    path = shutil.which("etcd")
    if path is None:
        return None
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, check=False, timeout=10
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"etcd Version: (\d+)\.(\d+)\.(\d+)", out)
    if not match or (int(match.group(1)), int(match.group(2))) < (3, 4):
        return None
    return path, ".".join(match.groups())


def _etcd_fallback(root: Path, failure: BuildError, log: Log) -> None:
    """Use the machine's etcd after the etcd build failed, or raise with how to get one."""
    found = system_etcd()
    if found is None:
        raise BuildError(
            f"{failure}\nfallback: no etcd >= 3.4 on PATH either; installing Debian's "
            "etcd-server (apt-get install etcd-server) lets muster use that one instead"
        ) from failure
    path, version = found
    link = root / SYSTEM_ETCD / "bin" / "etcd"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(path)
    log(
        f"warning: the etcd {versions.ETCD} build failed; using the machine's etcd {version} "
        f"({path}) instead. Kubernetes {versions.KUBERNETES} is tested with etcd 3.5; remove "
        f"{link.parent.parent} to try the build again"
    )


def ensure_built(root: Path | None = None, log: Log = _stderr) -> Binaries:
    """Build whatever is missing from the cache; a no-op (and fast) when everything is there."""
    root = root or cache_root()
    binaries = Binaries.at(root)
    missing = binaries.missing()
    if not missing:
        return binaries
    go = check_go()
    root.mkdir(parents=True, exist_ok=True)
    steps: list[tuple[Path, Callable[[str, Path, Log], None]]] = [
        (binaries.etcd, build_etcd),
        (binaries.kube_apiserver, build_kubernetes),
        (binaries.kwok, build_kwok),
    ]
    done: set[Callable[[str, Path, Log], None]] = set()
    for path, builder in steps:
        needed = path in missing or (
            builder is build_kubernetes
            and any(p.parent == binaries.kube_apiserver.parent for p in missing)
        )
        if needed and builder not in done:
            started = time.monotonic()
            try:
                builder(go, root, log)
            except BuildError as exc:
                if builder is not build_etcd:
                    raise
                _etcd_fallback(root, exc, log)
            log(f"  done in {time.monotonic() - started:.0f}s")
            done.add(builder)
    binaries = Binaries.at(root)
    still = binaries.missing()
    if still:
        raise BuildError(f"after building, still missing: {', '.join(map(str, still))}")
    return binaries
