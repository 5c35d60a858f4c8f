"""`mtguard agent`: one process per host owning the one loaded BPF monitor program.

    agent (server.py)  <-  guard (client.py: RemoteProgram, an `EventSource`)

Guards reach it over a root-only unix socket (protocol.py) and ask it to watch their
sandboxes' cgroups; it routes each record to the connection that watches its cgroup. The
trees are still built in the guard (`Monitor` over a `RemoteProgram`). No agent: the
guard loads its own program (the embedded default).
"""

from __future__ import annotations

from .protocol import agent_socket_path

__all__ = ["agent_socket_path"]
