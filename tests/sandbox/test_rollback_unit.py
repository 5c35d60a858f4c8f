"""Workspace rollback on a real filesystem, without Docker: the shadow's snapshot, change
detection (scan and given paths), restore and commit, its bounds, the protocol a supervisor
follows (begin / capture / settle) and the errors a bad configuration gets."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import anyio
import pytest

from mtguard_rt.config import load_config
from mtguard_rt.errors import PolicyError, RollbackError
from mtguard_rt.model import BehaviorTree, DeclaredCall, FileEvent, ProcessNode
from mtguard_rt.sandbox import SandboxConfig
from mtguard_rt.sandbox.rollback import open_rollback, tree_paths
from mtguard_rt.sandbox.shadow import ShadowLimits, WorkspaceShadow

TIMEOUT_S = 30.0


def manifest(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry: type, mode, owner, mtime, and content hash / link target. Directory sizes
    are left out (ext4 never shrinks a directory)."""
    out: dict[str, tuple[object, ...]] = {}
    for path in [root, *sorted(root.rglob("*"))]:
        st = path.lstat()
        rel = str(path.relative_to(root))
        meta = (st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns)
        if path.is_symlink():
            out[rel] = ("link", os.readlink(path), *meta)
        elif path.is_dir():
            out[rel] = ("dir", *meta)
        elif path.is_fifo():
            out[rel] = ("fifo", *meta)
        else:
            out[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest(), *meta)
    return out


def populate(ws: Path) -> None:
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "mod.py").write_text("print('hi')\n")
    (ws / "data.bin").write_bytes(os.urandom(300_000))
    (ws / "notes.txt").write_text("keep me\n")
    (ws / "old" / "deep").mkdir(parents=True)
    (ws / "old" / "deep" / "f").write_text("f")
    (ws / "link").symlink_to("src/pkg/mod.py")
    os.mkfifo(ws / "pipe")
    os.chmod(ws / "notes.txt", 0o640)
    os.utime(ws / "notes.txt", ns=(1_000_000_000, 2_000_000_000))


def vandalise(ws: Path) -> None:
    """Writes, truncation, creation, deletion, renames (files and directories), chmod,
    a symlink pointed out of the workspace, a file replaced by a directory."""
    with (ws / "src" / "pkg" / "mod.py").open("a") as f:
        f.write("import os; os.system('rm -rf /')\n")
    with (ws / "data.bin").open("r+b") as f:
        f.truncate(10)
    (ws / "new.txt").write_text("dropped\n")
    (ws / "newdir" / "sub").mkdir(parents=True)
    (ws / "newdir" / "sub" / "x").write_text("x")
    shutil.rmtree(ws / "old")
    (ws / "src").rename(ws / "moved")
    os.chmod(ws / "notes.txt", 0o777)
    (ws / "link").unlink()
    (ws / "link").symlink_to("/etc/shadow")
    (ws / "pipe").unlink()
    (ws / "pipe").mkdir()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    populate(root)
    return root


def shadow_of(ws: Path, tmp_path: Path, name: str = "store", **limits: int) -> WorkspaceShadow:
    store = tmp_path / name
    store.mkdir()
    return WorkspaceShadow.create(str(ws), str(store), ShadowLimits(**limits), TIMEOUT_S)


def test_scan_finds_every_change_and_restore_is_byte_for_byte(ws: Path, tmp_path: Path) -> None:
    before = manifest(ws)
    shadow = shadow_of(ws, tmp_path)
    assert shadow.changes(TIMEOUT_S) == ([], len(before))
    vandalise(ws)
    changed, _ = shadow.changes(TIMEOUT_S)
    kinds = {r: shadow.classify(r) for r in changed}
    assert kinds["new.txt"] == "created" and kinds["old/deep/f"] == "deleted"
    assert kinds["data.bin"] == kinds["notes.txt"] == kinds["link"] == "modified"
    assert kinds["moved/pkg/mod.py"] == "created" and kinds["src/pkg/mod.py"] == "deleted"
    assert shadow.restore(changed, TIMEOUT_S) == {}
    assert manifest(ws) == before
    assert shadow.changes(TIMEOUT_S)[0] == []  # the index follows the restored inodes


def test_given_paths_expand_to_renamed_and_deleted_subtrees(ws: Path, tmp_path: Path) -> None:
    before = manifest(ws)
    shadow = shadow_of(ws, tmp_path)
    vandalise(ws)
    # what the tree would name: the top of each operation only
    named = {"src/pkg/mod.py", "data.bin", "new.txt", "newdir", "newdir/sub", "newdir/sub/x",
             "old", "src", "moved", "notes.txt", "link", "pipe"}  # fmt: skip
    changed, _ = shadow.changes(TIMEOUT_S, named)
    assert set(changed) == set(shadow.changes(TIMEOUT_S)[0])
    assert shadow.restore(changed, TIMEOUT_S) == {}
    assert manifest(ws) == before


def test_commit_moves_the_baseline(ws: Path, tmp_path: Path) -> None:
    shadow = shadow_of(ws, tmp_path)
    vandalise(ws)
    committed = manifest(ws)
    shadow.commit(shadow.changes(TIMEOUT_S)[0], TIMEOUT_S)
    assert shadow.changes(TIMEOUT_S)[0] == []
    (ws / "moved" / "pkg" / "mod.py").write_text("again\n")
    (ws / "new.txt").unlink()
    changed, _ = shadow.changes(TIMEOUT_S)
    assert shadow.restore(changed, TIMEOUT_S) == {}
    assert manifest(ws) == committed


def test_restore_never_follows_a_symlinked_parent(ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "mod.py").write_text("host file\n")
    shadow = shadow_of(ws, tmp_path)
    shutil.rmtree(ws / "src")
    (ws / "src").symlink_to(outside)  # src/pkg/mod.py would now resolve outside
    (ws / "src" / "pkg").mkdir()
    changed, _ = shadow.changes(TIMEOUT_S)
    assert shadow.restore(changed, TIMEOUT_S) == {}
    assert (ws / "src").is_dir() and not (ws / "src").is_symlink()
    assert (ws / "src" / "pkg" / "mod.py").read_text() == "print('hi')\n"
    assert sorted(p.name for p in outside.iterdir()) == ["mod.py", "pkg"]  # untouched
    assert (outside / "mod.py").read_text() == "host file\n"


@pytest.mark.root
def test_an_immutable_file_is_reported_not_restored(ws: Path, tmp_path: Path) -> None:
    shadow = shadow_of(ws, tmp_path)
    (ws / "notes.txt").write_text("tampered\n")
    (ws / "new.txt").write_text("x")
    subprocess.run(["chattr", "+i", str(ws / "notes.txt")], check=True)
    try:
        failed = shadow.restore(shadow.changes(TIMEOUT_S)[0], TIMEOUT_S)
    finally:
        subprocess.run(["chattr", "-i", str(ws / "notes.txt")], check=True)
    assert failed == {"notes.txt": "Operation not permitted"}
    assert not (ws / "new.txt").exists()  # the rest was restored


def test_bounds_fail_clearly(ws: Path, tmp_path: Path) -> None:
    with pytest.raises(RollbackError, match="more than 5 entries"):
        shadow_of(ws, tmp_path, max_files=5)
    with pytest.raises(RollbackError, match=r"exceed 0 MiB at 'data.bin'"):
        shadow_of(ws, tmp_path, "store2", max_bytes=1000)


def _tree(workspace: str, *events: FileEvent) -> BehaviorTree:
    call = DeclaredCall(call_id="c", server="s", tool="t")
    proc = ProcessNode(key="1@1", pid=1, files=list(events))
    return BehaviorTree(call=call, processes=[proc])


def test_tree_paths_keeps_workspace_writes_and_falls_back_when_unsure() -> None:
    ws = "/srv/ws"
    tree = _tree(
        ws,
        FileEvent(ts_ns=1, op="open", path="/srv/ws/a.txt", flags=["write", "create"]),
        FileEvent(ts_ns=2, op="open", path="/srv/ws/read.txt", flags=["read"]),
        FileEvent(ts_ns=3, op="rename", path="/srv/ws/b", target="/srv/ws/c/../d"),
        FileEvent(ts_ns=4, op="unlink", path="/etc/passwd"),
        FileEvent(ts_ns=5, op="rmdir", path="/srv/wsx/e"),
    )
    assert tree_paths(tree, ws) == ({"a.txt", "b", "d"}, None)
    tree.processes[0].files.append(FileEvent(ts_ns=6, op="unlink", path="x", resolved=False))
    assert tree_paths(tree, ws) == (None, "a path the monitor could not resolve ('x')")
    tree.drops = {"file": 3}
    assert tree_paths(tree, ws)[1] == "the monitor lost events ({'file': 3})"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_protocol_restores_on_deny_and_commits_on_allow(ws: Path) -> None:
    config = SandboxConfig(workspace=str(ws), rollback="tree")
    before = manifest(ws)
    async with open_rollback(config) as rb:
        assert rb is not None and rb.shadow.method == "copy_file_range"
        await rb.begin("1")
        (ws / "notes.txt").write_text("evil\n")
        event = FileEvent(ts_ns=1, op="open", path=f"{ws}/notes.txt", flags=["write"])
        await rb.capture("1", _tree(str(ws), event))
        report = await rb.settle("1", deny=True)
        assert report is not None and report.action == "restored"
        assert (report.modified, report.paths) == (1, [f"{ws}/notes.txt"])
        assert manifest(ws) == before

        await rb.begin("2")
        (ws / "kept.txt").write_text("ok\n")
        event = FileEvent(ts_ns=1, op="open", path=f"{ws}/kept.txt", flags=["write", "create"])
        await rb.capture("2", _tree(str(ws), event))
        report = await rb.settle("2", deny=False)
        assert report is not None and (report.action, report.created) == ("committed", 1)
        assert rb.shadow.changes(TIMEOUT_S)[0] == []
        store = rb.shadow.store
    assert not Path(store).exists()  # noqa: ASYNC240 - the shadow copy went with the sandbox


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_observe_mode_keeps_a_denied_calls_changes(ws: Path) -> None:
    config = SandboxConfig(workspace=str(ws), rollback="scan")
    async with open_rollback(config, observe=True) as rb:
        assert rb is not None
        await rb.begin("1")
        (ws / "notes.txt").write_text("evil\n")
        await rb.capture("1", _tree(str(ws)))  # scan mode: the tree is not needed
        report = await rb.settle("1", deny=True)
    assert report is not None and (report.action, report.modified) == ("kept", 1)
    assert (ws / "notes.txt").read_text() == "evil\n"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.parametrize("mode", ["tree", "scan"])
async def test_changes_between_calls_become_the_baseline(ws: Path, mode: str) -> None:
    config = SandboxConfig(workspace=str(ws), rollback=mode)  # type: ignore[arg-type]
    async with open_rollback(config) as rb:
        assert rb is not None
        (ws / "user-edit.txt").write_text("the user typed this between calls\n")
        await rb.begin("1")
        (ws / "evil.txt").write_text("x")
        await rb.capture("1", _tree(str(ws)))
        report = await rb.settle("1", deny=True)
    assert report is not None and (report.synced, report.action) == (1, "restored")
    assert (ws / "user-edit.txt").exists() and not (ws / "evil.txt").exists()


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_bad_configuration_is_a_clear_error(ws: Path, tmp_path: Path) -> None:
    shadows = tmp_path / "shadows"
    shadows.mkdir()
    cases = [
        (SandboxConfig(rollback="scan"), "needs a \\[sandbox\\] workspace"),
        (SandboxConfig(workspace=str(ws / "nope"), rollback="scan"), "not a directory"),
        (SandboxConfig(workspace=str(ws), rollback="tree", rollback_max_mb=0), "must be positive"),
        (SandboxConfig(workspace=str(ws), rollback="tree", rollback_dir=str(ws / "src")),
         "inside the workspace"),
        (SandboxConfig(workspace=str(ws), rollback="scan", rollback_max_files=3,
                       rollback_dir=str(shadows)), "more than 3 entries"),
    ]  # fmt: skip
    for config, message in cases:
        with pytest.raises(RollbackError, match=message):
            async with open_rollback(config):
                pass
    assert list(shadows.iterdir()) == []  # a failed snapshot leaves no shadow behind
    async with open_rollback(SandboxConfig(workspace=str(ws))) as rb:
        assert rb is None  # off by default


def test_untraced_creations_are_found_through_their_directory(ws: Path, tmp_path: Path) -> None:
    """Tree mode stats every directory: a symlink, hard link or fifo made by a call the
    monitor does not trace moves its directory's mtime, so it is found without any event."""
    shadow = shadow_of(ws, tmp_path)
    (ws / "src" / "pkg" / "evil").symlink_to("/etc/shadow")
    os.link(ws / "notes.txt", ws / "old" / "deep" / "hard")
    (ws / "old" / "deep" / "f").unlink()
    changed, scanned = shadow.changes(TIMEOUT_S, set())
    assert {"src/pkg/evil", "old/deep/hard", "old/deep/f"} <= set(changed)
    assert scanned < len(shadow.index) + 2  # not a full scan: the directories and their entries
    assert shadow.restore(changed, TIMEOUT_S) == {}
    assert not (ws / "src" / "pkg" / "evil").is_symlink() and (ws / "old" / "deep" / "f").exists()


def test_the_pack_is_compacted_and_still_restores(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("mtguard_rt.sandbox.shadow.COMPACT_MIN", 0)
    shadow = shadow_of(ws, tmp_path)
    pack = tmp_path / "store" / "pack"
    for i in range(5):  # each commit appends a new copy of data.bin; compaction drops old ones
        (ws / "data.bin").write_bytes(os.urandom(200_000 + i))
        shadow.commit(shadow.changes(TIMEOUT_S)[0], TIMEOUT_S)
    assert pack.stat().st_size <= 2 * shadow.bytes
    committed = manifest(ws)
    (ws / "data.bin").write_bytes(b"gone")
    (ws / "src" / "pkg" / "mod.py").write_text("changed\n")
    assert shadow.restore(shadow.changes(TIMEOUT_S)[0], TIMEOUT_S) == {}
    assert manifest(ws) == committed


def test_config_file_sets_rollback_and_rejects_a_bad_mode(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text('[sandbox]\nworkspace = "/srv/ws"\nrollback = "scan"\nrollback_max_mb = 10\n')
    config = load_config(good)
    assert (config.sandbox.rollback, config.sandbox.rollback_max_mb) == ("scan", 10)
    assert load_config(None).sandbox.rollback == "off"
    bad = tmp_path / "bad.toml"
    bad.write_text('[sandbox]\nworkspace = "/srv/ws"\nrollback = "always"\n')
    with pytest.raises(PolicyError, match=r"bad.toml:3: Invalid enum value 'always'"):
        load_config(bad)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_call_without_a_verdict_is_rolled_back_before_the_next(ws: Path) -> None:
    """Dispatched, then cancelled before capture and verdict: the next call's begin() fails
    closed, restoring the workspace (a full scan finds what the call did)."""
    before = manifest(ws)
    async with open_rollback(SandboxConfig(workspace=str(ws), rollback="tree")) as rb:
        assert rb is not None
        await rb.begin("1")
        (ws / "notes.txt").write_text("evil\n")
        (ws / "dropped").write_text("x")
        await rb.begin("2")  # call 1 never captured nor settled
        assert manifest(ws) == before
        report = await rb.settle("1", deny=False)  # too late: already settled as a deny
        assert report is None  # call 2 is the pending one now
        await rb.capture("2", _tree(str(ws)))
        report = await rb.settle("2", deny=False)
        assert report is not None and (report.action, report.created) == ("committed", 0)


def test_proxy_flag_sets_rollback(ws: Path) -> None:
    from mtguard_rt.cli import build_parser
    from mtguard_rt.commands.proxy import config_from_args

    argv = ["proxy", "--workspace", str(ws), "--rollback", "tree", "--", "python", "s.py"]
    config = config_from_args(build_parser().parse_args(argv))
    assert (config.sandbox.workspace, config.sandbox.rollback) == (str(ws), "tree")
    with pytest.raises(SystemExit):  # argparse: invalid choice
        build_parser().parse_args(["proxy", "--rollback", "sometimes", "--", "x"])


def test_a_workspace_reached_through_a_symlink(ws: Path, tmp_path: Path) -> None:
    (tmp_path / "alias").symlink_to(ws)
    before = manifest(ws)
    shadow = shadow_of(tmp_path / "alias", tmp_path)
    (ws / "notes.txt").write_text("x")
    assert shadow.restore(shadow.changes(TIMEOUT_S)[0], TIMEOUT_S) == {}
    assert manifest(ws) == before


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_the_next_call_waits_for_the_previous_verdict(ws: Path) -> None:
    """Call 2 may not dispatch while call 1 (captured, verdict pending: an LLM judge, say)
    could still be restored: its changes would be clobbered or taken as baseline."""
    before = manifest(ws)
    async with open_rollback(SandboxConfig(workspace=str(ws), rollback="scan")) as rb:
        assert rb is not None
        await rb.begin("1")
        (ws / "evil.txt").write_text("x")
        await rb.capture("1", _tree(str(ws)))
        began = anyio.Event()

        async def second() -> None:
            await rb.begin("2")
            began.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(second)
            with anyio.move_on_after(0.3):
                await began.wait()
            assert not began.is_set()  # still waiting for call 1's verdict
            report = await rb.settle("1", deny=True)
            with anyio.fail_after(10):
                await began.wait()
        assert report is not None and report.action == "restored"
        assert manifest(ws) == before
