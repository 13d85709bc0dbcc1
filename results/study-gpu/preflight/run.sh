#!/usr/bin/env bash
# The CPU pre-flight of the GPU study (issue 45): warm-up on Wikipedia from scratch -> continual pre-training on the
# ACL papers, three arms -> ACL-ARC fine-tuning. Every step is one femlm command in a fixed run directory under
# $RUNS; re-running this script skips finished steps, resumes a cut pre-training run in place (resume=<dir>) and
# sets an unfinished fine-tuning run aside (<dir>.incomplete-<time>), as python -m femlm.experiment does. Then
# collect.py writes the curves, numbers and raw files next to this script.
#   bash results/study-gpu/preflight/run.sh            (from the repository root; FEMLM_MIRROR=../shared/data)
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=results/study-gpu/preflight
RUNS=${RUNS:-runs/preflight}
export FEMLM_MIRROR=${FEMLM_MIRROR:-$(cd .. && pwd)/shared/data}
export FEMLM_CACHE=${FEMLM_CACHE:-$(pwd)/.cache/femlm}
FEMLM=${FEMLM:-.venv/bin/femlm}
mkdir -p "$RUNS"

# Shared by every command: the tiny preset (BERT post-LN, 4 layers x 256, 4 heads, FFN 1024; 128-token blocks;
# 32 rows a step), one thread (runtime.threads=1: measured, README), the 256-block held-out set of seed 1234.
COMMON=(preset=tiny runtime.threads=1 logger.progress=false logger.wandb.mode=disabled)
HELD_OUT=(data.eval_blocks=256)
WARMUP=(domain=wikipedia masking=mlm_subword trainer.max_steps=2000 trainer.lr=1e-3 trainer.warmup_ratio=0.1
        runtime.eval_every=100 runtime.save_every=250 seed=1)
CONTINUAL=(domain=acl domain.max_documents=20 data.split_seed=0 model=tiny trainer.max_steps=300 trainer.lr=3e-4
           trainer.warmup_ratio=0.06 trainer.equal_compute=same_rows runtime.eval_every=50 runtime.save_every=100 seed=1)
ARMS=(mlm_subword fe_passes_subword fe_subword)
FINETUNE=(task=aclarc model=tiny finetune.seeds=[1,2,3])

stamp() { date -u +%Y-%m-%dT%H:%M:%SZ; }
# step NAME DONE_FILE COMMAND ARGS...: run (or resume) one femlm command in $RUNS/NAME, logging to $RUNS/NAME.log
step() {
  local name=$1 done=$2 cmd=$3; shift 3
  local dir=$RUNS/$name
  if [[ -e $dir/$done ]]; then echo "$(stamp) done: $name"; return; fi
  local where=("hydra.run.dir=$dir")
  if [[ -f $dir/run.json ]]; then
    if [[ $cmd == finetune || $cmd == prepare ]]; then mv "$dir" "$dir.incomplete-$(date +%s)"
    else where=("resume=$dir"); fi
  fi
  echo "$(stamp) start: $name: femlm $cmd $* ${where[*]}"
  local t0=$SECONDS
  "$FEMLM" "$cmd" "$@" "${where[@]}" >> "$RUNS/$name.log" 2>&1
  echo "$(stamp) end: $name ($((SECONDS - t0)) s)"
}

lscpu | grep -E "Model name|^CPU\(s\)" ; grep -o -E "avx512_bf16|amx_[a-z0-9]+" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
# 1. corpora and their context-free baselines (corpus.json: "baseline"); the vocabulary is trained here, once
step prepare_wikipedia corpus.json prepare "${COMMON[@]}" "${HELD_OUT[@]}" domain=wikipedia
step prepare_acl corpus.json prepare "${COMMON[@]}" "${HELD_OUT[@]}" domain=acl
# parallel NAME...: wait for the steps started in the background, failing if any failed
parallel() { local ok=0; for pid in "$@"; do wait "$pid" || ok=1; done; return $ok; }
# 2. the warm-up, from scratch on Wikipedia: A (declared first), then B1 and B2 (README, amendment 1) side by side
step warmup checkpoints/final pretrain-scratch "${COMMON[@]}" "${HELD_OUT[@]}" "${WARMUP[@]}"
NODROP=(+model.arch.hidden_dropout_prob=0 +model.arch.attention_probs_dropout_prob=0)
step warmup_postln_nodrop checkpoints/final pretrain-scratch "${COMMON[@]}" "${HELD_OUT[@]}" "${WARMUP[@]}" \
  "${NODROP[@]}" & b1=$!
step warmup_preln_nodrop checkpoints/final pretrain-scratch "${COMMON[@]}" "${HELD_OUT[@]}" "${WARMUP[@]}" \
  "${NODROP[@]}" model.arch.model_type=roberta-prelayernorm & b2=$!
parallel $b1 $b2
# C1 and C2 (README, amendment 2) side by side
step warmup_modernbert checkpoints/final pretrain-scratch "${COMMON[@]}" "${HELD_OUT[@]}" "${WARMUP[@]}" \
  model.arch.model_type=modernbert & c1=$!
step warmup_postln_nodrop_mask40 checkpoints/final pretrain-scratch "${COMMON[@]}" "${HELD_OUT[@]}" "${WARMUP[@]}" \
  "${NODROP[@]}" masking.ratio=0.4 & c2=$!
parallel $c1 $c2
# the warm-up the continual phase starts from: the first whose declared gate passed, else the lowest
WARM=$(.venv/bin/python "$HERE/collect.py" --choose "$RUNS" warmup_postln_nodrop warmup_preln_nodrop \
       warmup_postln_nodrop_mask40 warmup_modernbert warmup)
echo "$(stamp) continual phase from $WARM"
# 3. continual pre-training on 20 ACL papers from the warm-up, one run per arm, equal rows and steps
pids=()
for arm in "${ARMS[@]}"; do
  step "continual_$arm" checkpoints/final continual-pretrain "${COMMON[@]}" "${HELD_OUT[@]}" "${CONTINUAL[@]}" \
    masking="$arm" model.name_or_path="$RUNS/$WARM/checkpoints/final" & pids+=($!)
done
parallel "${pids[@]}"
# 4. ACL-ARC fine-tuning of each arm's checkpoint, three seeds each
pids=()
for arm in "${ARMS[@]}"; do
  step "finetune_$arm" results.json finetune "${COMMON[@]}" "${FINETUNE[@]}" \
    model.name_or_path="$RUNS/continual_$arm/checkpoints/final" & pids+=($!)
done
parallel "${pids[@]}"
.venv/bin/python "$HERE/collect.py" "$RUNS" "$HERE"
