"""The self-identifying credential formats `secrets.find_secrets` looks for, and where.

Each format is (kind, anchors, regex): a regex is only tried where one of its literal anchors
occurs (found by `str.find`, at C speed), starting at the anchor or a fixed number of
characters before it, so a text holding no anchor costs one substring search per anchor and
the scan stays linear in the text. Pure data and one matcher; no policy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# (kind, anchors, regex): formats that say by themselves that they are credentials. A regex
# is only tried where one of its anchors occurs (found by `str.find`, at C speed), starting
# at the anchor (or `_BACK` chars before it), so a text holding no anchor costs one substring
# search per anchor.
_FORMATS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    (
        "private key",
        ("-----BEGIN ",),
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[ \t]*(?:\r?\n|(?:\\r)?\\n)"
        r"(?:[\w-]+: [^\n]*(?:\r?\n|\\n))*\s*[A-Za-z0-9+/=]{40,}",
    ),
    (
        "AWS access key id",
        ("AKIA", "ASIA", "ABIA", "ACCA"),
        r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b",
    ),
    ("GCP API key", ("AIza",), r"\bAIza[0-9A-Za-z_-]{35}(?![\w-])"),
    ("Google OAuth token", ("ya29.",), r"\bya29\.[0-9A-Za-z_-]{30,}"),
    (
        "Azure client secret",
        ("Q~",),
        r"(?<![\w~.-])[A-Za-z0-9_~.-]{3}\dQ~[A-Za-z0-9_~.-]{31,34}(?![\w~.-])",
    ),
    ("Azure SAS signature", ("sig=",), r"[?&]sig=[A-Za-z0-9%+/]{40,}={0,2}"),
    (
        "GitHub token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        r"\bgh[pousr]_[A-Za-z0-9]{30,255}\b",
    ),
    ("GitHub fine-grained token", ("github_pat_",), r"\bgithub_pat_[A-Za-z0-9_]{40,255}\b"),
    (
        "GitLab token",
        ("glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "gloas-", "glsoat-", "glft-", "glimt-"),
        r"\bgl(?:pat|dt|rt|ptt|cbt|oas|soat|ft|imt)-[A-Za-z0-9_-]{20,}",
    ),
    ("Slack token", ("xox",), r"\bxox[abposre]-\d{6,}-[A-Za-z0-9-]{8,}"),
    (
        "Slack webhook",
        ("https://hooks.slack.com/",),
        r"https://hooks\.slack\.com/services/T[A-Z0-9]+/B[A-Z0-9]+/[A-Za-z0-9]{16,}",
    ),
    ("Stripe live key", ("sk_live_", "rk_live_"), r"\b(?:sk|rk)_live_[A-Za-z0-9]{20,}\b"),
    ("Stripe webhook secret", ("whsec_",), r"\bwhsec_[A-Za-z0-9]{24,}\b"),
    ("Anthropic API key", ("sk-ant-",), r"\bsk-ant-[a-z]{2,8}\d{2}-[A-Za-z0-9_-]{40,}"),
    ("OpenAI API key", ("sk-",), r"\bsk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{32,}"),
    ("API key (sk-)", ("sk-",), r"\bsk-[A-Za-z0-9]{32,}\b"),
    ("npm token", ("npm_",), r"\bnpm_[A-Za-z0-9]{36}\b"),
    ("PyPI token", ("pypi-AgEI",), r"\bpypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{40,}"),
    ("Hugging Face token", ("hf_",), r"\bhf_[A-Za-z0-9]{34,}\b"),
    ("SendGrid key", ("SG.",), r"\bSG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}\b"),
    ("DigitalOcean token", ("doo_v1_", "dop_v1_", "dor_v1_"), r"\bdo[opr]_v1_[a-f0-9]{64}\b"),
    ("Docker Hub token", ("dckr_pat_",), r"\bdckr_pat_[A-Za-z0-9_-]{27,}"),
    ("Telegram bot token", (":AA",), r"\b\d{8,10}:AA[A-Za-z0-9_-]{33}\b"),
    ("JWT", ("eyJ",), r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{16,}"),
    ("bearer token", ("Bearer ", "bearer "), r"\b[Bb]earer[ \t]+[A-Za-z0-9._~+/-]{20,}=*"),
)
# Where a match starts before its anchor: (fewest, most) characters (default: at the anchor).
_BACK = {
    "Azure client secret": (4, 4),
    "Azure SAS signature": (1, 1),
    "Telegram bot token": (8, 10),
}
FORMATS = tuple(
    (kind, anchors, _BACK.get(kind, (0, 0)), re.compile(rx)) for kind, anchors, rx in _FORMATS
)
WINDOW_AFTER = 4096  # chars after an anchor a match may reach (the longest format fits)
MAX_ANCHORS = 20_000  # occurrences of one anchor examined per text
NEEDS_REACH = 200  # `needs` (the @ of user:password@) within this many chars of the anchor


def at_anchors(
    text: str,
    anchors: Iterable[str],
    rx: re.Pattern[str],
    back: tuple[int, int],
    loose: bool = False,
    needs: str = "",
) -> list[re.Match[str]]:
    """Matches of `rx` starting at (or `back` chars before) an occurrence of an anchor.
    `loose`: also as if a space preceded the anchor (a text whose spaces were squeezed out
    glues a split token to the word before it)."""
    found: list[re.Match[str]] = []
    end = -1
    for anchor in anchors:
        at, seen = text.find(anchor), 0
        while at >= 0 and seen < MAX_ANCHORS:
            seen += 1
            if needs and text.find(needs, at, at + NEEDS_REACH) < 0:
                at = text.find(anchor, at + 1)
                continue
            for pos in range(max(0, at - back[1]), max(0, at - back[0]) + 1):
                if pos < end:
                    continue
                m = rx.match(text, pos, at + WINDOW_AFTER)
                if m is None and loose and pos == at:
                    m = rx.match(" " + text[at : at + WINDOW_AFTER], 1)
                if m is not None:
                    found.append(m)
                    end = pos + len(m.group(0))
                    break
            at = text.find(anchor, at + 1)
        end = -1
    return found


__all__ = ["FORMATS", "MAX_ANCHORS", "WINDOW_AFTER", "at_anchors"]
