"""The host's stdio in the event loop (proxy/hoststdio.py): lines split and decoded as the
SDK's transport does, writes that never block the loop, fds claimed for the wire and put back,
and the SDK's stdio server over them in a real subprocess (a stray print lands on stderr)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import pytest

from mtguard_rt.proxy.hoststdio import CHUNK, FdLines, FdWriter, open_host_stdio

WAIT_S = 30.0  # generous: a loaded 2-core CI machine


async def _lines(fd: int) -> list[str]:
    return [line async for line in FdLines(fd)]


@pytest.mark.anyio
async def test_lines_split_across_reads_and_at_eof() -> None:
    r, w = os.pipe()
    got: list[str] = []

    async def read() -> None:
        got.extend(await _lines(r))

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            os.write(w, b'{"a": 1}\n{"b"')
            await anyio.sleep(0.01)  # a second read for the rest of the line
            os.write(w, b": 2}\n\xff\xfe bad\nlast line, no newline")
            os.close(w)
    os.close(r)
    assert got == ['{"a": 1}\n', '{"b": 2}\n', "\ufffd\ufffd bad\n", "last line, no newline"]


@pytest.mark.anyio
async def test_a_line_of_megabytes_arrives_whole() -> None:
    """A line far longer than one read (a 16 MB argument is tested end to end in e2e)."""
    r, w = os.pipe()
    line = '{"blob": "' + "z" * (3 << 20) + '"}\n'
    got: list[str] = []

    async def read() -> None:
        got.extend(await _lines(r))

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            writer = FdWriter(w)
            await writer.write(line + "next\n")
            await writer.flush()
            os.close(w)
    os.close(r)
    assert got == [line, "next\n"]


@pytest.mark.anyio
async def test_a_large_write_waits_for_the_reader_without_blocking_the_loop() -> None:
    r, w = os.pipe()
    payload = json.dumps({"data": "x" * (1 << 20)})  # far more than a pipe holds (64 KiB)
    writer = FdWriter(w)
    flushed = anyio.Event()

    async def send() -> None:
        await writer.write(payload)
        await writer.write("\n")
        await writer.flush()
        flushed.set()

    received = bytearray()
    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(send)
            await anyio.sleep(0.05)
            # nobody has read yet: the flush waits, and this task still runs (the loop is free)
            assert not flushed.is_set()
            while not flushed.is_set() or len(received) < len(payload) + 1:
                await anyio.wait_readable(r)
                received += os.read(r, 1 << 16)
    os.close(r)
    os.close(w)
    assert received.decode() == payload + "\n"
    assert CHUNK <= 4096  # what poll's "writable" guarantees room for (PIPE_BUF)


@pytest.mark.anyio
async def test_the_fds_are_claimed_for_the_wire_and_restored() -> None:
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    before = (os.fstat(in_r).st_ino, os.fstat(out_w).st_ino)
    with open_host_stdio(in_r, out_w) as streams:
        assert streams is not None
        lines, writer = streams
        # the numbers now point at /dev/null and stderr; the wire is on private duplicates
        assert os.fstat(in_r).st_ino == os.stat(os.devnull).st_ino
        assert os.fstat(out_w).st_ino == os.fstat(2).st_ino
        assert lines.fd not in (in_r, out_w) and writer.fd not in (in_r, out_w)
        assert (os.fstat(lines.fd).st_ino, os.fstat(writer.fd).st_ino) == before
        with anyio.fail_after(WAIT_S):
            os.write(in_w, b"ping\n")
            os.close(in_w)
            assert await _lines(lines.fd) == ["ping\n"]
            await writer.write("pong\n")
            await writer.flush()
        assert os.read(out_r, 100) == b"pong\n"
    assert (os.fstat(in_r).st_ino, os.fstat(out_w).st_ino) == before
    for fd in (in_r, out_r, out_w):
        os.close(fd)


@pytest.mark.anyio
async def test_a_file_or_terminal_keeps_the_sdk_transport() -> None:
    with tempfile.TemporaryFile() as f:
        r, w = os.pipe()
        with open_host_stdio(f.fileno(), w) as streams:
            assert streams is None
        with open_host_stdio(r, f.fileno()) as streams:
            assert streams is None
        os.close(r)
        os.close(w)


ECHO_SERVER = """
import sys, anyio
from mtguard_rt.proxy.hoststdio import host_stdio_server

async def main():
    async with host_stdio_server() as (read_stream, write_stream), write_stream:
        async for item in read_stream:
            print("a stray print", flush=True)  # fd 1 is stderr now: not the wire
            await write_stream.send(item)

anyio.run(main, backend=sys.argv[1])
"""


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_the_sdk_stdio_server_over_the_host_pipes(backend: str) -> None:
    """A real subprocess with pipes for stdio (what a host spawns) answers every message,
    in order, with nothing but JSON-RPC on stdout; a print goes to stderr."""
    messages = [
        {"jsonrpc": "2.0", "id": i, "method": "ping", "params": {"n": "é" * i}} for i in range(50)
    ]
    big = {"jsonrpc": "2.0", "id": 99, "method": "ping", "params": {"blob": "y" * 300_000}}
    data = "".join(json.dumps(m) + "\n" for m in [*messages, big]).encode()
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root}
    done = subprocess.run(
        [sys.executable, "-c", ECHO_SERVER, backend],
        input=data,
        capture_output=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    answers = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert [a["id"] for a in answers] == [*range(50), 99]
    assert answers[7]["params"]["n"] == "é" * 7
    assert len(answers[-1]["params"]["blob"]) == 300_000
    assert done.stderr.decode().count("a stray print") == 51
