"""`mtguard policy check|explain|list` through the CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from mtguard_rt.audit.spec import RULE_IDS
from mtguard_rt.cli import main
from mtguard_rt.model import Timings, Violation

from .telemetry.fixtures import SSH_KEY, allowed_record, denied_record, pre_denied_record


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_check_shows_every_rule_with_its_mode_and_the_layer_that_set_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text('[rules.off-task-url]\nmode = "observe"\n\n[lists]\n'
                    'allowed_domains = ["docs.internal.example"]\n')
    code, out, err = run(capsys, "policy", "check", "strict", str(mine))
    assert code == 0 and "policy OK (3 layer(s))" in err
    assert out.startswith("layers: ") and out.splitlines()[0].endswith(str(mine))
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if line.startswith("  ") and not line.startswith("      ")}
    assert set(RULE_IDS) <= set(rows)
    assert rows["off-task-url"][1:] == ["observe", "(mode", "from", "mine.toml)"]
    assert rows["incomplete-tree"][1:] == ["enforce", "(mode", "from", "strict.toml)"]
    assert rows["sensitive-file-arg"][1:] == ["enforce", "(mode", "from", "balanced.toml)"]
    assert "allowed_domains (1): docs.internal.example" in out
    assert "... and" in out  # long lists are cut without --full
    _, full, _ = run(capsys, "policy", "check", "strict", str(mine), "--full")
    assert "... and" not in full and "/run/secrets/**" in full


def test_check_json_is_the_effective_policy(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "policy", "check", "finance", "--json")
    assert code == 0
    data = json.loads(out)
    rules = {r["rule"]: r for r in data["rules"]}
    assert rules["task-entity-mismatch"]["mode_from"] == "finance.toml"
    names = [e["name"] for e in rules["task-entity-mismatch"]["settings"]["entities"]]
    assert names == ["ticker", "recipient", "account", "wallet"]
    assert rules["repeated-call"]["settings"]["threshold"] == 2
    assert data["guard"] == {"mode": "enforce", "pinning_action": "deny"}


def test_check_rejects_a_bad_file_with_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[guard]\nmode = "enforce"\n\n[rules.dangerous-shell]\nmode = "block"\n')
    code, out, err = run(capsys, "policy", "check", str(bad))
    assert (code, out) == (2, "")
    assert err.startswith(f"mtguard: error: {bad}:5:")
    code, _, err = run(capsys, "policy", "check", "no-such-preset")
    assert code == 2 and "no policy preset named 'no-such-preset'" in err


def test_list_names_the_presets_and_skips_data_files(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "policy", "list")
    assert code == 0
    names = [line.split()[0] for line in out.splitlines()]
    assert names == ["balanced", "browser", "filesystem", "finance", "permissive", "shell",
                     "strict"]


def _log(tmp_path: Path, *records: object) -> Path:
    path = tmp_path / "audit.jsonl"
    path.write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in records))
    return path


def test_explain_a_post_denial_points_at_the_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _log(tmp_path, allowed_record("8"), denied_record("7"), pre_denied_record("9"))
    code, out, _ = run(capsys, "policy", "explain", "7", "--audit-log", str(log))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("call 7: tools/call read_note on notes")
    assert "denied after execution by secret-file-read, undeclared-egress" in out
    assert "result was withheld" in out
    assert "  secret-file-read: denied; post-execution, mode enforce" in lines
    assert f"    evidence: pid 102 open {SSH_KEY}" in lines
    hits = [line for line in lines if line.startswith("    in the tree:")]
    assert any(h.endswith(f"open {SSH_KEY} [read]") and f"cat {SSH_KEY}" in h for h in hits)
    assert lines[-1] == "timings (ms): pre 0.4, exec 8.0, settle 2.0, post 0.6, total 11.2"


def test_explain_pre_denial_allowed_call_and_observe_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    observed = denied_record("10")
    observed.mode = "observe"
    quiet = allowed_record("11")
    quiet.violations = [Violation(rule="result-injection", phase="post", mode="observe",
                                  reason="instructions in the result", evidence=["IGNORE ALL"])]
    quiet.timings_ms = Timings(total=1.0)
    log = _log(tmp_path, allowed_record("8"), pre_denied_record("9"), observed, quiet)
    _, out, _ = run(capsys, "policy", "explain", "9", "--audit-log", str(log))
    assert "denied before dispatch by shadowed-tool: the server never ran the call" in out
    assert "tree: none, the call was not executed" in out
    _, out, _ = run(capsys, "policy", "explain", "req-8", "--audit-log", str(log))  # JSON-RPC id
    assert "allowed: no rule fired" in out and "INCOMPLETE (ring buffer overflow)" in out
    _, out, _ = run(capsys, "policy", "explain", "10", "--audit-log", str(log))
    assert "nothing blocked: the guard ran in observe mode" in out
    assert "  secret-file-read: would deny (observe mode)" in out
    _, out, _ = run(capsys, "policy", "explain", "11", "--audit-log", str(log), "--tree")
    assert "allowed: the rules that fired only observe (result-injection)" in out
    assert "  result-injection: recorded only (rule observes)" in out
    assert "1 calls · 0 denied · 1 allowed" in out  # --tree appends the drawn tree


def test_explain_unknown_call_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _log(tmp_path, allowed_record("8"))
    code, out, err = run(capsys, "policy", "explain", "nope", "--audit-log", str(log))
    assert (code, out) == (2, "")
    assert err == f"mtguard: error: telemetry: no call 'nope' in {log}\n"
    code, _, err = run(capsys, "policy", "explain", "8", "--audit-log", str(tmp_path / "x"))
    assert code == 2 and "cannot read the audit log" in err
