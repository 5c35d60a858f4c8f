"""The real-server benign suite: loader, normaliser and compare as units; then a real run.

The unit tests use result shapes recorded from the real servers. The real test runs a fast
subset (git, time, sqlite) unguarded and through `mtguard proxy` on the real sandbox and eBPF,
and checks the suite's mechanics: every call ran both ways and is matched to its audit record,
identical work compares equal after normalising, and a harmful call slipped into a benign
session is reported as a denial with its rule and evidence. 0 FP / 0 broken is asserted only
for the sessions that pass today (the rules are being fixed in parallel).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from mtguard_rt.eval.realsuite import report
from mtguard_rt.eval.realsuite.compare import classify, normalise, normalise_text
from mtguard_rt.eval.realsuite.runner import (
    SERVERS_DIR,
    CallRun,
    ServerRun,
    SuiteRun,
    _take,
    build_fixture,
    create_workdir,
    guarded_command,
    run_suite,
)
from mtguard_rt.eval.realsuite.session import (
    SESSIONS_DIR,
    Call,
    SessionError,
    load_session,
    load_sessions,
    resolve,
)
from mtguard_rt.model import AuditRecord, Timings
from tests.audit_records import call_records

REPO = Path(__file__).resolve().parents[2]
SETUP_TIMEOUT_S = 900  # a first install of the pinned PyPI and npm servers
SUITE_TIMEOUT_S = 420  # three sessions, each a sandbox start, BPF compile and ~10 traced calls
FAST = ["git", "time", "sqlite"]
PASSING = {"git", "time", "sqlite"}  # sessions with 0 FP / 0 broken at the time of writing


def _text(text: str, is_error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def _classify(a: dict[str, Any], b: dict[str, Any], **kw: Any) -> tuple[str, str]:
    return classify(a, b, denied=kw.get("denied", False), expect_error=kw.get("expect", False),
                    subs_unguarded={"/tmp/w": "{ws}", "/tmp/h": "{home}"},
                    subs_guarded={"/tmp/w": "{ws}", "/home/mtguard": "{home}"})


# --- loader -----------------------------------------------------------------------------------

def test_shipped_sessions_load_and_are_pinned_by_the_setup_script() -> None:
    setup = (REPO / "scripts/setup-servers.sh").read_text()
    sessions = load_sessions()
    names = {s.server for s in sessions}
    assert {"git", "fetch", "time", "sqlite", "markitdown", "shell"} <= names
    for s in sessions:
        assert 5 <= len(s.calls) <= 15, s.server
        assert re.fullmatch(r"\S+(==|@)\d[\w.]*", s.package), s.package
        assert s.package in setup, f"{s.package} is not installed by scripts/setup-servers.sh"
        assert s.registry == ("pypi" if "==" in s.package else "npm")


def test_a_session_file_error_names_the_file_and_line(tmp_path: Path) -> None:
    good = (SESSIONS_DIR / "git.toml").read_text()
    bad = tmp_path / "git.toml"
    bad.write_text(good.replace('tool = "git_add"', 'tool = "git_add"\nargs = {}', 1))
    with pytest.raises(SessionError) as err:
        load_session(bad)
    line = next(n for n, t in enumerate(bad.read_text().splitlines(), 1) if t == "args = {}")
    assert err.value.line is not None and abs(err.value.line - line) <= 1
    assert "args" in str(err.value) and str(bad) in str(err.value)


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (lambda t: t.replace('server = "git"', 'server = "gitx"'), "must match the file name"),
        (lambda t: t.replace("{ws}/project", "{workspace}/project", 1), "unknown placeholder"),
        (lambda t: t.replace('"project/README.md" =', '"../README.md" =', 1), "stay in the"),
        (lambda t: t.replace("{ws}/project", "{site}/project", 1), 'network = "host"'),
        (lambda t: t.replace('registry = "pypi"', 'registry = "pypi"\nowner = -1'), "not a uid"),
    ],
)
def test_malformed_sessions_are_refused(tmp_path: Path, edit: Any, why: str) -> None:
    path = tmp_path / "git.toml"
    path.write_text(edit((SESSIONS_DIR / "git.toml").read_text()))
    with pytest.raises(SessionError, match=why):
        load_session(path)


def test_unknown_server_names_the_known_ones() -> None:
    with pytest.raises(SessionError, match=r"no session for nosuch.*known: .*git"):
        load_sessions(["nosuch"])


def test_placeholders_resolve_everywhere_but_leave_other_braces() -> None:
    value = {"q": "SELECT '{x}' FROM t", "paths": ["{ws}/a", {"deep": "{home}/b"}], "n": 3}
    assert resolve(value, {"ws": "/w", "home": "/h"}) == {
        "q": "SELECT '{x}' FROM t", "paths": ["/w/a", {"deep": "/h/b"}], "n": 3}


# --- normalise and compare --------------------------------------------------------------------

def test_normalise_masks_what_differs_between_two_runs_of_the_same_work() -> None:
    one = ("Commit: 7fe1a1d5a00005e5e7168a63aa9b67a9aa9938c2\nAuthor: Dev\n"
           "Date: 2026-12-01 12:13:02+00:00\nin /tmp/w/project, id "
           "0b7e8c1e-4f5a-4d3c-9a2b-1c2d3e4f5a6b, pid 4242, took 0.52s, Tue Dec 1 12:13:02 2026")
    two = ("Commit: eb175a736f8a50d779b2d5b1cb130089add74676\nAuthor: Dev\n"
           "Date: 2026-12-01 12:13:16+00:00\nin /tmp/w/project, id "
           "9d8c7b6a-1111-4222-8333-444455556666, pid 17, took 1.9s, Tue Dec 1 12:14:59 2026")
    subs = {"/tmp/w": "{ws}"}
    assert normalise_text(one, subs) == normalise_text(two, subs)
    assert "{ws}/project" in normalise_text(one, subs)
    assert "Author: Dev" in normalise_text(one, subs)  # ordinary words are kept


def test_timestamps_in_file_names_are_masked() -> None:
    a = "- [Snapshot](.playwright-mcp/page-2026-12-01T12-27-50-420Z.yml)"
    b = "- [Snapshot](.playwright-mcp/page-2026-12-01T12-28-08-159Z.yml)"
    masked = "- [Snapshot](.playwright-mcp/page-<ts>.yml)"
    assert normalise_text(a, {}) == normalise_text(b, {}) == masked



def test_an_all_digit_short_hash_in_a_hash_field_is_masked_but_other_numbers_are_not() -> None:
    a = '{"shortHash": "7431126", "totalCount": 2}'
    b = '{"shortHash": "a9c03f1", "totalCount": 2}'
    assert normalise_text(a, {}) == normalise_text(b, {})
    escaped = '{\\n \\"shortHash\\": \\"7431126\\"}'  # JSON text inside a result's text
    assert "<hex>" in normalise_text(escaped, {})
    assert normalise_text('{"count": 7431126}', {}) != normalise_text('{"count": 7431127}', {})


def test_an_all_digit_abbreviated_hash_in_text_is_not_a_broken_call() -> None:
    a = _text("3264486 Invoice totals from time sheets\n")
    b = _text("9f1c2ab Invoice totals from time sheets\n")
    assert _classify(a, b) == ("ok", "")
    c = _text("9f1c2ab Invoice totals from time sheets (4 rows)\n")
    assert _classify(a, c)[0] == "broken"  # any other difference still counts

def test_normalise_keeps_real_differences() -> None:
    subs: dict[str, str] = {}
    assert normalise_text("affected_rows: 4", subs) != normalise_text("affected_rows: 0", subs)
    assert normalise_text("modified: README.md", subs) != normalise_text("clean", subs)
    assert normalise(_text("x"), subs) != normalise(_text("x", is_error=True), subs)


def test_the_run_paths_compare_equal_once_substituted() -> None:
    a = _text("HOME is /tmp/h, repo /tmp/w/project")
    b = _text("HOME is /home/mtguard, repo /tmp/w/project")
    assert _classify(a, b) == ("ok", "")


def test_a_denial_is_a_false_positive_even_if_the_text_is_not_checked() -> None:
    denied = _text("mtguard denied git_status (post): unexpected-shell", is_error=True)
    assert _classify(_text("On branch main"), denied)[0] == "fp"
    # the audit record's decision alone is enough
    assert _classify(_text("x"), _text("x"), denied=True)[0] == "fp"


def test_an_allowed_call_with_another_result_is_broken_with_a_diff() -> None:
    status, detail = _classify(_text("[{'affected_rows': 4}]"), _text("[{'affected_rows': 0}]"))
    assert status == "broken"
    assert "-" in detail and "affected_rows': 4" in detail and "affected_rows': 0" in detail


def test_epoch_numbers_in_structured_content_are_masked() -> None:
    a = {**_text("ok"), "structuredContent": {"commits": [{"timestamp": 1796131041, "n": 3}]}}
    b = {**_text("ok"), "structuredContent": {"commits": [{"timestamp": 1796131062, "n": 3}]}}
    assert _classify(a, b) == ("ok", "")
    c = {**_text("ok"), "structuredContent": {"commits": [{"timestamp": 1796131062, "n": 4}]}}
    assert _classify(a, c)[0] == "broken"
    ms = {**_text("ok"), "structuredContent": {"t": 1796131041123, "flag": True}}
    assert normalise(ms, {})["structuredContent"] == {"t": "<epoch>", "flag": True}


def test_structured_content_is_compared_too() -> None:
    a = {**_text("ok"), "structuredContent": {"rows": 4}}
    b = {**_text("ok"), "structuredContent": {"rows": 3}}
    assert _classify(a, b)[0] == "broken"
    assert _classify(a, dict(a))[0] == "ok"


def test_epoch_numbers_in_structured_content_are_masked_like_the_text_form() -> None:
    a = {**_text("ok"), "structuredContent": {"commits": [{"timestamp": 1796130221, "n": 2}]}}
    b = {**_text("ok"), "structuredContent": {"commits": [{"timestamp": 1796130229, "n": 2}]}}
    assert _classify(a, b) == ("ok", "")
    ms = {**_text("ok"), "structuredContent": {"t": 1796130221000, "ok": True}}
    assert _classify(ms, {**ms, "structuredContent": {"t": 1796130229123, "ok": True}})[0] == "ok"
    small = {**_text("ok"), "structuredContent": {"size": 4990}}  # not a time: still compared
    assert _classify(small, {**small, "structuredContent": {"size": 4994}})[0] == "broken"


def test_the_unguarded_answer_must_match_the_session_expectation() -> None:
    err = _text("Invalid timezone", is_error=True)
    assert _classify(err, err, expect=True) == ("ok", "")
    assert _classify(err, err)[0] == "session-error"
    assert _classify(_text("fine"), _text("fine"), expect=True)[0] == "session-error"
    rpc = {"isError": True, "rpcError": "-32601: Method not found"}
    assert _classify(rpc, rpc, expect=True)[0] == "ok"


# --- runner pieces ----------------------------------------------------------------------------

def test_the_guarded_command_is_the_default_proxy_with_the_session_flags() -> None:
    session = load_session(SESSIONS_DIR / "shell.toml")
    session.network = "host"
    values = {"servers": "/repo/.servers", "ws": "/w", "home": "/home/mtguard"}
    cmd = guarded_command(session, values, Path("/w"), Path("/r/audit.jsonl"))
    proxy, server = cmd[: cmd.index("--")], cmd[cmd.index("--") + 1:]
    assert proxy[1:4] == ["-m", "mtguard_rt", "proxy"]
    flags = dict(zip(proxy[4::2], proxy[5::2], strict=False))
    assert flags["--name"] == "shell" and flags["--workspace"] == "/w"
    assert flags["--mount"] == str(SERVERS_DIR) and flags["--audit-log"] == "/r/audit.jsonl"
    assert flags["--network"] == "host" and flags["--env"].startswith("ALLOW_COMMANDS=ls,")
    assert "--policy" not in proxy and "--observe" not in proxy  # default policy, enforce
    assert server == ["/repo/.servers/py1/bin/mcp-shell-server"]


def test_allowed_domains_become_proxy_flags_and_sets_filter_sessions() -> None:
    session = load_session(SESSIONS_DIR / "memory-npx.toml")
    values = {"servers": "/repo/.servers", "ws": "/w", "home": "/home/mtguard"}
    cmd = guarded_command(session, values, Path("/w"), Path("/r/audit.jsonl"))
    proxy = cmd[: cmd.index("--")]
    assert proxy[proxy.index("--allow-domain") + 1] == "registry.npmjs.org"
    assert "--network" not in proxy  # the registry only, never the host's network
    held = load_sessions(sets=["held-out"])
    assert len(held) >= 6 and all(s.set == "held-out" for s in held)
    core = {s.server for s in load_sessions(sets=["core"])}
    assert "git" in core and not core & {s.server for s in held}
    assert load_sessions(["git"], sets=["held-out"]) == []


def test_records_are_matched_to_calls_in_order_by_tool() -> None:
    def rec(tool: str, n: int) -> AuditRecord:
        return AuditRecord(call_id=str(n), server="s", tool=tool, arguments={},
                           decision="allow", phase=None, rules=[], reasons=[], mode="enforce",
                           timings_ms=Timings(), tree_complete=True, llm_used=False, tree=None)

    queue = [rec("a", 1), rec("b", 2), rec("a", 3)]
    got = [_take(queue, t) for t in ("a", "a", "b")]
    assert [r.call_id if r else None for r in got] == ["1", "3", None]


def test_a_fixture_is_built_fresh_and_a_failing_setup_command_is_an_error(
    tmp_path: Path
) -> None:
    session = load_session(SESSIONS_DIR / "git.toml")
    ws = tmp_path / "ws"
    values = {"servers": "/s", "ws": str(ws), "home": str(tmp_path)}
    (ws / "stale").mkdir(parents=True)
    anyio.run(build_fixture, session, ws, values, os.geteuid())
    assert not (ws / "stale").exists()
    assert (ws / "project/README.md").read_text() == "# Project\n\nUsage: python app.py\n"
    log = subprocess.run(["git", "-c", "safe.directory=*", "-C", str(ws / "project"), "log",
                          "--format=%an %s"], capture_output=True, text=True, check=True)
    assert log.stdout == "Dev initial commit\n"
    session.fixture.setup.append(["git", "-C", "nowhere", "status"])
    with pytest.raises(SessionError, match="fixture command"):
        anyio.run(build_fixture, session, ws, values, os.geteuid())


# --- report -----------------------------------------------------------------------------------

def _run() -> SuiteRun:
    fp = CallRun(index=1, tool="git_log", arguments={"repo_path": "/w"}, status="fp",
                 rules=["unexpected-shell"], phase="post",
                 evidence=["unexpected-shell: a shell ran | sh -c git log"],
                 task="show me the history",
                 unguarded_ms=5, guarded_ms=900)
    ok = CallRun(index=0, tool="git_status", arguments={}, status="ok", unguarded_ms=5,
                 guarded_ms=15, guard_ms=1.5)
    broken = CallRun(index=2, tool="git_add", arguments={}, status="broken", detail="-a\n+b",
                     unguarded_ms=5, guarded_ms=25, after_fp=1)
    return SuiteRun(servers=[
        ServerRun(server="git", package="mcp-server-git==1", registry="pypi",
                  calls=[ok, fp, broken]),
        ServerRun(server="time", package="mcp-server-time==1", registry="pypi",
                  calls=[CallRun(index=0, tool="get_current_time", arguments={})],
                  error="guarded run: ServerExited: the server exited"),
    ])


def test_report_counts_false_positives_broken_calls_and_latency() -> None:
    s = report.summarise(_run())
    assert (s["calls"], s["run"], s["fp"], s["broken"]) == (4, 3, 1, 1)
    assert s["fp_by_rule"] == {"unexpected-shell": 1}
    assert s["servers_failed"] == ["time"]
    git = s["servers"][0]
    assert git["added_ms_p50"] == 10 and git["added_ms_p95"] == 20  # denied calls excluded
    assert git["false_positives"][0]["evidence"] == ["unexpected-shell: a shell ran | "
                                                     "sh -c git log"]
    md = report.render_markdown(_run())
    assert git["guard_ms_p50"] == git["guard_ms_p95"] == 1.5
    assert "| git | `mcp-server-git==1` | 3/3 | 1 | 1 | 0 | 10 / 20 | 1.5 / 1.5 |" in md
    assert "unexpected-shell: a shell ran" in md and "```diff\n-a\n+b\n```" in md
    assert "broken call 2 `git_add` (after the denied call 1: may follow from it)" in md
    assert "ServerExited" in md and "  - task: show me the history" in md
    assert report.failed(_run())
    clean = SuiteRun(servers=[ServerRun(server="git", package="p==1", registry="pypi",
                                        calls=[_run().servers[0].calls[0]])])
    assert not report.failed(clean)


# --- real -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real_servers() -> None:
    try:
        done = subprocess.run([str(REPO / "scripts/setup-servers.sh")], capture_output=True,
                              text=True, timeout=SETUP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"scripts/setup-servers.sh took over {SETUP_TIMEOUT_S} s")
    if done.returncode != 0:
        pytest.fail(f"scripts/setup-servers.sh failed:\n{done.stderr[-2000:]}")


@pytest.fixture
def workdir() -> Iterator[Path]:
    """The runner's own folder (under /tmp, traversable by the sandbox user), removed after."""
    path = create_workdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.docker
@pytest.mark.bpf
@pytest.mark.timeout(SUITE_TIMEOUT_S + 60)
def test_real_suite_runs_compares_and_reports_a_harmful_call(
    real_servers: None, workdir: Path
) -> None:
    sessions = load_sessions(FAST)
    git = sessions[0]
    # A harmful call slipped into the benign git session: it names the user's SSH directory.
    harmful = Call(tool="git_log", arguments={"repo_path": "{home}/.ssh"}, expect_error=True)
    git.calls = [*git.calls[:3], harmful, *git.calls[3:]]

    async def main() -> SuiteRun:
        with anyio.fail_after(SUITE_TIMEOUT_S):
            return await run_suite(sessions, progress=None, workdir=workdir)

    run = anyio.run(main, backend="trio")
    by_name = {s.server: s for s in run.servers}
    assert list(by_name) == FAST
    for server in run.servers:
        assert server.error is None, server.error
        for call in server.calls:
            assert call.status is not None and call.decision in ("allow", "deny"), call
            assert call.unguarded is not None and call.guarded is not None
            assert call.unguarded_ms is not None and call.guarded_ms is not None
            assert call.guard_ms is not None and call.guard_ms >= 0
    bad = by_name["git"].calls[3]
    assert (bad.tool, bad.status, bad.decision) == ("git_log", "fp", "deny")
    assert bad.rules and bad.evidence and any(".ssh" in e for e in bad.evidence), bad.evidence
    assert bad.guarded is not None
    assert bad.guarded["content"][0]["text"].startswith("mtguard denied git_log")
    # the calls after the harmful one still ran and compare with the unguarded run
    commit = next(c for c in by_name["git"].calls if c.tool == "git_commit")
    assert commit.index > bad.index and commit.decision == "allow" and commit.status == "ok"
    summary = report.summarise(run)
    assert summary["fp_by_rule"] and summary["servers"][0]["false_positives"][0]["call"] == 3
    for server in run.servers:
        benign = [c for c in server.calls if c is not bad]
        if server.server in PASSING:
            assert [(c.index, c.tool, c.status, c.rules, c.detail) for c in benign
                    if c.status != "ok"] == []
    audit = workdir / "git" / "audit.jsonl"
    assert len(call_records(audit)) == len(git.calls)  # one record per call
    # the run is plain data: it round-trips through its JSON
    again = msgspec.json.decode(msgspec.json.encode(run), type=SuiteRun)
    assert again == run
