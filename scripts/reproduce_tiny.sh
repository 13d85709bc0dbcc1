#!/usr/bin/env bash
# The paper's pipeline at tiny scale, on CPU, offline, in about 25 minutes on 2 cores (experiment "tiny",
# conf/experiment/tiny.yaml; the README gives the measured time of the committed run):
#   1. verify the local data mirror (femlm download, offline)                               < 1 min
#   2. pre-train a tiny BERT from scratch on the general corpus with MLM (mlm_subword),
#      FE-MLM (fe_subword) and the i.i.d. K-mask control (iid_subword)                      3 x ~2.5 min
#   3. continue pre-training each on the CS corpus                                          3 x ~1 min
#   4. fine-tune each continual checkpoint on ACL-ARC and SciERC with 3 seeds               6 x ~1.7 min
#   5. femlm analyze both on the FE-MLM checkpoint before and after continual pre-training  2 x ~1.5 min
#   6. femlm report -> results/tiny/ (README.md, the continual pre-training table -- tab:eval_2, printed as Table 1 -- as md/tex/csv, figures)
#
# Usage: FEMLM_MIRROR=/path/to/shared/data scripts/reproduce_tiny.sh
# Re-running skips finished steps (fixed run directories under runs/tiny/) and resumes a cut pre-training.
# Environment:
#   FEMLM_MIRROR       required: a local copy of the data laid out like shared/data (nothing is downloaded)
#   FEMLM_TINY_RUNS    run directories (default runs/tiny); FEMLM_TINY_OUT report folder (default results/tiny)
#   FEMLM_TINY_EXTRAS  1: also fine-tune the scratch MLM checkpoint (the "no continual pre-training" row)
#                      and sweep the continual checkpoints on ACL-ARC (Figure 4 left); about 8 more minutes
#   DRY_RUN            1: print the femlm commands instead of running them
set -euo pipefail

# shellcheck source=scripts/_reproduce_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/_reproduce_lib.sh"
cd "$REPO_ROOT"

EXP=tiny
plan_load "$EXP"
if [[ -z ${FEMLM_MIRROR:-} || ! -d ${FEMLM_MIRROR:-} ]]; then
  die "set FEMLM_MIRROR to a local data mirror (the layout of shared/data): this script runs offline"
fi
export FEMLM_MIRROR
# Nothing may reach the network: Hugging Face libraries read only local files from here on.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
export WANDB_MODE=${WANDB_MODE:-offline}

RUNS=${FEMLM_TINY_RUNS:-$(plan $EXP runs_dir)}
OUT=${FEMLM_TINY_OUT:-$(plan $EXP out_dir)}
PRESET=$(plan $EXP preset)
mapfile -t TABLES < <(plan $EXP tables)
mapfile -t DOWNLOAD < <(plan $EXP download)
mapfile -t SCRATCH_ARMS < <(plan $EXP scratch.arms)
mapfile -t SCRATCH_OVR < <(plan $EXP scratch.overrides)
mapfile -t CONT_ARMS < <(plan $EXP continual.arms)
mapfile -t CONT_OVR < <(plan $EXP continual.overrides)
mapfile -t TASKS < <(plan $EXP finetune.tasks)
mapfile -t SEEDS < <(plan $EXP finetune.seeds)
mapfile -t FT_OVR < <(plan $EXP finetune.overrides)
mapfile -t AN_OVR < <(plan $EXP analysis.overrides)
SCRATCH_MODEL=$(plan $EXP scratch.model)
SCRATCH_DOMAIN=$(plan $EXP scratch.domain)
CONT_MODEL=$(plan $EXP continual.model)
CONT_DOMAIN=$(plan $EXP continual.domain)
FT_MODEL=$(plan $EXP finetune.model)
AN_KIND=$(plan $EXP analysis.kind)
AN_MODEL=$(plan $EXP analysis.model)
AN_ARM=$(plan $EXP analysis.arm)
AN_DOMAIN=$(plan $EXP analysis.domain)
SCALE=$(plan $EXP report.scale)

require_configs preset "$PRESET"
require_configs model "$SCRATCH_MODEL" "$CONT_MODEL" "$FT_MODEL" "$AN_MODEL"
require_configs domain "$SCRATCH_DOMAIN" "$CONT_DOMAIN" "$AN_DOMAIN"
require_configs masking "${SCRATCH_ARMS[@]}" "${CONT_ARMS[@]}"
require_configs task "${TASKS[@]}"

# Keys every command gets: the preset, and no network even if a mirror file is missing.
COMMON=("preset=$PRESET" "download.offline=true")
log "tiny reproduction: runs in $RUNS, report in $OUT; $(plan $EXP estimate.breakdown)"

log "1/6 verify the data mirror"
once_step download.json download "$RUNS/download" "${DOWNLOAD[@]}" "download.offline=true"

log "2/6 pre-train from scratch on $SCRATCH_DOMAIN: ${SCRATCH_ARMS[*]}"
for arm in "${SCRATCH_ARMS[@]}"; do
  pretrain_step pretrain-scratch "$RUNS/scratch_$arm" "${COMMON[@]}" "model=$SCRATCH_MODEL" \
    "domain=$SCRATCH_DOMAIN" "masking=$arm" "${SCRATCH_OVR[@]}"
done

log "3/6 continue pre-training on $CONT_DOMAIN: ${CONT_ARMS[*]} ($(elapsed) so far)"
for arm in "${CONT_ARMS[@]}"; do
  # Each arm continues its own scratch checkpoint, so the row compares masking end to end.
  pretrain_step continual-pretrain "$RUNS/continual_$arm" "${COMMON[@]}" "model=$CONT_MODEL" \
    "model.name_or_path=$(final_ckpt "$RUNS/scratch_$arm")" "domain=$CONT_DOMAIN" "masking=$arm" "${CONT_OVR[@]}"
done

log "4/6 fine-tune on ${TASKS[*]} with seeds ${SEEDS[*]} ($(elapsed) so far)"
for arm in "${CONT_ARMS[@]}"; do
  for task in "${TASKS[@]}"; do
    finetune_step "$RUNS/finetune_${arm}_$task" "${COMMON[@]}" "model=$FT_MODEL" \
      "model.name_or_path=$(final_ckpt "$RUNS/continual_$arm")" "task=$task" \
      "finetune.seeds=$(hydra_list "${SEEDS[@]}")" "${FT_OVR[@]}"
  done
done

log "5/6 analyze ($AN_KIND) the $AN_ARM checkpoint before and after continual pre-training ($(elapsed) so far)"
for when in before after; do
  if [[ $when == before ]]; then ckpt=$(final_ckpt "$RUNS/scratch_$AN_ARM"); else ckpt=$(final_ckpt "$RUNS/continual_$AN_ARM"); fi
  once_step analysis.json analyze "$RUNS/analyze_$when" "$AN_KIND" "${COMMON[@]}" "model=$AN_MODEL" \
    "model.name_or_path=$ckpt" "domain=$AN_DOMAIN" "masking=$AN_ARM" "${AN_OVR[@]}"
done

if [[ ${FEMLM_TINY_EXTRAS:-0} == 1 ]]; then
  BASE_ARM=$(plan $EXP extras.baseline_arm)
  EFF_TASK=$(plan $EXP extras.efficiency_task)
  mapfile -t EFF_ARMS < <(plan $EXP extras.efficiency_arms)
  log "extras: no-continual baseline ($BASE_ARM) and the efficiency sweep on $EFF_TASK ($(elapsed) so far)"
  for task in "${TASKS[@]}"; do
    finetune_step "$RUNS/finetune_scratch_${BASE_ARM}_$task" "${COMMON[@]}" "model=$FT_MODEL" \
      "model.name_or_path=$(final_ckpt "$RUNS/scratch_$BASE_ARM")" "task=$task" \
      "finetune.seeds=$(hydra_list "${SEEDS[@]}")" "${FT_OVR[@]}"
  done
  for arm in "${EFF_ARMS[@]}"; do
    once_step efficiency.json evaluate "$RUNS/efficiency_$arm" "${COMMON[@]}" "model=$FT_MODEL" \
      "task=$EFF_TASK" "evaluate.checkpoints=$RUNS/continual_$arm" "evaluate.sweep=true" \
      "finetune.seeds=$(hydra_list "${SEEDS[@]}")" "${FT_OVR[@]}"
  done
fi

log "6/6 report -> $OUT ($(elapsed) so far)"
# The report is always rewritten (it only reads); its own run directory is fresh each time.
run_femlm report "report.inputs=$(hydra_list "$RUNS")" "report.out_dir=$OUT" \
  "report.scale=$(hydra_quote "$SCALE")" "report.tables=$(hydra_list "${TABLES[@]}")" \
  "hydra.run.dir=$RUNS/report/$(date +%Y%m%d-%H%M%S)"
log "done in $(elapsed): $OUT/README.md"
