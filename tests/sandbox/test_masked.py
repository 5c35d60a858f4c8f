"""The host directories a sandbox does not see (sandbox/plan.py `MASKED`, `needs`)."""

from __future__ import annotations

from mtguard_rt.sandbox.plan import Bind, needs


def test_usr_local_is_masked_unless_the_server_needs_it() -> None:
    std = ["/usr/local/bin", "/usr/bin", "/bin"]
    assert not needs("/usr/local", ["node", "server.js"], std, [Bind("/usr", "/usr", "ro")])
    assert needs("/usr/local", ["/usr/local/bin/tool"], std, [])
    assert needs("/usr/local", ["python3", "/usr/local/lib/srv/main.py"], std, [])
    assert needs("/usr/local", ["x"], std, [Bind("/usr/local/share/d", "/usr/local/share/d", "ro")])
    assert needs("/usr/local", ["x"], ["/usr/local/go/bin", *std], [])
