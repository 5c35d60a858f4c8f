#!/usr/bin/env bash
# The agent frameworks the examples embed the guard in, pinned, in their own venv
# (.venv-agentscope) so their many dependencies never meet the guard's .venv: AgentScope plus
# this checkout (editable), resolved against .venv's exact versions (same mcp, anyio, httpx),
# built from the interpreter .venv uses, with bcc linked in as scripts/setup-venv.sh does.
# Idempotent: a stamp records the pin and pyproject.toml; a second run only re-checks.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '\033[1msetup:\033[0m %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

AGENTSCOPE=agentscope==2.0.11
VENV=.venv-agentscope

[ -x .venv/bin/python ] || die "run scripts/setup-venv.sh first (.venv is missing)"
base=$(readlink -f .venv/bin/python)
want="${base} ${AGENTSCOPE} $(sha256sum pyproject.toml | cut -c1-16)"
if [ "$(cat "$VENV/.pinned" 2>/dev/null)" != "$want" ]; then
  log "installing $AGENTSCOPE and mtguard-rt into $VENV"
  rm -rf "$VENV"
  "$base" -m venv "$VENV"
  constraints=$(mktemp)
  trap 'rm -f "$constraints"' EXIT
  .venv/bin/python -m pip freeze --exclude-editable --disable-pip-version-check > "$constraints"
  "$VENV/bin/pip" install -q --disable-pip-version-check -c "$constraints" "$AGENTSCOPE" -e . \
    > "$VENV/pip.log" 2>&1 \
    || { grep -v "^WARNING: Location" "$VENV/pip.log" >&2; die "pip install of $AGENTSCOPE failed"; }
  "$VENV/bin/python" -c 'import agentscope.agent, agentscope.tool, mtguard_rt' \
    || die "$AGENTSCOPE or mtguard_rt does not import in $VENV"
  echo "$want" > "$VENV/.pinned"
fi
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ -d /usr/lib/python3/dist-packages/bcc ] && [ ! -e "$site/bcc" ]; then
  ln -sfn /usr/lib/python3/dist-packages/bcc "$site/bcc"
fi
