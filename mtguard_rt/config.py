"""The guard's configuration: one TOML file, every section optional, typos rejected.

```toml
observe = false                 # true: record every verdict, block nothing
task = "Summarise MSFT prices"  # default task when a call carries none in _meta
policies = ["policies/strict.toml"]
audit_log = "/var/log/mtguard/audit.jsonl"  # default: $XDG_STATE_HOME/mtguard/audit.jsonl
call_timeout_s = 60
[sandbox]   image, network, workspace, user, mounts, state_dir, package_overlay, memory_mb,
            pids_limit, cpus, env, allow_domains = ["registry.npmjs.org"] (kernel-enforced:
            only these hosts; the resolvers of /etc/resolv.conf or `dns` for port 53 only),
            rollback = "off" | "tree" | "scan" (+ rollback_dir, _max_files, _max_mb, _timeout_s),
            seccomp = "guard" | "docker-default" | "profile.json" (relative to this file)
[monitor]   settle_max_ms, workers, ring_pages
[online]    mode = "enforce" | "observe" | "off", kill_on_touch = true
[llm]       base_url, model, api_key_env, timeout_s, on_error ...   (absent: no LLM judge)
[telemetry] exporter, endpoint, webhook ...
[profile]   path = "profiles/learned.toml", mode = "observe" | "enforce" | "off"
```
Errors name the file and line (`PolicyError`). CLI flags override file values.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

import msgspec

from .errors import PolicyError, SandboxError
from .paths import default_audit_log
from .sandbox.seccomp import CHOICES as SECCOMP_CHOICES
from .sandbox.seccomp import load_profile
from .sandbox.settings import SandboxConfig

# A call that has not answered in this long is abandoned: its result is withheld and the
# server's process tree keeps being watched until settle. Long enough for a slow browser tool.
DEFAULT_CALL_TIMEOUT_S = 120.0


class MonitorSection(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    settle_max_ms: int = 1000
    # true: a call settles once its response arrived and the ring buffer is drained; what it
    # left running is a worker, followed between calls; false: wait for it up to settle_max_ms
    workers: bool = True
    ring_pages: int = 4096  # 16 MiB: a 400k-event burst is taken without loss (BENCHMARKS.md)


class OnlineSection(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    # enforce: a single-event deny (canary, persistence write, shell, endpoint) kills the
    # call's processes at once; observe: recorded only; off: left to post-verification
    mode: Literal["enforce", "observe", "off"] = "enforce"
    # enforce mode only: canaries and the policy's protected paths / forbidden executables
    # are SIGKILLed in the kernel on open / exec (exact absolute names; see monitor.bpf.c)
    kill_on_touch: bool = True


class BetweenSection(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    # what a sandbox does with no call in flight becomes its own audit record (between_calls.py,
    # monitor/between.py): cut `flush_after_s` after an effect (file, exec, network, kill), at
    # most once per `min_gap_s` per server, every `flush_every_s` when only forks and exits are
    # pending, at `max_events`, and when the next call's window opens
    enabled: bool = True
    flush_after_s: float = 0.5
    min_gap_s: float = 2.0
    flush_every_s: float = 30.0
    max_events: int = 20_000


class ProfileSection(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    # a learned behaviour profile (`mtguard learn`), relative to the config file; a call of a
    # profiled tool whose tree leaves it is a `profile-deviation` violation in this mode
    path: str
    mode: Literal["enforce", "observe", "off"] = "observe"


class GuardConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    observe: bool = False
    task: str | None = None
    policies: list[str] = msgspec.field(default_factory=list)
    # the per-user state dir, never the workspace (paths.py); "" or None: no audit log
    audit_log: str | None = msgspec.field(default_factory=default_audit_log)
    call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    sandbox: SandboxConfig = msgspec.field(default_factory=SandboxConfig)
    monitor: MonitorSection = msgspec.field(default_factory=MonitorSection)
    online: OnlineSection = msgspec.field(default_factory=OnlineSection)
    between: BetweenSection = msgspec.field(default_factory=BetweenSection)
    llm: dict[str, Any] | None = None  # validated by the audit layer's JudgeConfig
    telemetry: dict[str, Any] | None = None  # validated by the telemetry layer's config
    profile: ProfileSection | None = None  # learned behaviour profile (overrides the policy's)
    # the agent session the guard's servers join (agent/session_client.py): a proxy's
    # default is its host process's; none (or "off"): this guard's own servers only
    session: str | None = None
    # Test/evaluation seam: "module:function" rewriting each approved call before dispatch,
    # to simulate a compromised host (the paper's tool-call-hook attacks). Never set it in use.
    dispatch_hook: str | None = None


def load_config(path: str | Path | None) -> GuardConfig:
    if path is None:
        return GuardConfig()
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise PolicyError(str(p), None, f"cannot read the config file: {exc.strerror}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"\(at line (\d+)", str(exc))
        line = int(found.group(1)) if found else None
        raise PolicyError(str(p), line, str(exc).split(" (at")[0]) from exc
    try:
        config = msgspec.convert(data, GuardConfig)
    except msgspec.ValidationError as exc:
        raise PolicyError(str(p), _line_of(text, str(exc)), str(exc)) from exc
    base = p.parent
    config.policies = [
        str((base / q).resolve()) if not Path(q).is_absolute() else q for q in config.policies
    ]
    if config.profile is not None and not Path(config.profile.path).is_absolute():
        config.profile.path = str((base / config.profile.path).resolve())
    seccomp = config.sandbox.seccomp
    if seccomp not in SECCOMP_CHOICES and not Path(seccomp).is_absolute():
        config.sandbox.seccomp = str((base / seccomp).resolve())
    if config.sandbox.seccomp not in SECCOMP_CHOICES:  # a typo fails here, with its line
        try:
            load_profile(config.sandbox.seccomp)
        except SandboxError as exc:
            raise PolicyError(str(p), _line_of(text, "field `seccomp`"), str(exc)) from exc
    return config


def _line_of(text: str, message: str) -> int | None:
    """Best effort: the line of the key a msgspec error names (unknown field `netwrk`, or
    the last key of a path like `$.sandbox.network`)."""
    found = re.search(r"field `(\w+)`", message) or re.search(r"`\$\.([\w.\[\]]+)`", message)
    if not found:
        return None
    key = re.split(r"[.\[]", found.group(1))[-1].rstrip("]")
    for number, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*{re.escape(key)}\s*=", line):
            return number
    return None
