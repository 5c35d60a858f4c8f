"""The LLM judge's prompts, shipped as package data (`*.md` beside this module).

`render(name, **values)` fills a prompt's `$placeholders` (string.Template, so JSON braces
in few-shot examples need no escaping). Templates are read once and cached.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from string import Template

PROMPTS = ("system", "pre", "post")


@cache
def template(name: str) -> Template:
    if name not in PROMPTS:
        raise KeyError(f"no prompt named {name!r}")
    return Template(resources.files(__name__).joinpath(f"{name}.md").read_text("utf-8"))


def render(name: str, **values: str) -> str:
    """The prompt `name` with every placeholder filled (a missing one is a KeyError)."""
    return template(name).substitute(values)
