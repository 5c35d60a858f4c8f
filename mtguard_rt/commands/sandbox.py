"""`mtguard image build` and `mtguard sandbox prune`: manage the sandbox image and containers."""

from __future__ import annotations

import argparse
from typing import Any

import trio


def register(sub: Any) -> None:
    image = sub.add_parser("image", help="manage the default sandbox image")
    image_sub = image.add_subparsers(dest="image_command", required=True)
    build = image_sub.add_parser("build", help="build the default image offline (idempotent)")
    build.add_argument("--force", action="store_true", help="rebuild with new canary markers")
    build.set_defaults(func=build_handler)
    sandbox = sub.add_parser("sandbox", help="manage sandbox containers")
    sandbox_sub = sandbox.add_subparsers(dest="sandbox_command", required=True)
    prune = sandbox_sub.add_parser(
        "prune", help="remove containers (and host mounts) whose guard is gone"
    )
    prune.set_defaults(func=prune_handler)


def build_handler(args: argparse.Namespace) -> int:
    from ..sandbox import ensure_image, open_engine

    async def run() -> tuple[str, bool]:
        async with open_engine() as engine:
            return await ensure_image(engine, force=args.force)

    image, built = trio.run(run)
    print(f"sandbox image {image}: {'built' if built else 'present'}")
    return 0


def prune_handler(args: argparse.Namespace) -> int:
    from ..sandbox import open_engine, prune_stale
    from ..sandbox.mounts import prune_mounts

    async def run() -> list[str]:
        async with open_engine() as engine:
            return await prune_stale(engine, force=True)

    removed = trio.run(run)
    detached = prune_mounts()  # idmapped / overlay staging mounts of those guards
    print(f"removed {len(removed)} stale container(s), {len(detached)} stale mount(s)")
    return 0
