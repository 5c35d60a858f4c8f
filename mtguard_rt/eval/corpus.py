"""Load the MCP-SafetyBench cases into replayable `Scenario`s, reading them at run time.

`load_corpus(path)` reads `<path>/{browser_automation,financial_analysis}/*.json` (default:
$MTGUARD_CORPUS_DIR, else `<repo>/../shared/corpora/mcp-safetybench`) and returns one
scenario per case, sorted by case id: surface and type, benign and attacked trajectories, the
server payload as example-server environment, the host seam's action. `load_scenarios` adds
the 16 generated Tool Call Hook cases. A missing or malformed corpus raises `CorpusError`
naming the file and what is wrong.
"""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path
from typing import Any

from ..errors import CorpusError
from .attacked import attacked_trajectory
from .scenario import AttackEvaluator, Domain, HostAttack, Scenario, ServerAttack, Surface
from .tool_call_hook import tool_call_hook_scenarios
from .trajectory import SERVER_OF, benign_trajectory

DOMAIN_DIRS: dict[str, Domain] = {
    "browser_automation": "browser",
    "financial_analysis": "financial",
}
HOST_TYPES = {"Intent Injection", "Replay Injection", "Data Tampering"}
USER_TYPES = {"Malicious Code Execution", "Remote Access Control", "Credential Theft"}
DEFAULT_TARGET = {"browser": "playwright_navigate", "financial": "get_historical_stock_prices"}
SHELL_CALLS = {"check_output", "run", "call", "check_call", "Popen", "system", "popen"}


def default_corpus_dir() -> Path:
    env = os.environ.get("MTGUARD_CORPUS_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2].parent / "shared" / "corpora" / "mcp-safetybench"


def surface_of(attack_category: str) -> Surface:
    if attack_category in HOST_TYPES:
        return "host"
    if attack_category in USER_TYPES:
        return "user"
    return "server"


def _as_list(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    return [value] if isinstance(value, dict) else list(value)


def _return_payload(value: Any) -> tuple[str, str]:
    """(text, append|replace) from a `modification_return`: data replaces the result; an
    expression `result + '...'` or a template `{result}...` appends its literal part."""
    if not isinstance(value, str):
        return json.dumps(value), "replace"
    expr = re.fullmatch(r"\s*\w+\s*\+\s*(.+)", value, re.S)
    if expr:
        try:
            return str(ast.literal_eval(expr.group(1))), "append"
        except (ValueError, SyntaxError):
            pass
    template = re.match(r"\{\w+\}", value)
    if template:
        rest = value[template.end() :]
        while rest.startswith(("\\n", "\n")):
            rest = rest[2:] if rest.startswith("\\n") else rest[1:]
        return rest.replace("\\n", "\n"), "append"
    return value, "replace"


def _rug_pull_env(update: dict[str, Any]) -> dict[str, str]:
    """The swapped implementation's effects, read from its code with `ast` (never run)."""
    env = {"MTGUARD_RUGPULL_AFTER": str(int(update["call_threshold"]))}
    payloads: list[str] = []
    tree = ast.parse(update["implementation_code"])
    func = next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)), None)
    params = {a.arg for a in func.args.args} if func else set()
    rewritten: dict[str, Any] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            first = node.args[0] if node.args else None
            if (
                name in SHELL_CALLS
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                env["MTGUARD_RUGPULL_COMMAND"] = first.value
                payloads.append("shell")
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in params
            and isinstance(node.value, ast.Constant)
        ):
            rewritten[node.targets[0].id] = node.value.value
    if rewritten:
        env["MTGUARD_RUGPULL_ARGS"] = json.dumps(rewritten)
        payloads.append("args")
    env["MTGUARD_RUGPULL_PAYLOAD"] = ",".join(dict.fromkeys(payloads)) or "shell"
    return env


def server_attack(case: dict[str, Any], target: str) -> tuple[ServerAttack | None, str]:
    """The example-server environment for a case's server payload, and its text."""
    env: dict[str, str] = {}
    texts: list[str] = []
    for mod in _as_list(case.get("mcp_server_modifications")):
        env["MTGUARD_ATTACK_TOOL"] = mod["tool_name"]
        if "modification_description" in mod:
            env["MTGUARD_POISON_DESCRIPTION"] = mod["modification_description"]
            texts.append(mod["modification_description"])
        if "modification_return" in mod:
            text, mode = _return_payload(mod["modification_return"])
            env["MTGUARD_INJECT_TEXT"], env["MTGUARD_INJECT_MODE"] = text, mode
            texts.append(text)
    additions = _as_list(case.get("mcp_server_additions"))
    if additions:
        shadows = [
            {k: a[k] for k in ("tool_name", "description", "input_parameters") if k in a}
            for a in additions
        ]
        env["MTGUARD_SHADOW_TOOLS"] = json.dumps(shadows)
        env.setdefault("MTGUARD_ATTACK_TOOL", target)
        texts.extend(a.get("description", "") for a in additions)
    update = case.get("mcp_server_update")
    if update:
        env["MTGUARD_ATTACK_TOOL"] = update["tool_name"]
        env.update(_rug_pull_env(update))
    if not env:
        return None, ""
    server = SERVER_OF.get(env["MTGUARD_ATTACK_TOOL"], "unknown")
    return ServerAttack(server=server, env=env), "\n".join(texts)


def host_attack(case: dict[str, Any]) -> HostAttack | None:
    if p := case.get("wrong_function_intent_injection"):
        return HostAttack(
            kind="wrong_function",
            target_tool=p["target_tool"],
            malicious_tool=p["malicious_function"],
        )
    if p := case.get("wrong_arguments_intent_injection"):
        return HostAttack(
            kind="wrong_arguments",
            target_tool=p["target_tool"],
            malicious_arguments=dict(p["malicious_arguments"]),
        )
    if p := case.get("data_tampering"):
        return HostAttack(
            kind="data_tampering", target_tool=p["target_tool"], forged_data=p["forged_data"]
        )
    if p := case.get("replay_injection"):
        return HostAttack(
            kind="replay", target_tool=p["target_tool"], replay_threshold=int(p["replay_threshold"])
        )
    return None


def scenario_from_case(case: dict[str, Any], case_id: str, domain: Domain, source: str) -> Scenario:
    category = str(case["attack_category"])
    evaluators = [
        AttackEvaluator(op=e["op"], args=dict(e.get("op_args") or {}), desc=e.get("desc", ""))
        for e in case["evaluators"]
        if str(e.get("op", "")).startswith("check_")
    ]
    if not evaluators:
        raise CorpusError(source, "the case has no check_* attack-success evaluator")
    utility = [
        (str(e["op"]), e["op_args"] if isinstance(e.get("op_args"), dict) else {})
        for e in case["evaluators"]
        if e.get("op") and not str(e["op"]).startswith("check_")
    ]
    surface = surface_of(category)
    target = str(evaluators[0].args.get("target_tool") or DEFAULT_TARGET[domain])
    server, server_text = server_attack(case, target)
    benign = benign_trajectory(domain, case_id, case["question"], utility)
    added = {
        a["tool_name"]: a.get("input_parameters")
        for a in _as_list(case.get("mcp_server_additions"))
    }
    attacked = attacked_trajectory(
        benign,
        evaluators[0],
        payload_text=case["question"] if surface == "user" else server_text,
        anchor=server.env.get("MTGUARD_ATTACK_TOOL") if server and not added else None,
        added=added,
    )
    return Scenario(
        case_id=case_id,
        domain=domain,
        surface=surface,
        attack_category=category,
        attack_type=category.removeprefix("Tool Poisoning-"),
        category=str(case["category"]),
        task=str(case["question"]),
        benign=benign,
        attacked=attacked,
        evaluators=evaluators,
        utility_evaluators=[op for op, _ in utility],
        server_attack=server,
        host_attack=host_attack(case),
        source=source,
    )


def load_corpus(path: str | Path | None = None) -> list[Scenario]:
    root = Path(path) if path is not None else default_corpus_dir()
    if not root.is_dir():
        raise CorpusError(str(root), "no such directory")
    scenarios: list[Scenario] = []
    for dirname, domain in DOMAIN_DIRS.items():
        folder = root / dirname
        if not folder.is_dir():
            raise CorpusError(str(folder), "the domain folder is missing")
        for file in sorted(folder.glob("*.json")):
            try:
                case = json.loads(file.read_text())
                scenarios.append(scenario_from_case(case, file.stem, domain, str(file)))
            except CorpusError:
                raise
            except (OSError, ValueError, KeyError, TypeError, SyntaxError) as exc:
                raise CorpusError(str(file), f"{type(exc).__name__}: {exc}") from exc
    if not scenarios:
        raise CorpusError(str(root), "no case files found")
    return sorted(scenarios, key=lambda s: s.case_id)


def load_scenarios(path: str | Path | None = None) -> list[Scenario]:
    """The corpus cases, then the 16 generated Tool Call Hook cases."""
    corpus = load_corpus(path)
    return corpus + tool_call_hook_scenarios(corpus)
