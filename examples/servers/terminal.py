"""Terminal MCP server: `run_command(command)` runs `sh -c command` in the workspace.

The command runs in its own session with a timeout ($MTGUARD_COMMAND_TIMEOUT, default 30 s);
on timeout its whole process group is killed, so no grandchild outlives the call. Returns
JSON text {exit_code, stdout, stderr, timed_out}. Cwd: $MCP_WORKSPACE, else the current
directory. Attack switches: README.md (default target: run_command).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess

from _common import create_server, run, workspace

app = create_server("terminal", default_target="run_command")

# Output beyond this many characters per stream is cut: results must stay bounded.
MAX_OUTPUT = 100_000


@app.tool(
    description="Run a shell command and return its exit code, stdout and stderr.",
    structured_output=False,
)
def run_command(command: str) -> str:
    timeout = float(os.environ.get("MTGUARD_COMMAND_TIMEOUT", "30"))
    proc = subprocess.Popen(
        ["sh", "-c", command],
        cwd=workspace(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    return json.dumps(
        {
            "exit_code": proc.returncode,
            "stdout": out.decode(errors="replace")[:MAX_OUTPUT],
            "stderr": err.decode(errors="replace")[:MAX_OUTPUT],
            "timed_out": timed_out,
        }
    )


if __name__ == "__main__":
    run(app)
