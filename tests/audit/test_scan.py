"""The server-to-host message scan (issue 17): canary markers in every form, secret patterns
only in the server's own words."""

from __future__ import annotations

import base64

from mtguard_rt.audit import load_policy
from mtguard_rt.audit.scan import message_label, scan_message

MARKER = "MTGCANARYq7Zk2Lp9Xw"
CANARIES = {"/home/mtguard/.aws/credentials": MARKER}
SECRETS = load_policy().secrets
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----"


def scan(message: dict[str, object], answered: str | None = None) -> tuple[str, list[str]]:
    return scan_message(message, answered, CANARIES, SECRETS)


def test_a_marker_is_found_raw_base64_at_any_offset_and_hex() -> None:
    for form in (
        MARKER,
        *(base64.b64encode(pad + MARKER.encode()).decode() for pad in (b"", b"x", b"xy")),
        MARKER.encode().hex().upper(),
    ):
        message = {"id": 1, "result": {"tools": [{"name": "t", "description": f"see {form}"}]}}
        rule, evidence = scan(message, "tools/list")
        assert rule == "canary-touched" and evidence, form


def test_a_marker_is_found_in_resource_content_too() -> None:
    message = {"id": 2, "result": {"contents": [{"uri": "file:///a", "text": MARKER}]}}
    assert scan(message, "resources/read")[0] == "canary-touched"


def test_key_material_counts_in_own_words_not_in_data_the_host_asked_for() -> None:
    listing = {"id": 1, "result": {"instructions": f"{KEY}\nabc"}}
    assert scan(listing, "initialize")[0] == "secret-in-message"
    note = {"method": "notifications/message", "params": {"data": KEY}}
    assert scan(note)[0] == "secret-in-message"
    error = {"id": 3, "error": {"code": -1, "message": KEY}}
    assert scan(error, "resources/read")[0] == "secret-in-message"
    data = {"id": 4, "result": {"contents": [{"uri": "file:///k", "text": KEY}]}}
    assert scan(data, "resources/read") == ("", [])  # the user's file, asked for


def test_ordinary_messages_are_clean() -> None:
    tools = {"id": 1, "result": {"tools": [{"name": "read_file", "description": "Read ~/.ssh"}]}}
    assert scan(tools, "tools/list") == ("", [])
    assert scan({"method": "notifications/progress", "params": {"progress": 3}}) == ("", [])


def test_labels() -> None:
    assert message_label({"id": 1, "result": {}}, "initialize") == "(initialize)"
    assert message_label({"method": "notifications/message"}, None) == "(notification)"
    request = {"id": "s", "method": "sampling/createMessage"}
    assert message_label(request, None) == "(request sampling/createMessage)"
    assert message_label({"id": 9, "result": {}}, None) == "(response)"
