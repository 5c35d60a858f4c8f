#!/usr/bin/env bash
# Arize Phoenix, the OTLP trace backend with a web UI that tests/telemetry/test_phoenix.py
# sends the guard's spans to, pinned, in its own venv (.venv-phoenix): its ~140 packages
# (fastapi, sqlalchemy, pandas, an mcp of its own, ...) never meet the guard's. The guard does
# not import it: it only talks OTLP/HTTP to `.venv-phoenix/bin/phoenix serve`. Built from the
# interpreter .venv uses. Idempotent: a stamp records the interpreter and the pins file's hash.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '\033[1msetup:\033[0m %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

# every package, from a resolved install of arize-phoenix==20.26.1
reqs="otel/phoenix-requirements.txt"
venv=".venv-phoenix"
[ -x .venv/bin/python ] || die "run scripts/setup-venv.sh first (.venv is missing)"
base=$(readlink -f .venv/bin/python)
want="$base $(sha256sum "$reqs" | cut -c1-16)"
[ "$(cat "$venv/.pinned" 2>/dev/null)" = "$want" ] && exit 0
log "installing $reqs into $venv (a few minutes)"
rm -rf "$venv"
"$base" -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r "$reqs" > "$venv/pip.log" 2>&1 \
  || { grep -v "^WARNING: Location" "$venv/pip.log" >&2; die "pip install of $reqs failed"; }
# importing phoenix creates its working dir (default ~/.phoenix): point it at a scratch one
scratch=$(mktemp -d)
PHOENIX_WORKING_DIR="$scratch" "$venv/bin/python" -c "import phoenix.server.main" \
  || { rm -rf "$scratch"; die "phoenix does not import in $venv"; }
rm -rf "$scratch"
[ -x "$venv/bin/phoenix" ] || die "$venv/bin/phoenix is missing"
echo "$want" > "$venv/.pinned"
