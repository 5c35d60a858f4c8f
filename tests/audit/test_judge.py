"""The LLM judge against a real chat-completions server on loopback (scripted answers)."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

from mtguard_rt.audit import JudgeConfig, LlmJudge, parse_reply
from mtguard_rt.errors import JudgeProtocolError, JudgeTimeout, JudgeUnavailable

from .llm_server import ScriptedLlm, serve_llm

BOUND_S = 10.0


@pytest.fixture
def llm() -> Iterator[ScriptedLlm]:
    with serve_llm() as server:
        yield server


def _judge(llm: ScriptedLlm, model: str, **kw: object) -> LlmJudge:
    return LlmJudge(JudgeConfig(base_url=llm.base_url, model=model, **kw))  # type: ignore[arg-type]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("model", "decision", "policy"),
    [("allow", "allow", None), ("deny", "deny", "2"), ("fenced", "deny", "3")],
)
async def test_scripted_verdicts(
    llm: ScriptedLlm, model: str, decision: str, policy: str | None
) -> None:
    async with _judge(llm, model) as judge:
        with anyio.fail_after(BOUND_S):
            answer = await judge.judge("system", "user")
    assert (answer.decision, answer.violated_policy, answer.error) == (decision, policy, None)
    sent = llm.requests[0]
    assert sent["model"] == model and sent["temperature"] == 0.0
    assert [m["role"] for m in sent["messages"]] == ["system", "user"]


@pytest.mark.anyio
@pytest.mark.parametrize("model", ["malformed", "prose", "extra-field"])
async def test_malformed_answers_are_protocol_errors(llm: ScriptedLlm, model: str) -> None:
    async with _judge(llm, model) as judge:
        with anyio.fail_after(BOUND_S):
            with pytest.raises(JudgeProtocolError):
                await judge.ask("s", "u")
            answer = await judge.judge("s", "u")
    assert answer.decision == "deny" and answer.error == "JudgeProtocolError"


@pytest.mark.anyio
async def test_slow_answer_times_out_and_on_error_applies(llm: ScriptedLlm) -> None:
    async with _judge(llm, "slow", timeout_s=0.3) as judge:
        with anyio.fail_after(BOUND_S):
            with pytest.raises(JudgeTimeout):
                await judge.ask("s", "u")
    async with _judge(llm, "slow", timeout_s=0.3, on_error="allow") as judge:
        with anyio.fail_after(BOUND_S):
            answer = await judge.judge("s", "u2")
    assert answer.decision == "allow" and answer.error == "JudgeTimeout"


@pytest.mark.anyio
async def test_http_500_is_unavailable_and_denies_by_default(llm: ScriptedLlm) -> None:
    async with _judge(llm, "http500") as judge:
        with anyio.fail_after(BOUND_S):
            with pytest.raises(JudgeUnavailable, match="HTTP 500"):
                await judge.ask("s", "u")
            answer = await judge.judge("s", "u")
    assert answer.decision == "deny" and answer.violated_policy == "judge-error"


@pytest.mark.anyio
async def test_unreachable_endpoint_is_unavailable() -> None:
    with anyio.fail_after(BOUND_S):
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
        await listener.aclose()  # nothing listens there now
        async with LlmJudge(JudgeConfig(base_url=f"http://127.0.0.1:{port}/v1", model="m")) as j:
            with pytest.raises(JudgeUnavailable):
                await j.ask("s", "u")


@pytest.mark.anyio
async def test_identical_requests_are_cached(llm: ScriptedLlm) -> None:
    async with _judge(llm, "deny") as judge:
        with anyio.fail_after(BOUND_S):
            first = await judge.judge("s", "u")
            second = await judge.judge("s", "u")
            third = await judge.judge("s", "other")
    assert not first.cached and second.cached and not third.cached
    assert len(llm.requests) == 2 and judge.requests == 2


@pytest.mark.anyio
async def test_concurrency_is_capped(llm: ScriptedLlm) -> None:
    answers: list[str] = []
    async with _judge(llm, "gate", max_concurrency=2) as judge:

        async def one(i: int) -> None:
            answers.append((await judge.judge("s", f"u{i}")).decision)

        with anyio.fail_after(BOUND_S):
            async with anyio.create_task_group() as tg:
                for i in range(6):
                    tg.start_soon(one, i)
                await anyio.to_thread.run_sync(llm.two_inflight.wait, BOUND_S)
                await anyio.sleep(0.2)  # give a third request the chance to (wrongly) arrive
                assert llm.inflight == 2
                llm.release.set()
    assert answers == ["allow"] * 6 and llm.max_inflight == 2


@pytest.mark.anyio
async def test_api_key_from_environment(llm: ScriptedLlm, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MTG_TEST_KEY", "sk-test-123")
    async with _judge(llm, "allow", api_key_env="MTG_TEST_KEY") as judge:
        with anyio.fail_after(BOUND_S):
            await judge.ask("s", "u")
    assert llm.headers_seen[0]["authorization"] == "Bearer sk-test-123"
    monkeypatch.delenv("MTG_TEST_KEY")
    async with _judge(llm, "allow", api_key_env="MTG_TEST_KEY") as judge:
        with anyio.fail_after(BOUND_S), pytest.raises(JudgeUnavailable, match="MTG_TEST_KEY"):
            await judge.ask("s", "u")


def test_parse_reply_is_strict() -> None:
    assert (
        parse_reply(' {"decision":"allow","violated_policy":null,"reason":"r"} ').decision
        == "allow"
    )
    assert (
        parse_reply('```\n{"decision":"deny","violated_policy":"1","reason":"r"}\n```').decision
        == "deny"
    )
    for bad in ['{"decision":"allow","reason":"r"}', "allow", "```python\n{}\n```", ""]:
        with pytest.raises(JudgeProtocolError):
            parse_reply(bad)
