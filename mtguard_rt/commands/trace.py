"""`mtguard trace [--image I] [--network none|host] [--json] [--raw] -- CMD...`

Runs CMD in a gated sandbox, watches it from before its first instruction until it has
exited and settled, and prints its behavior tree (indented text, or JSON with --json).
The text view is simplified with policies/noise.toml unless --raw is given.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import AsyncIterable
from pathlib import Path

import anyio

from ..errors import GuardError
from ..model import BehaviorTree, DeclaredCall, tree_encoder

DESCRIPTION = (
    "Run CMD in the sandbox, watched from before its first instruction until it has exited "
    "and settled, and print its behavior tree (noise dropped unless --raw)."
)
TRACE_TIMEOUT_S = 600.0  # a traced command that runs longer than this is stopped
OUTPUT_TAIL_BYTES = 65536  # the command's stdout shown after the tree (its last bytes)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "trace",
        help="run a command in the sandbox and print its behavior tree",
        description=DESCRIPTION,
    )
    p.add_argument("--image", default=None, help="sandbox image (default: the built-in one)")
    p.add_argument("--network", choices=["none", "host"], default="none")
    p.add_argument("--json", action="store_true", help="print the tree as JSON")
    p.add_argument("--raw", action="store_true", help="do not drop noise from the text view")
    p.add_argument("--settle-ms", type=float, default=1000.0, help="settle bound after exit")
    p.add_argument("--timeout", type=float, default=TRACE_TIMEOUT_S)
    p.add_argument("--record", metavar="FILE", help="also save the raw events for replay")
    p.add_argument("--print-bpf", action="store_true", help="print the BPF C as compiled, exit")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    p.set_defaults(func=handler)


async def trace(cmd: list[str], args: argparse.Namespace) -> tuple[BehaviorTree, int, str]:
    from ..monitor import MonitorConfig, open_monitor
    from ..monitor.decode import save_recording
    from ..sandbox import SandboxConfig, open_sandbox

    call = DeclaredCall(
        call_id=uuid.uuid4().hex[:12], server="trace", tool=cmd[0], arguments={"argv": cmd}
    )
    config = SandboxConfig(network=args.network, image=args.image)
    mconfig = MonitorConfig(settle_max_ms=args.settle_ms, record_raw=bool(args.record))
    out = bytearray()

    async def drain_stdout(stream: AsyncIterable[bytes]) -> None:
        # the command's stdout must flow (its stream is bounded); keep the tail to show it
        async for chunk in stream:
            out.extend(chunk)
            del out[:-OUTPUT_TAIL_BYTES]

    async with open_monitor(mconfig) as monitor:
        async with open_sandbox(cmd, config, name="trace", gated=True) as sb:
            async with anyio.create_task_group() as tg:
                tg.start_soon(drain_stdout, sb.stdout)
                async with monitor.watch(sb.cgroup_id, sb.cgroup_path) as watch:
                    async with watch.window(call) as window:
                        await sb.release()
                        with anyio.fail_after(args.timeout):
                            code = await sb.wait()
                        window.response_arrived()
                tg.cancel_scope.cancel()
            if args.record:
                save_recording(window.recording(), Path(args.record))
            output = out.decode("utf-8", "replace") + sb.stderr_tail()
            return window.tree, code, output
    raise AssertionError("unreachable")


def handler(args: argparse.Namespace) -> int:
    if args.print_bpf:
        from ..monitor import MonitorConfig
        from ..monitor.loader import compiled_source

        print(compiled_source(MonitorConfig().ring_pages))
        return 0
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise GuardError("trace needs a command: mtguard trace -- CMD [ARGS...]")
    try:
        tree, code, output = anyio.run(trace, cmd, args, backend="trio")
    except TimeoutError as exc:
        raise GuardError(f"the traced command ran longer than {args.timeout:g} s") from exc
    if args.json:
        sys.stdout.write(tree_encoder.encode(tree).decode() + "\n")
    else:
        from ..monitor.render import render_tree
        from ..monitor.simplify import load_noise, simplify

        shown = tree if args.raw else simplify(tree, load_noise())
        print(render_tree(shown))
        print(f"exit code {code}")
    if output.strip():  # the command's own output goes to stderr, away from the tree
        sys.stderr.write(output if output.endswith("\n") else output + "\n")
    return 0
