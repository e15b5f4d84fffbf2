"""The image `muster image build` writes, run the way a container runtime runs it.

The image is unpacked by umoci into an OCI runtime bundle (`rootfs/` and the `config.json` a
runtime reads: user, entrypoint, environment, working folder). `muster run` is started from it
in a mount namespace of its own: the root filesystem read-only, a tmpfs on /tmp (the
Deployment's emptyDir), /proc and /dev, then chroot as the image's user (65532:65532, not root)
with the image's environment only, and the image's entrypoint with `muster run --local`'s
flags. It shares the host's network, so it reaches the local control plane on loopback and the
apiserver calls its webhook there. It must suspend a labelled Job and admit it.

The image's base layer (Debian and the locked dependencies, a minute or two) is built by
`muster image build`, which `./run test` runs before pytest; the muster layer on top is
rebuilt here if the sources changed (seconds). The session's `muster run --local` registers the
same webhook configuration name, so it is stopped while this module runs.
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.launcher import MusterRun, launch
from kubeport.kubeapi import KubeClient
from muster.commands.image import UID, Image, ImageError, build, unpack
from policies.vocabulary import ADMITTED
from tests import builders
from tests.conftest import MusterProcess
from tests.controller_helpers import create_queue, delete_queue, jobs_path
from tests.kube import create_through_webhook, wait_for

pytestmark = [pytest.mark.cluster]


@pytest.fixture(scope="module")
def image() -> Image:
    try:
        return build(say=lambda _: None, base_only_if_cached=True)
    except ImageError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def bundle(image: Image) -> Path:
    return unpack(image)


def runtime_config(bundle: Path) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((bundle / "config.json").read_text())
    return config


def embedded_kubeconfig(kubeconfig: Path, out: Path) -> Path:
    """The kubeconfig with its certificate files read into it: the files are not in the
    image's root filesystem."""
    config = yaml.safe_load(kubeconfig.read_text())
    for entry, fields in (
        ("clusters", ("certificate-authority",)),
        ("users", ("client-certificate", "client-key")),
    ):
        for item in config[entry]:
            body = item["cluster" if entry == "clusters" else "user"]
            for field in fields:
                if path := body.pop(field, None):
                    body[f"{field}-data"] = base64.b64encode(Path(path).read_bytes()).decode()
    out.write_text(yaml.safe_dump(config))
    return out


def image_command(bundle: Path, kubeconfig: Path) -> list[str]:
    """The words that start the image's entrypoint as a runtime would; `launch` appends the
    flags (`"$@"` of the script)."""
    process = runtime_config(bundle)["process"]
    root = bundle / runtime_config(bundle)["root"]["path"]
    user = f"{process['user']['uid']}:{process['user']['gid']}"
    script = "\n".join(
        [
            f"root={shlex.quote(str(root))}",
            'mkdir -p "$root/dev"',  # a runtime's mount point; the image ships no /dev
            'mount --bind "$root" "$root"',
            'mount -o remount,bind,ro "$root"',
            'mount -t tmpfs -o mode=1777,size=64m tmpfs "$root/tmp"',
            'mount -t proc proc "$root/proc"',
            'mount --rbind /dev "$root/dev"',
            f'install -m 0444 {shlex.quote(str(kubeconfig))} "$root/tmp/kubeconfig"',
            f'exec chroot --userspec={user} "$root" /usr/bin/env -i'
            f" -C {shlex.quote(process['cwd'])} {shlex.join(process['env'])}"
            ' "$@"',
        ]
    )
    return ["unshare", "--mount", "--propagation", "private", "sh", "-ec", script, "image"] + list(
        process["args"]
    )


def test_the_image_runs_muster_as_a_non_root_user(bundle: Path) -> None:
    config = runtime_config(bundle)
    process = config["process"]
    assert process["user"]["uid"] == UID and process["user"]["gid"] == UID
    assert process["args"] == ["muster", "run"]
    env = dict(variable.split("=", 1) for variable in process["env"])
    assert env["PATH"].startswith("/opt/muster/bin:")
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    root = bundle / config["root"]["path"]
    assert f"muster:x:{UID}:{UID}:" in (root / "etc/passwd").read_text()
    assert os.access(root / "opt/muster/bin/muster", os.X_OK)
    assert (root / "opt/muster/bin/muster").read_text().startswith("#!/opt/muster/bin/python")
    # Nothing the user could write to outside /tmp: everything is root's.
    stat = (root / "opt/muster").stat()
    assert (stat.st_uid, stat.st_gid) == (0, 0)


@pytest.fixture(scope="module")
def image_muster(
    bundle: Path, kubeconfig: Path, muster: MusterProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[MusterRun]:
    """`muster run --local` from the image, for this module; the session's is stopped meanwhile."""
    muster.stop()
    inside = embedded_kubeconfig(kubeconfig, tmp_path_factory.mktemp("image") / "kubeconfig")
    run = launch(
        Path("/tmp/kubeconfig"),  # where the script put it, inside the image
        "--deadlock-grace",
        "3",
        command=image_command(bundle, inside),
        timeout=120,
    )
    try:
        yield run
    finally:
        run.stop()
        muster.restart(signal.SIGTERM)


def test_muster_run_from_the_image_suspends_and_admits_a_job(
    image_muster: MusterRun, kube: KubeClient, namespace: str
) -> None:
    queue = f"{namespace}-q"
    create_queue(kube, queue, {"nominal": {"cpu": "8"}})
    try:
        created = create_through_webhook(
            kube, jobs_path(namespace), builders.job("gang", queue, pods=2)
        )
        assert created["spec"]["suspend"] is True  # the image's webhook suspended it
        job = wait_for(
            lambda: (
                (j := kube.get(f"{jobs_path(namespace)}/gang"))["metadata"]
                .get("annotations", {})
                .get(ADMITTED)
                and j
            ),
            timeout=60,
            what="the Job is admitted by muster running from the image",
        )
        assert job["spec"]["suspend"] is False
        wait_for(
            lambda: f"{namespace}/gang admitted 2 of 2 pods" in image_muster.text(),
            timeout=10,
            what="the image's muster logs the admission",
        )
        # It ran as the image's user, not as root.
        uids = subprocess.run(
            ["ps", "-o", "uid=", "-p", str(image_muster.pid)], capture_output=True, text=True
        ).stdout.split()
        assert uids == [str(UID)]
    finally:
        delete_queue(kube, queue)


@pytest.mark.slow
def test_a_second_build_from_the_same_inputs_has_the_same_digest(
    image: Image, tmp_path: Path
) -> None:
    """`muster image build` again, into an empty cache: nothing shared but the inputs."""
    cache = tmp_path / "cache"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "muster.cli", "image", "build"],
            env={**os.environ, "MUSTER_CACHE": str(cache)},
            capture_output=True,
            text=True,
            check=False,
            timeout=1800,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        digest = done.stdout.split()[1]
        rebuilt = Path(done.stdout.split("Debian packages:", 1)[1].split()[0])
        moved = set(rebuilt.read_text().splitlines()) ^ set(image.packages.read_text().splitlines())
        assert digest == image.digest, f"Debian packages that differ (the mirror moved?): {moved}"
    finally:
        shutil.rmtree(cache, ignore_errors=True)
