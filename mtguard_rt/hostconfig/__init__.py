"""`mtguard wrap` / `unwrap`: put the guard in front of an agent host's MCP servers, and back.

`entries` rewrites server entries (stdio and `url`), `needs` infers the sandbox flags a stdio
server needs (workspace, mounts, network), `files` reads, diffs and writes host config files
with numbered backups.
"""

from .entries import (
    Change,
    Rewrite,
    Table,
    default_infer,
    is_remote,
    is_stdio,
    is_wrapped,
    server_tables,
    unwrap_config,
    unwrap_entry,
    wrap_config,
    wrap_entry,
    wrap_remote,
)
from .files import (
    HostConfigFile,
    backups,
    config_diff,
    planned_text,
    project_dir,
    read_host_config,
    render_config,
    strip_jsonc,
    write_host_config,
)
from .needs import Need, Needs, infer_needs, without_network_flags

__all__ = [
    "Change", "HostConfigFile", "Need", "Needs", "Rewrite", "Table", "backups", "config_diff",
    "default_infer", "infer_needs", "is_remote", "is_stdio", "is_wrapped", "planned_text",
    "project_dir", "read_host_config", "render_config", "server_tables", "strip_jsonc",
    "unwrap_config", "unwrap_entry", "without_network_flags", "wrap_config", "wrap_entry",
    "wrap_remote", "write_host_config",
]
