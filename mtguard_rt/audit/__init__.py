"""The audit layer: code rules before and after each call, an optional LLM judge, tool pins.

policy = load_policy([path, ...] | None)           # None -> the balanced preset
engine = PolicyEngine(policy, judge=None, observe=False, simplify=None)
pre = await engine.pre_audit(CallContext(call=..., task=..., ...))
post = await engine.post_verify(ctx, tree, result)
"""

from __future__ import annotations

from .context import CallContext
from .engine import POST_RULES, PolicyEngine
from .judge import JudgeAnswer, JudgeConfig, JudgeReply, LlmJudge, parse_reply
from .loader import load_policy, policies_dir, preset_path
from .pins import ToolChange, ToolPin, ToolPins
from .policy import Policy
from .rules_pre import NEEDS_TASK, PRE_RULES
from .schema import strip_descriptions
from .spec import RULE_IDS, PolicySpec
from .summary import summarize

__all__ = [
    "NEEDS_TASK",
    "POST_RULES",
    "PRE_RULES",
    "RULE_IDS",
    "CallContext",
    "JudgeAnswer",
    "JudgeConfig",
    "JudgeReply",
    "LlmJudge",
    "Policy",
    "PolicyEngine",
    "PolicySpec",
    "ToolChange",
    "ToolPin",
    "ToolPins",
    "load_policy",
    "parse_reply",
    "policies_dir",
    "preset_path",
    "strip_descriptions",
    "summarize",
]
