"""`PolicyEngine`: the audit the supervisor runs before and after each call.

`pre_audit(ctx)` runs the pre-execution rules on the declared call (descriptions stripped);
any enforce-mode violation denies at once, else the LLM judge (when configured) decides.
`post_verify(ctx, tree, result)` does the same with the post rules on the raw tree and the
judge on a simplified one. A verdict denies only for an enforce-mode violation; in observe
mode (engine flag or policy) every violation is recorded as observe and nothing denies.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import msgspec

from ..model import BehaviorTree, Phase, Verdict, Violation
from .baseline import ServerBaseline
from .context import CallContext
from .judge import JudgeAnswer, LlmJudge
from .pins import ToolChange
from .policy import Policy
from .profile import RULE as PROFILE_RULE
from .profile import profile_deviation, profile_skip
from .prompts import render
from .rules_exec import command_mismatch, privilege_escalation, unexpected_shell
from .rules_files import canary_touched, persistence_write, result_text, sensitive_file_read
from .rules_integrity import request_mismatch, result_tampered, undeclared_request
from .rules_lost import lost_events
from .rules_net import incomplete_tree, unexpected_network
from .rules_pre import NEEDS_TASK, PRE_RULES
from .rules_process import process_control
from .rules_result import result_injection
from .rules_scope import scope_escape
from .rules_secrets import secret_in_result
from .rules_state import STATE_PRE_RULES, unrequested_change
from .schema import strip_descriptions
from .session import fence, render_calls, render_registry
from .summary import summarize
from .treeview import TreeView

PostRule = Callable[[CallContext, TreeView, dict[str, Any], Policy], list[Violation]]
POST_RULES: tuple[tuple[str, PostRule], ...] = (
    ("canary-touched", canary_touched),
    ("sensitive-file-read", sensitive_file_read),
    ("persistence-write", persistence_write),
    ("scope-escape", scope_escape),
    ("unexpected-shell", unexpected_shell),
    ("command-mismatch", command_mismatch),
    ("privilege-escalation", privilege_escalation),
    ("unexpected-network", unexpected_network),
    ("result-injection", result_injection),
    ("secret-in-result", secret_in_result),
    ("incomplete-tree", incomplete_tree),
    ("lost-events", lost_events),
    ("request-mismatch", request_mismatch),
    ("undeclared-request", undeclared_request),
    ("result-tampered", result_tampered),
    ("unrequested-change", unrequested_change),
    ("process-control", process_control),
    (PROFILE_RULE, profile_deviation),
)
UNTRACED_OK = frozenset(
    {"canary-touched", "result-injection", "secret-in-result", "incomplete-tree"}
)
JUDGE = "llm-judge"
PINNING = "tool-pinning"
MAX_HISTORY = 20  # most recent turns shown to the judge
MAX_TURN_CHARS = 2000
MAX_ARGUMENT_CHARS = 8000

_json = msgspec.json.Encoder(enc_hook=repr)  # whatever `simplify` returns can be shown


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} chars cut]"


_fence = fence  # untrusted text cannot close the <untrusted> block that holds it


def _dump(value: Any, limit: int) -> str:
    return _fence(_clip(_json.encode(value).decode(), limit))


class PolicyEngine:
    """Rules (always) plus an optional judge, under one policy. Safe to share across calls."""

    def __init__(
        self,
        policy: Policy,
        judge: LlmJudge | None = None,
        observe: bool = False,
        simplify: Callable[[BehaviorTree], Any] | None = None,
    ) -> None:
        self.policy = policy
        self.judge = judge
        self.observe = observe or policy.observe
        self.simplify = simplify or summarize
        # What each server executes on every call (learnt online from its first calls).
        self.baselines: dict[str, ServerBaseline] = {}

    def _attach(self, ctx: CallContext) -> None:
        if ctx.baseline is None:
            ctx.baseline = self.baselines.setdefault(ctx.call.server, ServerBaseline())

    def _finish(self, phase: Phase, found: list[Violation], skipped: list[str]) -> Verdict:
        if self.observe:
            found = [msgspec.structs.replace(v, mode="observe") for v in found]
        deny = any(v.mode == "enforce" for v in found)
        return Verdict(
            decision="deny" if deny else "allow", phase=phase, violations=found, skipped=skipped
        )

    def _guard(
        self, rule: str, phase: Phase, run: Callable[[], list[Violation]]
    ) -> list[Violation]:
        try:
            return run()
        except Exception as exc:  # a broken rule fails closed, visibly
            return [
                Violation(
                    rule=rule,
                    phase=phase,
                    mode=self.policy.mode_of(rule),
                    reason=f"rule failed: {type(exc).__name__}: {exc}",
                )
            ]

    def pre_rules(self, ctx: CallContext) -> Verdict:
        """The pre-execution code rules alone (no judge): a pure, synchronous verdict."""
        self._attach(ctx)
        found: list[Violation] = []
        skipped: list[str] = []
        for rule, fn in (*PRE_RULES, *STATE_PRE_RULES):
            if self.policy.mode_of(rule) == "off":
                continue
            if rule in NEEDS_TASK and ctx.task is None:
                skipped.append(f"{rule}: no task")
                continue
            found.extend(self._guard(rule, "pre", partial(fn, ctx, self.policy)))
        skipped.extend(
            f"scan: argument {key!r} has {n} chars; rules read its first and last "
            f"{ctx.scan_limit // 2}"
            for key, n in ctx.clipped
        )
        return self._finish("pre", found, skipped)

    def post_rules(self, ctx: CallContext, tree: BehaviorTree, result: dict[str, Any]) -> Verdict:
        """The post-execution code rules alone (no judge) on the raw tree and the result."""
        found: list[Violation] = []
        skipped: list[str] = []
        self._attach(ctx)
        view = TreeView.build(tree, self.policy, ctx.canaries)
        for rule, fn in POST_RULES:
            if self.policy.mode_of(rule) == "off":
                continue
            if rule == PROFILE_RULE:  # only calls of a profiled tool (none configured: silent)
                why = profile_skip(ctx.call.server, ctx.call.tool, self.policy.profile)
                if why is not None:
                    skipped.extend([f"{rule}: {why}"] if why else [])
                    continue
            if not tree.traced and rule not in UNTRACED_OK:
                skipped.append(f"{rule}: nothing was traced")
                continue
            found.extend(self._guard(rule, "post", partial(fn, ctx, view, result, self.policy)))
        verdict = self._finish("post", found, skipped)
        if isinstance(ctx.baseline, ServerBaseline):
            ctx.baseline.files.record(tree)  # the files this call made, for the next calls
        clean = all(self.policy.mode_of(v.rule) != "enforce" for v in found)
        if clean and isinstance(ctx.baseline, ServerBaseline):
            ctx.baseline.learn(ctx, view, self.policy)  # an allowed call: housekeeping to learn
        return verdict

    async def pre_audit(self, ctx: CallContext) -> Verdict:
        verdict = self.pre_rules(ctx)
        if verdict.decision == "deny" or not self._judging():
            return verdict
        user = render(
            "pre",
            task=ctx.task or "(no task given)",
            history=self._history(ctx),
            server=ctx.call.server,
            tool=ctx.call.tool,
            schema=_dump(strip_descriptions(ctx.input_schema), MAX_ARGUMENT_CHARS),
            arguments=_dump(ctx.call.arguments, MAX_ARGUMENT_CHARS),
            registry=render_registry(ctx.session),
            session_calls=render_calls(ctx.session),
            policies=self._policies(),
        )
        return await self._ask_judge(verdict, user)

    async def post_verify(
        self, ctx: CallContext, tree: BehaviorTree, result: dict[str, Any], *, judge: bool = True
    ) -> Verdict:
        """The post rules, then the LLM judge if one is set and `judge` (a server's start-up
        has no call or task for it to weigh, and its first answer waits on the verdict)."""
        verdict = self.post_rules(ctx, tree, result)
        if verdict.decision == "deny" or not judge or not self._judging():
            return verdict
        assert self.judge is not None
        cfg = self.judge.config
        user = render(
            "post",
            task=ctx.task or "(no task given)",
            server=ctx.call.server,
            tool=ctx.call.tool,
            arguments=_dump(ctx.call.arguments, MAX_ARGUMENT_CHARS),
            tree=_dump(self.simplify(tree), cfg.max_tree_chars),
            result=_fence(_clip(result_text(result), cfg.max_result_chars)),
            result_limit=str(cfg.max_result_chars),
            session_calls=render_calls(ctx.session),
            policies=self._policies(),
        )
        return await self._ask_judge(verdict, user)

    def pinning_verdict(self, change: ToolChange) -> Verdict:
        """The pre verdict for a call to a tool whose definition changed after pinning:
        `pinning_action` deny -> an enforce violation, observe -> recorded, allow -> none."""
        action = self.policy.pinning_action
        if action == "allow":
            return Verdict(decision="allow", phase="pre")
        found = [
            Violation(
                rule=PINNING,
                phase="pre",
                mode="enforce" if action == "deny" else "observe",
                reason="the tool's definition changed since it was pinned (a possible rug pull)",
                evidence=[change.describe()],
            )
        ]
        return self._finish("pre", found, [])

    def _judging(self) -> bool:
        return self.judge is not None and self.policy.mode_of(JUDGE) != "off"

    def _policies(self) -> str:
        return "\n".join(f"{i}. {p}" for i, p in enumerate(self.policy.judge_policies, 1))

    @staticmethod
    def _history(ctx: CallContext) -> str:
        turns = [
            {
                "role": str(m.get("role", "")),
                "content": _clip(str(m.get("content", "")), MAX_TURN_CHARS),
            }
            for m in ctx.history[-MAX_HISTORY:]
        ]
        return _fence(_json.encode(turns).decode()) if turns else "(none)"

    async def _ask_judge(self, verdict: Verdict, user: str) -> Verdict:
        assert self.judge is not None and verdict.phase is not None
        answer: JudgeAnswer = await self.judge.judge(render("system"), user)
        found = list(verdict.violations)
        skipped = list(verdict.skipped)
        if answer.decision == "deny":
            evidence = [f"violated policy: {answer.violated_policy}"]
            if answer.error:
                evidence.append(f"judge error ({answer.error}), on_error=deny")
            found.append(
                Violation(
                    rule=JUDGE,
                    phase=verdict.phase,
                    mode=self.policy.mode_of(JUDGE),
                    reason=answer.reason,
                    evidence=evidence,
                )
            )
        elif answer.error:
            skipped.append(f"{JUDGE}: {answer.error}: {answer.reason} (on_error=allow)")
        out = self._finish(verdict.phase, found, skipped)
        out.llm_used = True
        return out
