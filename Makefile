# The README's two commands: `make demo` and `make test`. Both start from a fresh clone.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test smoke docs docs-build docs-serve bench bench-callback bench-detection bench-readers clean install

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# The CPU build of torch (pinned: an unpinned torch pulls a multi-GB CUDA build).
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev,docs]'
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

# The manual (docs/, mkdocs.yml): regenerate the pictures (the demo and a healthy run, their dashboards and an alert
# as Slack and e-mail show it, in headless Chromium) and the rule reference, then build the site offline into site/.
docs: $(STAMP)
	$(BIN)/python docs/gen/make_pictures.py
	$(BIN)/python docs/gen/make_rules.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The site only, from the pictures and rule reference as they are (what tests/test_docs.py checks in CI).
docs-build: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_analyze.py

bench-callback: $(STAMP)
	$(BIN)/python benchmarks/bench_callback.py

bench-detection: $(STAMP)
	$(BIN)/python benchmarks/detection/bench.py --split all

bench-readers: $(STAMP)
	$(BIN)/python benchmarks/bench_readers.py

clean:
	rm -rf $(VENV) build dist site *.egg-info .pytest_cache .ruff_cache
