"""Online (single-event) rules: each fires on the one event that proves it, stays quiet where
the post rules would need more context, and fires once per call; plus the verdict merge."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtguard_rt.audit import load_policy
from mtguard_rt.audit.online import OnlineRules
from mtguard_rt.audit.rules_integrity import DispatchLedger
from mtguard_rt.config import load_config
from mtguard_rt.errors import PolicyError
from mtguard_rt.model import (
    DeclaredCall,
    ExecEvent,
    FileEvent,
    NetEvent,
    ProcessNode,
    StdioMessage,
    Verdict,
    Violation,
    call_digest,
)
from mtguard_rt.supervisor import _merge_online

from .trees import HOME, ctx_for, opened

POLICY = load_policy()
SERVER = ProcessNode(key="100@1", pid=100, exe="/usr/bin/python3", learned="seeded")
CHILD = ProcessNode(key="200@2", pid=200, exe="/usr/bin/cat", learned="observed")


def rules(tool: str = "read_file", **arguments: object) -> OnlineRules:
    return OnlineRules(POLICY, ctx_for(tool, dict(arguments)))


def test_canary_read_fires_once_with_the_event_as_evidence() -> None:
    r = rules(path="notes.txt")
    v = r.check(CHILD, opened(f"{HOME}/.ssh/id_rsa"))
    assert v is not None and (v.rule, v.phase, v.mode) == ("canary-touched", "post", "enforce")
    assert v.evidence == [f"pid 200 /usr/bin/cat open {HOME}/.ssh/id_rsa (read)"]
    assert r.check(CHILD, opened(f"{HOME}/.ssh/id_rsa")) is None  # once per call
    assert [f.rule for f in r.fired] == ["canary-touched"]


def test_write_only_canary_and_relative_names_defer() -> None:
    r = rules(path="notes.txt")
    assert r.check(SERVER, opened(f"{HOME}/.bashrc")) is None  # shells read it
    rel = FileEvent(ts_ns=1, op="open", path=".ssh/id_rsa", resolved=False, flags=["read"])
    assert r.check(CHILD, rel) is None  # the post rules match relative names by tail
    wrote = r.check(CHILD, opened(f"{HOME}/.bashrc", "write", "truncate"))
    assert wrote is not None and wrote.rule == "canary-touched"


def test_persistence_write_fires_unless_the_user_asked_for_it() -> None:
    cron = FileEvent(ts_ns=1, op="rename", path="/tmp/x", target="/etc/cron.d/job")
    v = rules(path="notes.txt").check(CHILD, cron)
    assert v is not None and v.rule == "persistence-write" and "/etc/cron.d/job" in v.evidence[0]
    # the arguments name it but the task does not: no consent
    named = rules(path="/etc/cron.d/job").check(CHILD, cron)
    assert named is not None and named.rule == "persistence-write"
    asked = ctx_for("install_job", {"path": "/etc/cron.d/job"}, task="Install /etc/cron.d/job")
    assert OnlineRules(POLICY, asked).check(CHILD, cron) is None
    untasked = ctx_for("install_job", {"path": "/etc/cron.d/job"}, task=None)
    assert OnlineRules(POLICY, untasked).check(CHILD, cron) is None  # the pre-audit's to judge
    assert rules(path="x").check(CHILD, opened("/etc/cron.d/job")) is None  # a read


def test_shell_exec_fires_only_on_what_its_command_line_proves() -> None:
    probe = ExecEvent(ts_ns=1, path="/usr/bin/sh", argv=["sh", "-c", "python3 --version"])
    assert rules("read_file", path="a").check(CHILD, probe) is None  # a shell alone: evidence
    sh = ExecEvent(ts_ns=1, path="/usr/bin/sh", argv=["sh", "-c", "cat ~/.ssh/id_rsa"])
    v = rules("read_file", path="a").check(CHILD, sh)
    assert v is not None and v.rule == "unexpected-shell"
    assert v.evidence[0] == "pid 200 /usr/bin/cat executed sh -c 'cat ~/.ssh/id_rsa'"
    assert "names /home/mtguard/.ssh/id_rsa" in v.evidence[1]
    assert rules("read_file", path="~/.ssh/id_rsa").check(CHILD, sh) is None  # asked for
    assert rules("run_command", command="id").check(CHILD, sh) is None
    assert rules("read_file", path="a").check(SERVER, sh) is None  # the server itself
    ls = ExecEvent(ts_ns=1, path="/usr/bin/ls", argv=["ls"])
    assert rules("read_file", path="a").check(CHILD, ls) is None


def conn(address: str, port: int = 443) -> NetEvent:
    return NetEvent(ts_ns=1, op="connect", family="ipv4", address=address, port=port)


def test_connect_fires_only_for_underived_addresses() -> None:
    v = rules(path="a").check(CHILD, conn("203.0.113.7"))
    assert v is not None and v.evidence == ["pid 200 /usr/bin/cat connected to 203.0.113.7:443"]
    # the sandbox's resolvers unknown (no watch): port 53 is the post rule's to judge
    assert rules(path="a").check(CHILD, conn("203.0.113.7", 53)) is None
    assert rules(url="http://203.0.113.7/x").check(CHILD, conn("203.0.113.7")) is None
    # a named host may resolve to this address: only the tree's DNS can tell
    assert rules(url="https://example.com/").check(CHILD, conn("203.0.113.7")) is None


def test_port_53_is_exempt_only_to_the_sandbox_resolvers() -> None:
    r = rules(path="a")
    r.resolvers = ["10.255.255.53"]
    assert r.check(CHILD, conn("10.255.255.53", 53)) is None
    tunnel = NetEvent(
        ts_ns=2, op="send", family="ipv4", address="203.0.113.7", port=53, transport="udp", sent=1
    )
    v = r.check(CHILD, tunnel)
    assert v is not None and v.rule == "unexpected-network"
    assert v.evidence == ["pid 200 /usr/bin/cat sent 1 udp datagram to 203.0.113.7:53"]
    none_known = rules(path="a")
    none_known.resolvers = []
    assert none_known.check(CHILD, conn("10.255.255.53", 53)) is not None


def test_loopback_is_one_definition_online_and_post() -> None:
    """Online as post: loopback passes only under `allow_loopback` (under --network host it
    is the host's loopback)."""
    v = rules(path="a").check(CHILD, conn("127.0.0.1", 2375))
    assert v is not None and v.evidence == ["pid 200 /usr/bin/cat connected to 127.0.0.1:2375"]
    browser = load_policy(["browser"])
    assert browser.spec.rules.unexpected_network.allow_loopback
    allowed = OnlineRules(browser, ctx_for("read_file", {"path": "a"}))
    assert allowed.check(CHILD, conn("127.0.0.1", 9222)) is None


def test_merge_puts_the_kill_first_and_denies_in_phase_post() -> None:
    online = Violation(
        rule="canary-touched",
        phase="post",
        mode="enforce",
        reason="r",
        evidence=["pid 1 open x (read)", "terminated online: SIGKILL to pid(s) [1]"],
    )
    post = Verdict(decision="deny", phase="post", violations=[
        Violation(rule="canary-touched", phase="post", mode="enforce", reason="r",
                  evidence=["post line"])])  # fmt: skip
    merged = _merge_online(post, [online])
    assert merged.rules == ["canary-touched"]
    assert merged.violations[0].evidence[1].startswith("terminated online")
    assert merged.violations[0].evidence[-1] == "post line"
    alone = _merge_online(Verdict(), [online])
    assert (alone.decision, alone.phase, alone.rules) == ("deny", "post", ["canary-touched"])
    observed = Violation(rule="unexpected-shell", phase="post", mode="observe", reason="r")
    assert _merge_online(Verdict(), [observed]).decision == "allow"


def test_online_config_and_policy_lists(tmp_path: Path) -> None:
    good = tmp_path / "g.toml"
    good.write_text('[online]\nmode = "observe"\nkill_on_touch = false\n')
    online = load_config(good).online
    assert (online.mode, online.kill_on_touch) == ("observe", False)
    assert (load_config(None).online.mode, load_config(None).online.kill_on_touch) == (
        "enforce",
        True,
    )
    bad = tmp_path / "b.toml"
    bad.write_text('[online]\nmode = "kill"\n')
    with pytest.raises(PolicyError):
        load_config(bad)
    lists = POLICY.spec.lists
    assert "/etc/shadow" in lists.protected_paths
    assert "/usr/bin/sudo" in lists.forbidden_executables
    assert all(p.startswith("/") for p in [*lists.protected_paths, *lists.forbidden_executables])


def test_udp_connect_fires_only_once_a_datagram_is_sent() -> None:
    r = rules(path="a")
    probe = NetEvent(ts_ns=1, op="connect", family="ipv6", address="2001:4860:4860::8888",
                     port=443, transport="udp")
    assert r.check(CHILD, probe) is None  # a connect() on a UDP socket sends nothing
    probe.sent = 1  # the monitor counts the first datagram on the same event
    v = r.check(CHILD, probe)
    assert v is not None and v.rule == "unexpected-network"
    assert v.evidence == [
        "pid 200 /usr/bin/cat sent 1 udp datagram to 2001:4860:4860::8888:443 (connected)"
    ]
    tcp = NetEvent(ts_ns=2, op="connect", family="ipv4", address="203.0.113.7", port=443,
                   transport="tcp")
    v = rules(path="a").check(CHILD, tcp)
    assert v is not None and v.evidence == [
        "pid 200 /usr/bin/cat connected to 203.0.113.7:443 (tcp)"
    ]
    sent = NetEvent(ts_ns=3, op="send", family="ipv4", address="203.0.113.7", port=9,
                    transport="udp", sent=1)
    assert rules(path="a").check(CHILD, sent) is not None  # sendto an explicit address
    accept = NetEvent(ts_ns=4, op="accept", family="ipv4", address="203.0.113.7", port=9)
    assert rules(path="a").check(CHILD, accept) is None


# -- the integrity rules online: each whole tools/call the server reads ------------------
def read(tool: str, arguments: dict[str, object], rid: object = "g-1") -> StdioMessage:
    return StdioMessage(
        ts_ns=5,
        pid=100,
        method="tools/call",
        id=rid,  # type: ignore[arg-type]
        tool=tool,
        arguments=arguments,
        digest=call_digest(tool, arguments),
    )


def test_the_declared_request_passes_and_a_swapped_one_fires_request_mismatch() -> None:
    r = rules("run_command", command="ls")
    assert r.check(SERVER, read("run_command", {"command": "ls"})) is None  # not expected yet
    r.expect("g-1", "srv")
    assert r.check(SERVER, read("run_command", {"command": "ls"})) is None
    r = rules("run_command", command="ls")
    r.expect("g-1", "srv")
    v = r.check(SERVER, read("run_command", {"command": "cat ~/.ssh/id_rsa"}))
    assert v is not None and (v.rule, v.mode) == ("request-mismatch", "enforce")
    assert v.evidence == [
        'argument \'command\': declared "ls", received "cat ~/.ssh/id_rsa"'
    ]  # the post rule's wording (shared)


def test_a_routed_request_fires_against_the_declared_call() -> None:
    r = rules("read_file", path="notes.txt")
    r.expect("g-1", "term")  # the host routed it to another server's sandbox
    v = r.check(SERVER, read("run_command", {"command": "id"}))
    assert v is not None and v.rule == "request-mismatch"
    assert v.evidence[:2] == [
        "the call declared for server 'srv' was read by server 'term' "
        "(pid 100: tools/call 'run_command')",
        "the server read tools/call 'run_command'; declared 'read_file'",
    ]


def test_a_second_read_is_undeclared_and_truncated_reads_never_decide() -> None:
    r = rules("transfer", to="bob", amount=5)
    r.expect("g-1", "srv")
    cut = StdioMessage(ts_ns=5, pid=100, digest="raw-sha256:00", size=9, truncated=True)
    assert r.check(SERVER, cut) is None
    notif = StdioMessage(ts_ns=5, pid=100, method="notifications/cancelled", digest="x")
    assert r.check(SERVER, notif) is None
    assert r.check(SERVER, read("transfer", {"to": "bob", "amount": 5})) is None
    v = r.check(SERVER, read("transfer", {"to": "bob", "amount": 5}, rid="g-1~replay-1"))
    assert v is not None and v.rule == "undeclared-request"
    assert v.evidence[0].endswith("(identical to the declared call: a replay)")
    # a foreign id read before the guard's own request is not the call's own either
    r = rules("transfer", to="bob", amount=5)
    r.expect("g-1", "srv")
    v = r.check(SERVER, read("transfer", {"to": "eve", "amount": 500}, rid=7))
    assert v is not None and v.rule == "undeclared-request"
    assert r.check(SERVER, read("transfer", {"to": "bob", "amount": 5})) is None


def test_without_a_json_rpc_id_the_first_call_read_is_the_calls_own() -> None:
    r = rules("transfer", to="bob", amount=5)
    r.expect({"not": "an id"}, "srv")
    v = r.check(SERVER, read("transfer", {"to": "eve", "amount": 5}, rid=None))
    assert v is not None and v.rule == "request-mismatch"
    assert v.evidence == ["argument 'to': declared \"bob\", received \"eve\""]


def test_integrity_rules_off_in_the_policy_stay_quiet_online(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[rules.request-mismatch]\nmode = "off"\n')
    r = OnlineRules(load_policy([str(path)]), ctx_for("run_command", {"command": "ls"}))
    r.expect("g-1", "srv")
    assert r.check(SERVER, read("run_command", {"command": "id"})) is None
    v = r.check(SERVER, read("run_command", {"command": "id"}, rid="x"))
    assert v is not None and v.rule == "undeclared-request"


def test_the_guards_own_earlier_request_read_late_is_declared_once() -> None:
    """A busy server reads an abandoned call's request in a later call's window: the guard
    sent it (ledger), so it is declared; a second read of that one send is a replay."""
    ledger = DispatchLedger("srv")
    earlier = DeclaredCall(call_id="c0", server="srv", tool="transfer", arguments={"amount": 1})
    ledger.sent("g-0", earlier)
    r = rules("transfer", amount=5)
    ledger.sent("g-1", r.ctx.call)
    r.expect("g-1", "srv", ledger)
    late = read("transfer", {"amount": 1}, rid="g-0")
    assert r.check(SERVER, late) is None and late.dispatched_by == "c0"
    own = read("transfer", {"amount": 5})
    assert r.check(SERVER, own) is None and own.dispatched_by == r.ctx.call.call_id
    v = r.check(SERVER, read("transfer", {"amount": 1}, rid="g-0"))
    assert v is not None and v.rule == "undeclared-request"
