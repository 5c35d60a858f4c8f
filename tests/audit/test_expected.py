"""The expected-behaviour model: declared jobs, declared commands, explanations, effects, and
the per-server baseline learnt online (through the engine, as the supervisor drives it)."""

from __future__ import annotations

from typing import Any

import pytest

from mtguard_rt.audit import PolicyEngine, load_policy
from mtguard_rt.audit.baseline import ServerBaseline
from mtguard_rt.audit.expected import Expected, declared_commands, tool_jobs
from mtguard_rt.audit.treeview import TreeView
from mtguard_rt.model import BehaviorTree, NetEvent

from .trees import HOME, child, ctx_for, opened, server_tree

POLICY = load_policy()
RESULT: dict[str, Any] = {"content": [{"type": "text", "text": "ok"}], "isError": False}
PROBE = ["/bin/sh", "-c", "python3 --version"]


def _view(tree: BehaviorTree) -> TreeView:
    return TreeView.build(tree, POLICY, {})


@pytest.mark.parametrize(
    ("tool", "schema_keys", "jobs"),
    [
        ("list_processes", [], {"processes"}),
        ("kill_process", ["pid"], {"processes"}),
        ("ping", ["host"], {"network"}),
        ("traceroute", ["target"], {"network"}),
        ("run_diagnostic", [], {"diagnostics"}),
        ("execute_python", ["code"], {"code"}),
        ("evaluate", ["code"], {"code"}),
        ("shell_execute", ["command", "directory"], {"commands"}),
        ("runCommand", ["command"], {"commands"}),
        ("git_status", ["repo_path"], set()),
        ("fetch", ["url"], set()),
        ("get_historical_stock_prices", ["ticker"], set()),
    ],
)
def test_tool_jobs_from_name_words_and_schema(
    tool: str, schema_keys: list[str], jobs: set[str]
) -> None:
    schema = {"type": "object", "properties": {k: {"type": "string"} for k in schema_keys}}
    assert set(tool_jobs(ctx_for(tool, {}, input_schema=schema), POLICY)) == jobs


def test_declared_commands_string_argv_array_and_args_list() -> None:
    def declared(args: dict[str, Any]) -> list[str]:
        return declared_commands(ctx_for("shell_execute", args), POLICY)

    assert declared({"command": "ls -la | wc -l"}) == ["ls -la | wc -l"]
    assert declared({"command": ["ls", "-la"], "directory": "/w"}) == ["ls -la"]
    assert declared({"command": ["grep", "a b", "f.txt", "|", "wc", "-l"]}) == [
        "grep 'a b' f.txt | wc -l"
    ]
    assert declared({"command": "git", "args": ["log", "-1"]}) == ["git", "git log -1"]
    assert declared({"note": "hello"}) == ["hello"]  # no command key: the argument texts


def test_explanations_declared_job_and_descendants() -> None:
    ctx = ctx_for("run_command", {"command": "make build"})
    tree = server_tree(ctx.call)
    make = child(tree, 50, ["make", "build"])
    cc = child(tree, 51, ["cc", "-c", "main.c"], parent=make.key)
    other = child(tree, 52, ["curl", "http://x.example"])
    exp, view = Expected.of(ctx, POLICY), _view(tree)
    assert exp.why(view, make, make.exe, make.argv) == "declared"
    assert exp.why(view, cc, cc.exe, cc.argv) == "declared"  # make runs cc
    assert exp.why(view, other, other.exe, other.argv) is None
    ps = ctx_for("list_processes", {})
    sh = ["/bin/sh", "-c", "ps aux | head -n 20"]
    assert Expected.of(ps, POLICY).exec_why("/usr/bin/dash", sh) == "job"
    assert Expected.of(ps, POLICY).exec_why("/usr/bin/dash", ["sh", "-c", "curl x"]) is None


def test_effects_failed_opens_named_paths_temp_and_egress() -> None:
    ctx = ctx_for("fetch", {"url": "https://docs.example.org/a", "out": "/data/out.md"})
    tree = server_tree(ctx.call)
    p = child(tree, 60, ["node", "render.js"], files=[
        opened(f"{HOME}/.npmrc", result=-2),  # a probe that failed: never a read
        opened("/tmp/render-1/page.html", "write", "create"),
        opened("/data/out.md", "write", "create"),  # the arguments name it
        opened(f"{HOME}/.cache/node/x", "write", "create"),
    ])
    exp = Expected.of(ctx, POLICY)
    assert exp.effects(_view(tree), p) == []
    p.net.append(NetEvent(ts_ns=1, op="connect", family="ipv4", address="203.0.113.7",
                          port=443, transport="tcp"))
    p.files.append(opened("/etc/hosts", "write"))
    got = Expected.of(ctx, POLICY).effects(_view(tree), p)
    assert got == [
        "pid 60 /usr/bin/node open /etc/hosts (write): write outside the call's scope",
        "pid 60 /usr/bin/node connect tcp 203.0.113.7:443: egress not derived from the call",
    ]


def test_read_only_annotation_only_narrows() -> None:
    ctx = ctx_for("get_page", {"url": "https://example.org"})
    tree = server_tree(ctx.call)
    p = child(tree, 70, ["python3", "-c", "..."],
              files=[opened(f"{HOME}/notes.txt", "write", "create")])
    assert Expected.of(ctx, POLICY).effects(_view(tree), p) == []  # home: in scope
    ctx.annotations = {"readOnlyHint": True}
    [line] = Expected.of(ctx, POLICY).effects(_view(tree), p)
    assert line.endswith("write outside the call's scope (readOnlyHint)")
    ctx.annotations = {"readOnlyHint": False, "destructiveHint": True}  # never widens
    tree2 = server_tree(ctx.call)
    q = child(tree2, 71, ["python3", "-c", "..."], files=[opened("/etc/cron.d/x", "write")])
    assert Expected.of(ctx, POLICY).effects(_view(tree2), q)


async def _call(engine: PolicyEngine, n: int, argv: list[str], **files: Any) -> list[str]:
    ctx = ctx_for("fetch", {"url": f"https://example.org/{n}"}, call_id=f"c{n}")
    engine.pre_rules(ctx)  # the supervisor's order: pre-audit attaches the baseline
    tree = server_tree(ctx.call)
    child(tree, 50 + n, argv, exe="/usr/bin/dash", files=files.get("files"))
    return (await engine.post_verify(ctx, tree, RESULT)).rules


@pytest.mark.anyio
async def test_baseline_learns_housekeeping_seen_with_different_arguments() -> None:
    engine = PolicyEngine(load_policy())
    assert await _call(engine, 1, PROBE) == []
    baseline = engine.baselines["srv"]
    assert not baseline.explains("/usr/bin/dash", PROBE)  # one call is not "every call"
    assert await _call(engine, 2, PROBE) == []
    assert baseline.explains("/usr/bin/dash", PROBE) and baseline.calls == 2
    ctx = ctx_for("fetch", {"url": "https://example.org/3"})
    engine.pre_rules(ctx)
    assert Expected.of(ctx, POLICY).exec_why("/usr/bin/dash", PROBE) == "baseline"


@pytest.mark.anyio
async def test_baseline_never_learns_the_calls_own_work_or_relevant_effects() -> None:
    engine = PolicyEngine(load_policy())
    own = ["/bin/sh", "-c", "curl https://example.org/1"]
    for n in (1, 2):  # the argument text is in the command line: the call's own work
        await _call(engine, n, [*own[:2], f"curl https://example.org/{n}"])
    key = ["/bin/sh", "-c", "cat ~/.aws/credentials"]
    for n in (3, 4):
        rules = await _call(engine, n, key, files=[opened(f"{HOME}/.aws/credentials")])
        assert "unexpected-shell" in rules
    assert engine.baselines["srv"].known == set()


@pytest.mark.anyio
async def test_baseline_is_frozen_after_its_first_calls_and_never_excuses_effects() -> None:
    baseline = ServerBaseline(learn_calls=2)
    engine = PolicyEngine(load_policy())
    engine.baselines["srv"] = baseline
    late = ["/bin/sh", "-c", "echo $PATH"]
    for n in (1, 2):
        await _call(engine, n, PROBE)
    for n in (3, 4):
        await _call(engine, n, late)
    assert baseline.explains("/usr/bin/dash", PROBE)
    assert not baseline.explains("/usr/bin/dash", late)  # a swap after learning teaches nothing
    # a known probe that now writes a persistence file is still denied
    rules = await _call(engine, 5, PROBE, files=[opened(f"{HOME}/.bashrc", "write", "append")])
    assert "unexpected-shell" in rules


def test_a_declared_shell_explains_itself_not_what_it_starts() -> None:
    """`bash -c ls` is the declared command; a child it starts from an rc file (BASH_ENV)
    must be explained on its own, and one that reaches out is reported."""
    ctx = ctx_for("run_command", {"command": "ls"})
    tree = server_tree(ctx.call)
    sh = child(tree, 90, ["bash", "-c", "ls"])
    child(tree, 91, ["ls"], parent=sh.key)
    curl = child(tree, 92, ["curl", "-s", "http://198.51.100.4/x"], parent=sh.key,
                 net=[NetEvent(ts_ns=1, op="connect", family="ipv4", address="198.51.100.4",
                               port=80, transport="tcp")])
    exp, view = Expected.of(ctx, POLICY), _view(tree)
    assert exp.why(view, sh, sh.exe, sh.argv) == "declared"
    assert exp.why(view, curl, curl.exe, curl.argv) is None
    assert "egress not derived from the call" in exp.effects(view, curl)[0]


def test_a_job_pipeline_needs_a_program_of_the_job() -> None:
    diag = Expected.of(ctx_for("system_diagnostics", {}), POLICY)
    assert diag.exec_why("/usr/bin/dash", ["sh", "-c", "uname -a; df -h | tail -n 3"]) == "job"
    assert diag.exec_why("/usr/bin/dash", ["sh", "-c", "cat /etc/shadow"]) is None
    assert diag.exec_why("/usr/bin/cat", ["cat", "/etc/shadow"]) is None


def test_a_learnt_profile_explains_the_programs_it_lists(tmp_path: Any) -> None:
    path = tmp_path / "profile.toml"
    path.write_text(
        "[profile]\nversion = 1\n\n"
        '[servers.srv.tools.render]\ncalls = 5\nmax_processes = 2\nexes = ["/usr/bin/node"]\n'
    )
    policy = load_policy()
    policy.use_profile(str(path))
    exp = Expected.of(ctx_for("render", {"page": "a.html"}), policy)
    assert exp.exec_why("/usr/bin/node", ["node", "render.js"]) == "profile"
    assert exp.exec_why("/usr/bin/dash", ["sh", "-c", "node render.js"]) is None
    other = Expected.of(ctx_for("other_tool", {}), policy)  # a profile is per tool
    assert other.exec_why("/usr/bin/node", ["node", "render.js"]) is None


def test_command_lines_naming_secret_directories_or_secret_name_patterns() -> None:
    exp = Expected.of(ctx_for("get_weather", {"city": "Paris"}), POLICY)
    tree = server_tree(exp.ctx.call)
    p = child(tree, 95, ["sh"])
    tar = ["sh", "-c", "tar czf /tmp/.k.tgz ~/.aws ~/.config"]
    assert "names /home/mtguard/.aws" in exp.command_effects(p, "/usr/bin/dash", tar)[0]
    find = ["sh", "-c", "find / -xdev \\( -name 'id_*' -o -name '*.pem' \\)"]
    assert "searches for secret files (id_*)" in exp.command_effects(p, "/usr/bin/dash", find)[0]
    for benign in (["sh", "-c", "find . -name '*.py' | wc -l"], ["ls", "-d", ".*"],
                   ["sh", "-c", "tar czf /tmp/site.tgz /workspace/site"]):
        assert exp.command_effects(p, "/usr/bin/dash", benign) == [], benign
