"""User mapping, server state, hidden guard state and the user's PATH, in real containers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from mtguard_rt.errors import SandboxError, ServerExited
from mtguard_rt.sandbox import SandboxConfig, open_sandbox
from mtguard_rt.sandbox.lifecycle import owner_token
from mtguard_rt.sandbox.mounts import RUNTIME_DIR, MountSet, prune_mounts
from mtguard_rt.sandbox.plan import package_state

pytestmark = [pytest.mark.docker, pytest.mark.root, pytest.mark.anyio]

HOME = "/home/mtguard"
NPX_TIMEOUT_S = 40  # without retries npm gives up at once; ~70 s of backoff otherwise


async def run(cmd: list[str], config: SandboxConfig, name: str = "t") -> str:
    async with open_sandbox(cmd, config, name=name) as sb:
        out = b""
        with anyio.fail_after(60):
            try:
                while True:
                    out += await sb.stdout.receive()
            except anyio.EndOfStream:
                pass
            code = await sb.wait()
    assert code == 0, sb.stderr_tail()
    return out.decode()


def repo(path: Path, uid: int, gid: int) -> Path:
    path.mkdir(parents=True)
    git = ["git", "-c", "safe.directory=*", "-C", str(path)]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    (path / "a.txt").write_text("one\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "-c", "user.email=d@e.org", "-c", "user.name=D", "commit", "-qm", "init"],
                   check=True)  # fmt: skip
    for root, dirs, files in os.walk(path):
        for n in [root, *(os.path.join(root, x) for x in [*dirs, *files])]:
            os.lchown(n, uid, gid)
    return path


SCRIPT = """id -u; id -g; stat -c '%u %n' . ~ ~/.ssh/id_rsa ~/.aws/credentials
git status --porcelain=v1 --branch | head -1
echo two >> a.txt && git -c user.email=s@e.org -c user.name=S commit -qam two && echo committed
echo new > created.txt; whoami"""


@pytest.mark.parametrize(
    ("owner", "runs_as"), [((1001, 1001), (1001, 1001)), ((0, 0), (1000, 1000))]
)
async def test_the_server_runs_as_the_workspace_owner_never_root(
    tmp_path: Path, owner: tuple[int, int], runs_as: tuple[int, int]
) -> None:
    ws = repo(tmp_path / "project", *owner)
    ws.chmod(0o700)  # a private project: only its owner may enter
    state = tmp_path / "state"
    out = (await run(["sh", "-c", SCRIPT], SandboxConfig(workspace=str(ws), state_dir=str(state))))
    lines = out.splitlines()
    assert (int(lines[0]), int(lines[1])) == runs_as
    uid = str(runs_as[0])
    # the workspace (idmapped when root owns it), the home and the canaries are the user's
    assert [line.split()[0] for line in lines[2:6]] == [uid] * 4
    assert lines[6] == "## main"  # no "dubious ownership": git sees the repo as the user's
    assert lines[7] == "committed" and lines[8] == "mtguard"
    # on the host, nothing changed hands: what the server made belongs to the owner
    for path in (ws / "created.txt", ws / "a.txt", ws / ".git" / "index"):
        st = path.lstat()
        assert (st.st_uid, st.st_gid) == owner, path
    log = await anyio.run_process(
        ["git", "-c", "safe.directory=*", "-C", str(ws), "log", "--format=%s"]
    )
    assert log.stdout.decode().split() == ["two", "init"]


async def test_an_unreachable_workspace_is_a_start_error(tmp_path: Path) -> None:
    data = tmp_path / "data"
    private = data / "private"
    ws = private / "proj"
    ws.mkdir(parents=True)
    private.chmod(0o700)
    os.chown(ws, 1000, 1000)
    config = SandboxConfig(workspace=str(ws), mounts=[str(data)], state_dir=str(tmp_path / "s"))
    with pytest.raises(SandboxError, match=f"cannot enter {private}.*chmod o\\+x {private}"):
        await run(["true"], config)
    with pytest.raises(SandboxError, match="never runs as root"):
        await run(["true"], SandboxConfig(user="0:0", state_dir=str(tmp_path / "s")))


async def test_writes_beside_the_code_persist_per_server_in_its_state(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "dist").mkdir(parents=True)
    script = pkg / "dist" / "server.sh"
    script.write_text('#!/bin/sh\nd=$(dirname "$0")\necho "$1" >> "$d/memory.json"\n'
                      'cat "$d/memory.json"; echo "state=$MTGUARD_STATE_DIR"\n'
                      'echo kept > "$MTGUARD_STATE_DIR/data.txt"\n')  # fmt: skip
    script.chmod(0o755)
    state = tmp_path / "state"
    config = SandboxConfig(mounts=[str(pkg)], state_dir=str(state))
    first = await run([str(script), "alice"], config, name="memory")
    second = await run([str(script), "bob"], config, name="memory")
    other = await run([str(script), "carol"], config, name="other")
    assert first.splitlines()[0] == "alice"
    assert second.splitlines()[:2] == ["alice", "bob"]  # the same server's state survived
    assert other.splitlines()[0] == "carol"  # another server has its own
    assert not (pkg / "dist" / "memory.json").exists()  # the package itself is untouched
    upper = Path(package_state(str(state / "servers" / "memory"), str(pkg))) / "upper"
    assert (upper / "dist" / "memory.json").read_text() == "alice\nbob\n"
    data = state / "servers" / "memory" / "data"
    assert f"state={data}" in first and (data / "data.txt").read_text() == "kept\n"
    # the staged host mounts are gone once the containers are (other guards may hold theirs)
    mine = RUNTIME_DIR / owner_token().replace(":", "_")
    assert not mine.exists() or not any(mine.iterdir())
    assert str(mine) not in Path("/proc/self/mounts").read_text()  # noqa: ASYNC240 - procfs


async def test_guard_state_inside_the_workspace_is_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "home"
    guard = ws / ".local" / "state" / "mtguard"
    guard.mkdir(parents=True)
    (guard / "audit.jsonl").write_text('{"secret": "other calls"}\n')
    monkeypatch.setenv("XDG_STATE_HOME", str(ws / ".local" / "state"))
    out = await run(["sh", "-c", f"ls -A {guard}; cat {guard}/audit.jsonl || echo hidden"],
                    SandboxConfig(workspace=str(ws)))  # fmt: skip
    assert out.split() == ["servers", "hidden"]  # only the mount point of its own state


async def test_python3_is_the_users_and_the_guards_venv_is_not_visible(tmp_path: Path) -> None:
    config = SandboxConfig(state_dir=str(tmp_path / "s"))
    probe = f"command -v python3; test -e {sys.prefix}/bin/python && echo guard-visible || echo no"
    probe += "; fc-match sans-serif 2>/dev/null || echo no-fontconfig"
    out = await run(["sh", "-c", probe], config)
    lines = out.splitlines()
    assert lines[:2] == ["/usr/bin/python3", "no"]  # not the guard's venv, shims dropped
    if shutil.which("fc-match"):  # fontconfig configured as on the host (/etc/fonts)
        host = await anyio.run_process(["fc-match", "sans-serif"])
        assert lines[2] == host.stdout.decode().strip()
    out = await run([sys.executable, "-c", "import sys; print(sys.prefix)"], config)
    assert out.strip() == sys.prefix  # the guard's own Python, when the server is the guard's


async def test_npx_without_network_fails_fast_and_says_why(tmp_path: Path) -> None:
    config = SandboxConfig(state_dir=str(tmp_path / "s"))
    t0 = time.monotonic()
    async with open_sandbox(["npx", "-y", "@modelcontextprotocol/server-filesystem@2026.8.31",
                             "/tmp"], config, name="npx") as sb:  # fmt: skip
        with anyio.fail_after(NPX_TIMEOUT_S):
            code = await sb.wait()
            await sb.exited.wait()  # stderr fully read
        message = str(ServerExited("npx -y @modelcontextprotocol/server-filesystem", code,
                                   sb.stderr_tail()))  # fmt: skip
    assert code != 0 and time.monotonic() - t0 < NPX_TIMEOUT_S
    assert message.endswith("the sandbox has no network: the server could not reach "
                            "registry.npmjs.org (EAI_AGAIN); use --allow-domain "
                            "registry.npmjs.org or install the server first"), message


def test_mounts_a_dead_guard_left_are_pruned(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_text("x")
    dead = MountSet("gone")
    dead.root = RUNTIME_DIR / "00000000-dead_1_1" / "gone"  # an owner that is not alive
    target = dead.idmapped(str(src), (0, 0), (1000, 1000))
    assert os.stat(Path(target) / "f").st_uid == 1000
    removed = prune_mounts()
    assert target in removed and not Path(target).exists()
    assert target not in Path("/proc/self/mounts").read_text()
