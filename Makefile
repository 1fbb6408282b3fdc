# The README's two commands: `make demo` and `make test`. Both start from a fresh clone.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test smoke bench bench-callback bench-detection bench-readers clean install

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# The CPU build of torch (pinned: an unpinned torch pulls a multi-GB CUDA build).
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/rlcluster demo

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/python -m pytest -q

# The user's path: sdist + wheel, installed with no extras into a fresh venv, used from outside the checkout.
smoke: $(STAMP)
	.ci/smoke-wheel $(PY)

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_analyze.py

bench-callback: $(STAMP)
	$(BIN)/python benchmarks/bench_callback.py

bench-detection: $(STAMP)
	$(BIN)/python benchmarks/detection/bench.py --split all

bench-readers: $(STAMP)
	$(BIN)/python benchmarks/bench_readers.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache
