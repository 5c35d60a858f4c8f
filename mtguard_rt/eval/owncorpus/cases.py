"""The own corpus as data: server personas and cases, validated at load with file and case.

Four sets: `dev` (cases/, servers.toml: the corpus the rules are written against), `held-out`
(heldout/<class>.toml with heldout/servers.toml: other personas and payloads, written blind to
the rules, run and never tuned for), `held-out-2` (heldout2/: a second blind set, written
after the first was spent on fixes), `held-out-3` (heldout3/: a third, written blind while
the second was being fixed) and `held-out-4` (heldout4/: a fourth, written blind while the
third was being fixed); `load_set()` loads one or all. A persona (servers.toml)
is a scripted server: its tools, schemas and real steps
(examples/servers/attacks/scripted.py). A case (cases/<class>.toml) names its class, source
(server, host, user, cross-server), label (attack or benign), the user's task, the personas it
connects in ONE guard (a session), tool overrides (a poisoned description, a look-alike tool,
a rug-pulled implementation), fixture files and symlinks under its root (`ws/` is the
workspace, the rest is outside it), and the agent's calls; a call the attack caused is
`unsafe`, with `expect` (text its result must carry, proving the effect happened) and, for a
host attack, `sent` (what the compromised dispatch sends instead of what was declared).
"""

from __future__ import annotations

import tomllib
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import msgspec

from ...errors import CorpusError

HERE = Path(__file__).resolve().parent
CASES_DIR = HERE / "cases"
SERVERS_FILE = HERE / "servers.toml"
HELDOUT_DIR = HERE / "heldout"
HELDOUT_SERVERS = HELDOUT_DIR / "servers.toml"
HELDOUT2_DIR = HERE / "heldout2"
HELDOUT2_SERVERS = HELDOUT2_DIR / "servers.toml"
HELDOUT3_DIR = HERE / "heldout3"
HELDOUT3_SERVERS = HELDOUT3_DIR / "servers.toml"
HELDOUT4_DIR = HERE / "heldout4"
HELDOUT4_SERVERS = HELDOUT4_DIR / "servers.toml"
SETS = ("dev", "held-out", "held-out-2", "held-out-3", "held-out-4", "all")
Source = Literal["server", "host", "user", "cross-server"]
SOURCES: tuple[Source, ...] = ("server", "host", "user", "cross-server")
CLASSES = {
    "cross-server-induction": "Cross-server induction",
    "tool-choice": "Tool choice (look-alikes, fake errors, user impersonation)",
    "out-of-scope-params": "Out-of-scope parameters",
    "secrets-in-results": "Secrets leaving through results",
    "scope-escape": "Scope escape (../, symlinks)",
    "rug-pull": "Behaviour change with an unchanged tool list",
    "unrequested-state-change": "Unrequested state changes (incl. signals)",
    "persistence-content": "Persistence whose content differs from what was asked",
}


class ToolSpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    name: str
    server: str = ""  # in a case's overrides: which of its servers the tool lives on
    description: str = ""
    params: dict[str, str] = msgspec.field(default_factory=dict)
    optional: list[str] = msgspec.field(default_factory=list)
    steps: list[dict[str, Any]] = msgspec.field(default_factory=list)
    after: dict[str, Any] | None = None  # {"calls": N, "steps": [...]}: a rug pull


class Persona(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    daemon: bool = False  # a helper process the server starts (a signal's target)
    tools: list[ToolSpec] = msgspec.field(default_factory=list)


class Sent(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    server: str
    tool: str
    args: dict[str, Any] = msgspec.field(default_factory=dict)


class Call(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    server: str
    tool: str
    args: dict[str, Any] = msgspec.field(default_factory=dict)
    unsafe: bool = False
    why: str = ""
    expect: str = ""  # text the result must hold for the attack to count as succeeded
    sent: Sent | None = None  # host source: what the compromised dispatch sends instead


class Case(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    id: str
    source: Source
    label: Literal["attack", "benign"]
    task: str
    servers: list[str]
    calls: list[Call]
    cls: str = ""  # from the file
    hard: bool = False  # a hard negative: the benign twin of an attack's very operation
    note: str = ""
    tools: list[ToolSpec] = msgspec.field(default_factory=list)
    files: dict[str, str] = msgspec.field(default_factory=dict)
    links: dict[str, str] = msgspec.field(default_factory=dict)

    @property
    def unsafe_calls(self) -> list[Call]:
        return [c for c in self.calls if c.unsafe]


class CaseFile(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    cls: str
    case: list[Case]


def load_personas(path: Path = SERVERS_FILE) -> dict[str, Persona]:
    try:
        raw = tomllib.loads(path.read_text())
        return msgspec.convert(raw["servers"], dict[str, Persona])
    except (OSError, KeyError, tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise CorpusError(str(path), f"{type(exc).__name__}: {exc}") from exc


def server_spec(case: Case, name: str, personas: dict[str, Persona]) -> dict[str, Any]:
    """The JSON definition scripted.py serves for `name` in `case`: the persona's tools, the
    case's overrides replacing a tool of the same name or added after them."""
    persona = personas[name]
    tools = {t.name: t for t in persona.tools}
    for t in case.tools:
        if t.server == name:
            tools[t.name] = t
    spec = {"name": name, "daemon": persona.daemon, "tools": [msgspec.to_builtins(t) for t in
                                                               tools.values()]}
    return spec


def _check(case: Case, personas: dict[str, Persona], where: str) -> None:
    def bad(why: str) -> CorpusError:
        return CorpusError(where, f"case {case.id}: {why}")

    for s in case.servers:
        if s not in personas:
            raise bad(f"unknown server persona {s!r}")
    for t in case.tools:
        if t.server not in case.servers:
            raise bad(f"tool {t.name} overrides a server the case does not connect")
    for c in case.calls:
        names = {t["name"] for t in server_spec(case, c.server, personas)["tools"]} if (
            c.server in case.servers) else set()
        if c.tool not in names:
            raise bad(f"call of {c.server}.{c.tool}: no such server or tool")
        if c.sent and c.sent.server not in case.servers:
            raise bad(f"host swap to {c.sent.server}: not a server of the case")
        if c.sent and case.source != "host":
            raise bad("only host cases swap what is sent")
    if (case.label == "attack") != bool(case.unsafe_calls):
        raise bad("an attack case has unsafe calls, a benign case none")
    for rel in (*case.files, *case.links):
        p = PurePosixPath(rel)
        if p.is_absolute() or ".." in p.parts:
            raise bad(f"fixture path {rel!r} leaves the case root")


def load_cases(folder: Path = CASES_DIR, personas: dict[str, Persona] | None = None) -> list[Case]:
    personas = personas if personas is not None else load_personas()
    out: list[Case] = []
    seen: set[str] = set()
    for file in sorted(folder.glob("*.toml")):
        if file.name == SERVERS_FILE.name:  # a set's personas may sit beside its cases
            continue
        try:
            data = msgspec.convert(tomllib.loads(file.read_text()), CaseFile)
        except (OSError, tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
            raise CorpusError(str(file), f"{type(exc).__name__}: {exc}") from exc
        if data.cls not in CLASSES:
            raise CorpusError(str(file), f"unknown class {data.cls!r}")
        for case in data.case:
            if case.id in seen:
                raise CorpusError(str(file), f"case id {case.id} appears twice")
            seen.add(case.id)
            case.cls = data.cls
            _check(case, personas, str(file))
            out.append(case)
    if not out:
        raise CorpusError(str(folder), "no case files found")
    return out


def load_set(name: str = "dev") -> tuple[list[Case], dict[str, Persona]]:
    """The cases of a set and the personas they run on: `dev`, `held-out`, `held-out-2`,
    `held-out-3`, `held-out-4` or `all` (every set; persona names and case ids must not collide
    between the sets)."""
    if name not in SETS:
        raise CorpusError(name, f"unknown set (known: {', '.join(SETS)})")
    parts = [(CASES_DIR, SERVERS_FILE)] if name in ("dev", "all") else []
    parts += [(HELDOUT_DIR, HELDOUT_SERVERS)] if name in ("held-out", "all") else []
    parts += [(HELDOUT2_DIR, HELDOUT2_SERVERS)] if name in ("held-out-2", "all") else []
    parts += [(HELDOUT3_DIR, HELDOUT3_SERVERS)] if name in ("held-out-3", "all") else []
    parts += [(HELDOUT4_DIR, HELDOUT4_SERVERS)] if name in ("held-out-4", "all") else []
    personas: dict[str, Persona] = {}
    cases: list[Case] = []
    for folder, file in parts:
        mine = load_personas(file)
        clash = sorted(personas.keys() & mine.keys())
        if clash:
            raise CorpusError(str(file), f"persona(s) {', '.join(clash)} also in another set")
        personas.update(mine)
        more = load_cases(folder, mine)
        twice = sorted({c.id for c in cases} & {c.id for c in more})
        if twice:
            raise CorpusError(str(folder), f"case id(s) {', '.join(twice)} also in another set")
        cases += more
    return cases, personas
