#!/usr/bin/env bash
# Create .venv (once), install the project with its test extras, and let it import bcc:
# Debian's python3-bpfcc is pure Python over libbcc, so linking its folder is enough.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  if ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null
    py=/usr/bin/python3
  fi
  echo "setup: creating .venv with $("$py" --version)" >&2
  "$py" -m venv .venv
fi
stamp=.venv/.mtguard-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing mtguard-rt and its test dependencies into .venv" >&2
  .venv/bin/pip install -q --disable-pip-version-check -e '.[test]' 2>&1 | grep -v "^WARNING: Location" >&2 || true
  .venv/bin/python -c 'import mtguard_rt, mcp, trio, msgspec' || { echo "setup: error: pip install failed" >&2; exit 1; }
  touch "$stamp"
fi
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ -d /usr/lib/python3/dist-packages/bcc ] && [ ! -e "$site/bcc" ]; then
  ln -sfn /usr/lib/python3/dist-packages/bcc "$site/bcc"
fi
