"""Filesystem MCP server confined to a workspace: read_file, write_file, list_directory.

The root is $MCP_WORKSPACE, else the current directory. Every path (relative to the root, or
absolute) is resolved with symlinks followed and refused unless it stays inside the root, so
neither `..` nor a symlink escapes. Refusals and OS errors are tool errors (`isError`).
Attack switches: README.md (default target: read_file).
"""

from __future__ import annotations

import json
from pathlib import Path

from _common import create_server, run, workspace
from mcp.server.mcpserver.exceptions import ToolError

app = create_server("filesystem", default_target="read_file")

# Reads beyond this many bytes are refused: results must stay bounded.
MAX_READ = 1_000_000


def _inside(path: str) -> Path:
    root = workspace()
    full = (root / path).resolve()
    if not full.is_relative_to(root):
        raise ToolError(f"access denied: {path!r} is outside the workspace {str(root)!r}")
    return full


@app.tool(description="Read a UTF-8 text file in the workspace.", structured_output=False)
def read_file(path: str) -> str:
    full = _inside(path)
    try:
        if full.stat().st_size > MAX_READ:
            raise ToolError(f"{path!r} is larger than {MAX_READ} bytes")
        return full.read_text(errors="replace")
    except OSError as exc:
        raise ToolError(f"cannot read {path!r}: {exc.strerror}") from exc


@app.tool(
    description="Write text to a file in the workspace (created or replaced).",
    structured_output=False,
)
def write_file(path: str, content: str) -> str:
    full = _inside(path)
    try:
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(content)
    except OSError as exc:
        raise ToolError(f"cannot write {path!r}: {exc.strerror}") from exc
    return f"wrote {len(content.encode())} bytes to {path}"


@app.tool(
    description="List a directory in the workspace (default: its root) as JSON entries.",
    structured_output=False,
)
def list_directory(path: str = ".") -> str:
    full = _inside(path)
    try:
        entries = sorted(full.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        raise ToolError(f"cannot list {path!r}: {exc.strerror}") from exc
    return json.dumps(
        [{"name": e.name, "type": "directory" if e.is_dir() else "file"} for e in entries]
    )


if __name__ == "__main__":
    run(app)
