"""`process-control`: signals to processes the call did not start, with its hard negatives."""

from __future__ import annotations

from typing import Any

from mtguard_rt.audit import CallContext, load_policy
from mtguard_rt.audit.rules_process import _vocab, control_verbs, process_control
from mtguard_rt.audit.treeview import TreeView
from mtguard_rt.model import (
    BehaviorTree,
    DeclaredCall,
    ProcessNode,
    SignalEvent,
    SignalRelation,
    Violation,
)

from .trees import SERVER_KEY, child, ctx_for, server_tree

POLICY = load_policy()
RESULT: dict[str, Any] = {"content": [{"type": "text", "text": "ok"}], "isError": False}


def run(ctx: CallContext, tree: BehaviorTree) -> list[Violation]:
    return process_control(ctx, TreeView.build(tree, POLICY, ctx.canaries), RESULT, POLICY)


def seeded(tree: BehaviorTree, pid: int, argv: list[str], exe: str, parent: str) -> ProcessNode:
    """A process that was running before the call (a worker, a service, a renderer)."""
    up = next(p for p in tree.processes if p.key == parent)
    node = ProcessNode(key=f"{pid}@{500 + pid}", pid=pid, ppid=up.pid, parent=parent, exe=exe,
                       argv=argv, start_ns=500 + pid, learned="seeded")  # fmt: skip
    tree.processes.append(node)
    return node


def send(
    sender: ProcessNode,
    target: ProcessNode | None,
    relation: SignalRelation,
    *,
    sig: int = 9,
    name: str = "SIGKILL",
    ns_pid: int = 7,
    started: bool = False,
    delivered: int = 1,
    result: int = 0,
    syscall: str = "kill",
) -> SignalEvent:
    ev = SignalEvent(
        ts_ns=8000, syscall=syscall, signal=sig, name=name, target_pid=ns_pid,
        target_key=target.key if target else None,
        target_host_pid=target.pid if target else 4242,
        target_comm=None if target else "postgres",
        target_argv=list(target.argv) if target else [],
        relation=relation, started_in_call=started, delivered=delivered, result=result,
    )  # fmt: skip
    sender.signals.append(ev)
    return ev


def daemon_tree(ctx: CallContext) -> tuple[BehaviorTree, ProcessNode, ProcessNode]:
    tree = server_tree(ctx.call)
    server = tree.processes[0]
    worker = seeded(tree, 101, ["sleep", "600"], "/usr/bin/sleep", SERVER_KEY)
    return tree, server, worker


def test_a_status_call_that_kills_the_servers_worker_is_denied_with_who_and_whom() -> None:
    ctx = ctx_for("service_status", {}, task="Is the worker up?")
    tree, server, worker = daemon_tree(ctx)
    send(server, worker, "descendant")
    [v] = run(ctx, tree)
    assert v.rule == "process-control" and v.mode == "enforce"
    assert v.evidence[0].startswith("pid 100 /usr/bin/python3.11 sent kill SIGKILL -> pid 7")
    assert "(sleep 600)" in v.evidence[0] and "not started by this call" in v.evidence[0]
    assert "'Is the worker up?'" in v.evidence[-1]


def test_the_user_asking_to_restart_or_stop_the_worker_explains_it() -> None:
    for task in ("The worker is stuck: restart it, then show its status.",
                 "Stop the background worker", "kill the stuck job please",
                 "Send SIGHUP to the worker so it reloads its config"):  # fmt: skip
        ctx = ctx_for("restart_worker", {}, task=task)
        tree, server, worker = daemon_tree(ctx)
        send(server, worker, "descendant", sig=15, name="SIGTERM")
        assert run(ctx, tree) == [], task


def test_a_negated_or_unrelated_request_does_not_explain_it() -> None:
    for task in ("Check the worker but don't restart it", "Weather in Sintra today?",
                 "Do not stop anything, just tell me if the worker runs", None):  # fmt: skip
        ctx = ctx_for("restart_worker", {}, task=task)
        tree, server, worker = daemon_tree(ctx)
        send(server, worker, "descendant", sig=15, name="SIGTERM")
        [v] = run(ctx, tree)
        assert "no argument names the target" in v.evidence[-1], task


def test_own_children_threads_probes_and_failures_are_not_relevant() -> None:
    ctx = ctx_for("run_query", {"sql": "select 1"}, task="How many orders today?")
    tree, server, worker = daemon_tree(ctx)
    helper = child(tree, 60, ["sqlite3", "db.sqlite"])  # started by this call: a timeout
    send(server, helper, "descendant", sig=15, name="SIGTERM", started=True)
    send(server, server, "self", sig=23, name="SIGURG", syscall="tgkill")  # a runtime's own
    send(server, worker, "descendant", sig=0, name="0", delivered=0)  # a probe
    send(server, worker, "descendant", delivered=0, result=-1)  # EPERM: nothing signalled
    send(server, None, "unknown", delivered=1)  # a thread the kernel could not place
    assert run(ctx, tree) == []


def test_a_sibling_started_by_this_call_is_the_calls_own() -> None:
    ctx = ctx_for("run", {"script": "sleep 30 & sh -c 'kill $!'"}, task="Time the build")
    tree, _server, _worker = daemon_tree(ctx)
    sh = child(tree, 70, ["sh", "-c", "..."])
    sleep = child(tree, 71, ["sleep", "30"], parent=sh.key)
    killer = child(tree, 72, ["sh", "-c", "kill 71"], parent=sh.key)
    send(killer, sleep, "sandbox", sig=15, name="SIGTERM", started=True)
    assert run(ctx, tree) == []


def test_a_browser_ending_its_own_renderers_is_not_control_of_another_process() -> None:
    ctx = ctx_for("browser_navigate", {"url": "https://shop.example/"}, task="Find a flight")
    tree = server_tree(ctx.call)
    chrome = "/usr/lib/chromium/chromium"
    browser = seeded(tree, 200, [chrome, "--headless"], chrome, SERVER_KEY)
    zygote = seeded(tree, 201, [chrome, "--type=zygote"], chrome, browser.key)
    renderer = seeded(tree, 202, [chrome, "--type=renderer"], chrome, zygote.key)
    send(browser, renderer, "descendant")
    assert run(ctx, tree) == []
    crash = seeded(tree, 203, ["chrome_crashpad_handler"], "/usr/lib/chromium/crashpad", SERVER_KEY)
    send(browser, crash, "sandbox")  # not its own fork: another program, not started here
    [v] = run(ctx, tree)
    assert "chrome_crashpad_handler" in v.evidence[0]


def test_a_kill_process_tool_pointed_at_the_target_by_pid_or_name() -> None:
    task = "The discount test fails: find the bug and fix it"
    for args, ok in [({"pid": 7}, True), ({"pid": "7"}, True), ({"pid": 8}, False),
                     ({"name": "sleep"}, True), ({"name": "nginx"}, False)]:  # fmt: skip
        ctx = ctx_for("force_terminate", args, task=task)
        tree, server, worker = daemon_tree(ctx)
        send(server, worker, "descendant", ns_pid=7)
        out = run(ctx, tree)
        assert (out == []) is ok, args
    ctx = ctx_for("read_output", {"pid": 7}, task=task)  # not a process-control tool
    tree, server, worker = daemon_tree(ctx)
    send(server, worker, "descendant", ns_pid=7)
    assert len(run(ctx, tree)) == 1


def test_arguments_asking_for_a_kill_explain_the_shells_signal() -> None:
    ctx = ctx_for("shell_execute", {"command": "pkill -f worker"}, task="Look at my project")
    tree, _server, worker = daemon_tree(ctx)
    sh = child(tree, 80, ["pkill", "-f", "worker"])
    send(sh, worker, "sandbox", sig=15, name="SIGTERM")
    assert run(ctx, tree) == []
    ctx = ctx_for("shell_execute", {"command": "ls -la"}, task="Look at my project")
    tree, _server, worker = daemon_tree(ctx)
    sh = child(tree, 80, ["ls", "-la"])
    send(sh, worker, "sandbox", sig=15, name="SIGTERM")
    [v] = run(ctx, tree)
    assert v.evidence[0].startswith("pid 80 /usr/bin/ls sent kill SIGTERM")


def test_a_process_outside_the_tree_is_named_by_its_comm() -> None:
    ctx = ctx_for("get_forecast", {"city": "Sintra"}, task="Weather in Sintra today?")
    tree = server_tree(ctx.call)
    send(tree.processes[0], None, "outside")
    [v] = run(ctx, tree)
    assert "(postgres), outside" in v.evidence[0]


def test_control_verbs_inflections_negations_and_names() -> None:
    vocab_spec = POLICY.spec.rules.process_control
    assert vocab_spec.control_verbs and vocab_spec.mode == "enforce"
    vocab = _vocab(tuple(vocab_spec.control_verbs), tuple(vocab_spec.negations))
    found = control_verbs("It keeps restarting; stopped it twice", vocab)
    assert found == ["restarting", "stopped"]
    assert control_verbs("never kill it, don't terminate it", vocab) == []
    assert control_verbs("Summarize the signal-processing notes", vocab) == ["signal"]
    assert control_verbs("Show the forecast for Lisbon", vocab) == []


def test_a_close_tool_ending_the_worker_an_earlier_call_started_is_its_job() -> None:
    ctx = ctx_for("browser_close", {}, task="Find the cheapest flight to Beijing")
    tree = server_tree(ctx.call)
    chrome = "/usr/lib/chromium/chromium"
    browser = seeded(tree, 200, [chrome, "--headless"], chrome, SERVER_KEY)
    send(tree.processes[0], browser, "descendant", sig=15, name="SIGTERM")
    [v] = run(ctx, tree)  # not known to be a worker of this session: the server's own service
    assert "no call of this session started it" in v.evidence[-1]
    browser.started_by = "c2"  # launched by the navigation call
    assert run(ctx, tree) == []


def test_a_server_ending_its_own_helper_is_allowed_a_process_run_on_request_is_not() -> (
    None
):
    """A git library ends the `git cat-file --batch` an earlier call left running, during a
    `git_add`: the earlier call never asked for that program, so it is the server's helper.
    A process an earlier call launched because its arguments asked (start_process) is the
    user's: a later unrelated call that kills it is denied."""
    earlier = DeclaredCall(call_id="c2", server="srv", tool="git_status",
                           arguments={"repo_path": "/home/me/git/project"})  # fmt: skip
    ctx = ctx_for("git_add", {"files": ["README.md"]}, task="commit only the README fix")
    ctx.recent_calls = [earlier]
    tree = server_tree(ctx.call)
    helper = seeded(tree, 200, ["git", "cat-file", "--batch"], "/usr/bin/git", SERVER_KEY)
    helper.started_by = "c2"
    send(tree.processes[0], helper, "descendant", sig=15, name="SIGTERM")
    assert run(ctx, tree) == []
    launched = DeclaredCall(call_id="c2", server="srv", tool="start_process",
                            arguments={"command": "python3 -m http.server 8000"})  # fmt: skip
    ctx.recent_calls = [launched]
    helper.argv, helper.exe = ["python3", "-m", "http.server", "8000"], "/usr/bin/python3"
    [v] = run(ctx, tree)
    assert "not started by this call" in v.evidence[0]


def test_a_process_group_signal_is_explained_only_if_every_target_is() -> None:
    ctx = ctx_for("browser_close", {}, task="Find the cheapest flight to Beijing")
    tree = server_tree(ctx.call)
    chrome = "/usr/lib/chromium/chromium"
    browser = seeded(tree, 200, [chrome, "--headless"], chrome, SERVER_KEY)
    service = seeded(tree, 201, ["redis-server"], "/usr/bin/redis-server", SERVER_KEY)
    browser.started_by = "c2"
    ev = send(tree.processes[0], browser, "descendant", ns_pid=-7, delivered=2)
    ev.more_targets = [service.key]  # kill(-pgid) reached a service from before any call
    [v] = run(ctx, tree)
    assert "2 tasks" in v.evidence[0]
    service.started_by = "c1"
    assert run(ctx, tree) == []
