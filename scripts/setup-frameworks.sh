#!/usr/bin/env bash
# The agent frameworks of examples/frameworks, pinned, one venv each (.venv-fw-NAME): the
# OpenAI Agents SDK, PydanticAI and LangChain's MCP adapters. None of them imports mtguard_rt:
# each starts `.venv/bin/mtguard proxy -- SERVER` as its MCP stdio server, so their mcp (1.x
# for langchain-mcp-adapters) never meets the guard's mcp 2.x. Built from the interpreter
# .venv uses. Idempotent: a stamp per venv records the interpreter and its pins file's hash.
# `scripts/setup-frameworks.sh NAME` sets up one of them.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '\033[1msetup:\033[0m %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

# name | a module that must import afterwards; the pins: examples/frameworks/requirements/NAME.txt
# (every package, from a resolved install of openai-agents==0.24.0,
# pydantic-ai-slim[openai,mcp]==2.68.0, langchain-mcp-adapters==0.3.2 + langchain-openai==1.7.4)
FRAMEWORKS=(
  "openai-agents|agents.mcp"
  "pydantic-ai|pydantic_ai.mcp"
  "langchain|langchain_mcp_adapters.tools"
)

[ -x .venv/bin/python ] || die "run scripts/setup-venv.sh first (.venv is missing)"
base=$(readlink -f .venv/bin/python)
only=${1:-}
for entry in "${FRAMEWORKS[@]}"; do
  IFS='|' read -r name module <<< "$entry"
  [ -z "$only" ] || [ "$only" = "$name" ] || continue
  venv=".venv-fw-$name"
  reqs="examples/frameworks/requirements/$name.txt"
  want="$base $(sha256sum "$reqs" | cut -c1-16)"
  [ "$(cat "$venv/.pinned" 2>/dev/null)" = "$want" ] && continue
  log "installing $reqs into $venv"
  rm -rf "$venv"
  "$base" -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$reqs" > "$venv/pip.log" 2>&1 \
    || { grep -v "^WARNING: Location" "$venv/pip.log" >&2; die "pip install of $reqs failed"; }
  "$venv/bin/python" -c "import $module" || die "$module does not import in $venv"
  echo "$want" > "$venv/.pinned"
done
