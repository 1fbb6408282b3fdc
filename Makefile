# The README's two commands: `make demo` and `make test`. Both start from a fresh clone.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Where pip finds torch. Empty (default): the configured index. From PyPI on Linux, torch==2.13.0 is the CUDA build
# (with ~19 NVIDIA/triton packages, several GB); the CPU-only build: make install TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
# The CPU kernel sets a tiny model's training is rerun under (make test-kernels): its RL trajectory follows them.
KERNEL_CAPS ?= default avx2 $(if $(shell grep -qsw avx512f /proc/cpuinfo && echo y),avx512)
# Which tests make test-kernels reruns (default: every test marked trains); e.g. KERNEL_TESTS=tests/test_demo.py
KERNEL_TESTS ?=

.PHONY: demo test test-fast test-kernels test-compiled check-compiled compiled smoke docs docs-build docs-install docs-serve bench bench-callback bench-detection bench-faults bench-readers bench-real clean install

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch pinned first, so trl does not pull whatever torch is newest; which build it is depends on the index
	# (TORCH_INDEX above): a local CPU wheel or the CPU index gives the CPU build, PyPI on Linux the CUDA one.
	$(BIN)/python -m pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/python -m pip install -q -e '.[dev,docs]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/rlcluster demo

# Test workers (pytest-xdist): 2 fits a 2-core machine; more on a bigger one (make test TEST_WORKERS=8). Tests that
# share one expensive run stay on one worker (--dist loadgroup: tests/conftest.py holds the groups and the scheduler).
TEST_WORKERS ?= 2
PYTEST_PARALLEL = -n $(TEST_WORKERS) --dist loadgroup

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks setup.py build_backend
	$(BIN)/mypy
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL) --durations=40

# While working: the core, the readers, the alert rules and channels, the CLI -- nothing that trains a model or is
# marked slow (a real browser, the docs build, a detection corpus). Under 2 minutes on 2 cores.
test-fast: $(STAMP)
	$(BIN)/ruff check src tests benchmarks setup.py build_backend
	$(BIN)/python -m pytest -q $(PYTEST_PARALLEL) -m "not trains and not slow"

# The tests that train a tiny model, once per CPU kernel set: a test must hold for any trajectory, not this CPU's.
test-kernels: $(STAMP)
	@failed=""; for cap in $(KERNEL_CAPS); do \
	  echo "== ATEN_CPU_CAPABILITY=$$cap"; start=$$(date +%s); \
	  ATEN_CPU_CAPABILITY=$$cap $(BIN)/python -m pytest -q -m trains $(KERNEL_TESTS) || failed="$$failed $$cap"; \
	  echo "== ATEN_CPU_CAPABILITY=$$cap took $$(( $$(date +%s) - start )) s"; \
	done; \
	if [ -n "$$failed" ]; then echo "test-kernels: failed with ATEN_CPU_CAPABILITY=$$failed"; exit 1; fi

# The compiled core (setup.py, RLCLUSTER_COMPILE=1: mypyc turns the typed core into C extension modules, about 4x
# faster per row): the wheel built as a release would be, unpacked into build/compiled (never into src/, where a stale
# .so would shadow the source being edited). A few minutes of C compiling at -O3 (MYPYC_OPT_LEVEL, a release's 3).
MYPYC_OPT_LEVEL ?= 3
compiled: $(STAMP)
	rm -rf build
	MYPYC_OPT_LEVEL=$(MYPYC_OPT_LEVEL) RLCLUSTER_COMPILE=1 $(BIN)/python -m pip wheel -q --no-build-isolation --no-deps \
	  -w build/compiled-wheel .
	$(BIN)/python -m pip install -q --no-deps --target build/compiled build/compiled-wheel/*.whl
	PYTHONPATH=$(CURDIR)/build/compiled $(BIN)/python -c "from wandb_rlcluster.core.build import core_build; \
	  b = core_build(); print('core:', b); assert b == 'compiled', 'the unpacked wheel is not the compiled core'"

# What CI checks of the compiled core (.ci/check-compiled): the same C unoptimised (-O0 compiles in a fraction of
# -O3's time); benchmarks/same_behaviour.py --quick on the pure core (recorded while the compiler runs) and on the
# compiled one, 0 differences allowed; then the core, reader and compiled-only tests against the compiled build.
check-compiled: $(STAMP)
	BIN=$(BIN) TEST_WORKERS=$(TEST_WORKERS) MYPYC_OPT_LEVEL=$(if $(filter command line,$(origin MYPYC_OPT_LEVEL)),$(MYPYC_OPT_LEVEL),0) \
	  .ci/check-compiled

# The whole test suite against the compiled core (everything but the slow tier, and but the liveness tests: signals,
# forks and the guardian process, none of it compiled, timed against a second worker): before a release, not in CI
# (check-compiled is CI's); findings the same as the pure core's is benchmarks/same_behaviour.py's job
# (docs/performance.md).
test-compiled: compiled
	RLCLUSTER_EXPECT_COMPILED=1 PYTHONPATH=$(CURDIR)/build/compiled $(BIN)/python -m pytest -q $(PYTEST_PARALLEL) \
	  -m "not slow" --ignore=tests/test_liveness.py

# The user's path: sdist + wheel, installed with no extras into a fresh venv, used from outside the checkout.
smoke: $(STAMP)
	.ci/smoke-wheel $(PY)

# The manual (docs/, mkdocs.yml): regenerate the pictures (the demo and a healthy run, their dashboards and an alert
# as Slack and e-mail show it, in headless Chromium) and the rule reference, then build the site offline into site/.
docs: $(STAMP)
	$(BIN)/python docs/gen/make_pictures.py
	$(BIN)/python docs/gen/make_rules.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The site alone needs no torch, TRL or DeepSpeed: its own venv (.venv-docs) holds the `docs` extra only (MkDocs,
# Material, mkdocstrings, pillow, and the pyyaml and numpy the rule pages' generator imports); the generators and
# mkdocstrings read the package from src/, so the package itself is not installed there.
DOCS_VENV := .venv-docs
DOCS_BIN := $(DOCS_VENV)/bin
DOCS_STAMP := $(DOCS_VENV)/.installed

$(DOCS_STAMP): pyproject.toml
	$(PY) -m venv $(DOCS_VENV)
	$(DOCS_BIN)/python -m pip install -q --upgrade pip
	$(DOCS_BIN)/python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['optional-dependencies']['docs']))" > $(DOCS_VENV)/requirements.txt
	$(DOCS_BIN)/python -m pip install -q -r $(DOCS_VENV)/requirements.txt
	touch $(DOCS_STAMP)

docs-install: $(DOCS_STAMP)

# The site, with the rule pages, their pictures and the frontiers regenerated first (seconds, no training: they
# cannot go stale); the dashboard and alert pictures and the demo transcript need `make docs` (they train).
docs-build: $(DOCS_STAMP)
	PYTHONPATH=src $(DOCS_BIN)/python docs/gen/make_rules.py
	PYTHONPATH=src $(DOCS_BIN)/python docs/gen/make_pictures.py --figures
	NO_MKDOCS_2_WARNING=1 PYTHONPATH=src $(DOCS_BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --dev-addr 127.0.0.1:8000

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_analyze.py

bench-callback: $(STAMP)
	$(BIN)/python benchmarks/bench_callback.py

bench-detection: $(STAMP)
	$(BIN)/python benchmarks/detection/bench.py --split all

# Real TRL runs with a fault switched on at a known step, each beside its healthy twin, scored by every detector
# (ours, the seed rules, z-score, GLR, the oracle, rldoctor, rlwatch). Recorded runs stay in bench-out/faults/runs
# (delete it to train again); FAULT_SEEDS picks the seeds, e.g. make bench-faults FAULT_SEEDS=0-1
FAULT_SEEDS ?= 0-9
bench-faults: $(STAMP)
	$(BIN)/python benchmarks/faults/bench.py --seeds $(FAULT_SEEDS)

bench-readers: $(STAMP)
	$(BIN)/python benchmarks/bench_readers.py

# Every real log in ../shared/real-logs (and listed ones copied into ../shared/real-logs/new), per framework, beside
# rldoctor 0.2.0 and rlwatch 0.5.1 (each pip-installed on first use into ~/.cache/rlcluster-peers/<tool>).
bench-real: $(STAMP)
	$(BIN)/python benchmarks/real_logs_bench.py

clean:
	rm -rf $(VENV) $(DOCS_VENV) build dist site *.egg-info .pytest_cache .ruff_cache .mypy_cache
