"""`scope-escape` on what a server reads by itself, through a link an argument names, or
where a climbing argument leads once the server adds an extension: each attack beside its
benign twin (the same read explained by an argument, the task, the tool, the server's own
code or configuration, or a read whose content never reaches the result)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from mtguard_rt.audit import CallContext, load_policy
from mtguard_rt.audit.rules_scope import scope_escape
from mtguard_rt.audit.scope import ServerScope
from mtguard_rt.audit.treeview import TreeView
from mtguard_rt.model import BehaviorTree, FileEvent, Violation

from .trees import ctx_for, opened, server_tree

POLICY = load_policy()
SALARIES = "name,salary\nJonas Weber,71200\nEmma Roth,88400\n"


def _root(tmp_path: Path) -> Path:
    """A case root mounted read-only: the workspace ws/ and user data beside it (the
    server's code in a folder of its own, beside the root)."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "server.py").write_text("print('hi')\n")
    tmp_path = tmp_path / "case"
    (tmp_path / "ws" / "repo" / "docs").mkdir(parents=True)
    (tmp_path / "ws" / "repo" / "README.md").write_text("# ui-kit\n")
    (tmp_path / "private" / "hr").mkdir(parents=True)
    (tmp_path / "private" / "hr" / "salaries.csv").write_text(SALARIES)
    return tmp_path


def _call(
    root: Path,
    tool: str,
    args: dict[str, Any],
    paths: list[FileEvent],
    result: str,
    *,
    task: str = "Show README.md of the repo.",
    mounts: list[str] | None = None,
    env: dict[str, str] | None = None,
    server: str = "srv",
) -> list[Violation]:
    ws = str(root / "ws")
    ctx: CallContext = ctx_for(tool, args, task=task, server=server)
    command = ["python3", str(root.parent / "code" / "server.py")]
    mounts = [str(root)] if mounts is None else mounts
    ctx.scope = ServerScope.create(ws, command, mounts, env)
    tree: BehaviorTree = server_tree(ctx.call)
    tree.processes[0].cwd = ws
    tree.processes[0].files.extend(paths)
    tree.wall_offset_ns = time.time_ns() - tree.window_start_ns
    out = {"content": [{"type": "text", "text": result}], "isError": False}
    return scope_escape(ctx, TreeView.build(tree, POLICY, ctx.canaries), out, POLICY)


def test_a_server_that_reads_user_data_beside_its_workspace_into_the_result(
    tmp_path: Path,
) -> None:
    root = _root(tmp_path)
    hr = str(root / "private" / "hr" / "salaries.csv")
    reads = [opened(str(root / "ws" / "repo" / "README.md")), opened(hr)]
    [v] = _call(root, "show_file", {"path": "README.md"}, reads, "# ui-kit\n" + SALARIES)
    assert v.rule == "scope-escape" and v.mode == "enforce"
    assert f"the call read {hr} on the mount {root}" in v.evidence[1]
    assert "line 2 of it reaches the result" in v.evidence[1] and "88400" not in v.evidence[1]
    # a small table: its header and a short row
    (root / "private" / "hr" / "salaries.csv").write_text("name,salary\nAna,4200\n")
    assert _call(root, "show_file", {"path": "."}, [opened(hr)], "app.py\nname,salary\nAna,4200")


def test_the_same_read_is_allowed_when_something_explains_it_or_nothing_leaves(
    tmp_path: Path,
) -> None:
    root = _root(tmp_path)
    hr = str(root / "private" / "hr" / "salaries.csv")
    shown = "# ui-kit\n" + SALARIES
    # its content stays in the server (a configuration it reads on every call), or one
    # short line of it happens to be in the result
    assert _call(root, "show_file", {"path": "README.md"}, [opened(hr)], "# ui-kit\n") == []
    assert _call(root, "show_file", {"path": "README.md"}, [opened(hr)], "name,salary") == []
    # an argument names it (its name without the extension the server adds)
    assert _call(root, "get_sheet", {"name": "salaries"}, [opened(hr)], shown) == []
    # the task names it by the words of its name, or the tool's name does
    task = "Show me the salaries table."
    assert _call(root, "show_file", {"path": "README.md"}, [opened(hr)], shown, task=task) == []
    assert _call(root, "salaries", {}, [opened(hr)], shown) == []
    # the server's own configuration is named after it
    assert _call(root, "show_file", {}, [opened(hr)], shown, server="salaries-svc") == []
    # the directory is the server's: a root its environment names, or its code's mount
    env = {"HR_DIR": str(root / "private" / "hr")}
    assert _call(root, "show_file", {"path": "README.md"}, [opened(hr)], shown, env=env) == []
    code_mount = [str(root.parent / "code"), str(root / "private")]
    own = str(root.parent / "code" / "server.py")
    assert _call(root, "show_file", {}, [opened(own)], "print('hi')", mounts=code_mount) == []
    # no mount but the workspace: nothing outside is data it was shown
    assert _call(root, "show_file", {"path": "README.md"}, [opened(hr)], shown, mounts=[]) == []


def test_a_link_in_the_repo_that_the_argument_names_with_its_directory(tmp_path: Path) -> None:
    root = _root(tmp_path)
    link = root / "ws" / "repo" / "docs" / "setup.md"
    os.symlink("../../../private/hr/salaries.csv", link)
    [v] = _call(root, "show_file", {"path": "docs/setup.md"}, [opened(str(link))], SALARIES)
    assert "argument path='docs/setup.md' names 'setup.md' through the link" in v.evidence[1]
    # a link that stays in the workspace is a shortcut, not an escape
    inside = root / "ws" / "repo" / "LATEST.md"
    os.symlink("README.md", inside)
    assert _call(root, "show_file", {"path": "LATEST.md"}, [opened(str(inside))], "# ui") == []


def test_a_climbing_argument_the_server_completes_with_an_extension(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (root / "private" / "vpn").mkdir()
    ceo = root / "private" / "vpn" / "ceo.ovpn"
    ceo.write_text("remote board.corp.example 1194\n")
    args = {"name": "../../private/vpn/ceo"}
    text = "remote board.corp.example 1194"
    [v] = _call(root, "show_profile", args, [opened(str(ceo))], text, mounts=[], task="VPN log?")
    assert "argument name='../../private/vpn/ceo' climbs out of its base" in v.evidence[1]
    # the user asked for that very file
    task = "Show the profile ../../private/vpn/ceo.ovpn, outside the workspace, I know."
    assert _call(root, "show_profile", args, [opened(str(ceo))], text, mounts=[], task=task) == []


def test_a_climbing_directory_argument_the_server_joins_a_name_to(tmp_path: Path) -> None:
    root = _root(tmp_path)
    (root / "srv" / "auth").mkdir(parents=True)
    robot = root / "srv" / "auth" / "robot.json"
    robot.write_text('{"user": "robot"}\n')
    args = {"repo": "../../srv/auth", "tag": "robot"}
    task = "Inspect the manifest of web:1.4."
    [v] = _call(root, "inspect", args, [opened(str(robot))], "{}", mounts=[], task=task)
    assert "argument repo='../../srv/auth' climbs out of its base" in v.evidence[1]
    # the runtime's own files below a system directory of that name are not its doing
    lib = "/usr/lib/python3/dist-packages/x/__init__.py"
    args = {"path": "../lib/python3"}
    assert _call(root, "inspect", args, [opened(lib)], "{}", mounts=[], task=task) == []
