"""Reading an audit log in tests: the records of the tool calls made, apart from the records
the guard writes besides them (a server's start-up, what it did between calls, a killed
call's answer the guard dropped), each of which is checked here."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from mtguard_rt.between_calls import is_between, is_startup
from mtguard_rt.model import AuditRecord, record_decoder


def all_records(path: Path) -> list[AuditRecord]:
    return [record_decoder.decode(line) for line in path.read_bytes().splitlines() if line]


def call_records(path: Path, *, startup_denies: bool = False) -> list[AuditRecord]:
    """The call records of the audit log at `path`. A start-up record must allow unless
    `startup_denies` (a test server that reads a secret at start-up); a between-call record
    must allow; a dropped late answer must carry `withheld-response`."""
    calls = []
    for r in all_records(path):
        if is_startup(r):
            assert startup_denies or r.decision == "allow", (r.decision, r.rules)
        elif is_between(r):
            assert r.decision == "allow", (r.decision, r.rules)
        elif r.tool == "(late-response)":
            assert r.rules == ["withheld-response"], r.rules
        else:
            calls.append(r)
    return calls


def last_call(records: Sequence[AuditRecord], tool: str | None = None) -> AuditRecord:
    """The latest record of a tool call (of `tool`, when given): not a start-up, between-call
    or dropped-late-answer record, which the guard may append at any moment (a between-call
    period closes concurrently with the call that ends it), so `records[-1]` may be one."""
    for r in reversed(records):
        if is_between(r) or r.tool == "(late-response)":
            continue
        if tool is None or r.tool == tool:
            return r
    raise AssertionError(f"no record of a call {tool or ''} among {len(records)} records")
