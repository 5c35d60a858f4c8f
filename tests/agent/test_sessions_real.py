"""One host (the MCP SDK's client, in this process), two real `mtguard proxy` processes, one
agent (root, eBPF, Docker): the proxies form one session, so an injection in server A's
result that induces a call to server B is denied by B's proxy before it runs (the
provenance rule reads A's result); with `--session` set apart B's pre-audit allows it (the
call runs; on today's rules its write is then caught after the effect), and the benign twin
is allowed both ways. Then the agent is SIGKILLed mid-session: the proxies answer on with
their local view and say so."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from mtguard_rt.doctor import _agent as agent_check
from mtguard_rt.eval.mcp_client import open_stdio_client
from mtguard_rt.eval.owncorpus.cases import Case, Persona, load_set, server_spec
from mtguard_rt.eval.owncorpus.replay import SCRIPT, SERVERS_DIR, build_root
from mtguard_rt.model import AuditRecord
from tests.audit_records import call_records

from ..proxy.mcp_http_server import run_server
from .test_agent_real import MTGUARD, running_agent

pytestmark = [pytest.mark.root, pytest.mark.bpf, pytest.mark.docker, pytest.mark.timeout(900)]
# the translator's result orders write_note on the notes server (only the provenance rule,
# which needs the translator's result, catches it); the twin asks for the note itself
ATTACK, TWIN = "xs-09", "xs-b08"
# a same-named tool on another server claims to be the real one: only the session's registry
# (the translator's listing, from a proxy no call reached) shows the look-alike
LOOKALIKE = "tc-12"
REQUEST_TIMEOUT_S = 120  # a sandbox start and a call on a loaded 2-core host


@pytest.fixture
def anyio_backend() -> str:
    return "trio"  # the proxies are subprocesses: one backend is enough (CPU is scarce)


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    with running_agent(tmp_path_factory.mktemp("sess") / "run" / "agent.sock") as started:
        yield started


def corpus() -> tuple[dict[str, Case], dict[str, Persona]]:
    got, personas = load_set("dev")
    return {c.id: c for c in got if c.id in (ATTACK, TWIN, LOOKALIKE)}, personas


def proxy_cmd(
    case: Case, personas: dict[str, Persona], server: str, root: Path, audit: Path,
    session: str | None,
) -> list[str]:  # fmt: skip
    spec = json.dumps(server_spec(case, server, personas))
    ws = root / "ws"
    return [
        MTGUARD, "proxy", "--name", server, "--audit-log", str(audit), "--task", case.task,
        "--mount", str(SERVERS_DIR), "--mount", str(root), "--workspace", str(ws),
        "--env", f"MTGUARD_OWN_SERVER={spec}", "--env", f"MCP_WORKSPACE={ws}",
        *(["--session", session] if session else []),
        "--", sys.executable, str(SCRIPT),
    ]  # fmt: skip


def last_call(audit: Path) -> AuditRecord:
    return call_records(audit)[-1]


async def replay(
    case: Case, personas: dict[str, Persona], env: dict[str, str], tmp: Path, apart: bool,
    while_up: Any = None,
) -> tuple[AuditRecord, Path]:
    """The case's calls through one proxy per server, all started by this one host; the
    record of its last call (the induced one, on the other server), and the case's root.
    `while_up()` runs after the calls, the proxies still up."""
    root = build_root(case, tmp)
    tag = f"{case.id}-{'apart' if apart else 'shared'}"
    audits = {s: tmp / f"{tag}-{s}.jsonl" for s in case.servers}
    clients: dict[str, Any] = {}
    async with anyio.create_task_group() as tg:
        done = anyio.Event()

        async def host(server: str, *, task_status: Any) -> None:
            cmd = proxy_cmd(case, personas, server, root, audits[server],
                            f"{tag}-{server}" if apart else None)  # fmt: skip
            with (tmp / f"{tag}-{server}.err").open("w") as err:
                async with open_stdio_client(
                    cmd, env=env, mode="legacy", request_timeout=REQUEST_TIMEOUT_S, errlog=err
                ) as client:  # legacy: the scripted server has no subscriptions/listen
                    await client.list_tools()
                    task_status.started(client)
                    await done.wait()

        for server in case.servers:  # one at a time: the sandboxes start on a loaded host
            clients[server] = await tg.start(host, server)
        for c in case.calls:
            await clients[c.server].call_tool(c.tool, dict(c.args))
        if while_up is not None:
            await anyio.to_thread.run_sync(while_up)
        done.set()
    return last_call(audits[case.calls[-1].server]), root


@pytest.mark.anyio
async def test_an_induced_call_across_proxies_is_denied_only_with_the_session(
    agent: tuple[subprocess.Popen[str], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _proc, sock = agent
    env = {**os.environ, "MTGUARD_AGENT_SOCKET": str(sock)}
    got, personas = corpus()
    monkeypatch.setenv("MTGUARD_AGENT_SOCKET", str(sock))  # what `mtguard doctor` asks
    doctor: list[str] = []
    # the twin first: the session's history (the attack's proxies, once gone) never helps it
    twin, _ = await replay(got[TWIN], personas, env, tmp_path, apart=False,
                           while_up=lambda: doctor.append(agent_check().detail))  # fmt: skip
    session = f"host-{os.getpid()}"
    assert f"sessions: {session} (" in doctor[0], doctor
    shown = doctor[0].split(f"{session} (")[1]
    for server in got[TWIN].servers:  # each of the host's live proxies, with its pid
        assert f"{server} pid " in shown, doctor
    attack, root = await replay(got[ATTACK], personas, env, tmp_path, apart=False)
    lookalike, _ = await replay(got[LOOKALIKE], personas, env, tmp_path, apart=False)
    attack_apart, _ = await replay(got[ATTACK], personas, env, tmp_path, apart=True)
    lookalike_apart, _ = await replay(got[LOOKALIKE], personas, env, tmp_path, apart=True)
    twin_apart, _ = await replay(got[TWIN], personas, env, tmp_path, apart=True)
    assert (lookalike.tool, lookalike.server) == ("translate_text", "weather")
    assert (lookalike.decision, lookalike.phase) == ("deny", "pre"), lookalike.reasons
    assert {"lookalike-tool", "shadowed-tool"} & set(lookalike.rules), lookalike.rules
    assert lookalike_apart.decision == "allow", lookalike_apart.reasons  # missed apart
    assert (attack.tool, attack.server) == ("write_note", "notes")
    assert (attack.decision, attack.phase) == ("deny", "pre"), attack.reasons
    assert "induced-call" in attack.rules
    assert any("on 'translate'" in e for v in attack.violations for e in v.evidence)
    assert not (root / "ws" / "notes" / "todo.md").exists()  # never ran
    # apart: the notes proxy never saw the translator's result, so its pre-audit let it run
    assert "induced-call" not in attack_apart.rules, attack_apart.reasons
    assert attack_apart.phase != "pre", attack_apart.reasons
    assert twin.decision == "allow", twin.reasons
    assert twin_apart.decision == "allow", twin_apart.reasons
    for r in (attack, twin, attack_apart, twin_apart, lookalike, lookalike_apart):
        assert not any(x.startswith("session:") for x in r.reasons), r.reasons
    err = (tmp_path / f"{ATTACK}-shared-notes.err").read_text()
    assert f"session 'host-{os.getpid()}' in the agent" in err, err


@pytest.mark.anyio
async def test_the_agent_killed_mid_session_leaves_each_proxy_its_local_view(
    agent: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    """Runs last in this module: it kills the module's agent. The proxies guard a URL
    upstream (no sandbox, no monitor), so only the session depends on the agent."""
    proc, sock = agent
    env = {**os.environ, "MTGUARD_AGENT_SOCKET": str(sock)}
    with run_server() as upstream:
        audits = {n: tmp_path / f"{n}.jsonl" for n in ("first", "second")}
        errs = {n: tmp_path / f"{n}.err" for n in audits}

        def cmd(name: str) -> list[str]:
            return [MTGUARD, "proxy", "--name", name, "--audit-log", str(audits[name]),
                    "--task", "echo what I say", "--upstream", upstream.url]  # fmt: skip

        with errs["first"].open("w") as e1, errs["second"].open("w") as e2:
            async with (
                open_stdio_client(cmd("first"), env=env, request_timeout=60, errlog=e1) as a,
                open_stdio_client(cmd("second"), env=env, request_timeout=60, errlog=e2) as b,
            ):
                await a.call_tool("echo", {"text": "one"})
                await b.call_tool("echo", {"text": "two"})
                assert not any(x.startswith("session:") for x in last_call(audits["second"])
                               .reasons)  # fmt: skip
                proc.send_signal(signal.SIGKILL)
                proc.wait(30)
                with anyio.fail_after(60):  # no hang: answered on the local view
                    out_a = await a.call_tool("echo", {"text": "three"})
                    out_b = await b.call_tool("echo", {"text": "four"})
        assert "three" in json.dumps(out_a) and "four" in json.dumps(out_b)
        for name in audits:
            reasons = last_call(audits[name]).reasons
            assert any(x.startswith("session: judged on the local view only") for x in reasons)
            text = errs[name].read_text()
            assert "calls are judged on this guard's own view of the session" in text, text
