"""The public API is exactly what `mtguard_rt.__all__` names, and each name resolves."""

import mtguard_rt


def test_all_members_exist_and_are_public() -> None:
    for name in mtguard_rt.__all__:
        assert hasattr(mtguard_rt, name), name
    public = {n for n in dir(mtguard_rt) if not n.startswith("_")}
    modules = {"agent", "audit", "cli", "commands", "config", "errors", "eval", "guard", "model",
               "monitor", "paths", "proxy", "sandbox", "supervisor", "telemetry", "demo",
               "doctor", "hostconfig", "between_calls", "startup"}
    assert public - set(mtguard_rt.__all__) <= modules
