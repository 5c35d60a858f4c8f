"""Policy loading: presets, layering, and errors that name the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtguard_rt.audit import RULE_IDS, load_policy, policies_dir, preset_path
from mtguard_rt.errors import PolicyError


def test_balanced_is_the_default_and_sets_every_rule() -> None:
    p = load_policy(None)
    assert p.sources == (str(policies_dir() / "balanced.toml"),)
    assert p.pinning_action == "deny" and not p.observe
    text = (policies_dir() / "balanced.toml").read_text()
    for rule in RULE_IDS:
        assert f"[rules.{rule}]" in text, rule
    assert p.mode_of("incomplete-tree") == "observe" and p.mode_of("dangerous-shell") == "enforce"
    assert p.spec.rules.repeated_call.threshold == 3


def test_presets_layer_over_balanced() -> None:
    strict, permissive = load_policy([Path("strict")]), load_policy(["permissive"])
    assert strict.mode_of("incomplete-tree") == "enforce"
    assert strict.spec.rules.shadowed_tool.max_edit_distance == 2
    assert permissive.mode_of("off-task-url") == "observe"
    assert permissive.mode_of("canary-touched") == "enforce"
    assert permissive.pinning_action == "observe"
    assert strict.sensitive.globs == load_policy().sensitive.globs  # inherited lists


def test_user_layers_override_key_by_key(tmp_path: Path) -> None:
    a = tmp_path / "a.toml"
    a.write_text('[guard]\nmode = "observe"\n[lists]\nallowed_domains = ["corp.example"]\n')
    b = tmp_path / "b.toml"
    b.write_text(
        '[lists]\nallowed_domains = ["other.example"]\n[rules.repeated-call]\nthreshold = 5\n'
    )
    p = load_policy([a, b])
    assert p.observe and p.allowed_domains == ["other.example"]
    assert p.spec.rules.repeated_call.threshold == 5 and p.spec.rules.repeated_call.window == 20
    assert p.sources[0].endswith("balanced.toml") and p.sources[1:] == (str(a), str(b))


def test_extends_none_starts_empty(tmp_path: Path) -> None:
    f = tmp_path / "bare.toml"
    f.write_text('extends = "none"\n[rules.dangerous-shell]\nmode = "off"\n')
    p = load_policy([f])
    assert p.sources == (str(f),) and not p.sensitive and p.mode_of("dangerous-shell") == "off"


def _error(tmp_path: Path, text: str) -> PolicyError:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(PolicyError) as info:
        load_policy([f])
    assert info.value.path == str(f)
    return info.value


def test_unknown_key_names_its_line(tmp_path: Path) -> None:
    err = _error(tmp_path, '[guard]\nmode = "enforce"\n\n[rules.repeated-call]\nthreshhold = 4\n')
    assert err.line == 5 and "threshhold" in err.why
    assert str(err).startswith(f"{tmp_path / 'bad.toml'}:5: ")


def test_unknown_rule_names_its_header(tmp_path: Path) -> None:
    err = _error(tmp_path, '# x\n[rules.no-such-rule]\nmode = "off"\n')
    assert err.line == 2 and "no-such-rule" in err.why


def test_bad_mode_type_names_its_line(tmp_path: Path) -> None:
    err = _error(tmp_path, '\n[rules.off-task-url]\nmode = "block"\n')
    assert err.line == 3 and "'block'" in err.why


def test_bad_regex_in_array_of_tables_names_its_line(tmp_path: Path) -> None:
    text = (
        "[rules.dangerous-shell]\n"
        "[[rules.dangerous-shell.patterns]]\nname = \"ok\"\nregex = 'a+'\n"
        "[[rules.dangerous-shell.patterns]]\nname = \"broken\"\nregex = '(unclosed'\n"
    )
    err = _error(tmp_path, text)
    assert err.line == 7 and "invalid regular expression" in err.why


def test_bad_glob_in_a_multiline_list_names_its_line(tmp_path: Path) -> None:
    text = '[lists]\nsensitive_paths = [\n  "~/.ssh/**",\n  "~/.aws/**",\n  "relative/path",\n]\n'
    err = _error(tmp_path, text)
    assert err.line == 5 and "must start with" in err.why


def test_toml_syntax_error_names_its_line(tmp_path: Path) -> None:
    err = _error(tmp_path, '[guard]\nmode = "enforce"\npinning_action = \n')
    assert err.line == 3


def test_threshold_below_two_is_rejected(tmp_path: Path) -> None:
    err = _error(tmp_path, "\n\n[rules.repeated-call]\nthreshold = 1\n")
    assert err.line == 4 and "at least 2" in err.why


def test_extends_cycle_and_missing_files(tmp_path: Path) -> None:
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text(f'extends = "{b}"\n')
    b.write_text(f'extends = "{a}"\n')
    with pytest.raises(PolicyError, match="cycle"):
        load_policy([a])
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy([tmp_path / "missing.toml"])
    with pytest.raises(PolicyError, match="no policy preset"):
        preset_path("nonexistent")


def test_presets_are_found_in_a_wheel_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    import mtguard_rt.audit.loader as loader

    wheel_dir = tmp_path / "mtguard_rt" / "_policies"
    shutil.copytree(policies_dir(), wheel_dir)
    monkeypatch.setattr(loader, "_POLICY_DIRS", (tmp_path / "no-checkout", wheel_dir))
    assert policies_dir() == wheel_dir
    assert load_policy(["strict"]).sources[0] == str(wheel_dir / "balanced.toml")
    monkeypatch.setattr(loader, "_POLICY_DIRS", (tmp_path / "a", tmp_path / "b"))
    with pytest.raises(PolicyError, match="presets are missing"):
        load_policy()


def test_global_regex_flags_in_patterns_that_get_joined(tmp_path: Path) -> None:
    f = tmp_path / "flags.toml"
    f.write_text(
        "[rules.sensitive-file-arg]\n"
        "secret_patterns = ['(?i)password\\s*=\\s*\\S+', 'AKIA[0-9A-Z]{16}']\n"
        "[[rules.task-entity-mismatch.entities]]\n"
        "name = 'order'\npattern = '(?i)ord-[0-9]+'\nkeys = ['order']\n"
    )
    p = load_policy([f])
    assert p.secrets is not None and p.secrets.search("PASSWORD = hunter2")
    assert p.entities[0][1].fullmatch("ORD-12")
