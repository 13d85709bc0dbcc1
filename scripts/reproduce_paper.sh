#!/usr/bin/env bash
# One of the paper's tables or figures at the paper's scale (preset paper), end to end, on a GPU machine.
#
# Usage: scripts/reproduce_paper.sh table1|table2|table3|figures [--plan]
#   table2   experiments table2_cs + table2_news: RoBERTa-base fine-tuned as released (RoBERTa row), continual
#            pre-training with MLM / FE-MLM x subword / span, fine-tuning with 5 seeds -> results/paper/table2/
#   table1   experiment table1_glue: released bert-base-uncased on GLUE (ReEval), BERT-base pre-trained from
#            scratch with MLM and FE-MLM, GLUE dev fine-tuning -> results/paper/table1/ (Tables 1 and 3)
#   table3   the same runs as table1 (shared run directories: nothing runs twice) -> results/paper/table3/
#   figures  experiment figures: efficiency sweep over table2_cs's checkpoints, split ablation K=2,4,6,8,
#            gradient analysis before/after CS continual pre-training -> results/paper/figures/
#   --plan   print the expected GPU hours / memory and the commands, run nothing
#
# The expected cost is printed before anything starts. Re-running resumes: an arm whose final checkpoint
# (pre-training) or a complete results.json (fine-tuning) exists is skipped, a cut pre-training continues from its
# last saved state (resume), other cut steps run again. Run directories: runs/paper/<experiment>/.
# Environment: FEMLM_MIRROR / FEMLM_CACHE (data), FEMLM_PAPER_RUNS (default runs/paper),
#   FEMLM_PAPER_OUT (default results/paper), FEMLM_ALLOW_CPU=1 to start without a GPU, DRY_RUN=1.
set -euo pipefail

# shellcheck source=scripts/_reproduce_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/_reproduce_lib.sh"
cd "$REPO_ROOT"

usage() { sed -n '4,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; }

TABLE=${1:-}
MODE=${2:-run}
case $TABLE in
  table1 | table3) EXPS=(table1_glue) ;;
  table2) EXPS=(table2_cs table2_news) ;;
  figures) EXPS=(figures) ;;
  *) usage; exit 2 ;;
esac
[[ $MODE == run || $MODE == --plan ]] || { usage; exit 2; }
for exp in "${EXPS[@]}"; do plan_load "$exp"; done
if [[ $TABLE == figures ]]; then plan_load table2_cs; fi
if [[ $MODE == --plan ]]; then DRY_RUN=1; fi

runs_of() { printf '%s/%s' "${FEMLM_PAPER_RUNS:-runs/paper}" "$1"; }
OUT="${FEMLM_PAPER_OUT:-$(plan "${EXPS[0]}" out_dir)}/$TABLE"

print_estimate() {
  local exp total=0 hours
  printf 'femlm: reproducing %s at the paper scale\n' "$TABLE"
  for exp in "${EXPS[@]}"; do
    hours=$(plan "$exp" estimate.gpu_hours)
    total=$(awk -v a="$total" -v b="$hours" 'BEGIN { print a + b }')
    printf '  %-12s ~%s GPU hours on %s; peak GPU memory ~%s GB\n' "$exp" "$hours" \
      "$(plan "$exp" estimate.gpu)" "$(plan "$exp" estimate.gpu_memory_gb)"
    printf '  %-12s %s\n' "" "$(plan "$exp" estimate.breakdown)"
    printf '  %-12s %s\n' "" "$(plan "$exp" estimate.memory)"
  done
  printf '  total: ~%s GPU hours before what earlier runs already finished (those steps are skipped)\n' "$total"
}

# The paper's tables, one experiment at a time -------------------------------------------------------------

# Fine-tune the released model as is: the RoBERTa row (continual table: tab:eval_2, printed Table 1) / BERT-base ReEval (tab:average).
run_baseline() {
  local exp=$1 runs model task seeds
  local -a tasks
  runs=$(runs_of "$exp")
  model=$(plan "$exp" baseline.model)
  seeds=$(hydra_list "$(plan "$exp" finetune.seeds | paste -sd, -)")
  mapfile -t tasks < <(plan "$exp" baseline.tasks)
  for task in "${tasks[@]}"; do
    finetune_step "$runs/finetune_released_$task" "preset=$(plan "$exp" preset)" "model=$model" "task=$task" \
      "finetune.seeds=$seeds"
  done
}

# pretrain_arms EXP STAGE [ARM...]: STAGE scratch | continual; ARMs default to the experiment's list.
pretrain_arms() {
  local exp=$1 stage=$2 runs arm command
  local -a ovr
  shift 2
  runs=$(runs_of "$exp")
  local arms=("$@")
  if [[ ${#arms[@]} -eq 0 ]]; then mapfile -t arms < <(plan "$exp" "$stage.arms"); fi
  mapfile -t ovr < <(plan "$exp" "$stage.overrides")
  if [[ $stage == scratch ]]; then command=pretrain-scratch; else command=continual-pretrain; fi
  for arm in "${arms[@]}"; do
    # Continual runs start from the model config's released weights (model.name_or_path of conf/model).
    pretrain_step "$command" "$runs/${stage}_$arm" "preset=$(plan "$exp" preset)" \
      "model=$(plan "$exp" "$stage.model")" "domain=$(plan "$exp" "$stage.domain")" "masking=$arm" "${ovr[@]}"
  done
}

finetune_arms() {
  local exp=$1 stage=$2 runs arm task seeds
  local -a arms tasks ovr
  runs=$(runs_of "$exp")
  seeds=$(hydra_list "$(plan "$exp" finetune.seeds | paste -sd, -)")
  mapfile -t arms < <(plan "$exp" "$stage.arms")
  mapfile -t tasks < <(plan "$exp" finetune.tasks)
  mapfile -t ovr < <(plan "$exp" finetune.overrides)
  for arm in "${arms[@]}"; do
    for task in "${tasks[@]}"; do
      finetune_step "$runs/finetune_${arm}_$task" "preset=$(plan "$exp" preset)" \
        "model=$(plan "$exp" finetune.model)" "model.name_or_path=$(final_ckpt "$runs/${stage}_$arm")" \
        "task=$task" "finetune.seeds=$seeds" "${ovr[@]}"
    done
  done
}

check_configs() {
  local exp=$1 stage
  local -a t a
  require_configs preset "$(plan "$exp" preset)"
  mapfile -t t < <(plan "$exp" finetune.tasks)
  require_configs task "${t[@]}"
  for stage in scratch continual; do
    if has_plan "$exp" "$stage.arms"; then
      mapfile -t a < <(plan "$exp" "$stage.arms")
      require_configs masking "${a[@]}"
      require_configs domain "$(plan "$exp" "$stage.domain")"
      require_configs model "$(plan "$exp" "$stage.model")"
    fi
  done
}

run_table() {
  local exp=$1 stage
  local -a datasets
  if has_plan "$exp" scratch.arms; then stage=scratch; else stage=continual; fi
  check_configs "$exp"
  mapfile -t datasets < <(plan "$exp" download)
  once_step download.json download "$(runs_of "$exp")/download" "${datasets[@]}"
  run_baseline "$exp"
  pretrain_arms "$exp" "$stage"
  finetune_arms "$exp" "$stage"
}

# Figures: efficiency sweep, split ablation, analysis ------------------------------------------------------

run_figures() {
  local runs src arm k task seeds preset
  local -a arms ovr tasks
  runs=$(runs_of figures)
  preset=$(plan figures preset)
  src=$(plan figures efficiency.from_experiment)
  mapfile -t arms < <(plan figures efficiency.arms)
  check_configs "$src"
  log "efficiency: $src arms ${arms[*]} (run first where missing), then every saved checkpoint on $(plan figures efficiency.task)"
  pretrain_arms "$src" continual "${arms[@]}"
  seeds=$(hydra_list "$(plan figures efficiency.seeds | paste -sd, -)")
  for arm in "${arms[@]}"; do
    once_step efficiency.json evaluate "$runs/efficiency_$arm" "preset=$preset" \
      "model=$(plan "$src" finetune.model)" "task=$(plan figures efficiency.task)" \
      "evaluate.checkpoints=$(runs_of "$src")/continual_$arm" "evaluate.sweep=true" "finetune.seeds=$seeds"
  done

  log "split ablation: K = $(plan figures ablation.num_masks | paste -sd' ' -)"
  mapfile -t ovr < <(plan figures ablation.overrides)
  mapfile -t tasks < <(plan figures ablation.tasks)
  seeds=$(hydra_list "$(plan figures ablation.seeds | paste -sd, -)")
  while read -r k; do
    pretrain_step continual-pretrain "$runs/ablation_k$k" "preset=$preset" "model=$(plan figures ablation.model)" \
      "domain=$(plan figures ablation.domain)" "masking=$(plan figures ablation.masking)" "masking.num_masks=$k" \
      "masking.ratio=$(plan figures ablation.ratio)" "${ovr[@]}"
    for task in "${tasks[@]}"; do
      finetune_step "$runs/finetune_ablation_k${k}_$task" "preset=$preset" "model=$(plan figures ablation.model)" \
        "model.name_or_path=$(final_ckpt "$runs/ablation_k$k")" "task=$task" "finetune.seeds=$seeds"
    done
  done < <(plan figures ablation.num_masks)

  log "analysis before / after continual pre-training"
  local after_exp after_arm model
  after_exp=$(plan figures analysis.after_experiment)
  after_arm=$(plan figures analysis.after_arm)
  model=$(plan figures analysis.model)
  mapfile -t ovr < <(plan figures analysis.overrides)
  pretrain_arms "$after_exp" continual "$after_arm"
  once_step analysis.json analyze "$runs/analyze_before" "$(plan figures analysis.kind)" "preset=$preset" \
    "model=$model" "domain=$(plan figures analysis.domain)" "${ovr[@]}"
  once_step analysis.json analyze "$runs/analyze_after" "$(plan figures analysis.kind)" "preset=$preset" \
    "model=$model" "model.name_or_path=$(final_ckpt "$(runs_of "$after_exp")/continual_$after_arm")" \
    "domain=$(plan figures analysis.domain)" "${ovr[@]}"
}

# ----------------------------------------------------------------------------------------------------------

print_estimate
if [[ $MODE == --plan ]]; then
  printf '\nCommands (steps whose output already exists are marked skip):\n'
elif ! command -v nvidia-smi >/dev/null 2>&1 && [[ ${FEMLM_ALLOW_CPU:-0} != 1 ]]; then
  die "no GPU found (nvidia-smi): the paper scale needs one; FEMLM_ALLOW_CPU=1 starts anyway"
fi

if [[ $TABLE == figures ]]; then
  run_figures
  inputs=("$(runs_of figures)" "$(runs_of table2_cs)")
  tables=()
else
  for exp in "${EXPS[@]}"; do run_table "$exp"; done
  inputs=()
  for exp in "${EXPS[@]}"; do inputs+=("$(runs_of "$exp")"); done
  if [[ $TABLE == table2 ]]; then tables=(table2); else tables=(table1 table3); fi
fi
scale=""
for exp in "${EXPS[@]}"; do scale+="${scale:+ | }$(plan "$exp" report.scale)"; done
log "report -> $OUT ($(elapsed))"
run_femlm report "report.inputs=$(hydra_list "${inputs[@]}")" "report.out_dir=$OUT" \
  "report.tables=$(hydra_list "${tables[@]}")" "report.scale=$(hydra_quote "$scale")" \
  "hydra.run.dir=$(runs_of reports)/$TABLE-$(date +%Y%m%d-%H%M%S)"
log "done in $(elapsed): $OUT/README.md"
