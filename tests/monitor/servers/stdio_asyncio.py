"""A hand-rolled MCP stdio server on asyncio pipes (os.read/os.write on fd 0/1, no SDK).

Tool `echo(text)`. Before each tools/call answer it writes non-UTF-8 bytes and a non-JSON
line on its stdout, so a test can check the guard and the stdio reassembly survive them.
Run: python stdio_asyncio.py
"""

from __future__ import annotations

import asyncio
import json
import sys

TOOLS = [
    {
        "name": "echo",
        "description": "Return the text.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
    }
]


def answer(msg: dict) -> dict | None:
    method, rid = msg.get("method"), msg.get("id")
    if rid is None:
        return None
    if method == "initialize":
        result = {
            "protocolVersion": msg["params"].get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "stdio-asyncio", "version": "1"},
        }
    elif method == "tools/list":
        result = {"tools": TOOLS}
    elif method == "tools/call":
        text = str(msg["params"].get("arguments", {}).get("text", ""))
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    else:
        return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": method}}
    return {"jsonrpc": "2.0", "id": rid, "result": result}


async def main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, _ = await loop.connect_write_pipe(asyncio.Protocol, sys.stdout)
    while line := await reader.readline():
        msg = json.loads(line)
        out = answer(msg)
        if out is None:
            continue
        if msg.get("method") == "tools/call":
            transport.write(b"\xff\xfe\x80 not utf-8 \xc3\x28\n")
            transport.write(b"this is not json {\n")
        transport.write(json.dumps(out).encode() + b"\n")


if __name__ == "__main__":
    asyncio.run(main())
