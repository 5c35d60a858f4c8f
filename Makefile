# Two commands do everything on a fresh Debian 12 machine (as root):
#   make demo   set up, then run the guarded demo
#   make test   set up, then run the whole suite (a missing capability fails, never skips)
# Both are idempotent; a second run only re-checks.
VENV   := .venv
PY     := $(VENV)/bin/python
MTG    := $(VENV)/bin/mtguard

.PHONY: setup host venv image servers examples demo test bench lint clean

setup: host venv image servers

host:
	@scripts/setup-host.sh

venv: host
	@scripts/setup-venv.sh

image: venv
	@$(MTG) image build

servers: venv
	@scripts/setup-servers.sh

demo: setup
	@$(MTG) demo

# --- agent-framework examples (examples/agentscope, examples/frameworks) and Arize Phoenix
# (tests/telemetry/test_phoenix.py): their own pinned venvs, .venv-agentscope, .venv-fw-* and
# .venv-phoenix; only the tests need them, so only `make test` installs them.
examples: venv
	@scripts/setup-examples.sh
	@scripts/setup-frameworks.sh
	@scripts/setup-phoenix.sh
# --- end of agent-framework examples

test: setup examples
	MTGUARD_REQUIRE_REAL=1 $(PY) -m pytest -q $(PYTEST_ARGS)

bench: setup
	$(PY) -m bench

lint: venv
	@$(VENV)/bin/pip install -q ruff mypy
	$(VENV)/bin/ruff check mtguard_rt tests bench examples
	$(VENV)/bin/mypy

clean:
	-$(MTG) sandbox prune
	rm -rf $(VENV) .venv-agentscope .venv-fw-* .venv-phoenix .pytest_cache
