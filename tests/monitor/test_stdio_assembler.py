"""Reassembly of EV_STDIO records into JSON-RPC messages (pure logic, no kernel).

Records are built the way monitor.bpf.c emits them: per syscall, chunks of at most
IO_CHUNK bytes at offsets a1, a2 the syscall's byte count, TRUNC1 past IO_CAP.
"""

from __future__ import annotations

import json
import random
from typing import Any

import msgspec

from mtguard_rt.model import BehaviorTree, DeclaredCall, call_digest, tree_decoder, tree_encoder
from mtguard_rt.monitor.builder import TreeBuilder
from mtguard_rt.monitor.decode import RawEvent
from mtguard_rt.monitor.kinds import IO_CAP, IO_CHUNK, Flag, Kind
from mtguard_rt.monitor.stdio import MAX_MESSAGE_BYTES, StdioAssembler

CALL = DeclaredCall(call_id="c1", server="srv", tool="echo", arguments={"text": "hi"})


class Wire:
    """Emits the records of read()/write() syscalls of one pid."""

    def __init__(self, pid: int = 100) -> None:
        self.pid = pid
        self.ts = 1_000
        self.records: list[RawEvent] = []

    def syscall(self, stream: int, data: bytes, drop: set[int] | None = None) -> None:
        captured = data[:IO_CAP]
        flags = int(Flag.TRUNC1) if len(data) > IO_CAP else 0
        for i, off in enumerate(range(0, len(captured), IO_CHUNK)):
            self.ts += 1
            if drop and i in drop:
                continue
            self.records.append(
                RawEvent(
                    ts_ns=self.ts,
                    cgroup_id=1,
                    kind=int(Kind.STDIO),
                    pid=self.pid,
                    a0=stream,
                    a1=off,
                    a2=len(data),
                    a3=6 + stream,
                    flags=flags,
                    s1=captured[off : off + IO_CHUNK],
                )
            )

    def read(self, data: bytes, **kw: set[int]) -> None:
        self.syscall(0, data, **kw)

    def write(self, data: bytes, **kw: set[int]) -> None:
        self.syscall(1, data, **kw)


def line(obj: object) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode() + b"\n"


def tools_call(rid: object, name: str, arguments: dict[str, Any]) -> bytes:
    params = {"name": name, "arguments": arguments}
    return line({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})


def assemble(wire: Wire) -> StdioAssembler:
    asm = StdioAssembler()
    for ev in wire.records:
        asm.feed(ev)
    return asm


def test_messages_split_across_chunks_and_syscalls_reassemble() -> None:
    big = {"text": "é" * 20_000}  # 40 KB of UTF-8: five chunks, multibyte cut at chunk edges
    req = tools_call("r1", "echo", big)
    wire = Wire()
    wire.read(req[:7])  # a message read in three syscalls
    wire.read(req[7:30_001])
    wire.read(req[30_001:] + line({"jsonrpc": "2.0", "method": "notifications/x"}))
    result = {"content": [{"type": "text", "text": "ok"}]}
    wire.write(line({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}))
    wire.write(line({"jsonrpc": "2.0", "id": "r1", "result": result})[:-1])
    wire.write(b"\n")
    cap = assemble(wire).capture()
    assert [m.method for m in cap.requests] == ["tools/call", "notifications/x"]
    req_msg = cap.requests[0]
    assert (req_msg.id, req_msg.tool, req_msg.arguments) == ("r1", "echo", big)
    assert req_msg.digest == call_digest("echo", big) and not req_msg.truncated
    assert req_msg.size == len(req) - 1
    assert [(r.id, r.error) for r in cap.responses] == [("r1", False)]
    assert cap.notifications_out == 1 and cap.garbage_lines == 0 and not cap.unverified
    assert cap.bytes_in == len(req) + len(line({"jsonrpc": "2.0", "method": "notifications/x"}))


def test_garbage_is_counted_never_raised() -> None:
    wire = Wire()
    wire.write(b"\xff\xfe\x80 not utf-8 \xc3\x28\n")
    wire.write(b"not json {\n[1, 2]\n\"a string\"\n\n   \n")
    wire.write(line({"jsonrpc": "2.0", "id": {"nested": 1}, "result": {}}))  # odd id: no match
    wire.write(b'{"jsonrpc": "2.0", "id": 7, "error": {"code": -1, "message": "x"}}\n')
    wire.read(b'{"id": 1, "method": "tools/call", "params": "not an object"}\n')
    wire.read(b'{"id": 2, "method": "tools/call", "params": {"name": 5, "arguments": [1]}}\n')
    cap = assemble(wire).capture()
    assert cap.garbage_lines == 4
    assert [(r.id, r.error) for r in cap.responses] == [(7, True)]
    assert cap.notifications_out == 1  # the response without a usable id
    assert [(m.method, m.tool) for m in cap.requests] == [("tools/call", None), ("tools/call", "5")]


def test_random_bytes_never_crash() -> None:
    rng = random.Random(7)
    wire = Wire()
    for _ in range(300):
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        if rng.random() < 0.3:
            blob += b"\n"
        wire.syscall(rng.randrange(2), blob)
    asm = assemble(wire)
    cap = asm.capture()
    assert asm.records == len(wire.records) and cap.garbage_lines > 0


def test_a_syscall_over_the_cap_truncates_and_is_unverified() -> None:
    arguments = {"text": "x" * (IO_CAP * 2)}
    wire = Wire()
    wire.read(tools_call("big", "echo", arguments))
    # where the cut line ends is unknown (its newline was not captured): up to the next one
    wire.read(tools_call("next", "echo", {"text": "swallowed"}))
    wire.read(tools_call("last", "echo", {"text": "small"}))
    cap = assemble(wire).capture()
    first, second = cap.requests
    assert first.truncated and first.method is None and first.digest.startswith("raw-sha256:")
    assert second.tool == "echo" and second.arguments == {"text": "small"}
    assert any("only the first 65536 were captured" in r for r in cap.unverified)


def test_a_lost_chunk_cuts_the_line_not_the_next_one() -> None:
    wire = Wire()
    wire.read(tools_call("a", "echo", {"text": "y" * 20_000}), drop={1})
    wire.read(tools_call("b", "echo", {"text": "ok"}))
    cap = assemble(wire).capture()
    assert [m.truncated for m in cap.requests] == [True, False]
    assert cap.requests[1].id == "b" and "chunk of pid 100 was lost" in cap.unverified[0]


def test_an_overlong_line_is_digested_only() -> None:
    wire = Wire()
    payload = tools_call("huge", "echo", {"text": "z" * MAX_MESSAGE_BYTES})
    for off in range(0, len(payload), IO_CAP):  # read in cap-sized syscalls: all captured
        wire.read(payload[off : off + IO_CAP])
    cap = assemble(wire).capture()
    (msg,) = cap.requests
    assert msg.truncated and msg.size == len(payload) - 1
    assert any("digested only" in r for r in cap.unverified)


def test_a_partial_line_at_window_end_is_unverified() -> None:
    wire = Wire()
    wire.read(b'{"jsonrpc": "2.0", "id": 1, "method": "tools/ca')
    cap = assemble(wire).capture(lost=None)
    assert cap.requests == [] and "partial" in cap.unverified[0]
    assert assemble(Wire()).capture(lost="records lost (stdio)").lossy


def test_builder_attaches_the_capture_and_marks_unverified_incomplete() -> None:
    wire = Wire()
    wire.read(tools_call("r", "echo", {"text": "hi"}))
    builder = TreeBuilder(CALL, 0)
    for ev in wire.records:
        builder.apply(ev)
    tree = builder.build(10_000, [], {}, 0)
    assert tree.complete and tree.processes == []  # wire bytes are not a process effect
    assert tree.stdio is not None and tree.stdio.requests[0].tool == "echo"
    lossy = TreeBuilder(CALL, 0).build(10_000, [], {"stdio": 3}, 0)
    assert not lossy.complete and lossy.stdio is not None and lossy.stdio.lossy
    assert lossy.incomplete_reasons == ["stdio unverified: records lost (stdio)"]


def test_old_trees_without_stdio_still_decode() -> None:
    old = msgspec.json.encode({"call": msgspec.to_builtins(CALL), "complete": True})
    tree = tree_decoder.decode(old)
    assert tree.stdio is None
    again = tree_decoder.decode(tree_encoder.encode(BehaviorTree(call=CALL)))
    assert again == tree
