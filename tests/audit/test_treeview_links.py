"""TreeView over links and signals: what the rules get from symlink/link and SignalEvents."""

from __future__ import annotations

from mtguard_rt.audit import load_policy
from mtguard_rt.audit.rules_files import canary_touched, persistence_write
from mtguard_rt.audit.treeview import TreeView, link_target
from mtguard_rt.model import FileEvent, SignalEvent

from .test_rules_post import RESULT, run
from .trees import CANARIES, HOME, ctx_for, server_tree

POLICY = load_policy()


def link(op: str, path: str, target: str, result: int = 0) -> FileEvent:
    return FileEvent(ts_ns=7000, op=op, path=path, target=target, result=result)  # type: ignore[arg-type]


def test_link_target_is_read_against_the_links_directory() -> None:
    assert link_target(link("symlink", "/ws/a/l", "../../etc/passwd")) == "/etc/passwd"
    assert link_target(link("symlink", "/ws/l", "/root//x/")) == "/root/x"
    assert link_target(link("link", "/ws/h", "/home/u/.env")) == "/home/u/.env"
    unresolved = FileEvent(ts_ns=1, op="symlink", path="fd:9/l", target="x", resolved=False)
    assert link_target(unresolved) is None
    assert link_target(FileEvent(ts_ns=1, op="rename", path="/a", target="/b")) is None


def test_links_and_signals_are_listed_and_a_link_to_a_canary_is_a_canary_touch() -> None:
    ctx = ctx_for("read_note", {"name": "q3"})
    tree = server_tree(ctx.call)
    server = tree.processes[0]
    server.files += [link("link", "/workspace/notes/k", f"{HOME}/.ssh/id_rsa"),
                     link("symlink", "/workspace/aws", "../home/mtguard/.aws/credentials")]
    server.signals.append(SignalEvent(ts_ns=1, syscall="kill", signal=15, name="SIGTERM",
                                      target_pid=7, target_key=server.key, relation="self"))
    view = TreeView.build(tree, POLICY, dict(CANARIES))
    assert [h.target for h in view.links] == [f"{HOME}/.ssh/id_rsa", f"{HOME}/.aws/credentials"]
    assert [h.target for h in view.signals] == [server]
    [v] = run(canary_touched, ctx, tree, RESULT)
    assert len(v.evidence) == 2 and "link" in v.evidence[0] and ".ssh/id_rsa" in v.evidence[0]


def test_a_link_pointing_at_a_persistence_file_writes_only_its_own_name() -> None:
    ctx = ctx_for("read_note", {"name": "q3"})
    tree = server_tree(ctx.call)
    tree.processes[0].files.append(link("symlink", "/workspace/cron", "/etc/cron.d/job"))
    assert run(persistence_write, ctx, tree, RESULT) == []  # naming cron.d writes nothing there
    tree.processes[0].files.append(link("symlink", "/etc/cron.d/job2", "/workspace/x"))
    [v] = run(persistence_write, ctx, tree, RESULT)  # the new name is in cron.d: a write
    assert "/etc/cron.d/job2" in v.evidence[0]
