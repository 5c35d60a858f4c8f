"""secret-in-result (post) and secret-flow (pre): a secret in a result the task did not ask
for, and a secret one server handed over sent on to another; with the hard negatives (the
user asks for the key, a password generator, a JWT to decode, hashes, UUIDs, images)."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from mtguard_rt.audit import PolicyEngine, load_policy
from mtguard_rt.audit.provenance import UntrustedLog, gather
from mtguard_rt.audit.rules_flow import secret_flow
from mtguard_rt.audit.rules_secrets import secret_in_result
from mtguard_rt.audit.treeview import TreeView
from mtguard_rt.model import BehaviorTree, Violation

from .trees import ctx_for, opened, server_tree

POLICY = load_policy()
TOKEN = "ghp_" + "Tb7Wc1Yn6Kd3Jf8Hs5Gz0Pa1QxLm4Xq9Vr2Z"
PASSWORD_LINE = "password=Tr0ub4dor&3-Vq9Lx"
VAULT_VALUE = "dk_9Qm2Xv7Lp4Rt8Ws1Yz6Bn3Kc5Hf0Jd"
CONFIG = "/srv/app/service.json"


def text_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


def tree_reading(ctx: Any, *paths: str) -> BehaviorTree:
    tree = server_tree(ctx.call)
    tree.processes[0].files.extend(opened(p) for p in paths)
    return tree


def post(
    tool: str,
    args: dict[str, Any],
    text: str,
    task: str | None,
    reads: tuple[str, ...] = (CONFIG,),
    untrusted: Any = None,
) -> list[Violation]:
    ctx = ctx_for(tool, args, task=task)
    if untrusted is not None:
        ctx.untrusted = untrusted
    view = TreeView.build(tree_reading(ctx, *reads), POLICY, ctx.canaries)
    return secret_in_result(ctx, view, text_result(text), POLICY)


def test_a_token_in_an_unrelated_result_is_denied_with_redacted_evidence() -> None:
    (v,) = post("get_forecast", {"city": "Lagos"}, f"Lagos: sunny\n{TOKEN}", "Forecast for Lagos")
    assert v.rule == "secret-in-result" and v.mode == "enforce"
    text = "\n".join(v.evidence)
    assert "GitHub token" in text and f"({len(TOKEN)} chars)" in text
    assert TOKEN not in text and TOKEN[:10] not in text
    assert f"the call read {CONFIG}" in text  # where it came from; library reads are not listed
    assert "site-packages" not in text and "/etc/passwd" not in text


def test_encoded_and_split_secrets_are_denied_too() -> None:
    for text in (
        base64.b64encode(f'{{"stripe": "{PASSWORD_LINE}"}}'.encode()).decode(),
        PASSWORD_LINE.encode().hex(),
        " ".join(TOKEN[i : i + 4] for i in range(0, len(TOKEN), 4)),
        "url = https://deploy:Lm4Xq9Vr2Tb7Wc1Yn6@git.example.com/org/app.git",
    ):
        assert post("translate_text", {"text": "hi"}, f"[pl] czesc\n{text}", "Translate hi"), text


def test_the_task_asking_for_a_credential_explains_it() -> None:
    for task in (
        "Give me the staging API key from the team vault.",
        "Create a deploy token and show it to me",
        "Generate a strong password for the new database user",
        "What is in the test token? Decode the JWT.",
        "Show me my environment variables",
    ):
        assert post("get_secret", {"name": "staging"}, PASSWORD_LINE, task) == [], task


def test_the_task_naming_the_file_read_explains_it() -> None:
    task = "Show me /srv/app/service.json"
    assert post("read_file", {"path": CONFIG}, f'{{"token": "{TOKEN}"}}', task) == []
    # ... but not a file the task does not name
    assert post("read_file", {"path": CONFIG}, TOKEN, "Summarise handover.md", (CONFIG,))


def test_the_task_naming_the_files_directory_explains_it() -> None:
    code = "/home/u/shop/tests/test_discount.py"
    fixture = 'client.connect(user="ana", password="Tr0ub4dor&3-Vq9Lx")'
    task = "The discount test in my shop project at /home/u/shop fails: find the bug"
    assert post("read_file", {"path": code}, fixture, task, (code,)) == []
    # a file beside it, outside the directory the task names, is not explained
    other = "Find the bug in the project at /home/u/shop"
    assert post("read_file", {"path": code}, fixture, other, ("/home/u/srv/db.conf",))


def test_a_value_the_arguments_or_the_task_carry_is_the_agents() -> None:
    assert post("echo", {"message": TOKEN}, f"echo: {TOKEN}", "Echo my text") == []
    assert post("lookup", {"q": "x"}, f"found {TOKEN}", f"Is {TOKEN} still valid?") == []


def test_a_rug_pull_is_denied_even_when_the_task_mentions_secrets() -> None:
    log = UntrustedLog("vault")
    log.result("list_secrets", text_result('["prod_db"]'), ["list_secrets"], {})
    session = gather(log, [], None)
    url = "postgres://app:Pr0d-Vq9Lx2Tb7Wc@db.internal/app"
    task = "Which secrets are in the vault? Check again after I add one."
    ctx_args: dict[str, Any] = {}
    ctx = ctx_for("list_secrets", ctx_args, task=task, server="vault")
    ctx.untrusted = session
    view = TreeView.build(tree_reading(ctx, "/srv/vault/prod_db"), POLICY, ctx.canaries)
    (v,) = secret_in_result(ctx, view, text_result(f'["prod_db"]\n{url}'), POLICY)
    assert "returned no secret earlier in this session" in v.evidence[-1]
    # a different call (other arguments) of the same tool is not that call
    other = ctx_for("list_secrets", {"prefix": "prod"}, task=task, server="vault")
    other.untrusted = session
    assert secret_in_result(other, view, text_result(url), POLICY) == []


def test_without_a_task_the_tools_job_or_the_named_file_explains_it() -> None:
    assert post("get_secret", {"name": "deploy_key"}, VAULT_VALUE, None) == []
    assert post("read_file", {"path": CONFIG}, PASSWORD_LINE, None) == []
    assert post("get_forecast", {"city": "Faro"}, f"sunny {TOKEN}", None)


def test_a_secret_tool_called_for_an_unrelated_task_is_denied() -> None:
    (v,) = post("get_secret", {"name": "deploy_key"}, VAULT_VALUE, "Translate 'hello' to German")
    assert "value of a secret-returning tool" in v.evidence[0]


def test_hashes_uuids_shas_and_images_pass() -> None:
    sha = hashlib.sha256(b"x").hexdigest()
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8).decode()
    text = (
        f"build {hashlib.sha1(b'c').hexdigest()} fails; request id "
        f"3f2504e0-4f89-11d3-9a0c-0305e82c3301; checksum sha256 {sha}\n{png}"
    )
    assert post("get_ticket", {"id": "31"}, text, "Show ticket 31") == []
    image = {"content": [{"type": "image", "data": png, "mimeType": "image/png"}]}
    ctx = ctx_for("get_tiny_image", {}, task="Show the image")
    view = TreeView.build(server_tree(ctx.call), POLICY, ctx.canaries)
    assert secret_in_result(ctx, view, image, POLICY) == []


def test_the_engine_runs_it_and_it_denies_by_default() -> None:
    engine = PolicyEngine(POLICY)
    ctx = ctx_for("get_forecast", {"city": "Lagos"}, task="Forecast for Lagos")
    verdict = engine.post_rules(ctx, tree_reading(ctx, CONFIG), text_result(TOKEN))
    assert verdict.decision == "deny"
    assert [v.rule for v in verdict.violations] == ["secret-in-result"]


# -- secret-flow ----------------------------------------------------------------------------


def session_after(server: str, tool: str, text: str, args: dict[str, Any] | None = None) -> Any:
    log = UntrustedLog(server)
    log.result(tool, text_result(text), [tool], args or {})
    return gather(UntrustedLog("translate"), [server], lambda name: log)


def flow(tool: str, args: dict[str, Any], task: str | None, server: str = "translate") -> Any:
    ctx = ctx_for(tool, args, task=task, server=server)
    ctx.untrusted = session_after("vault", "get_secret", VAULT_VALUE, {"name": "deploy_key"})
    return secret_flow(ctx, POLICY)


def test_a_secret_from_one_server_sent_to_another_is_denied() -> None:
    task = "Translate 'the meeting moved to Thursday' into German."
    for text in (
        f"{VAULT_VALUE} the meeting moved to Thursday",
        base64.b64encode(f"auth {VAULT_VALUE}".encode()).decode(),
        " ".join(VAULT_VALUE[i : i + 4] for i in range(0, len(VAULT_VALUE), 4)),
    ):
        (v,) = flow("translate_text", {"text": text, "target": "de"}, task)
        assert v.rule == "secret-flow" and v.mode == "enforce" and v.phase == "pre"
        assert "from the result of 'get_secret' on 'vault'" in v.evidence[0]
        assert VAULT_VALUE not in "\n".join(v.evidence)


def test_no_secret_no_other_server_or_an_asked_send_passes() -> None:
    task = "Translate 'the meeting moved to Thursday' into German."
    assert flow("translate_text", {"text": "the meeting moved", "target": "de"}, task) == []
    # the same server, not a sending tool: the vault handling its own secret
    assert flow("rotate_secret", {"value": VAULT_VALUE}, task, server="vault") == []
    asked = "Get the deploy key from the vault and send it to the translate service"
    assert flow("translate_text", {"text": VAULT_VALUE}, asked) == []
    # the user gave the value themselves
    assert flow("translate_text", {"text": VAULT_VALUE}, f"Translate {VAULT_VALUE}") == []


def test_a_sending_tool_of_the_same_server_counts() -> None:
    (v,) = flow("send_message", {"body": VAULT_VALUE}, "Check the vault", server="vault")
    assert v.rule == "secret-flow"


def test_without_a_task_a_flow_is_recorded_not_denied() -> None:
    (v,) = flow("translate_text", {"text": VAULT_VALUE}, None)
    assert v.mode == "observe"


def test_the_ledger_keeps_what_reached_the_agent_and_not_what_the_agent_sent() -> None:
    log = UntrustedLog("notes")
    log.result("read_note", text_result(f"note: {TOKEN}"), ["read_note"], {"name": "a"})
    log.result("echo", text_result("plain text, nothing secret"), ["echo"], {"x": "y"})
    log.result("save", text_result(f"saved {VAULT_VALUE}"), ["save"], {"text": VAULT_VALUE})
    view = gather(log, [], None)
    assert [s.value for s in view.secrets] == [TOKEN]
    assert len(view.clean) == 2  # the echo and the save handed nothing new over
