"""What the monitor sees of a Node program under each seccomp profile (real eBPF + Docker).

libuv (Node 20) does file I/O through io_uring when asked (`UV_USE_IO_URING=1`, which any
server can set for a child node) and the kernel lets it; io_uring's operations never pass the
syscall tracepoints. Under the guard profile it falls back to plain syscalls, and the tree
holds the program's files.
"""

from __future__ import annotations

import anyio
import pytest

from mtguard_rt.model import BehaviorTree, DeclaredCall
from mtguard_rt.monitor import MonitorConfig, open_monitor
from mtguard_rt.sandbox import SandboxConfig, open_sandbox

pytestmark = [pytest.mark.root, pytest.mark.bpf, pytest.mark.docker, pytest.mark.anyio]
CALL = DeclaredCall(call_id="s1", server="test", tool="run", arguments={})
# async fs calls go to libuv's thread pool, or to its io_uring ring where one is set up
NODE = """
const fs = require("fs/promises");
(async () => {
  await fs.writeFile("/tmp/written-by-node", "x");
  await fs.readFile("/tmp/written-by-node");
  console.log("done");
})();
"""


async def traced(seccomp: str) -> BehaviorTree:
    async with open_monitor(MonitorConfig(settle_max_ms=2000)) as mon:
        config = SandboxConfig(seccomp=seccomp, env={"UV_USE_IO_URING": "1"})
        async with open_sandbox(["node", "-e", NODE], config, gated=True) as sb:
            async with mon.watch(sb.cgroup_id, sb.cgroup_path) as watch:
                async with watch.window(CALL) as window:
                    await sb.release()
                    with anyio.fail_after(60):
                        assert await sb.wait() == 0, sb.stderr_tail()
                    window.response_arrived()
    return window.tree


def written(tree: BehaviorTree) -> list[list[str]]:
    return [f.flags for p in tree.processes for f in p.files if f.path == "/tmp/written-by-node"]


async def test_node_file_io_is_in_the_tree_under_the_guard_profile() -> None:
    tree = await traced("guard")
    assert not any("io_uring" in r for r in tree.incomplete_reasons), tree.incomplete_reasons
    flags = written(tree)
    assert any("create" in f for f in flags), flags


async def test_under_dockers_default_node_uses_io_uring_and_the_tree_says_so() -> None:
    # the control: the same program without our profile writes and reads through the ring
    tree = await traced("docker-default")
    assert any("io_uring_setup" in r for r in tree.incomplete_reasons), tree.incomplete_reasons
    assert written(tree) == [], written(tree)  # the tree never saw the file
