"""Tree building on recorded kernel event streams (fixtures/*.json): runs without root."""

from __future__ import annotations

from pathlib import Path

import msgspec

from mtguard_rt.model import BehaviorTree, tree_decoder, tree_encoder
from mtguard_rt.monitor.builder import replay
from mtguard_rt.monitor.decode import load_recording

FIXTURES = Path(__file__).parent / "fixtures"
WORKDIR = "/tmp/mtguard-fixture"


def tree_of(name: str) -> BehaviorTree:
    return replay(load_recording(FIXTURES / f"{name}.json"))


def test_exec_tree_edges_argv_and_exit_codes() -> None:
    tree = tree_of("exec_tree")
    (sh,) = [p for p in tree.processes if p.learned == "seeded"]
    assert sh.exit_code == 7 and sh.argv[:2] == ["sh", "-c"]
    (echo,) = [p for p in tree.processes if p.exe == "/bin/echo"]
    assert echo.parent == sh.key and echo.argv == ["/bin/echo", "one", "two"]
    assert echo.exit_code == 0 and echo.end_ns is not None and echo.end_ns > echo.start_ns
    failed = [e for p in tree.processes for e in p.execs if e.result < 0]
    assert ("/nonexistent/tool", -2) in [(e.path, e.result) for e in failed]
    assert all(e.path.endswith("/sh") for e in failed if e.path != "/nonexistent/tool")
    assert tree.roots() == [sh]
    assert len({p.key for p in tree.processes}) == len(tree.processes)


def test_paths_resolved_through_chdir_and_dirfd() -> None:
    tree = tree_of("files_chdir_dirfd")
    files = [f for p in tree.processes for f in p.files if f.path.startswith(WORKDIR)]
    ops = [(f.op, f.path, f.target) for f in files]
    assert ("mkdir", f"{WORKDIR}/sub", None) in ops
    assert ("rename", f"{WORKDIR}/sub/a.txt", f"{WORKDIR}/sub/b.txt") in ops
    assert ("open", f"{WORKDIR}/c.txt", None) in ops
    assert ("unlink", f"{WORKDIR}/c.txt", None) in ops
    assert ("rmdir", f"{WORKDIR}/sub", None) in ops
    assert ("open", f"{WORKDIR}/bad-\\xff-name", None) in ops
    assert all(f.resolved for f in files)


def test_dns_query_and_answer_decoded_and_attributed() -> None:
    tree = tree_of("dns_raw")
    dns = [d for p in tree.processes for d in p.dns]
    assert [(d.direction, d.name, d.qtype) for d in dns] == [
        ("query", "exfil.example.test", "A"),
        ("response", "exfil.example.test", "A"),
    ]
    assert dns[1].answers == ["10.20.30.40"] and dns[0].server == "127.0.0.1:53"


def test_tree_json_round_trip() -> None:
    for name in ("exec_tree", "files_chdir_dirfd", "dns_raw"):
        tree = tree_of(name)
        again = tree_decoder.decode(tree_encoder.encode(tree))
        assert msgspec.structs.asdict(again) == msgspec.structs.asdict(tree)
