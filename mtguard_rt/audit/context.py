"""What the audit knows about one call: `CallContext`, built by the supervisor per call.

Derived views (argument strings, decoded payloads, the trusted task text) are computed
lazily once per context and shared by all rules. Only the task and the *user* turns of the
history count as trusted intent: tool outputs and assistant turns may carry injected text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..model import DeclaredCall
from .provenance import UntrustedText, tokens
from .scope import ServerScope
from .session import SessionView
from .text import bare_hosts, decoded_variants, iter_strings, url_hosts, words

TRUSTED_ROLES = frozenset({"user"})
# Longest argument text the rules scan in full; longer ones are scanned on their head and
# tail (half each) and the verdict says so. Bounds pre-audit time for huge arguments; what
# such a call then does is still verified on the tree.
MAX_SCAN_CHARS = 256 * 1024


@dataclass(eq=False)
class CallContext:
    """The declared call plus everything the rules and the judge may consult."""

    call: DeclaredCall
    task: str | None = None
    history: list[dict[str, str]] = field(default_factory=list)
    input_schema: dict[str, Any] = field(default_factory=dict)
    tools_by_server: dict[str, list[str]] = field(default_factory=dict)
    recent_calls: list[DeclaredCall] = field(default_factory=list)
    canaries: dict[str, str] = field(default_factory=dict)  # absolute path -> marker
    # persistence files the call wrote: path -> (content before, after; None: not there),
    # read back from the sandbox once the call settled (`consent.WriteConsent`)
    written: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)
    # files the call read, as the sandbox holds them once it settled (`rules_secrets`)
    read_back: dict[str, str | None] = field(default_factory=dict)
    # What the servers said (descriptions, recent results): for the provenance rules only,
    # never shown to the judge.
    untrusted: UntrustedText = field(default_factory=UntrustedText)
    scan_limit: int = MAX_SCAN_CHARS
    # The tool's MCP annotations (readOnlyHint, ...: the server's word, they only narrow) and
    # this server's learnt baseline (`expected.ServerBaseline`, attached by the engine).
    annotations: dict[str, Any] = field(default_factory=dict)
    baseline: Any = None
    # what each exec of the call really ran (`programs.CallPrograms`, made on first use)
    programs: Any = None
    # The session as the LLM judge sees it (`session.SessionView`): every server's tools and
    # the recent calls across servers with what each answered. Only the judge's prompt uses it.
    session: SessionView | None = None
    # the server's workspace and command-line roots (`scope-escape`); None: not known
    scope: ServerScope | None = None
    _decoded: dict[int, list[tuple[str, str, str]]] = field(
        default_factory=dict, init=False, repr=False
    )

    @cached_property
    def arg_items(self) -> list[tuple[str, str]]:
        """(key path, text) for every string or number leaf of the arguments (clipped)."""
        half = self.scan_limit // 2
        return [
            (key, text if len(text) <= self.scan_limit else f"{text[:half]}\n{text[-half:]}")
            for key, text in iter_strings(self.call.arguments)
        ]

    @cached_property
    def clipped(self) -> list[tuple[str, int]]:
        """(key path, length) of every argument text longer than `scan_limit`."""
        return [
            (key, len(text))
            for key, text in iter_strings(self.call.arguments)
            if len(text) > self.scan_limit
        ]

    @cached_property
    def arg_texts(self) -> list[str]:
        return [text for _, text in self.arg_items]

    def decoded(self, min_length: int) -> list[tuple[str, str, str]]:
        """(key path, encoding, decoded text) for obfuscated payloads in the arguments."""
        if min_length not in self._decoded:
            self._decoded[min_length] = [
                (key, enc, dec)
                for key, text in self.arg_items
                for enc, dec in decoded_variants(text, min_length)
            ]
        return self._decoded[min_length]

    @cached_property
    def task_text(self) -> str | None:
        """The task plus the user turns of the history; None when there is no task."""
        if self.task is None:
            return None
        turns = [str(m.get("content", "")) for m in self.history if m.get("role") in TRUSTED_ROLES]
        return "\n".join([self.task, *turns])

    @cached_property
    def task_words(self) -> set[str]:
        return words(self.task_text or "")

    @cached_property
    def task_tokens(self) -> frozenset[str]:
        """Lower-case alphanumeric runs of the task text (see `provenance.tokens`)."""
        return tokens(self.task_text or "")

    @cached_property
    def task_hosts(self) -> set[str]:
        text = self.task_text or ""
        return set(url_hosts(text)) | set(bare_hosts(text, None))
