"""Who the sandboxed server runs as: the workspace's owner, `user` if set, never root.

`sandbox_user()` picks the uid:gid: an explicit `user = "UID[:GID]"`, else the owner of the
workspace, else the unprivileged default (1000:1000). Root is never chosen: a workspace owned
by root (or by anyone other than the chosen user) is shown to the server through an idmapped
mount as its own, so it can write there, git sees no "dubious ownership", and on the host the
files stay as they were owned. `check_reachable()` makes a path the server cannot reach a
start-up error naming the directory and the fix, instead of a server that silently works
somewhere else.
"""

from __future__ import annotations

import os
import stat

import msgspec

from ..errors import SandboxError

DEFAULT_UID = DEFAULT_GID = 1000


class SandboxUser(msgspec.Struct, frozen=True):
    uid: int
    gid: int
    # the workspace's owner (uid, gid) when it differs: the workspace is idmapped to the user
    workspace_owner: tuple[int, int] | None = None

    @property
    def spec(self) -> str:
        return f"{self.uid}:{self.gid}"


def parse_user(text: str) -> tuple[int, int | None]:
    uid_s, _, gid_s = text.partition(":")
    try:
        uid = int(uid_s)
        gid = int(gid_s) if gid_s else None
    except ValueError:
        raise SandboxError(f"user {text!r}: expected UID[:GID] (numbers)") from None
    if uid < 0 or (gid is not None and gid < 0):
        raise SandboxError(f"user {text!r}: ids cannot be negative")
    if uid == 0:
        raise SandboxError(
            f"user {text!r}: the sandboxed server never runs as root; give an unprivileged "
            "UID (a root-owned workspace is mapped to it)"
        )
    return uid, gid


def sandbox_user(user: str | None, workspace: str | None) -> SandboxUser:
    owner = None
    if workspace:
        st = os.stat(workspace)
        owner = (st.st_uid, st.st_gid)
    if user is not None:
        uid, gid = parse_user(user)
        if gid is None:
            gid = owner[1] if owner is not None and owner[0] == uid else uid
    elif owner is not None and owner[0] != 0:
        uid, gid = owner
    else:
        uid, gid = DEFAULT_UID, DEFAULT_GID
    mapped = owner if owner is not None and owner != (uid, gid) else None
    return SandboxUser(uid, gid, mapped)


def searchable(mode: int, owner: tuple[int, int], user: SandboxUser) -> bool:
    """Search (x) permission on a directory with `mode` and `owner` for the user."""
    if owner[0] == user.uid:
        return bool(mode & stat.S_IXUSR)
    if owner[1] == user.gid:
        return bool(mode & stat.S_IXGRP)
    return bool(mode & stat.S_IXOTH)


def check_reachable(
    path: str,
    user: SandboxUser,
    visible_roots: list[str],
    what: str,
    *,
    idmapped: str | None = None,
) -> None:
    """Every directory from the top of the outermost bind mount holding `path` down to `path`
    must be searchable by the sandbox user (directories above a mount are the image's own,
    0755). Entries under `idmapped` (the workspace, when idmapped) show its owner as the
    user."""
    real = os.path.realpath(path)
    roots = [r for r in visible_roots if real == r or real.startswith(r.rstrip("/") + "/")]
    if not roots:
        return
    top = min(roots, key=len)
    parts = real[len(top) :].strip("/").split("/") if real != top else []
    current = top
    for part in ["", *parts]:
        current = os.path.join(current, part) if part else current
        st = os.stat(current)
        if not stat.S_ISDIR(st.st_mode):  # a mounted file: only its directories are entered
            break
        owner = (st.st_uid, st.st_gid)
        inside = idmapped is not None and (current + "/").startswith(idmapped + "/")
        if inside and owner == user.workspace_owner:
            owner = (user.uid, user.gid)  # shown through the idmapped workspace
        if not searchable(st.st_mode, owner, user):
            raise SandboxError(
                f"the sandbox user {user.spec} cannot enter {current} (mode "
                f"{stat.S_IMODE(st.st_mode):o}, owner {st.st_uid}:{st.st_gid}), so the "
                f"{what} {real} is out of its reach; fix: `chmod o+x {current}`, or run the "
                "server as a user who can (--user UID[:GID])"
            )
