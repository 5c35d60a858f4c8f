"""eBPF behavior monitor: per-call tool behavior trees of what a sandboxed server did.

    async with open_monitor(MonitorConfig()) as monitor:
        async with monitor.watch(cgroup_id, cgroup_path) as watch:
            async with watch.window(call) as window:
                ...  # forward the call, await the response
                window.response_arrived()
            tree = window.tree

The monitor collects evidence; it never decides. `simplify(tree, load_noise())` gives the
compact view for the LLM judge; `render_tree()` the text view of `mtguard trace`.
"""

from __future__ import annotations

from .monitor import Monitor, MonitorConfig, Watch, open_monitor
from .render import render_tree
from .simplify import NoiseRules, load_noise, simplify
from .window import Window

__all__ = [
    "Monitor",
    "MonitorConfig",
    "NoiseRules",
    "Watch",
    "Window",
    "load_noise",
    "open_monitor",
    "render_tree",
    "simplify",
]
