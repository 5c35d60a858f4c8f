#!/usr/bin/env bash
# Widely used MCP servers the real-server tests guard, pinned, installed into .servers/
# (gitignored) so their dependencies never meet ours: a venv for the PyPI servers, built from
# the interpreter .venv uses (the sandbox already mounts it), and an npm prefix for Node ones.
# Idempotent: a stamp per install records the pinned versions; a second run only re-checks.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '\033[1msetup:\033[0m %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

# PyPI servers on the MCP SDK 2.x share .servers/py; those still on SDK 1.x (mcp<2: the shell
# server pins it, the sqlite server uses the 1.x server API) share .servers/py1.
PY_SERVERS=(mcp-server-fetch==2026.10.24 mcp-server-git==2026.10.19 mcp-server-time==2026.10.19
            markitdown-mcp==0.0.1a8)
PY1_SERVERS=(mcp-server-sqlite==2025.4.25 mcp-shell-server==1.1.14)
# The reference servers share one SDK and one prefix; each has dist/index.js.
NPM_SERVERS=(@modelcontextprotocol/server-filesystem@2026.8.31 @modelcontextprotocol/server-memory@2026.8.31
             @modelcontextprotocol/server-everything@2026.8.31
             @modelcontextprotocol/server-sequential-thinking@2026.8.31)

[ -x .venv/bin/python ] || die "run scripts/setup-venv.sh first (.venv is missing)"
base=$(readlink -f .venv/bin/python)
mkdir -p .servers

# py_venv DIR MODULES SPEC...: a venv in .servers/DIR holding SPEC..., checked by importing MODULES.
py_venv() {
  local dir=$1 modules=$2; shift 2
  local want="${base} $*"
  [ "$(cat ".servers/$dir/.pinned" 2>/dev/null)" != "$want" ] || return 0
  log "installing $* into .servers/$dir"
  rm -rf ".servers/$dir"
  "$base" -m venv ".servers/$dir"
  ".servers/$dir/bin/pip" install -q --disable-pip-version-check "$@" \
    > ".servers/pip-$dir.log" 2>&1 || { grep -v "^WARNING: Location" ".servers/pip-$dir.log" >&2; die "pip install of $* failed"; }
  ".servers/$dir/bin/python" -c "import $modules" || die "the PyPI servers in .servers/$dir do not import"
  echo "$want" > ".servers/$dir/.pinned"
}
py_venv py mcp_server_fetch,mcp_server_git,mcp_server_time,markitdown_mcp "${PY_SERVERS[@]}"
py_venv py1 mcp_server_sqlite,mcp_shell_server "${PY1_SERVERS[@]}"

want="${NPM_SERVERS[*]}"
if [ "$(cat .servers/node/.pinned 2>/dev/null)" != "$want" ]; then
  command -v npm >/dev/null || die "npm is missing (Node 20 + npm expected in /usr/bin)"
  log "installing ${NPM_SERVERS[*]} into .servers/node"
  # Built beside the old prefix and swapped in, so a sandbox using the old one keeps it.
  rm -rf .servers/node.new .servers/node.old
  mkdir -p .servers/node.new
  npm install --prefix .servers/node.new --no-audit --no-fund --loglevel=error "${NPM_SERVERS[@]}" >&2 \
    || die "npm install of ${NPM_SERVERS[*]} failed"
  for spec in "${NPM_SERVERS[@]}"; do
    pkg=${spec%@*}
    [ -f ".servers/node.new/node_modules/$pkg/dist/index.js" ] || die "$pkg installed without dist/index.js"
  done
  echo "$want" > .servers/node.new/.pinned
  [ ! -e .servers/node ] || mv .servers/node .servers/node.old
  mv .servers/node.new .servers/node
  rm -rf .servers/node.old
fi

# @wonderwhy-er/desktop-commander: its own prefix (its SDK and ~700 packages are not the
# reference servers'). --ignore-scripts: its postinstall sends install telemetry, and
# md-to-pdf's puppeteer would download a Chrome; ripgrep comes as an npm optional package.
DESKTOP_COMMANDER=@wonderwhy-er/desktop-commander@0.2.52
if [ "$(cat .servers/desktop-commander/.pinned 2>/dev/null)" != "$DESKTOP_COMMANDER" ]; then
  command -v npm >/dev/null || die "npm is missing (Node 20 + npm expected in /usr/bin)"
  log "installing $DESKTOP_COMMANDER into .servers/desktop-commander"
  rm -rf .servers/desktop-commander
  mkdir -p .servers/desktop-commander
  PUPPETEER_SKIP_DOWNLOAD=1 npm install --prefix .servers/desktop-commander --ignore-scripts \
    --no-audit --no-fund --loglevel=error "$DESKTOP_COMMANDER" >&2 \
    || die "npm install of $DESKTOP_COMMANDER failed"
  dc=.servers/desktop-commander/node_modules/@wonderwhy-er/desktop-commander
  [ -f "$dc/dist/index.js" ] || die "$DESKTOP_COMMANDER installed without dist/index.js"
  [ -x .servers/desktop-commander/node_modules/@vscode/ripgrep-linux-x64/bin/rg ] \
    || die "$DESKTOP_COMMANDER installed without its ripgrep binary"
  echo "$DESKTOP_COMMANDER" > .servers/desktop-commander/.pinned
fi

# @playwright/mcp drives Debian's Chromium (scripts/setup-host.sh installs it): the tests pass
# --executable-path, so Playwright's own browser download is never wanted (and no browser CDN
# is reachable). Its own prefix, so adding it never reinstalls the servers above.
PLAYWRIGHT_MCP=@playwright/mcp@0.0.83
if [ "$(cat .servers/playwright/.pinned 2>/dev/null)" != "$PLAYWRIGHT_MCP" ]; then
  command -v npm >/dev/null || die "npm is missing (Node 20 + npm expected in /usr/bin)"
  log "installing $PLAYWRIGHT_MCP into .servers/playwright"
  rm -rf .servers/playwright
  mkdir -p .servers/playwright
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix .servers/playwright --no-audit \
    --no-fund --loglevel=error "$PLAYWRIGHT_MCP" >&2 || die "npm install of $PLAYWRIGHT_MCP failed"
  [ -f .servers/playwright/node_modules/@playwright/mcp/cli.js ] \
    || die "$PLAYWRIGHT_MCP installed without cli.js"
  echo "$PLAYWRIGHT_MCP" > .servers/playwright/.pinned
fi

# Held-out servers (docs/EVALUATION.md, "Held-out servers"): sessions marked set = "held-out",
# run once before anyone tuned the guard for them. Their own venvs and prefix, so they never
# change the servers above: .servers/hx-excel and hx-word (MCP SDK 2.x, fastmcp for the Word
# server), .servers/hx-py1 (SDK 1.x: cli-mcp-server and mcp-server-duckdb use its server API),
# .servers/hx-pptx (SDK 1.x FastMCP), .servers/hx-node for the npm ones.
py_venv hx-excel excel_mcp excel-mcp-server==2.2.2
py_venv hx-word word_document_server office-word-mcp-server==1.1.11
py_venv hx-pptx ppt_mcp_server office-powerpoint-mcp-server==2.0.7 mcp==1.30.0  # SDK 1.x (FastMCP)
# (cli_mcp_server reads its ALLOWED_DIR at import: its entry point is checked instead.)
py_venv hx-py1 mcp_server_duckdb cli-mcp-server==0.2.5 mcp-server-duckdb==1.1.0 mcp==1.30.0
[ -x .servers/hx-py1/bin/cli-mcp-server ] || die "cli-mcp-server installed without its entry point"
HX_NPM_SERVERS=(mcp-server-commands@0.5.0 @cyanheads/git-mcp-server@2.15.3 mcp-server-code-runner@0.1.8
                @coo-quack/calc-mcp@2.1.1)
if [ "$(cat .servers/hx-node/.pinned 2>/dev/null)" != "${HX_NPM_SERVERS[*]}" ]; then
  command -v npm >/dev/null || die "npm is missing (Node 20 + npm expected in /usr/bin)"
  log "installing ${HX_NPM_SERVERS[*]} into .servers/hx-node"
  rm -rf .servers/hx-node
  mkdir -p .servers/hx-node
  npm install --prefix .servers/hx-node --no-audit --no-fund --loglevel=error "${HX_NPM_SERVERS[@]}" >&2 \
    || die "npm install of ${HX_NPM_SERVERS[*]} failed"
  for f in mcp-server-commands/build/index.js @cyanheads/git-mcp-server/dist/index.js \
           mcp-server-code-runner/dist/cli.js; do
    [ -f ".servers/hx-node/node_modules/$f" ] || die "held-out npm server without $f"
  done
  echo "${HX_NPM_SERVERS[*]}" > .servers/hx-node/.pinned
fi
