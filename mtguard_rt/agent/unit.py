"""The agent's systemd unit: `render_unit()` (examples/systemd/mtguard-agent.service is its
rendering for /usr/local/bin/mtguard) and `mtguard agent install-unit [--print]`.

Type=notify: systemd counts the agent started once it serves (spawn.announce_ready), after
its one compile. Hardened as far as loading and attaching the BPF program allows: root, but
a bounded capability set (BPF, perfmon, sys_admin for tracefs and bcc, sys_resource for the
locked maps, dac_read_search to read /proc of every sandbox), no new privileges, read-only
system and home, private /tmp, its own runtime dir 0700 for the socket. Left open on
purpose: /sys/kernel (tracefs) and kernel modules (bcc may load kheaders).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

UNIT_NAME = "mtguard-agent.service"
UNIT_DIR = Path("/etc/systemd/system")
DEFAULT_SOCKET = "/run/mtguard/agent.sock"

_UNIT = """\
[Unit]
Description=mtguard-rt host agent (one eBPF monitor for every guarded MCP server)
After=docker.service
Wants=docker.service

[Service]
Type=notify
NotifyAccess=main
ExecStart={mtguard} agent run --socket {socket}
Restart=on-failure
RestartSec=2s
# one bcc compile on a loaded host, then READY=1
TimeoutStartSec=300s
TimeoutStopSec=30s
RuntimeDirectory=mtguard
RuntimeDirectoryMode=0700
UMask=0077
LimitMEMLOCK=infinity
CapabilityBoundingSet=CAP_BPF CAP_PERFMON CAP_SYS_ADMIN CAP_SYS_RESOURCE CAP_DAC_READ_SEARCH
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=read-only
PrivateTmp=yes
PrivateDevices=yes
ProtectClock=yes
ProtectHostname=yes
ProtectControlGroups=yes
ProtectKernelLogs=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
RestrictNamespaces=yes
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
SystemCallArchitectures=native

[Install]
WantedBy=multi-user.target
"""


def render_unit(mtguard: str, socket: str = DEFAULT_SOCKET) -> str:
    return _UNIT.format(mtguard=mtguard, socket=socket)


def installed_mtguard() -> str:
    """This installation's `mtguard` (the venv's, beside its interpreter), else PATH's."""
    beside = Path(sys.executable).parent / "mtguard"
    if beside.exists():
        return str(beside)
    return shutil.which("mtguard") or "/usr/local/bin/mtguard"


def install_unit(socket: Path, *, print_only: bool) -> int:
    text = render_unit(installed_mtguard(), str(socket))
    if print_only:
        sys.stdout.write(text)
        return 0
    target = UNIT_DIR / UNIT_NAME
    target.write_text(text)
    print(f"mtguard: wrote {target}; now: systemctl daemon-reload && "
          f"systemctl enable --now {UNIT_NAME}")  # fmt: skip
    return 0
