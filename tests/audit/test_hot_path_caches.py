"""The hot path's shortcuts answer as the plain code did (issue 13: every optimisation keeps
the rules' verdicts): `persist_class` memoised, `names_path`'s early basename test, and the
consent's path arguments found once per call."""

from __future__ import annotations

import base64
import itertools
import os
import re

from mtguard_rt.audit.consent import WriteConsent
from mtguard_rt.audit.context import CallContext
from mtguard_rt.audit.decode import find_known, parts, rot13
from mtguard_rt.audit.loader import load_policy
from mtguard_rt.audit.patterns import HOME_RE
from mtguard_rt.audit.persist_class import _ALL, _SAMPLE, CLASSES, persist_class
from mtguard_rt.audit.text import _sentence_ends, _tokens, names_path
from mtguard_rt.model import DeclaredCall

POLICY = load_policy(None)
PATHS = [
    "/home/mtguard/.bashrc", "/home/mtguard/.zshrc/", "/root/.ssh/authorized_keys",
    "/home/u/.config/systemd/user/x.timer", "/ws/.git/hooks/pre-commit",
    "/ws/.git/hooks/pre-commit.sample", "/ws/package.json", "/ws/sub/Makefile",
    "/home/mtguard/.local/bin/ls", "/usr/lib/python3/site-packages/a.pth", "/tmp/x", "/",
    "/ws/notes/todo.txt", "relative/.bashrc", "/home/mtguard/.config/autostart/a.desktop",
]
TEXTS = [
    "add an alias to ~/.bashrc", "edit $HOME/.zshrc please", "/root/.ssh/authorized_keys",
    "notes/todo.txt", "../notes/todo.txt", "todo.txt.bak", "cat /ws/package.json.", "",
    "set up .git/hooks/pre-commit", "x.timer", "~/.local/bin/ls and /tmp/x",
]


def _reference_names_path(texts: list[str], path: str) -> bool:
    """`names_path` as it was before the hot-path work (the home matched first, the
    basename recomputed per text)."""
    home = re.match(HOME_RE, path)
    for text in texts:
        if os.path.basename(path.rstrip("/")) not in text:
            continue
        for tok in _sentence_ends(_tokens(text)):
            if home and (tok.startswith("~/") or tok.startswith("$HOME/")):
                tok = home.group(0) + tok[tok.index("/") :]
            norm = os.path.normpath(tok)
            if norm.startswith("/"):
                if norm == path:
                    return True
            elif not norm.startswith("..") and norm != "." and path.endswith("/" + norm):
                return True
            elif norm.startswith("..") and path.endswith("/" + norm.lstrip("./")):
                return True
    return False


def _reference_persist_class(path: str) -> object:
    if not path.startswith("/") or not _ALL.matches(path) or _SAMPLE.search(path):
        return None
    parts = path.split("/")
    return next((c for c in CLASSES if c.paths.matches(path, parts)), None)


def test_names_path_answers_as_before() -> None:
    checked = 0
    for path in PATHS:
        for texts in itertools.chain(([t] for t in TEXTS), itertools.combinations(TEXTS, 2)):
            assert names_path(list(texts), path) == _reference_names_path(list(texts), path), (
                texts, path)
            checked += 1
    assert checked > 500
    assert any(_reference_names_path([t], p) for t in TEXTS for p in PATHS)  # not all False


def test_persist_class_memoised_answers_as_computed() -> None:
    for _ in range(2):  # the second round comes from the cache
        for path in PATHS:
            assert persist_class(path) is _reference_persist_class(path), path
    assert sum(persist_class(p) is not None for p in PATHS) >= 6


def test_consent_path_arguments_found_once_per_call() -> None:
    call = DeclaredCall(call_id="c", server="s", tool="t", arguments={
        "path": " ~/.zshrc ", "content": "alias ll='ls -l'", "nested": {"to": ["/tmp/out"]}})
    consent = WriteConsent(CallContext(call=call, task="add an alias to my zshrc"), POLICY)
    assert consent._path_args == ["~/.zshrc", "/tmp/out"]
    assert consent._elsewhere("/home/mtguard/.zshrc")  # /tmp/out names another file
    alone = WriteConsent(CallContext(call=DeclaredCall(
        call_id="d", server="s", tool="t", arguments={"path": "~/.zshrc"}),
        task="add an alias to my zshrc"), POLICY)
    assert not alone._elsewhere("/home/mtguard/.zshrc")


def test_known_value_forms_cached_answer_as_computed() -> None:
    marker = "MTGCANARY0123456789ABCDEF"
    texts = {
        "plain": f"x {marker} y",
        "base64": base64.b64encode(f"k={marker}".encode()).decode(),
        "hex": marker.encode().hex(),
        "reversed": marker[::-1],
        "ROT13": rot13(marker),
        "split": " - ".join(marker[i : i + 5] for i in range(0, len(marker), 5)),
    }
    for _ in range(2):  # the second round's needles and parts come from the caches
        for form, text in texts.items():
            assert find_known(text, marker) == (form, marker)
        assert find_known("nothing here", marker) is None
        assert find_known(f"..{marker[3:20]}..", marker) == ("part, plain", marker[4:16])
    got = parts(marker)
    got.append("mutated")  # a caller's list is its own: the cache is not touched
    assert "mutated" not in parts(marker)
