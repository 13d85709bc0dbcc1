# shellcheck shell=bash
# Helpers shared by reproduce_tiny.sh and reproduce_paper.sh (sourced, not run).
#
# Every step writes into a fixed run directory (hydra.run.dir=...), so a re-run can tell what is done:
#   pre-training  done when <dir>/checkpoints/final and <dir>/summary.json exist; a directory with run.json
#                 but no final checkpoint is continued with resume=<dir>;
#   fine-tuning   done when <dir>/results.json says "complete" (it is rewritten after every seed, so a run
#                 killed between seeds leaves one that does not);
#   other steps   done when their output file exists.
# A fine-tuning / analysis / sweep directory left without its output (a killed run) is moved aside to
# <dir>.incomplete-<time> and the step runs again: those commands have no resume, and femlm refuses to
# reuse a directory that holds a run.

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -z ${PYTHON:-} ]]; then
  if [[ -x $REPO_ROOT/.venv/bin/python ]]; then PYTHON=$REPO_ROOT/.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONPATH="$REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"
DRY_RUN=${DRY_RUN:-0}  # 1: print the commands instead of running them

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

die() { printf 'error: %s\n' "$*" >&2; exit 2; }

# `femlm` through the interpreter of this checkout (works without `pip install -e .`).
run_femlm() {
  if [[ $DRY_RUN == 1 ]]; then
    printf 'femlm'; printf ' %q' "$@"; printf '\n'
    return 0
  fi
  "$PYTHON" -m femlm.cli "$@"
}

# The experiment plans (conf/experiment/<name>.yaml, `experiment:` block), read once per experiment by
# plan_load into PLAN["<experiment>:<key>"]; call plan_load in the main shell before any $(plan ...).
declare -A PLAN=()
plan_load() {
  local exp=$1 key value
  while IFS= read -r -d '' key && IFS= read -r -d '' value; do
    PLAN["$exp:$key"]=$value
  done < <("$PYTHON" -m femlm.report.experiment "$exp" --dump0)
  [[ -v PLAN["$exp:name"] ]] || die "conf/experiment/$exp.yaml: could not read its experiment: block"
}

# plan EXPERIMENT KEY: the value of experiment.KEY, one item per line (nothing for an empty list or null).
plan() {
  local key="$1:$2"
  if [[ ! -v PLAN["$key"] ]]; then
    printf 'error: conf/experiment/%s.yaml has no key experiment.%s\n' "$1" "$2" >&2
    return 1
  fi
  if [[ -n ${PLAN["$key"]} ]]; then printf '%s\n' "${PLAN["$key"]}"; fi
}

# has_plan EXPERIMENT KEY: whether the plan sets KEY (for optional stages).
has_plan() { [[ -v PLAN["$1:$2"] ]]; }

# A Hydra override value quoted so spaces, commas and quotes survive: report.scale=$(hydra_quote "$text").
hydra_quote() {
  local s=${1//\\/\\\\}
  s=${s//\'/\\\'}
  printf "'%s'" "$s"
}

# A Hydra list from bash words: [1,2,3].
hydra_list() {
  local IFS=,
  printf '[%s]' "$*"
}

set_aside() {
  local dir=$1 dest
  dest="$dir.incomplete-$(date +%Y%m%d-%H%M%S)"
  log "moving the incomplete run $dir aside to $dest"
  if [[ $DRY_RUN != 1 ]]; then mv -- "$dir" "$dest"; fi
}

# pretrain_step COMMAND RUN_DIR OVERRIDE... (COMMAND: pretrain-scratch | continual-pretrain)
pretrain_step() {
  local command=$1 dir=$2
  shift 2
  if [[ -d $dir/checkpoints/final && -f $dir/summary.json ]]; then
    log "skip $command: $dir/checkpoints/final exists"
  elif [[ -f $dir/run.json ]]; then
    log "resume $command in $dir"
    run_femlm "$command" "$@" "resume=$dir"
  else
    log "$command -> $dir"
    run_femlm "$command" "$@" "hydra.run.dir=$dir"
  fi
}

# once_step OUTPUT_FILE COMMAND RUN_DIR OVERRIDE...: run unless RUN_DIR/OUTPUT_FILE exists.
# output_done FILE: the file exists and, when it is a fine-tuning results.json, says it is complete.
output_done() {
  [[ -f $1 ]] || return 1
  [[ $(basename "$1") != results.json ]] && return 0
  "$PYTHON" -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1])).get("complete", True) else 1)' "$1"
}

once_step() {
  local output=$1 command=$2 dir=$3
  shift 3
  if output_done "$dir/$output"; then
    log "skip $command: $dir/$output exists"
    return 0
  fi
  if [[ -e $dir ]]; then set_aside "$dir"; fi
  log "$command -> $dir"
  run_femlm "$command" "$@" "hydra.run.dir=$dir"
}

# finetune_step RUN_DIR OVERRIDE...
finetune_step() {
  local dir=$1
  shift
  once_step results.json finetune "$dir" "$@"
}

# The final checkpoint of a pre-training run directory (what fine-tuning and continual pre-training load).
final_ckpt() { printf '%s/checkpoints/final' "$1"; }

# require_configs GROUP NAME...: fail before any training when a config the plan names does not exist.
require_configs() {
  local group=$1 name
  shift
  for name in "$@"; do
    [[ -f $REPO_ROOT/femlm/conf/$group/$name.yaml ]] || die "femlm/conf/$group/$name.yaml not found (the experiment names $group=$name)"
  done
}

elapsed() { printf '%dm%02ds' $((SECONDS / 60)) $((SECONDS % 60)); }
