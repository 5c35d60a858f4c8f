"""`mtguard learn`: malformed lines are reported and skipped, empty/missing logs are errors."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from mtguard_rt.audit.profile import load_profile
from mtguard_rt.cli import main
from mtguard_rt.paths import default_audit_log

from .audit.test_profile import _record, _report_call


def _log(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def _good(n: int) -> str:
    return msgspec.json.encode(_record(_report_call(n, f"doc{n}"))).decode()


def test_learn_reports_malformed_lines_and_writes_a_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _log(
        tmp_path / "audit.jsonl", [_good(1), "{not json", _good(2), "", '{"x": 1}', _good(3)]
    )
    out = tmp_path / "out" / "profile.toml"
    assert main(["learn", "--audit-log", str(log), "--out", str(out), "--min-calls", "3"]) == 0
    err = capsys.readouterr().err
    assert f"{log}:2: skipped, not an audit record" in err
    assert f"{log}:5: skipped, not an audit record" in err
    assert "learned 1 tool(s) of 1 server(s) from 3 call(s); skipped 2 record(s)" in err
    assert "srv.render: 3 call(s)" in err
    profile = load_profile(out)
    assert profile.spec.profile.calls == 3 and profile.spec.profile.skipped == 2
    assert profile.spec.profile.learned_from == str(log)


def test_learn_min_calls_drops_rare_tools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _log(tmp_path / "audit.jsonl", [_good(1), _good(2)])
    assert main(["learn", "--audit-log", str(log), "--out", "-", "--min-calls", "3"]) == 0
    captured = capsys.readouterr()
    assert "no profile for srv.render (2 call(s)): fewer than --min-calls 3" in captured.err
    assert "[profile]" in captured.out and "[servers." not in captured.out


@pytest.mark.parametrize("content", [None, "", "\n\n"])
def test_missing_or_empty_log_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None
) -> None:
    log = tmp_path / "audit.jsonl"
    if content is not None:
        log.write_text(content)
    assert main(["learn", "--audit-log", str(log), "--out", str(tmp_path / "p.toml")]) == 2
    err = capsys.readouterr().err
    assert ("No such file" in err) if content is None else ("is empty" in err)
    assert not (tmp_path / "p.toml").exists()


def test_a_log_of_denied_calls_only_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    denied = _record(_report_call(1, "a"), decision="deny", mode="observe", rules=["x"])
    log = _log(tmp_path / "audit.jsonl", [msgspec.json.encode(denied).decode()])
    assert main(["learn", "--audit-log", str(log)]) == 2
    assert "no allowed call with a behavior tree" in capsys.readouterr().err


def test_eval_takes_an_audit_log_for_learning() -> None:
    from mtguard_rt.cli import build_parser

    args = build_parser().parse_args(["eval", "--audit-log", "run/audit.jsonl"])
    assert args.audit_log == "run/audit.jsonl"
    learn = build_parser().parse_args(["learn"])
    assert (learn.audit_log, learn.out, learn.min_calls) == (
        default_audit_log(),
        ".mtguard/profile.toml",
        3,
    )


def test_min_calls_below_one_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = _log(tmp_path / "audit.jsonl", [_good(1)])
    assert main(["learn", "--audit-log", str(log), "--min-calls", "0"]) == 2
    assert "--min-calls must be at least 1" in capsys.readouterr().err
