"""The parts of `muster image build` that decide its digest and its cache, without building:
the deterministic layer tar, the cache keys, the locks, the tool check, pruning. The build
itself and the image running muster: tests/cluster/test_image.py."""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
import time
import tomllib
from pathlib import Path

import pytest

from muster.commands import image


def _layer(root: Path, out: Path, **kwargs: bool) -> bytes:
    image.write_tar(root, out, **kwargs)
    return out.read_bytes()


def test_a_layer_depends_on_the_content_only(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "opt/muster/bin").mkdir(parents=True)
    (root / "opt/muster/bin/muster").write_text("#!/opt/muster/bin/python\n")
    (root / "opt/muster/bin/muster").chmod(0o755)
    (root / "opt/muster/a.txt").write_text("a")
    (root / "opt/muster/python").symlink_to("/usr/bin/python3")
    os.chown(root / "opt/muster/a.txt", 1234, 5678)
    first = _layer(root, tmp_path / "1.tar")
    for path in root.rglob("*"):
        os.utime(path, (time.time(), time.time()), follow_symlinks=False)
    assert _layer(root, tmp_path / "2.tar") == first
    with tarfile.open(tmp_path / "1.tar") as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == ["opt", "opt/muster", "opt/muster/a.txt", "opt/muster/bin"] + [
        "opt/muster/bin/muster",
        "opt/muster/python",
    ]
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {
        (0, 0, "", "", image.epoch())
    }
    by_name = {m.name: m for m in members}
    assert by_name["opt/muster/bin/muster"].mode == 0o755
    assert by_name["opt/muster/python"].linkname == "/usr/bin/python3"


def test_source_date_epoch_sets_every_timestamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "root").mkdir()
    (tmp_path / "root/f").write_text("x")
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    image.write_tar(tmp_path / "root", tmp_path / "l.tar")
    with tarfile.open(tmp_path / "l.tar") as tar:
        assert tar.getmember("f").mtime == 1700000000
    assert "SOURCE_DATE_EPOCH=1700000000" in " ".join(image.base_command(image.MIRROR))
    assert image.config_command("0.1.0").count("--created=2023-11-14T22:13:20Z") == 1


def test_an_overlay_whiteout_is_refused(tmp_path: Path) -> None:
    upper = tmp_path / "upper"
    (upper / "etc").mkdir(parents=True)
    os.mknod(upper / "etc/passwd", 0o600 | 0o020000, os.makedev(0, 0))  # overlayfs: deleted
    with pytest.raises(image.ImageError, match="would delete from the base"):
        image.write_tar(upper, tmp_path / "l.tar", overlay=True)


def test_the_base_key_follows_the_inputs_not_the_build_folders(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = image.base_key(image.MIRROR)
    assert re.fullmatch(r"[0-9a-f]{16}", key)
    assert image.base_key(image.MIRROR) == key
    # The temporary folders of a build are not inputs: the key sees placeholders.
    assert "{stage}" in " ".join(image.base_command(image.MIRROR))
    assert image.base_key("http://snapshot.debian.org/archive/debian/20250520T000000Z") != key
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1")
    assert image.base_key(image.MIRROR) != key


def test_a_snapshot_mirror_is_used_for_security_updates_too() -> None:
    snapshot = "http://snapshot.debian.org/archive/debian/20250520T000000Z"
    command = image.base_command(snapshot)
    assert command[-3:] == [
        f"deb {snapshot} bookworm main",
        f"deb {snapshot} bookworm-updates main",
        "deb http://snapshot.debian.org/archive/debian-security/20250520T000000Z "
        "bookworm-security main",
    ]


def test_the_wheel_is_built_from_every_file_the_packages_ship() -> None:
    files = [p.relative_to(image.REPO).as_posix() for p in image._source_files()]
    assert files[:2] == ["pyproject.toml", "README.md"]
    assert "admission/crd/queues.muster.dev.yaml" in files  # package data
    assert "muster/commands/image.py" in files
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]
    assert not [f for f in files if f.split("/")[0] in ("tests", "charts", "manifests")]
    tops = {f.split("/")[0] for f in files[2:]}
    assert tops == {"muster", "admission", "webhook", "kubeport", "policies", "simulator"}


def _pins(lock: Path) -> dict[str, str]:
    pins = {}
    for line in lock.read_text().splitlines():
        if line.startswith("#"):
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+) --hash=sha256:([0-9a-f]{64})", line)
        assert match, f"{lock.name}: {line!r} is not NAME==VERSION --hash=sha256:..."
        pins[re.sub(r"[-_.]+", "-", match[1]).lower()] = match[2]
    return pins


def test_the_locks_pin_every_dependency_with_its_hash() -> None:
    runtime = _pins(image.LOCK)
    project = tomllib.loads((image.REPO / "pyproject.toml").read_text())
    for requirement in project["project"]["dependencies"]:
        name = re.split(r"[<>=!~ \[;]", requirement, maxsplit=1)[0]
        assert re.sub(r"[-_.]+", "-", name).lower() in runtime, f"{name} is not in the lock"
    assert "muster" not in runtime  # the checkout's own wheel is the second layer
    tools = _pins(image.BUILD_LOCK)
    assert set(tools) == {"pip", "setuptools"}


def test_without_the_tools_the_build_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(image.ImageError) as failed:
        image.check_tools()
    message = str(failed.value)
    if os.geteuid() == 0:
        assert message == (
            "mmdebstrap, umoci, unshare, chroot not found: apt-get install -y mmdebstrap umoci "
            "(Debian and Ubuntu package them)"
        )
    else:
        assert message.startswith("muster image build needs root")


def test_prune_keeps_the_current_the_newest_and_the_recently_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("MUSTER_CACHE", str(tmp_path))
    now = time.time()
    made = []
    for i in range(6):
        folder = tmp_path / f"image-{hashlib.sha256(bytes([i])).hexdigest()[:16]}"
        folder.mkdir()
        age = 7200 - 600 * i if i < 4 else 60  # four old ones, two used a minute ago
        os.utime(folder, (now - age, now - age))
        made.append(folder)
    base = tmp_path / f"image-base-{'0' * 16}"
    base.mkdir()
    os.utime(base, (now - 9999, now - 9999))
    removed = image.prune("image", current=made[0])
    # Kept: the current one, the two newest, and anything used within the hour.
    assert sorted(removed) == sorted(made[1:4])
    assert base.exists()  # another kind
