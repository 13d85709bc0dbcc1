#!/usr/bin/env bash
# Issue 46's GPU call: at most 4 minutes of wall time on one H100 or H200 (each part under a hard time limit).
#   1. benchmarks/attention_probe.py (<= 65 s): which attention kernel a 2-layer BERT-base-wide step runs at 48 x 512,
#      compiled (torch's choice vs femlm's kernels) and eager (cuDNN vs flash), op counts, memory, step time, and the
#      dropout rate each kernel applies;
#   2. benchmarks/gpu_check.py, compiled only, no CUDA tests, no agreement (<= 170 s): the GPU study's model at its
#      shape with its three arms first (femlm/conf/experiment/study_gpu.yaml; eager as the study runs, ~20 s), then
#      the 48 x 512 compiled row on both sides (femlm; HF under its own defaults; HF with femlm's attention kernels:
#      three compiles of ~35 s).
# Everything lands in $OUT/<card>-<date>/ (default: results/gpu/<card>-<date>/): attention_probe.{json,md},
# results.{json,md}, the two logs and nvidia-smi.txt (7 files: the device tool returns at most 8, at most two
# folders down). Nothing here needs hydra-core, omegaconf or datasets.
#
# Through the device tool (benchmarks/README.md), from the repository root, the commit measured named:
#   run(command="FEMLM_GIT_COMMIT=<sha> bash benchmarks/gpu_window.sh", timeout_s=300)
# with <sha> this checkout's `git rev-parse HEAD`, typed in: the device's copy has no .git.
# then copy <files_at>/<card>-<date>/ into results/gpu/ and commit it.
# --smoke: the same steps and files on the CPU at tiny sizes, into a temporary folder (tests/test_benchmarks.py).
set -uo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
commit="${FEMLM_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
export PYTHONUNBUFFERED=1 WANDB_MODE=disabled HF_HUB_OFFLINE=1
if [[ "${1:-}" == "--smoke" ]]; then
  mode=(--smoke)
  steps=(--steps 2 --warmup 1 --block 2)
  out="${OUT:-$(mktemp -d)}"
else
  mode=()
  steps=(--steps 12 --warmup 3 --block 4)
  out="${OUT:-results/gpu}"
fi
probe_s="${PROBE_S:-65}"
check_s="${CHECK_S:-170}"
mkdir -p "$out"
start=$SECONDS
status=0
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || rm -f "$out/nvidia-smi.txt"
timeout "$probe_s" "$python" benchmarks/attention_probe.py "${mode[@]}" --out "$out" --commit "$commit" 2>&1 \
  | tee "$out/attention_probe_log.txt" || status=1
timeout "$check_s" "$python" benchmarks/gpu_check.py "${mode[@]}" "${steps[@]}" --out "$out" --commit "$commit" \
  --only study,continual --compiled-only --skip-tests --skip-agree --budget-s "$((check_s - 10))" 2>&1 \
  | tee "$out/gpu_check_log.txt" || status=1
# the folder the tools wrote (their last lines: "...; wrote <folder>"), gpu-check's if it got that far
dir=$(sed -n 's/.*; wrote \(.*\)$/\1/p' "$out/attention_probe_log.txt" "$out/gpu_check_log.txt" | tail -n 1)
if [[ -n "$dir" && -d "$dir" ]]; then
  mv "$out/attention_probe_log.txt" "$out/gpu_check_log.txt" "$dir"/
  if [[ -f "$out/nvidia-smi.txt" ]]; then mv "$out/nvidia-smi.txt" "$dir"/; fi
fi
echo "gpu window: $((SECONDS - start)) s, exit status $status; wrote ${dir:-nothing}"
exit $status
