"""`scope-escape` on real directories and links: an effect outside the workspace, its roots
and the paths the call names is denied when an argument climbed there with `..`, went there
through a link in the workspace, or a link made during the call led there; what the server
does on its own outside (its runtime, /proc, git looking for .git upwards, node's and
python's links) and everything the task or the command line grants are allowed."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from mtguard_rt.audit import CallContext, PolicyEngine, load_policy
from mtguard_rt.audit.rules_scope import scope_escape
from mtguard_rt.audit.scope import LinkResolver, ServerScope, arg_paths, climbs, task_paths
from mtguard_rt.audit.treeview import TreeView
from mtguard_rt.model import BehaviorTree, FileEvent, Violation

from .trees import ctx_for, opened, server_tree

POLICY = load_policy()
RESULT: dict[str, Any] = {"content": [{"type": "text", "text": "ok"}], "isError": False}


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A workspace `ws/` with real files, and files beside it a server must not reach."""
    (tmp_path / "ws" / "docs").mkdir(parents=True)
    (tmp_path / "ws" / "README.md").write_text("# app\n")
    (tmp_path / "srv").mkdir()
    (tmp_path / "srv" / "service.json").write_text('{"token": "x"}\n')
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "keys.txt").write_text("k\n")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "notes.txt").write_text("n\n")
    return tmp_path


def call(
    root: Path,
    args: dict[str, Any],
    paths: list[FileEvent],
    *,
    task: str = "Show me README.md of the project.",
    command: list[str] | None = None,
    since_ns: int | None = None,
    scope: ServerScope | None = None,
) -> list[Violation]:
    """One call of a server whose workspace is root/ws: its usual noise plus `paths`."""
    ws = str(root / "ws")
    ctx: CallContext = ctx_for("read_file", args, task=task)
    ctx.scope = scope or ServerScope.create(ws, command or ["python3", "server.py"])
    tree: BehaviorTree = server_tree(ctx.call)
    tree.processes[0].cwd = ws
    tree.processes[0].files.extend(paths)
    start = time.time_ns() if since_ns is None else since_ns
    tree.wall_offset_ns = start - tree.window_start_ns
    return scope_escape(ctx, TreeView.build(tree, POLICY, ctx.canaries), RESULT, POLICY)


def test_a_relative_argument_that_climbs_out_of_the_workspace_is_an_escape(root: Path) -> None:
    target = str(root / "srv" / "service.json")
    [v] = call(root, {"path": "../srv/service.json"}, [opened(target)])
    assert v.rule == "scope-escape" and v.mode == "enforce"
    assert v.evidence[0].startswith(f"scope: workspace {root / 'ws'}; roots none")
    assert "argument path='../srv/service.json' climbs out of its base" in v.evidence[1]
    assert target in v.evidence[1]


def test_a_traversal_hidden_after_a_subdirectory_and_an_absolute_one(root: Path) -> None:
    target = str(root / "private" / "keys.txt")
    assert call(root, {"path": "docs/../../private/keys.txt"}, [opened(target)])
    absolute = f"{root}/ws/docs/../../private/keys.txt"
    assert call(root, {"path": absolute}, [opened(target)])


def test_a_climb_against_a_base_not_known_matches_a_directory_and_a_name(root: Path) -> None:
    # the server joined the argument to a data directory of its own, not the workspace
    assert call(root, {"path": "../srv/service.json"}, [opened("/data/srv/service.json")])
    # a bare name is not enough: that would be the server's own package.json anywhere
    own = opened("/usr/lib/node_modules/server/package.json")
    assert call(root, {"path": "../package.json"}, [own]) == []


def test_writes_renames_and_unlinks_out_of_the_workspace_count(root: Path) -> None:
    out = str(root / "status.txt")
    assert call(root, {"path": "../status.txt"}, [opened(out, "write", "create")])
    moved = FileEvent(ts_ns=8000, op="rename", path=f"{root}/ws/a", target=out)
    assert call(root, {"src": "a", "dst": "../status.txt"}, [moved])
    gone = FileEvent(ts_ns=8000, op="unlink", path=out)
    assert call(root, {"cmd": "rm -f ../status.txt"}, [gone])


def test_dotdot_that_stays_inside_and_failed_opens_are_not_escapes(root: Path) -> None:
    assert not climbs("docs/../README.md")
    readme = str(root / "ws" / "README.md")
    assert call(root, {"path": "docs/../README.md"}, [opened(readme)]) == []
    missing = opened(str(root / "srv" / "nope.json"), result=-2)
    assert call(root, {"path": "../srv/nope.json"}, [missing]) == []


def test_the_task_naming_the_outside_path_puts_it_in_scope(root: Path) -> None:
    notes = str(root / "shared" / "notes.txt")
    task = "Read ../shared/notes.txt and summarise it."
    assert call(root, {"path": "../shared/notes.txt"}, [opened(notes)], task=task) == []
    task = "Summarise every file in ../shared/ for me."
    assert call(root, {"path": "../shared/notes.txt"}, [opened(notes)], task=task) == []
    # the task naming one outside file does not grant its neighbours
    keys = str(root / "private" / "keys.txt")
    task = "Read ../shared/notes.txt and summarise it."
    assert call(root, {"path": "../private/keys.txt"}, [opened(keys)], task=task)


def test_several_allowed_directories_on_the_command_line_are_roots(root: Path) -> None:
    notes = str(root / "shared" / "notes.txt")
    command = ["node", "index.js", str(root / "ws"), f"--allow={root / 'shared'}"]
    assert ServerScope.create(str(root / "ws"), command).roots == (str(root / "shared"),)
    assert call(root, {"path": "../shared/notes.txt"}, [opened(notes)], command=command) == []
    assert call(root, {"path": notes}, [opened(notes)], command=command) == []
    keys = str(root / "private" / "keys.txt")
    assert call(root, {"path": "../private/keys.txt"}, [opened(keys)], command=command)


def test_an_absolute_path_outside_spelled_out_is_named_not_reached(root: Path) -> None:
    # sensitive-file-arg and the secret rules judge /etc/passwd; it is no traversal
    assert call(root, {"path": "/etc/os-release"}, [opened("/etc/os-release")]) == []
    # but an argument naming a directory above does not excuse another one's climb
    target = opened(str(root / "srv" / "service.json"))
    assert call(root, {"path": "../srv/service.json", "root": str(root)}, [target])
    assert call(root, {"path": "../srv/service.json", "sep": "/"}, [target])


def test_a_link_in_the_workspace_to_inside_it_is_fine(root: Path) -> None:
    ws = root / "ws"
    (ws / "reports").mkdir()
    (ws / "reports" / "2026-11.md").write_text("up\n")
    (ws / "reports" / "latest").symlink_to("2026-11.md")
    (ws / "shared").symlink_to("docs")
    events = [opened(f"{ws}/reports/latest"), opened(f"{ws}/shared/a.md")]
    assert call(root, {"path": "reports/latest"}, events[:1]) == []
    assert call(root, {"path": "shared/a.md"}, events[1:]) == []


def test_an_argument_through_a_link_out_of_the_workspace_is_an_escape(root: Path) -> None:
    ws = root / "ws"
    (ws / "assets").mkdir()
    (ws / "assets" / "logo.svg").symlink_to("../../srv/service.json")
    (ws / "shared").symlink_to("../private")
    [v] = call(root, {"path": "assets/logo.svg"}, [opened(f"{ws}/assets/logo.svg")])
    assert f"through the link {ws}/assets/logo.svg" in v.evidence[1]
    assert f"lands on {root}/srv/service.json" in v.evidence[1]
    task = "Summarise the files in shared/."
    assert call(root, {"path": "shared/keys.txt"}, [opened(f"{ws}/shared/keys.txt")], task=task)
    # a server that resolves the link itself opens the real path: the same escape
    assert call(root, {"path": "shared/keys.txt"}, [opened(f"{root}/private/keys.txt")])
    # listing the linked directory shows names only
    assert call(root, {"path": "shared"}, [opened(f"{ws}/shared")], task=task) == []


def test_an_argument_naming_a_step_through_a_link_out_is_an_escape(root: Path) -> None:
    ws = root / "ws"
    old = time.time_ns() + 10**9  # the links predate the call

    def at(args: dict[str, Any], paths: list[FileEvent]) -> list[Violation]:
        return call(root, args, paths, since_ns=old)

    (ws / "photos").mkdir()
    (ws / "photos" / "trip").symlink_to("../../private")  # the server adds photos/ itself
    (ws / "calendar").symlink_to("../shared")
    [v] = at({"album": "trip", "name": "keys"}, [opened(f"{ws}/photos/trip/keys.txt")])
    assert f"names 'trip/keys.txt' through the link {ws}/photos/trip" in v.evidence[1]
    assert at({"day": "notes"}, [opened(f"{ws}/calendar/notes.txt")])
    # a link the arguments do not name, a too short name, a listing: no escape
    assert at({"day": "other"}, [opened(f"{ws}/calendar/notes.txt")]) == []
    assert at({"n": "a"}, [opened(f"{ws}/photos/trip/a")]) == []
    assert at({"album": "trip"}, [opened(f"{ws}/photos/trip")]) == []
    (ws / "docs" / "a.md").write_text("a\n")
    (ws / "photos" / "mine").symlink_to("../docs")  # a link that stays inside
    assert at({"album": "mine", "name": "a"}, [opened(f"{ws}/photos/mine/a.md")]) == []


def test_a_link_made_during_the_call_and_read_through_is_an_escape(root: Path) -> None:
    ws = root / "ws"
    before = time.time_ns()
    (ws / ".cache-link").symlink_to("../private")
    read = opened(f"{ws}/.cache-link/keys.txt")
    [v] = call(root, {"path": "docs"}, [read], task="List docs/.", since_ns=before)
    assert f"a link made during the call ({ws}/.cache-link)" in v.evidence[1]
    # the same link, there before the call and not named by it: the server's own business
    later = os.lstat(ws / ".cache-link").st_ctime_ns + 10**9
    assert call(root, {"path": "docs"}, [read], task="List docs/.", since_ns=later) == []
    # ... unless the kernel saw this call make it
    made = FileEvent(ts_ns=7500, op="symlink", path=f"{ws}/.cache-link", target="../private")
    assert call(root, {"path": "docs"}, [made, read], task="List docs/.", since_ns=later)
    # ... or saw this server make it in an earlier call of its session (a rug pull's plant)
    scope = ServerScope.create(str(ws))
    assert call(root, {"path": "."}, [made], task="List the root.", scope=scope) == []
    [v] = call(root, {"path": "docs"}, [read], task="List docs/.", since_ns=later, scope=scope)
    assert f"a link this server made in an earlier call ({ws}/.cache-link)" in v.evidence[1]


def test_what_the_server_does_on_its_own_outside_is_not_an_escape(root: Path) -> None:
    ws = root / "ws"
    # git looking for .git above the workspace; the runtime; its own /proc and /tmp files
    own = [
        opened(f"{root}/.git/HEAD", result=-2),
        opened(str(root)),
        opened("/usr/lib/python3.11/os.py"),
        opened("/proc/self/status"),
        opened("/tmp/tmp-own.json", "write", "create"),
    ]
    assert call(root, {"repo_path": str(ws)}, own, task="Show git status.") == []
    # node resolving a module through a symlinked node_modules (made before the call)
    store = root / "store" / "left-pad"
    store.mkdir(parents=True)
    (store / "index.js").write_text("module.exports = 1\n")
    (ws / "node_modules").mkdir()
    (ws / "node_modules" / "left-pad").symlink_to(store)
    later = os.lstat(ws / "node_modules" / "left-pad").st_ctime_ns + 10**9
    mod = [opened(f"{ws}/node_modules/left-pad/index.js"), opened(f"{store}/index.js")]
    assert call(root, {"command": "node app.js"}, mod, task="Run app.js.", since_ns=later) == []
    # ... also when the call names the workspace the link lies in: the link is not its path
    args = {"path": str(ws), "script": "test"}
    assert call(root, args, mod, task="Run the tests.", since_ns=later) == []
    assert call(root, {"path": "."}, mod, task="Run the tests.", since_ns=later) == []
    # naming the linked module itself is going through the link
    assert call(root, {"path": "node_modules/left-pad/index.js"}, mod, since_ns=later)
    # python following its venv's links (bin/python -> /usr/bin/python3, lib64 -> lib)
    (ws / ".venv" / "bin").mkdir(parents=True)
    (ws / ".venv" / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    (ws / ".venv" / "bin" / "python").symlink_to("/usr/bin/python3")
    (ws / ".venv" / "lib64").symlink_to("lib")
    venv = [opened(f"{ws}/.venv/pyvenv.cfg"), opened(f"{ws}/.venv/lib64/python3.11/site.py")]
    assert call(root, {"command": ".venv/bin/python app.py"}, venv, since_ns=later) == []


def test_no_scope_known_means_no_verdict(root: Path) -> None:
    ctx = ctx_for("read_file", {"path": "../srv/service.json"})
    tree = server_tree(ctx.call)
    tree.processes[0].files.append(opened(str(root / "srv" / "service.json")))
    assert scope_escape(ctx, TreeView.build(tree, POLICY, ctx.canaries), RESULT, POLICY) == []


def test_resolver_is_bounded_on_a_link_loop(root: Path) -> None:
    ws = root / "ws"
    (ws / "a").symlink_to("b")
    (ws / "b").symlink_to("a")
    assert LinkResolver((str(ws),)).resolve(f"{ws}/a/x") is None
    res = LinkResolver((str(ws),)).resolve(f"{ws}/docs/../README.md")
    assert res is not None and res.path == f"{ws}/README.md" and not res.left


def test_argument_paths_come_from_paths_and_command_tokens() -> None:
    found = arg_paths([("path", "../x"), ("cmd", "cat ../srv/db.conf && ls"), ("t", "hi there")])
    assert [(a.key, a.text, a.climbs) for a in found] == [
        ("path", "../x", True),
        ("cmd", "../srv/db.conf", True),
    ]


def test_a_url_encoded_traversal_the_server_decodes_is_an_escape(root: Path) -> None:
    target = str(root / "private" / "keys.txt")
    for name in ("..%2F..%2Fprivate%2Fkeys.txt", "..%252Fprivate%252Fkeys.txt"):
        [v] = call(root, {"name": name}, [opened(target)])
        assert "climbs out of its base" in v.evidence[1], name
    (root / "ws" / "coverage report.txt").write_text("87%\n")
    assert call(root, {"name": "coverage%20report.txt"},
                [opened(str(root / "ws" / "coverage report.txt"))]) == []
    assert [a.text for a in arg_paths([("n", "a%2Fb")])] == ["a%2Fb", "a/b"]


def test_the_engine_runs_the_rule_and_enforces_it(root: Path) -> None:
    engine = PolicyEngine(POLICY)
    ctx = ctx_for("read_file", {"path": "../srv/service.json"})
    ctx.scope = ServerScope.create(str(root / "ws"))
    tree = server_tree(ctx.call)
    tree.processes[0].cwd = str(root / "ws")
    tree.processes[0].files.append(opened(str(root / "srv" / "service.json")))
    verdict = engine.post_rules(ctx, tree, RESULT)
    assert verdict.decision == "deny" and "scope-escape" in verdict.rules


def test_task_paths_drop_the_sentence_punctuation_after_a_path() -> None:
    assert task_paths("Open docs/guide.md. Then read ../a/b: and ~/x!") == [
        "docs/guide.md",
        "../a/b",
        "~/x",
    ]
    assert task_paths("Go up with .. and list ./") == ["..", "./"]
