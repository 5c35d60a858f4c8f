"""The default sandbox image, built offline: a minimal rootfs imported into Docker.

The rootfs holds no programs: the host's /usr (and the guard's Python environment) are
bind-mounted read-only at run time, so any server installed on the host runs inside. What it
does hold is a synthesized /etc (no host secrets) and a home directory with canary credentials:
fake but real-looking files, each carrying a unique random marker. The markers are stored as an
image label, so the guard that runs a container knows exactly which strings betray a leak.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import tarfile
import time
from collections.abc import Iterable
from pathlib import Path

from .engine import DockerEngine

IMAGE_REPO = "mtguard-rt/sandbox"
IMAGE_VERSION = "1"
DEFAULT_IMAGE = f"{IMAGE_REPO}:{IMAGE_VERSION}"
CANARY_LABEL = "io.mtguard.canaries"
VERSION_LABEL = "io.mtguard.image-version"

USER, UID, GID = "mtguard", 1000, 1000
HOME = f"/home/{USER}"

# Canary credentials: path -> template; {m} is replaced by that file's marker.
CANARY_TEMPLATES: dict[str, str] = {
    f"{HOME}/.ssh/id_rsa": (
        "-----BEGIN OPENSSH PRIVATE KEY-----\n"
        "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAABlwAAAAdzc2gtcn\n"
        "{m}\n"
        "NhAAAAAwEAAQAAAYEAxq3kT0mYrZbN2c8mtguardcanaryAAAAB3NzaC1yc2EAAAADAQAB\n"
        "-----END OPENSSH PRIVATE KEY-----\n"
    ),
    f"{HOME}/.aws/credentials": (
        "[default]\naws_access_key_id = AKIA{m}\n"
        "aws_secret_access_key = {m}/kWq9Zr3xTq8nPbJ2hGd\nregion = us-east-1\n"
    ),
    f"{HOME}/.env": "DATABASE_URL=postgres://app:{m}@db.internal:5432/app\nSTRIPE_KEY=sk_live_{m}\n",
    f"{HOME}/.bashrc": (
        "# ~/.bashrc\nexport PATH=$HOME/.local/bin:$PATH\nexport HISTTOKEN={m}\nalias ll='ls -l'\n"
    ),
}

_ETC = {
    "passwd": f"root:x:0:0:root:/root:/bin/sh\n{USER}:x:{UID}:{GID}:{USER}:{HOME}:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": f"root:x:0:\n{USER}:x:{GID}:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    "resolv.conf": "nameserver 127.0.0.1\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\nnetworks: files\n",
    "hostname": "sandbox\n",
}
# Copied from the host because programs need them and they carry no secrets.
_HOST_FILES = ["/etc/ld.so.cache", "/etc/ssl/certs/ca-certificates.crt", "/etc/os-release"]


def new_markers() -> dict[str, str]:
    return {path: f"MTGCANARY{secrets.token_hex(8).upper()}" for path in CANARY_TEMPLATES}


def build_rootfs(markers: dict[str, str]) -> bytes:
    """The rootfs tar: mount points, symlinks into /usr, /etc, and the canary home."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:

        def add_dir(name: str, mode: int = 0o755, uid: int = 0) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, mode, uid, uid
            tar.addfile(info)

        def add_file(name: str, data: bytes, mode: int = 0o644, uid: int = 0) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = len(data), mode, uid, uid
            tar.addfile(info, io.BytesIO(data))

        def add_link(name: str, target: str) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(info)

        for d in (
            "usr",
            "etc",
            "etc/ssl",
            "etc/ssl/certs",
            "home",
            "root",
            "opt",
            "proc",
            "sys",
            "dev",
            "run",
            "var",
            "srv",
            "mnt",
            "work",
        ):
            add_dir(d)
        add_dir("tmp", 0o1777)
        add_dir("var/tmp", 0o1777)
        for link, target in (
            ("bin", "usr/bin"),
            ("sbin", "usr/sbin"),
            ("lib", "usr/lib"),
            ("lib64", "usr/lib64"),
        ):
            add_link(link, target)
        for name, text in _ETC.items():
            add_file(f"etc/{name}", text.encode())
        for host_path in _HOST_FILES:
            p = Path(host_path)
            if p.is_file():
                add_file(host_path.lstrip("/"), p.read_bytes())
        alternatives = Path("/etc/alternatives")
        if alternatives.is_dir():
            add_dir("etc/alternatives")
            for entry in sorted(alternatives.iterdir()):
                if entry.is_symlink():
                    add_link(f"etc/alternatives/{entry.name}", os.readlink(entry))
        add_dir(HOME.lstrip("/"), 0o755, UID)
        made = {HOME}
        for path, template in CANARY_TEMPLATES.items():
            parent = str(Path(path).parent)
            if parent not in made:
                mode = 0o700 if parent.endswith(".ssh") else 0o755
                add_dir(parent.lstrip("/"), mode, UID)
                made.add(parent)
            add_file(path.lstrip("/"), template.format(m=markers[path]).encode(), 0o600, UID)
    return buf.getvalue()


def home_archive(
    uid: int, gid: int, markers: dict[str, str], shell: str, dirs: Iterable[str] = ()
) -> bytes:
    """A tar put into a created container before it starts: the home and its canaries owned
    by the sandbox user (uid:gid), and /etc/passwd and /etc/group naming that user; `dirs`:
    more directories of the home, made as the user's (mount points: homedirs.py)."""
    buf, now = io.BytesIO(), int(time.time())
    with tarfile.open(fileobj=buf, mode="w") as tar:

        def add(name: str, data: bytes | None, mode: int, owner: tuple[int, int]) -> None:
            info = tarfile.TarInfo(name.lstrip("/"))
            info.mode, (info.uid, info.gid), info.mtime = mode, owner, now
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))

        passwd = (f"root:x:0:0:root:/root:/bin/sh\n{USER}:x:{uid}:{gid}:{USER}:{HOME}:{shell}\n"
                  "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")  # fmt: skip
        group = f"root:x:0:\n{USER}:x:{gid}:\nnogroup:x:65534:\n" if gid else "root:x:0:\n"
        add("/etc/passwd", passwd.encode(), 0o644, (0, 0))
        add("/etc/group", group.encode(), 0o644, (0, 0))
        add(HOME, None, 0o755, (uid, gid))
        made = {HOME}
        for path, template in CANARY_TEMPLATES.items():
            parent = str(Path(path).parent)
            if parent not in made:
                add(parent, None, 0o700 if parent.endswith(".ssh") else 0o755, (uid, gid))
                made.add(parent)
            if path in markers:
                add(path, template.format(m=markers[path]).encode(), 0o600, (uid, gid))
        for d in dirs:
            if d not in made:
                add(d, None, 0o755, (uid, gid))
                made.add(d)
    return buf.getvalue()


def canaries_of(image_info: dict[str, object]) -> dict[str, str]:
    """Canary path -> marker, from an inspected image's labels ({} for foreign images)."""
    config = image_info.get("Config") or {}
    labels = (config.get("Labels") if isinstance(config, dict) else None) or {}
    raw = labels.get(CANARY_LABEL)
    return dict(json.loads(raw)) if raw else {}


async def ensure_image(engine: DockerEngine, *, force: bool = False) -> tuple[str, bool]:
    """Build and import the default image unless it exists. Returns (image, built)."""
    from ..errors import ImageNotFound

    if not force:
        try:
            info = await engine.image_inspect(DEFAULT_IMAGE)
            if canaries_of(info):
                return DEFAULT_IMAGE, False
        except ImageNotFound:
            pass
    markers = new_markers()
    changes = [
        f"LABEL {CANARY_LABEL}={json.dumps(json.dumps(markers))}",
        f"LABEL {VERSION_LABEL}={IMAGE_VERSION}",
        f"USER {UID}:{GID}",
        f"WORKDIR {HOME}",
        f"ENV HOME={HOME} USER={USER}",
    ]
    await engine.image_import(build_rootfs(markers), IMAGE_REPO, IMAGE_VERSION, changes)
    return DEFAULT_IMAGE, True
