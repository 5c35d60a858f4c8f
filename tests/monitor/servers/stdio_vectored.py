"""A hand-rolled MCP stdio server that reads with readv() and writes with writev() only.

Tool `echo(text)`. Its first read iovec is 16 bytes, so every message crosses iovecs; each
answer goes out as three iovecs. Run: python stdio_vectored.py
"""

from __future__ import annotations

import json
import os

from stdio_asyncio import answer


def main() -> None:
    head, body = bytearray(16), bytearray(65536)
    pending = b""
    while True:
        n = os.readv(0, [head, body])
        if n == 0:
            return
        pending += bytes(head[: min(n, 16)]) + bytes(body[: max(0, n - 16)])
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            if not line.strip():
                continue
            out = answer(json.loads(line))
            if out is not None:
                raw = json.dumps(out).encode()
                os.writev(1, [raw[:10], raw[10:], b"\n"])


if __name__ == "__main__":
    main()
