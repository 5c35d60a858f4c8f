"""Untrusted text the servers control, kept so the rules can ask where a call came from.

Everything a server says reaches the agent through the guard: its `tools/list` (names,
schemas, descriptions) and every result. A declared call whose tool choice or argument
values appear in that text, in a sentence that instructs the agent, and not in the user's
task, was induced by the server (tool poisoning, redirection, dependency injection, return
injection). `UntrustedLog` (one per supervisor) keeps the descriptions of the last listing
and the instruction-bearing sentences of a bounded window of recent results, each split
into `Sentence`s once, when it arrives; `snapshot()` hands the rules an immutable view, so a
call's pre-audit only matches short sentences (never re-reads a result).

Descriptions and results never reach the LLM judge through this: only the code rules see it.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

from ..model import call_digest
from .secrets import Sighting, sightings
from .text import iter_strings, leaf_key

SourceKind = Literal["description", "result"]
RECENT_RESULTS = 8  # results per server whose instruction sentences are kept
RECENT_SECRETS = 32  # per server: secrets its results handed over (the secret-flow ledger)
RECENT_CLEAN = 64  # per server: calls whose result carried no secret (secret-in-result)
MAX_RESULT_CHARS = 256 * 1024  # scanned per result (head and tail beyond this)
MAX_SENTENCE_CHARS = 600  # a sentence is clipped to this around its tool mention
MAX_SENTENCES_PER_RESULT = 40
MAX_OUTPUT_CHARS = 64 * 1024  # of a result's whole text kept for the argument-value links
_NOT_TEXT = frozenset({"type", "mimeType", "data", "blob", "uri"})  # no prose the agent reads
# "e.g. 'AAPL'", "such as 1d": a description's examples are not instructions
_EXAMPLE = re.compile(r"\b(?:e\.\s?g\.|i\.\s?e\.|for example|for instance|such as)[^.;)\n]*", re.I)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[^a-z\s])|(?<=[.!?][\"'])\s+|\n+")
_TOKEN = re.compile(r"[a-z0-9]+")
_SPLIT = re.compile(r"[a-z]+|[0-9]+")
# English function words: they carry no value, so a text holding one cannot have taken it
# from an instruction ("the" in an argument and in a description is no provenance)
STOP_WORDS = frozenset(
    "a about above after again against all am an and any are as at be because been before "
    "being below between both but by can could did do does doing down during each few for "
    "from further had has have having he her here hers him his how if in into is it its "
    "itself just me more most my no nor not now of off on once only or other our ours out "
    "over own same she should so some such than that the their theirs them then there these "
    "they this those through to too under until up very was we were what when where which "
    "while who whom why will with would you your yours".split()
)
# What in a sentence names a value rather than saying something: a quoted or code span, a
# run holding digits or identifier punctuation (1mo, 30000ms, a_b, x.example/p, a@b), or a
# capitalised word inside the sentence (a place, a ticker): `Sentence.values`
_QUOTED = re.compile(r"`([^`]{1,200})`|'([^'\n]{1,200})'|\"([^\"\n]{1,200})\"")
_VALUE_RUN = re.compile(r"\S*(?:\d|\w[_@/:=.]\w)\S*")
_PROPER = re.compile(r"(?<=[^\s.!?:]\s)[A-Z][A-Za-z0-9]*")


def tokens(text: str) -> frozenset[str]:
    """Lower-case alphanumeric runs, and the letter and digit runs of mixed ones (`30000ms`
    -> 30000ms, 30000, ms): the unit the provenance rules compare texts in."""
    out: set[str] = set()
    for run in _TOKEN.findall(text.lower()):
        out.add(run)
        if not (run.isalpha() or run.isdigit()):
            out.update(_SPLIT.findall(run))
    return frozenset(out)


@dataclass(frozen=True, slots=True, eq=False)  # identity: hashing is cheap, caches key on it
class Sentence:
    """One sentence of untrusted text, with where it came from."""

    kind: SourceKind
    server: str
    tool: str  # the tool described, or the tool whose result held it
    text: str
    lower: str
    tokens: frozenset[str]

    def where(self) -> str:
        of = "description of" if self.kind == "description" else "result of"
        return f"{of} {self.tool!r} on {self.server!r}"

    @property
    def values(self) -> frozenset[str]:
        """The tokens of the sentence's value-like spans (quoted, code, identifiers, numbers,
        capitalised names): what an override can demand of a prose argument."""
        return _values(self)


@lru_cache(maxsize=4096)
def _values(s: Sentence) -> frozenset[str]:
    spans = ["".join(g) for g in _QUOTED.findall(s.text)]
    spans += _VALUE_RUN.findall(s.text) + _PROPER.findall(s.text)
    return frozenset(t for span in spans for t in tokens(span)) - STOP_WORDS


@dataclass(frozen=True, slots=True, eq=False)
class ToolInfo:
    server: str
    name: str
    properties: frozenset[str]  # input schema property names, lower-cased
    description: str
    sentences: tuple[Sentence, ...]
    mentions: str  # the lower-cased description, to find other tools' names in
    read_only: bool = False  # annotations.readOnlyHint is true (the server's own claim)


@dataclass(frozen=True, slots=True, eq=False)
class Output:
    """One recent result's whole text (lower-cased, clipped), with the call that produced it:
    what a later call's argument values may have been taken from (`audit/carried.py`)."""

    server: str
    tool: str
    lower: str
    arg_tokens: frozenset[str]  # tokens of the producing call's argument strings

    @property
    def words(self) -> str:
        """The text as space-separated alphanumeric runs, padded: `audit-trail`, `audit
        trail` and `audit_trail` all read ' audit trail '."""
        return _words(self)


@lru_cache(maxsize=256)
def _words(o: Output) -> str:
    return word_line(o.lower)


def word_line(text: str) -> str:
    return " " + " ".join(_TOKEN.findall(text.lower())) + " "


@dataclass(frozen=True, slots=True)
class UntrustedText:
    """What the servers said, as the rules see it for one call (immutable)."""

    tools: tuple[ToolInfo, ...] = ()
    results: tuple[tuple[str, str, tuple[Sentence, ...]], ...] = ()  # (server, tool, ...)
    secrets: tuple[Sighting, ...] = ()  # secrets the session's results handed the agent
    clean: frozenset[tuple[str, str]] = frozenset()  # (server, call digest): no secret
    outputs: tuple[Output, ...] = ()

    def tool(self, server: str, name: str) -> ToolInfo | None:
        return next((t for t in self.tools if t.server == server and t.name == name), None)

    def __bool__(self) -> bool:
        return bool(self.tools or self.results or self.outputs)


def split_sentences(text: str, kind: SourceKind, server: str, tool: str) -> tuple[Sentence, ...]:
    text = _EXAMPLE.sub(" ", text)
    out = []
    for part in _SENTENCE_END.split(text):
        part = part.strip()
        if len(part) > 2:
            part = part[:MAX_SENTENCE_CHARS]
            low = part.lower()
            out.append(Sentence(kind, server, tool, part, low, tokens(low)))
    return tuple(out)


@lru_cache(maxsize=512)
def _tool_info(
    server: str, name: str, props: frozenset[str], description: str, read_only: bool = False
) -> ToolInfo:
    return ToolInfo(
        server=server,
        name=name,
        properties=props,
        description=description,
        sentences=split_sentences(description, "description", server, name),
        mentions=description.lower(),
        read_only=read_only,
    )


def _read_only(tool: dict[str, Any]) -> bool:
    annotations = tool.get("annotations")
    return isinstance(annotations, dict) and annotations.get("readOnlyHint") is True


def _properties(tool: dict[str, Any]) -> frozenset[str]:
    props = (tool.get("inputSchema") or {}).get("properties")
    return frozenset(str(k).lower() for k in props) if isinstance(props, dict) else frozenset()


def _named_at(lower: str, name: str) -> list[int]:
    """Where `name` (lower-cased) occurs in `lower` as a whole identifier."""
    out: list[int] = []
    at = lower.find(name)
    while at >= 0 and len(out) < MAX_SENTENCES_PER_RESULT:
        end = at + len(name)
        before = lower[at - 1] if at else " "
        after = lower[end] if end < len(lower) else " "
        if not (before.isalnum() or before == "_" or after.isalnum() or after == "_"):
            out.append(at)
        at = lower.find(name, end)
    return out


def result_sentences(
    result: Any, server: str, tool: str, tool_names: Iterable[str]
) -> tuple[Sentence, ...]:
    """The sentences of a result that name a known tool: the only part of a result the
    provenance rules use (a result that names no tool cannot direct the next tool call)."""
    names = sorted({n.lower() for n in tool_names if n}, key=len, reverse=True)
    out: list[Sentence] = []
    seen: set[str] = set()
    for _, raw in iter_strings(result):
        text = raw
        if len(text) > MAX_RESULT_CHARS:
            half = MAX_RESULT_CHARS // 2
            text = f"{text[:half]}\n{text[-half:]}"
        lower = text.lower()
        for name in names:
            for at in _named_at(lower, name):
                window = text[max(0, at - MAX_SENTENCE_CHARS) : at + len(name) + MAX_SENTENCE_CHARS]
                for sentence in split_sentences(window, "result", server, tool):
                    if name in sentence.lower and sentence.text not in seen:
                        seen.add(sentence.text)
                        out.append(sentence)
                if len(out) >= MAX_SENTENCES_PER_RESULT:
                    return tuple(out[:MAX_SENTENCES_PER_RESULT])
    return tuple(out)


@dataclass
class UntrustedLog:
    """One server's untrusted text: its last listing and its recent results' sentences."""

    server: str
    tools: tuple[ToolInfo, ...] = ()
    results: deque[tuple[str, str, tuple[Sentence, ...]]] = field(
        default_factory=lambda: deque(maxlen=RECENT_RESULTS)
    )
    secrets: deque[Sighting] = field(default_factory=lambda: deque(maxlen=RECENT_SECRETS))
    clean: deque[tuple[str, str]] = field(default_factory=lambda: deque(maxlen=RECENT_CLEAN))
    outputs: deque[Output] = field(default_factory=lambda: deque(maxlen=RECENT_RESULTS))

    def listing(self, tools: list[dict[str, Any]]) -> None:
        self.tools = tuple(
            _tool_info(
                self.server,
                str(t.get("name", "")),
                _properties(t),
                str(t.get("description") or ""),
                _read_only(t),
            )
            for t in tools
        )

    def result(
        self, tool: str, result: Any, tool_names: Iterable[str], arguments: Any = None
    ) -> None:
        """Keep what a result of `tool` (called with `arguments`) told the agent."""
        sentences = result_sentences(result, self.server, tool, tool_names)
        if sentences:
            self.results.append((self.server, tool, sentences))
        found = sightings(self.server, tool, result, arguments)
        self.secrets.extend(found)
        if not found:
            self.clean.append((self.server, call_digest(tool, arguments)))
        text = "\n".join(
            t for k, t in iter_strings(result) if leaf_key(k) not in _NOT_TEXT
        )
        if text.strip():
            if len(text) > MAX_OUTPUT_CHARS:
                half = MAX_OUTPUT_CHARS // 2
                text = f"{text[:half]}\n{text[-half:]}"
            args = " ".join(t for _, t in iter_strings(arguments)) if arguments else ""
            self.outputs.append(Output(self.server, tool, text.lower(), tokens(args)))


def gather(
    own: UntrustedLog,
    servers: Iterable[str],
    route: Callable[[str], Any] | None,
) -> UntrustedText:
    """The untrusted text of `own` plus every other server `route` reaches by name (a
    supervisor, whose `untrusted` log is read, or a log itself)."""
    logs = [own]
    if route is not None:
        for name in servers:
            other = route(name) if name != own.server else None
            log = other if isinstance(other, UntrustedLog) else getattr(other, "untrusted", None)
            if isinstance(log, UntrustedLog) and log is not own:
                logs.append(log)
    return UntrustedText(
        tools=tuple(t for log in logs for t in log.tools),
        results=tuple(r for log in logs for r in log.results),
        secrets=tuple(s for log in logs for s in log.secrets),
        clean=frozenset(c for log in logs for c in log.clean),
        outputs=tuple(o for log in logs for o in log.outputs),
    )
