"""Post rules on the kernel-witnessed stdio of the call: did the server get and answer it?

The monitor captures what the sandboxed server really read on its stdin and wrote on its
stdout (`BehaviorTree.stdio`); a host compromised between the pre-audit and the sandbox can
change what is sent or returned, but not what the kernel saw.
- `request-mismatch`: the tools/call the server read for this call is another tool or other
  arguments than the declared, pre-audited one (canonical JSON), or was read by another
  server than the one declared.
- `undeclared-request`: the server read a tools/call no declared call covers (a replay, an
  injected call) during the call's window, or while no guarded call was running since the
  previous one (reported on the next call).
- `result-tampered`: the result the guard is about to return is not the one the server wrote.
Only whole, parsed messages count: truncated or lost capture is "unverified" in the tree and
never a deny by itself. A tools/call the guard itself sent (`DispatchLedger`: its id and the
declared call) is declared wherever it is read: a server that reads its stdin late (busy,
single-threaded, a call abandoned at its timeout) reads it in a later window or between calls.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import msgspec

from ..model import (
    BehaviorTree,
    DeclaredCall,
    StdioCapture,
    StdioMessage,
    Violation,
    call_digest,
    canonical_digest,
)
from .context import CallContext
from .policy import Policy
from .rules_pre import violation
from .treeview import TreeView

SHOW_CHARS = 120  # per value shown in evidence


_json = msgspec.json.Encoder(order="sorted", enc_hook=repr)


def _show(value: Any) -> str:
    text = _json.encode(value).decode(errors="replace")
    return text if len(text) <= SHOW_CHARS else text[: SHOW_CHARS - 3] + "..."


LEDGER_SIZE = 512  # requests remembered per sandbox until read; one older still is undeclared
IdKey = tuple[bool, Any]


def _id_key(request_id: Any) -> IdKey | None:
    """A JSON-RPC id as a dict key ("1" and 1 are different ids), None when not an id."""
    if not isinstance(request_id, str | int | float) or isinstance(request_id, bool):
        return None
    return (isinstance(request_id, str), request_id)


class DispatchLedger:
    """Every tools/call the guard sent to one sandbox, by JSON-RPC id, until its server reads
    it. One send covers one read: `claim()` marks a read request as the guard's own
    (`StdioMessage.dispatched_by`), so a second read of it is a replay. A request read after
    its own call's window is claimed only if it is the declared call of that id for this
    server (a swapped or re-routed request stays undeclared)."""

    def __init__(self, server: str) -> None:
        self.server = server
        self._sent: OrderedDict[IdKey, list[tuple[str, str, str]]] = OrderedDict()

    def sent(self, request_id: Any, declared: DeclaredCall) -> None:
        """Before the send: `request_id` carries `declared` (call id, digest, server)."""
        key = _id_key(request_id)
        if key is None:
            return
        entry = (declared.call_id, call_digest(declared.tool, declared.arguments), declared.server)
        self._sent.setdefault(key, []).append(entry)
        self._sent.move_to_end(key)
        while len(self._sent) > LEDGER_SIZE:
            self._sent.popitem(last=False)

    def claim(self, m: StdioMessage, own_call: str | None = None) -> str | None:
        """The guard's call whose request `m` (a whole tools/call just read) is, or None.
        `own_call`: the call whose window reads it; its own request is claimed by id alone
        (request-mismatch judges its content), any other call's only when identical to it."""
        if m.dispatched_by is not None:
            return m.dispatched_by
        key = _id_key(m.id)
        entries = self._sent.get(key) if key is not None else None
        if m.method != "tools/call" or m.truncated or not entries:
            return None
        for i, (call_id, digest, server) in enumerate(entries):
            if call_id == own_call or (digest == m.digest and server == self.server):
                del entries[i]
                if not entries:
                    del self._sent[key]  # type: ignore[arg-type]
                m.dispatched_by = call_id
                return call_id
        return None

    def claim_all(self, cap: StdioCapture, own_call: str) -> None:
        """Post-verification's pass, in reading order (those read before the window first):
        what the online rules did not claim already."""
        for m in (*cap.between_calls, *cap.requests):
            if m.method == "tools/call" and (m.id == cap.request_id or m.dispatched_by is None):
                self.claim(m, own_call if m.id == cap.request_id else None)


def stamp_stdio(
    tree: BehaviorTree,
    server: str,
    request_id: Any,
    answered: bool,
    ledger: DispatchLedger | None = None,
) -> None:
    """Record on the tree which server's sandbox was watched and the JSON-RPC id the guard
    sent the call with (the guard's own knowledge, after the window), and which requests read
    are the guard's own (`ledger`). When the capture holds no such request, say so: the call
    is unverified, not denied."""
    cap = tree.stdio
    if cap is None:
        return
    cap.server = server
    valid = isinstance(request_id, str | int | float) and not isinstance(request_id, bool)
    cap.request_id = request_id if valid else str(request_id)
    cap.answered = answered
    if ledger is not None and not cap.lossy:
        ledger.claim_all(cap, tree.call.call_id)
    if _sent_request(cap) is None:
        why = f"the request (id {cap.request_id!r}) was not seen on the server's stdin"
        cap.unverified.append(why)
        tree.incomplete_reasons.append(f"stdio unverified: {why}")
        tree.complete = False


def _sent_request(cap: StdioCapture) -> StdioMessage | None:
    """The tools/call the guard sent for this call: the first one read with its id."""
    return next(
        (m for m in cap.requests if m.method == "tools/call" and m.id == cap.request_id), None
    )


def _own_request(cap: StdioCapture, declared: str) -> StdioMessage | None:
    """The read tools/call that stands for this call: the one with the guard's id, else (an
    id the server did not echo back as sent, e.g. not a JSON-RPC id) one equal to the
    declared call (digest `declared`)."""
    sent = _sent_request(cap)
    if sent is not None:
        return sent
    calls = (m for m in cap.requests if m.method == "tools/call")
    return next((m for m in calls if m.digest == declared), None)


def _calls_read(
    cap: StdioCapture, call: DeclaredCall
) -> tuple[StdioMessage | None, list[StdioMessage]]:
    """(the call's own read request, every tools/call read in the window). Without the
    guard's id or an identical request, the first call read stands for it: a changed call
    is request-mismatch's, the ones after it undeclared-request's."""
    calls = [m for m in cap.requests if m.method == "tools/call" and _not_late(m, call)]
    own = _own_request(cap, call_digest(call.tool, call.arguments))
    return (own or (calls[0] if calls else None)), calls


def _not_late(m: StdioMessage, call: DeclaredCall) -> bool:
    """Not another guarded call's request read late (those are declared, by their call)."""
    return m.dispatched_by is None or m.dispatched_by == call.call_id


def _capture(view: TreeView) -> StdioCapture | None:
    cap = view.tree.stdio
    if cap is None or cap.server is None or cap.lossy:
        return None  # nothing captured, not stamped by a guard, or records lost
    return cap


def request_mismatch(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    cap = _capture(view)
    if cap is None:
        return []
    got, _ = _calls_read(cap, ctx.call)
    ev = mismatch_evidence(ctx.call, got, cap.server) if got is not None else []
    if not ev:
        return []
    return [violation("request-mismatch", policy, "post", MISMATCH_WHY, ev)]


MISMATCH_WHY = "the server received another call than the one declared and pre-audited"
UNDECLARED_WHY = "the server read a tools/call that no declared call covers"


def mismatch_evidence(declared: DeclaredCall, got: StdioMessage, server: str | None) -> list[str]:
    """How the tools/call `got`, read by `server`'s sandbox, differs from the declared call
    (canonical JSON); empty when it is the declared call. Shared by the post rule and the
    online one (audit.online), so both name the difference alike. `got` must be whole."""
    ev: list[str] = []
    if server != declared.server:
        ev.append(
            f"the call declared for server {declared.server!r} was read by server "
            f"{server!r} (pid {got.pid}: tools/call {got.tool!r})"
        )
    if got.digest != call_digest(declared.tool, declared.arguments):
        if got.tool != declared.tool:
            ev.append(f"the server read tools/call {got.tool!r}; declared {declared.tool!r}")
        ev.extend(_argument_diff(declared.arguments, got))
    return ev


def undeclared_line(m: StdioMessage, own: StdioMessage | None) -> str:
    """Evidence for a tools/call read in a call's window beyond the call's own (`own`)."""
    return (
        f"pid {m.pid} read tools/call {m.tool!r} (id {m.id!r}) "
        f"{_show(m.arguments) if m.arguments is not None else m.digest}"
        + (" (identical to the declared call: a replay)" if own and m.digest == own.digest else "")
    )


def _argument_diff(declared: dict[str, Any], got: StdioMessage) -> list[str]:
    if not isinstance(got.arguments, dict):
        if call_digest(got.tool or "", declared) == got.digest:
            return []
        return [f"arguments differ: received {got.digest}, declared {call_digest('', declared)}"]
    out: list[str] = []
    for key in sorted(set(declared) | set(got.arguments), key=str):
        want, have = declared.get(key, None), got.arguments.get(key, None)
        if key not in got.arguments:
            out.append(f"argument {key!r} declared {_show(want)}, not received")
        elif key not in declared:
            out.append(f"argument {key!r} received {_show(have)}, not declared")
        elif canonical_digest(want) != canonical_digest(have):
            out.append(f"argument {key!r}: declared {_show(want)}, received {_show(have)}")
    return out


def undeclared_request(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    cap = _capture(view)
    if cap is None:
        return []
    own, calls = _calls_read(cap, ctx.call)
    extra = [m for m in calls if m is not own]
    before = [m for m in cap.between_calls if m.method == "tools/call" and m.dispatched_by is None]
    if not extra and not before:
        return []
    ev = [undeclared_line(m, own) for m in extra]
    ev += [
        f"pid {m.pid} read tools/call {m.tool!r} (id {m.id!r}) while no guarded call was "
        f"running (before this call) {_show(m.arguments) if m.arguments is not None else ''}"
        for m in before
    ]
    return [violation("undeclared-request", policy, "post", UNDECLARED_WHY, ev)]


def result_tampered(
    ctx: CallContext, view: TreeView, result: dict[str, Any], policy: Policy
) -> list[Violation]:
    cap = _capture(view)
    if cap is None or not cap.answered:
        return []
    wrote = next((m for m in cap.responses if m.id == cap.request_id and not m.truncated), None)
    if wrote is None:
        return []
    got = canonical_digest(result or {})
    if wrote.error:
        if not result:
            return []
        ev = [f"the server answered with an error; the guard was handed a result ({got})"]
    elif wrote.digest == got:
        return []
    else:
        ev = [f"the server wrote result {wrote.digest} ({wrote.size} bytes); handed on: {got}"]
    why = "the result handed back is not the one the server wrote"
    return [violation("result-tampered", policy, "post", why, ev)]
