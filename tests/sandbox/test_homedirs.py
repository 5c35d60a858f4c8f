"""The persistence directories' mount plan (sandbox/homedirs.py); the real mounts, their
refusals and the per-call flip: tests/e2e/test_refuse_before_harm.py."""

from __future__ import annotations

from mtguard_rt.sandbox.homedirs import home_parents, home_tmpfs

HOME = "/home/u"


def test_read_only_dirs_and_noexec_one_level_dirs() -> None:
    got = home_tmpfs({f"{HOME}/.config/systemd/": True, f"{HOME}/.local/bin/": False}, 7, 8)
    assert set(got) == {f"{HOME}/.config/systemd", f"{HOME}/.local/bin"}
    ro, rw = got[f"{HOME}/.config/systemd"].split(","), got[f"{HOME}/.local/bin"].split(",")
    assert "ro" in ro and "rw" not in ro and "exec" in ro
    assert "rw" in rw and "noexec" in rw and "ro" not in rw
    assert {"uid=7", "gid=8", "nosuid", "nodev"} <= set(ro) & set(rw)


def test_parents_are_made_first_and_outside_dirs_are_ignored() -> None:
    dirs = [f"{HOME}/.local/share/systemd/", f"{HOME}/.local/bin/", f"{HOME}/bin", "/etc/x/"]
    assert home_parents(dirs, HOME) == [
        f"{HOME}/.local",
        f"{HOME}/bin",
        f"{HOME}/.local/bin",
        f"{HOME}/.local/share",
        f"{HOME}/.local/share/systemd",
    ]
