"""The sandbox against the real Docker daemon: isolation, streams, errors, cleanup."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap

import anyio
import pytest

from mtguard_rt.errors import CommandNotFound, ImageNotFound
from mtguard_rt.sandbox import SandboxConfig, open_engine, open_sandbox, prune_stale
from mtguard_rt.sandbox.lifecycle import OWNER_LABEL, owner_token, token_of

pytestmark = [pytest.mark.docker, pytest.mark.anyio]


async def read_all(sb, limit: float = 20) -> bytes:  # type: ignore[no-untyped-def]
    out = b""
    with anyio.fail_after(limit):
        try:
            while True:
                out += await sb.stdout.receive()
        except anyio.EndOfStream:
            return out


async def our_containers(token: str | None = None) -> list[str]:
    """Containers made by this test process (or by the guard with `token`): other guards may
    run on the same daemon at the same time, so never count theirs."""
    async with open_engine() as engine:
        label = f"{OWNER_LABEL}={token or owner_token()}"
        return [c["Id"] for c in await engine.list_containers([label])]


async def test_isolation_user_caps_network_and_canaries() -> None:
    script = textwrap.dedent("""
        id -u; grep CapEff /proc/self/status; cat /proc/net/dev | tail -n +3 | cut -d: -f1
        ls -A /root | wc -l; test -e /etc/shadow && echo shadow || echo noshadow
        cat ~/.aws/credentials
    """)
    async with open_sandbox(["sh", "-c", script]) as sb:
        out = (await read_all(sb)).decode()
        assert await sb.wait() == 0
    lines = out.split("\n")
    assert lines[0] == "1000"
    assert lines[1].split()[1] == "0000000000000000"  # every capability dropped
    assert lines[2].strip() == "lo"  # network none: loopback only
    assert "noshadow" in out
    marker = sb.canaries["/home/mtguard/.aws/credentials"]
    assert marker.startswith("MTGCANARY") and marker in out
    assert len(set(sb.canaries.values())) == 4  # each canary has its own marker


async def test_stdin_stdout_roundtrip_and_stderr_tail() -> None:
    cmd = ["sh", "-c", 'echo started >&2; while read -r line; do echo "echo:$line"; done']
    async with open_sandbox(cmd) as sb:
        assert sb.cgroup_id > 0 and sb.pids()
        for i in range(3):
            await sb.stdin.send(f"msg{i}\n".encode())
            with anyio.fail_after(10):
                assert await sb.stdout.receive() == f"echo:msg{i}\n".encode()
        await sb.stdin.send_eof()
        assert await read_all(sb) == b""
        assert await sb.wait() == 0
        assert "started" in sb.stderr_tail()


async def test_large_output_is_not_lost() -> None:
    # 4 MB through the attach connection with back-pressure on a bounded stream.
    cmd = ["python3", "-c", "import sys; sys.stdout.write('x' * (4 << 20))"]
    async with open_sandbox(cmd) as sb:
        assert len(await read_all(sb, 60)) == 4 << 20


async def test_gated_command_waits_for_release() -> None:
    async with open_sandbox(["sh", "-c", "echo ran"], gated=True) as sb:
        with anyio.move_on_after(0.5):
            await sb.stdout.receive()
            pytest.fail("a gated command produced output before release")
        await sb.release()
        assert await read_all(sb) == b"ran\n"


async def test_workspace_is_writable_and_host_network_on_request(tmp_path) -> None:  # type: ignore[no-untyped-def]
    tmp_path.chmod(0o777)
    config = SandboxConfig(workspace=str(tmp_path), network="host")
    async with open_sandbox(
        ["sh", "-c", "pwd; echo hi > out.txt; cat /proc/net/dev | wc -l"], config
    ) as sb:
        out = (await read_all(sb)).decode().split()
    assert out[0] == str(tmp_path)
    assert (tmp_path / "out.txt").read_text() == "hi\n"
    assert int(out[1]) > 3  # the host's interfaces are visible


async def test_server_that_exits_at_once() -> None:
    async with open_sandbox(["sh", "-c", "echo bye >&2; exit 3"]) as sb:
        assert await read_all(sb) == b""
        assert await sb.wait() == 3
        assert "bye" in sb.stderr_tail()


async def test_command_not_found_is_one_clear_error() -> None:
    with pytest.raises(CommandNotFound, match="no-such-server"):
        async with open_sandbox(["no-such-server", "--stdio"]):
            pass
    assert await our_containers() == []


async def test_missing_image_is_one_clear_error() -> None:
    with pytest.raises(ImageNotFound, match="mtguard image build"):
        async with open_sandbox(["true"], SandboxConfig(image="mtguard-rt/absent:0")):
            pass


async def test_cancellation_removes_the_container() -> None:
    with anyio.move_on_after(1.5):
        async with open_sandbox(["sleep", "60"]):
            await anyio.sleep(60)
    assert await our_containers() == []


async def test_crash_inside_the_block_removes_the_container() -> None:
    with pytest.raises(RuntimeError):
        async with open_sandbox(["sleep", "60"]):
            raise RuntimeError("guard bug")
    assert await our_containers() == []


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_hundred_cycles_leak_nothing() -> None:
    gc.collect()
    fds_before = len(os.listdir("/proc/self/fd"))
    for _ in range(100):
        async with open_sandbox(["true"]) as sb:
            await read_all(sb)
    assert await our_containers() == []
    gc.collect()
    fds_after = len(os.listdir("/proc/self/fd"))
    assert fds_after <= fds_before + 2, (fds_before, fds_after)


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_guard_killed_with_sigkill_is_cleaned_up_next_start() -> None:
    child = textwrap.dedent("""
        import anyio
        from mtguard_rt.sandbox import open_sandbox
        async def main():
            async with open_sandbox(["sleep", "120"]):
                print("ready", flush=True)
                await anyio.sleep(120)
        anyio.run(main)
    """)
    # A separate guard process that we can SIGKILL; readline below runs in a thread.
    proc = subprocess.Popen(  # noqa: ASYNC220
        [sys.executable, "-c", child], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        with anyio.fail_after(30):
            line = await anyio.to_thread.run_sync(proc.stdout.readline)
        assert line.strip() == "ready"
        child_token = token_of(proc.pid)
        assert len(await our_containers(child_token)) == 1
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    leaked = await our_containers(child_token)
    assert len(leaked) == 1  # SIGKILL left it behind...
    async with open_engine() as engine:
        removed = await prune_stale(engine, force=True)
    assert leaked[0] in removed  # ...and the next guard removes it
    assert await our_containers(child_token) == []
