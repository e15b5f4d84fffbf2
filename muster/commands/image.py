"""`muster image build|lock`: muster's container image, built without a container daemon.

Owns the image recipe, from a checkout of this repository (it needs root, `mmdebstrap` and
`umoci`: `apt-get install mmdebstrap umoci`). Two layers, each cached under ~/.cache/muster/ by a
digest of its inputs, so a code change rebuilds only the second:

1. **base** (`image-base-KEY/`): a minimal Debian (`mmdebstrap --variant=essential`, merged
   /usr, no docs but copyright files, no man pages or locales) with Debian's python3, a virtual
   environment /opt/muster holding muster's dependencies at the versions and sha256 of
   image/requirements.txt (installed by a pinned pip inside the chroot, offline, from wheels
   downloaded and checked beforehand), and the user muster (uid and gid 65532). Key: the
   mmdebstrap command line, the two lock files and SOURCE_DATE_EPOCH.
2. **muster** (`image-KEY/`): the wheel of this checkout, built by the pinned setuptools and
   installed by the same pip into that environment, in a chroot over an overlay of the base:
   the overlay's upper directory is the layer. Key: the base layer, the package sources,
   pyproject.toml and the image configuration.

umoci writes the OCI layout (`oci/`, tag = muster's version; user 65532:65532, entrypoint
`muster run`, PATH and PYTHON* in the environment, the ports) and the layout as one tarball,
`muster-VERSION.oci.tar` (`skopeo copy oci-archive:muster-VERSION.oci.tar docker://REGISTRY/...`).

**Reproducible**: every timestamp is SOURCE_DATE_EPOCH (default 2025-01-01; mmdebstrap clamps
the base's, the muster layer's and the archive's are written so, the configuration's `created`
and history use it), layers are tar files in name order with numeric owners 0/0, gzip by umoci
is deterministic, bytecode is compiled with SOURCE_DATE_EPOCH set (so hash-checked .pyc, no
embedded mtimes), the Python packages are fixed by version and hash, and nothing random (no
machine-id, no apt lists or logs) stays. The Debian packages are the mirror's current ones: two
builds from the same inputs give the same digest while the mirror does not change (give a
snapshot.debian.org URL with --mirror to fix it for good); the build writes their versions to
`packages.txt` beside the image, so a changed digest can be traced to a changed package.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from muster import __version__
from simulator.controlplane.build import cache_root

REPO: Final = Path(__file__).resolve().parents[2]
LOCK: Final = REPO / "image" / "requirements.txt"
BUILD_LOCK: Final = REPO / "image" / "build-requirements.txt"
SUITE: Final = "bookworm"
MIRROR: Final = "http://deb.debian.org/debian"
SECURITY_MIRROR: Final = "http://deb.debian.org/debian-security"
PYTHON: Final = "3.11"
"""Debian bookworm's python3; the lock's wheels are for it (cp311, manylinux x86_64)."""
PLATFORM: Final = "manylinux_2_36_x86_64"
"""glibc 2.36 (bookworm): any manylinux wheel up to it runs there."""
PLATFORM_FLAGS: Final = tuple(
    flag
    for tag in [f"manylinux_2_{minor}_x86_64" for minor in range(36, 4, -1)]
    + ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    for flag in ("--platform", tag)
)
"""pip's --platform takes each tag it may pick literally: every manylinux tag up to glibc 2.36."""
UID: Final = 65532
"""The non-root user, as in the Deployment's securityContext (runAsUser: 65532)."""
VENV: Final = "/opt/muster"
ENTRYPOINT: Final = ("muster", "run")
ENVIRONMENT: Final = (
    f"PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    # The Deployment's root filesystem is read-only: nothing may try to write bytecode.
    "PYTHONDONTWRITEBYTECODE=1",
    "PYTHONUNBUFFERED=1",
)
PORTS: Final = ("9443/tcp", "8081/tcp", "8082/tcp", "8083/tcp")
DEFAULT_EPOCH: Final = 1735689600
"""2025-01-01T00:00:00Z: every timestamp in the image, unless SOURCE_DATE_EPOCH says another."""
EXCLUDED_PATHS: Final = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
)


Say = Callable[[str], None]


class ImageError(RuntimeError):
    """The image cannot be built; the message says why and what to do."""


@dataclass(frozen=True)
class Image:
    """A built image: its OCI layout, the layout as one tarball, its manifest digest."""

    root: Path
    tag: str

    @property
    def layout(self) -> Path:
        return self.root / "oci"

    @property
    def archive(self) -> Path:
        return self.root / f"muster-{self.tag}.oci.tar"

    @property
    def digest(self) -> str:
        return (self.root / "digest").read_text().strip()

    @property
    def packages(self) -> Path:
        """The Debian packages of the base, `name version` a line."""
        return self.root / "packages.txt"


def epoch() -> int:
    return int(os.environ.get("SOURCE_DATE_EPOCH", DEFAULT_EPOCH))


def _iso(seconds: int) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()


def _run(cmd: Sequence[str], log: Path, env: dict[str, str] | None = None) -> None:
    with log.open("a") as out:
        out.write(f"$ {shlex.join(cmd)}\n")
        out.flush()
        done = subprocess.run(list(cmd), stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise ImageError(
            f"{cmd[0]} failed (exit {done.returncode}); full log: {log}\n--- last lines ---\n{tail}"
        )


def check_tools() -> None:
    """Root, and the Debian tools the build runs; raise with how to get them."""
    if os.geteuid() != 0:
        raise ImageError(
            "muster image build needs root: mmdebstrap --mode=root, chroot and an overlay mount "
            "(run it as root, or in a privileged Debian container)"
        )
    missing = [t for t in ("mmdebstrap", "umoci", "unshare", "chroot") if not shutil.which(t)]
    if missing:
        raise ImageError(
            f"{', '.join(missing)} not found: apt-get install -y mmdebstrap umoci "
            "(Debian and Ubuntu package them)"
        )
    if not LOCK.exists() or not (REPO / "pyproject.toml").exists():
        raise ImageError(f"{LOCK} not found: muster image build runs from a checkout of muster")


# -- wheels ---------------------------------------------------------------------------------------


def download_wheels(log: Path) -> Path:
    """Every wheel both lock files name, downloaded once into the cache and checked by pip
    against the locks' sha256."""
    wheels = cache_root() / "image-wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    for lock in (LOCK, BUILD_LOCK):
        _run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check"]
            + ["--no-deps", "--only-binary=:all:", "--require-hashes", "--dest", str(wheels)]
            + [*PLATFORM_FLAGS, "--python-version", PYTHON, "--implementation", "cp"]
            + ["--requirement", str(lock)],
            log,
        )
    return wheels


def _pip_wheel(wheels: Path) -> Path:
    """The pinned pip's wheel: run as `python pip.whl/pip`, it installs without being installed."""
    found = sorted(wheels.glob(f"pip-{_pinned(BUILD_LOCK, 'pip')}-*.whl"))
    if not found:
        raise ImageError(f"no wheel of pip {_pinned(BUILD_LOCK, 'pip')} in {wheels}")
    return found[0]


def _pinned(lock: Path, name: str) -> str:
    for line in lock.read_text().splitlines():
        if line.startswith(f"{name}=="):
            return line.split("==", 1)[1].split()[0]
    raise ImageError(f"{lock} pins no {name}")


def _locked_wheels(wheels: Path, lock: Path) -> list[Path]:
    """The wheel files a lock pins, by their sha256 (pip download checked them)."""
    hashes = {
        part.split(":", 1)[1] for part in lock.read_text().split() if part.startswith("--hash=")
    }
    chosen = [w for w in sorted(wheels.glob("*.whl")) if _file_sha256(w) in hashes]
    if len(chosen) != sum(1 for line in lock.read_text().splitlines() if "==" in line):
        raise ImageError(f"the wheels in {wheels} do not match {lock}: delete the folder")
    return chosen


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _have_locked_wheels(wheels: Path) -> bool:
    try:
        _locked_wheels(wheels, LOCK)
        _locked_wheels(wheels, BUILD_LOCK)
    except ImageError:
        return False
    return True


# -- the base layer -------------------------------------------------------------------------------

STAGE: Final = "{stage}"
"""Stands for the host folder of wheels in the base's command line (a temporary folder: it must
not change the key)."""


def base_command(
    mirror: str, stage: str = STAGE, pip: str = "PIP", target: str = "{target}"
) -> list[str]:
    """The mmdebstrap command line of the base layer, up to its output file. The hooks run on
    the host with the root filesystem in "$1": the virtual environment is made and filled by
    Debian's python3 inside the chroot, offline, from the wheels staged in /tmp/wheels."""
    install = (
        f'chroot "$1" env -i HOME=/nonexistent PATH=/usr/bin:/bin SOURCE_DATE_EPOCH={epoch()} '
        f"PYTHONDONTWRITEBYTECODE=1 {VENV}/bin/python /tmp/wheels/{pip}/pip install --quiet "
        "--no-index --no-deps --no-cache-dir --disable-pip-version-check --require-hashes "
        "--find-links /tmp/wheels --requirement /tmp/wheels/requirements.txt"
    )
    return [
        "mmdebstrap",
        "--mode=root",
        "--variant=essential",
        "--include=python3",
        "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
        "--skip=output/dev",
        *(f"--dpkgopt={option}" for option in EXCLUDED_PATHS),
        f'--customize-hook=mkdir -p "$1/tmp/wheels" && cp -a {stage}/. "$1/tmp/wheels/"',
        f'--customize-hook=chroot "$1" python3 -m venv --without-pip {VENV}',
        f"--customize-hook={install}",
        '--customize-hook=rm -rf "$1/tmp/wheels"',
        f"--customize-hook=echo 'muster:x:{UID}:{UID}:muster:/nonexistent:/usr/sbin/nologin'"
        ' >> "$1/etc/passwd"',
        f"--customize-hook=echo 'muster:x:{UID}:' >> \"$1/etc/group\"",
        "--format=tar",
        SUITE,
        target,
    ] + _sources(mirror)


def _sources(mirror: str) -> list[str]:
    security = (
        SECURITY_MIRROR if mirror == MIRROR else mirror.replace("/debian", "/debian-security")
    )
    return [
        f"deb {mirror} {SUITE} main",
        f"deb {mirror} {SUITE}-updates main",
        f"deb {security} {SUITE}-security main",
    ]


def base_key(mirror: str) -> str:
    return _digest(
        json.dumps(base_command(mirror)), LOCK.read_bytes(), BUILD_LOCK.read_bytes(), str(epoch())
    )[:16]


def ensure_base(mirror: str, wheels: Path, log: Path, say: Say) -> Path:
    """The base layer's cache folder (`rootfs/`, `oci/` tagged `base`, `packages.txt`), built
    first if it is not there."""
    final = cache_root() / f"image-base-{base_key(mirror)}"
    if (final / "oci" / "index.json").exists():
        final.touch()
        say(f"base layer: cached in {final}")
        return final
    started = time.monotonic()
    say(f"base layer: building {final.name} (Debian {SUITE} from {mirror}; log: {log}) ...")
    staged = final.with_name(final.name + ".partial")
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="muster-image-") as tmp:
        stage = Path(tmp) / "wheels"
        stage.mkdir()
        for wheel in _locked_wheels(wheels, LOCK) + [_pip_wheel(wheels)]:
            shutil.copy2(wheel, stage / wheel.name)
        shutil.copy2(LOCK, stage / "requirements.txt")
        layer = Path(tmp) / "base.tar"
        command = base_command(mirror, str(stage), _pip_wheel(wheels).name, str(layer))
        _run(command, log, env={**os.environ, "SOURCE_DATE_EPOCH": str(epoch())})
        (staged / "rootfs").mkdir()
        _run(["tar", "-xf", str(layer), "-C", str(staged / "rootfs"), "--numeric-owner"], log)
        _new_layout(staged / "oci", "base", log)
        _add_layer(staged / "oci", "base", layer, f"mmdebstrap {SUITE}: python3, {VENV}", log)
    (staged / "packages.txt").write_text(_packages(staged / "rootfs"))
    shutil.rmtree(final, ignore_errors=True)
    staged.rename(final)
    prune("image-base", final)
    say(f"base layer: built in {time.monotonic() - started:.0f}s")
    return final


def _packages(rootfs: Path) -> str:
    """`name version` of every installed Debian package, in name order."""
    rows: list[str] = []
    name = ""
    for line in (rootfs / "var/lib/dpkg/status").read_text().splitlines():
        if line.startswith("Package: "):
            name = line.split(": ", 1)[1]
        elif line.startswith("Version: "):
            rows.append(f"{name} {line.split(': ', 1)[1]}")
    return "".join(f"{row}\n" for row in sorted(rows))


# -- the muster layer -----------------------------------------------------------------------------


def _package_dirs() -> list[Path]:
    """The top-level packages pyproject.toml ships (tool.setuptools.packages.find include)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted(
        d
        for d in REPO.iterdir()
        if d.is_dir() and (d / "__init__.py").exists() and any(d.match(p) for p in patterns)
    )


def _source_files() -> Iterator[Path]:
    """What the wheel is built from: pyproject.toml, README.md and every file of the packages
    (bytecode caches aside), in path order."""
    yield REPO / "pyproject.toml"
    yield REPO / "README.md"
    for package in _package_dirs():
        for path in sorted(package.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                yield path


def install_command(pip: str, wheel: str) -> list[str]:
    """How the muster wheel goes into the virtual environment, inside the chroot."""
    return [
        "/usr/bin/env",
        "-i",
        "HOME=/nonexistent",
        "PATH=/usr/bin:/bin",
        f"SOURCE_DATE_EPOCH={epoch()}",
        "PYTHONDONTWRITEBYTECODE=1",
        f"{VENV}/bin/python",
        f"/tmp/{pip}/pip",
        "install",
        "--quiet",
        "--no-index",
        "--no-deps",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--no-warn-script-location",
        f"/tmp/{wheel}",
    ]


def config_command(tag: str) -> list[str]:
    """umoci's configuration of the image: user, entrypoint, environment, ports, labels."""
    created = _iso(epoch())
    command = ["umoci", "config", "--image", f"oci:{tag}", f"--config.user={UID}:{UID}"]
    command += [f"--config.entrypoint={word}" for word in ENTRYPOINT]
    command += [f"--config.env={variable}" for variable in ENVIRONMENT]
    command += [f"--config.exposedports={port}" for port in PORTS]
    command += ["--config.workingdir=/", f"--created={created}", f"--history.created={created}"]
    labels = {
        "org.opencontainers.image.title": "muster",
        "org.opencontainers.image.description": "Gang-aware queue admission for Kubernetes",
        "org.opencontainers.image.version": __version__,
        "org.opencontainers.image.licenses": "Apache-2.0",
    }
    command += [f"--config.label={k}={v}" for k, v in labels.items()]
    return [*command, "--history.created_by=muster image build: configuration"]


def image_key(base: str) -> str:
    h = hashlib.sha256()
    for path in _source_files():
        h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    recipe = json.dumps([install_command("PIP", "WHEEL"), config_command(__version__)])
    return _digest(base, h.hexdigest(), recipe)[:16]


def build_wheel(work: Path, wheels: Path, log: Path) -> Path:
    """muster's wheel, from a copy of exactly the hashed sources, by the pinned setuptools."""
    source = work / "source"
    for path in _source_files():
        target = source / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    tools = work / "build-venv"
    python = str(tools / "bin" / "python")
    _run([sys.executable, "-m", "venv", "--without-pip", str(tools)], log)
    _run(
        [python, str(_pip_wheel(wheels) / "pip"), "install", "--quiet", "--no-index"]
        + ["--find-links", str(wheels), "--require-hashes", "--requirement", str(BUILD_LOCK)],
        log,
    )
    out = work / "wheel"
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch()), "PIP_NO_INPUT": "1"}
    _run(
        [python, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"]
        + ["--no-index", "--disable-pip-version-check", "--wheel-dir", str(out), str(source)],
        log,
        env=env,
    )
    (wheel,) = out.glob("muster-*.whl")
    return wheel


def build_muster_layer(base: Path, work: Path, wheels: Path, log: Path) -> Path:
    """The muster layer as a tar file: pip installs the wheel in a chroot over an overlay of
    the base, in a mount namespace of its own; the overlay's upper folder is what changed."""
    wheel = build_wheel(work, wheels, log)
    stage = work / "stage"
    stage.mkdir()
    shutil.copy2(wheel, stage / wheel.name)
    pip = _pip_wheel(wheels)
    shutil.copy2(pip, stage / pip.name)
    upper, scratch, merged = (work / name for name in ("upper", "overlay-work", "merged"))
    for folder in (upper, scratch, merged):
        folder.mkdir()
    script = "\n".join(
        [
            f"mount -t overlay overlay -o lowerdir={base / 'rootfs'},upperdir={upper},"
            f"workdir={scratch} {merged}",
            # /tmp of the base is empty: the staged wheels there leave nothing in the layer.
            f"mount --bind {stage} {merged}/tmp",
            f"exec chroot {merged} {shlex.join(install_command(pip.name, wheel.name))}",
        ]
    )
    _run(["unshare", "--mount", "--propagation", "private", "sh", "-ec", script], log)
    layer = work / "muster.tar"
    write_tar(upper, layer, overlay=True)
    return layer


def write_tar(root: Path, out: Path, overlay: bool = False) -> None:
    """`root`'s content as a tar file that depends on nothing but the content: entries in name
    order, owners 0/0 by number, every mtime SOURCE_DATE_EPOCH. `overlay`: refuse an overlay
    whiteout or opaque folder (the layer would delete something of the base)."""
    mtime = epoch()
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in _walk(root):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(root)))
            if overlay and (info.ischr() or _opaque(path)):
                raise ImageError(f"{path}: the muster layer would delete from the base")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = mtime
            if info.isreg():
                with path.open("rb") as content:
                    tar.addfile(info, content)
            else:
                tar.addfile(info)


def _walk(root: Path) -> Iterator[Path]:
    for path in sorted(root.iterdir()):
        yield path
        if path.is_dir() and not path.is_symlink():
            yield from _walk(path)


def _opaque(path: Path) -> bool:
    try:
        return os.getxattr(path, "trusted.overlay.opaque", follow_symlinks=False) == b"y"
    except OSError:
        return False


# -- the image ------------------------------------------------------------------------------------


def _new_layout(layout: Path, tag: str, log: Path) -> None:
    _run(["umoci", "init", "--layout", str(layout)], log)
    _run(["umoci", "new", "--image", f"{layout}:{tag}"], log)


def _add_layer(
    layout: Path, tag: str, layer: Path, what: str, log: Path, new_tag: str = ""
) -> None:
    created = _iso(epoch())
    command = ["umoci", "raw", "add-layer", "--image", f"{layout}:{tag}"]
    command += [f"--history.created={created}", f"--history.created_by={what}"]
    _run([*command, *(["--tag", new_tag] if new_tag else []), str(layer)], log)


def ensure_image(base: Path, wheels: Path, log: Path, say: Say) -> Image:
    """The image's cache folder, assembled on the base (a copy of its layout) if not there."""
    tag = __version__
    final = cache_root() / f"image-{image_key(base.name)}"
    if (final / "digest").exists():
        final.touch()  # in use: prune() keeps it
        say(f"muster layer: cached in {final}")
        return Image(final, tag)
    started = time.monotonic()
    staged = final.with_name(final.name + ".partial")
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="muster-image-") as tmp:
        layer = build_muster_layer(base, Path(tmp), wheels, log)
        layout = staged / "oci"
        shutil.copytree(base / "oci", layout)
        _add_layer(layout, "base", layer, f"muster {__version__} wheel in {VENV}", log, tag)
    command = config_command(tag)
    command[command.index("--image") + 1] = f"{layout}:{tag}"
    _run(command, log)
    _run(["umoci", "rm", "--image", f"{layout}:base"], log)
    _run(["umoci", "gc", "--layout", str(layout)], log)
    index = json.loads((layout / "index.json").read_text())
    (manifest,) = index["manifests"]
    write_tar(layout, staged / f"muster-{tag}.oci.tar")
    shutil.copy2(base / "packages.txt", staged / "packages.txt")
    (staged / "digest").write_text(manifest["digest"] + "\n")
    shutil.rmtree(final, ignore_errors=True)
    staged.rename(final)
    prune("image", final)
    say(f"muster layer and image: built in {time.monotonic() - started:.0f}s")
    return Image(final, tag)


def build(mirror: str = MIRROR, say: Say = print, base_only_if_cached: bool = False) -> Image:
    """Build what is missing of the image (a no-op when both layers are cached) and return it.
    `base_only_if_cached`: raise instead of building a missing base (minutes)."""
    check_tools()
    logs = cache_root() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / "image-build.log"
    log.write_text("")
    wheels = cache_root() / "image-wheels"
    if not _have_locked_wheels(wheels):
        say("downloading the locked wheels ...")
        download_wheels(log)
    final = cache_root() / f"image-base-{base_key(mirror)}"
    if base_only_if_cached and not (final / "oci" / "index.json").exists():
        raise ImageError(
            f"the image's base layer is not built ({final}): run `muster image build` "
            "(a few minutes, once; cached by its inputs)"
        )
    base = ensure_base(mirror, wheels, log, say)
    return ensure_image(base, wheels, log, say)


def prune(kind: str, current: Path, keep: int = 2, idle: float = 3600) -> list[Path]:
    """Remove cached builds of `kind` ("image" or "image-base") other than `current` and the
    `keep` newest, once unused for `idle` seconds (a layer and its unpacked root filesystem
    take hundreds of MB, and every code change makes a new image). Returns what it removed."""
    pattern = re.compile(rf"{kind}-[0-9a-f]{{16}}")
    others = sorted(
        (p for p in cache_root().iterdir() if pattern.fullmatch(p.name) and p != current),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    removed = [p for p in others[keep:] if time.time() - p.stat().st_mtime > idle]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed


def unpack(image: Image) -> Path:
    """The image unpacked as an OCI runtime bundle (`rootfs/` and `config.json`: the user,
    entrypoint, environment and working folder a runtime would use), cached beside it."""
    bundle = image.root / "bundle"
    if (bundle / "config.json").exists():
        return bundle
    staged = image.root / "bundle.partial"
    shutil.rmtree(staged, ignore_errors=True)
    log = cache_root() / "logs" / "image-unpack.log"
    log.write_text("")
    _run(["umoci", "unpack", "--image", f"{image.layout}:{image.tag}", str(staged)], log)
    staged.rename(bundle)
    return bundle


# -- the locks ------------------------------------------------------------------------------------


def resolve(requirements: Sequence[str]) -> list[tuple[str, str, str]]:
    """(name, version, sha256 of the wheel) of everything pip's resolver picks for the image's
    Python and platform, the local project itself left out."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        + ["--disable-pip-version-check", "--report", "-", "--only-binary=:all:"]
        + [*PLATFORM_FLAGS, "--python-version", PYTHON, "--implementation", "cp"]
        + ["--abi", f"cp{PYTHON.replace('.', '')}", *requirements],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise ImageError(f"pip could not resolve {' '.join(requirements)}:\n{done.stderr}")
    rows = []
    for item in json.loads(done.stdout)["install"]:
        archive = item["download_info"].get("archive_info")
        if archive is None:  # the checkout itself
            continue
        sha256 = archive.get("hashes", {}).get("sha256") or archive["hash"].split("=", 1)[1]
        rows.append((item["metadata"]["name"], item["metadata"]["version"], sha256))
    return sorted(rows, key=lambda row: row[0].lower())


def lock_text(rows: Sequence[tuple[str, str, str]], what: str) -> str:
    header = (
        f"# {what}, for CPython {PYTHON} on {PLATFORM} (Debian {SUITE}'s python3).\n"
        "# Written by `muster image lock` from pyproject.toml; pip installs them with\n"
        "# --require-hashes, so the image holds exactly these files.\n"
    )
    return header + "".join(f"{n}=={v} --hash=sha256:{h}\n" for n, v, h in rows)


def write_locks() -> tuple[int, int]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    runtime = resolve([str(REPO)])
    tools = resolve(["pip", *project["build-system"]["requires"]])
    LOCK.parent.mkdir(exist_ok=True)
    LOCK.write_text(lock_text(runtime, "muster's dependencies in its image"))
    BUILD_LOCK.write_text(lock_text(tools, "What builds muster's wheel and installs the image"))
    return len(runtime), len(tools)


# -- the command line -----------------------------------------------------------------------------


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Build:
    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--mirror",
            default=MIRROR,
            help=f"Debian mirror (default {MIRROR}; a snapshot.debian.org/archive/debian/STAMP "
            "URL fixes the Debian packages for good)",
        )
        parser.add_argument(
            "--out", type=Path, default=None, help="also copy the OCI archive into this folder"
        )
        parser.epilog = (
            "Builds muster's image without a container daemon (needs root, mmdebstrap and\n"
            "umoci): a minimal Debian with python3 and muster's locked dependencies, then this\n"
            "checkout's wheel; both layers are cached in ~/.cache/muster by their inputs.\n"
            "Writes an OCI layout and the same as one tarball, and prints the digest.\n\n"
            "examples:\n  muster image build\n  muster image build --out dist/\n"
            "  skopeo copy oci-archive:dist/muster-0.1.0.oci.tar docker://REGISTRY/muster:0.1.0"
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        started = time.monotonic()
        try:
            image = build(args.mirror, say=_err)
        except ImageError as exc:
            _err(f"muster image build: {exc}")
            return 1
        archive = image.archive
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            archive = Path(shutil.copy2(image.archive, args.out / image.archive.name))
        print(f"muster:{image.tag} {image.digest}")
        print(f"  OCI layout:  {image.layout}")
        print(f"  OCI archive: {archive}")
        print(f"  Debian packages: {image.packages}")
        _err(f"({time.monotonic() - started:.0f}s)")
        return 0


class Lock:
    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.epilog = (
            f"Resolves muster's dependencies (pyproject.toml) for the image's Python {PYTHON}\n"
            f"and writes {LOCK.relative_to(REPO)} (and the build tools to\n"
            f"{BUILD_LOCK.relative_to(REPO)}) with each wheel's sha256. Run it after changing\n"
            "the dependencies; the next `muster image build` rebuilds the base layer.\n\n"
            "example:\n  muster image lock"
        )

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        try:
            runtime, tools = write_locks()
        except ImageError as exc:
            _err(f"muster image lock: {exc}")
            return 1
        print(f"{LOCK.relative_to(REPO)}: {runtime} packages")
        print(f"{BUILD_LOCK.relative_to(REPO)}: {tools} packages")
        return 0


SUBCOMMANDS = {"build": Build, "lock": Lock}
