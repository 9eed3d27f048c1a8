#!/usr/bin/env bash
# The GPU check as one budgeted run: the most decisive numbers first, each step capped by the time left, a failing
# step logged and the run going on, every step's output written to the results folder as it goes.
#
#   bash scripts/gpu_check.sh [--budget SECONDS] [--out DIR] [--models M1,M2,...] [--steps 01,02,...] [--dry-run]
#
# Steps (NN_name.txt in --out, one line per step in steps.tsv: name, exit status, seconds; summary.md at the end):
#   01 versions: GPU, driver, torch, CUDA, Triton, timm; `python -m mrconvnext.engines`
#   02 smoke: per model, in its own process: eval, one training step and peak memory at batch 128 (bf16 autocast,
#      channels-last, 224 px); smoke/<model>.csv
#   03 eager table: the models whose smoke passed, interleaved rounds in one process (scripts/bench_gpu.py)
#   04 the 7x7 budget: convnext_tiny's depthwise conv forward / dgrad / wgrad and a profile (bench_dwconv_gpu.py)
#   05 the CUDA suite without the compile tests (pytest -m cuda)
#   06 the operator benchmarks (TaLK, DynamicConv, the long convolution)
#   07 the compiled table, one model per process, deployed mrconvnext_t and convnext_tiny first
# It runs from a checkout (PYTHONPATH) on a machine that has torch, Triton and timm, and installs nothing; without a
# visible GPU (and without --dry-run) it stops before running anything. Exit status 1 if a step failed.
# --steps runs only the steps named by number (a second call for what the first one cut); without step 02 every
# model counts as having passed its smoke.
# --dry-run: the same steps on the CPU at tiny sizes (atto models, batch 2, 64 px, Triton's interpreter, the
# benchmarks' byte accounting instead of GPU timing, torch.compile's eager backend), to prove the plumbing before a
# GPU is spent; tests/tools/test_gpu_check.py runs it.
set -uo pipefail
PY=${PYTHON:-python}
budget=540
out=results/gpu_check
dry=0
models=""
steps=01,02,03,04,05,06,07
while [ $# -gt 0 ]; do
  case $1 in
    --budget) budget=$2; shift ;;
    --out) out=$2; shift ;;
    --models) models=$2; shift ;;
    --steps) steps=$2; shift ;;
    --dry-run) dry=1 ;;
    *) echo "gpu_check: unknown argument $1 (expected --budget S, --out DIR, --models M1,M2, --steps 01,..., --dry-run)" >&2
       exit 2 ;;
  esac
  shift
done
for s in ${steps//,/ }; do
  case $s in 0[1-7]) ;; *) echo "gpu_check: --steps takes step numbers 01 to 07, comma-separated, got '$steps'" >&2; exit 2 ;; esac
done
[ -n "${steps//,/}" ] || { echo "gpu_check: --steps is empty" >&2; exit 2; }
case $budget in ''|*[!0-9]*) echo "gpu_check: --budget takes whole seconds, got '$budget'" >&2; exit 2 ;; esac
mkdir -p "$out" && out=$(cd "$out" && pwd)  # relative to where it was called from
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
if [ "$dry" = 0 ] && ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "gpu_check: no CUDA GPU is visible to $PY (torch.cuda.is_available() is False); nothing was run." \
    "--dry-run runs the same steps on the CPU." >&2
  exit 1
fi
start=$(date +%s)
: > "$out/steps.tsv"

if [ "$dry" = 1 ]; then
  export TRITON_INTERPRET=1
  default_models=convnext_atto,mrconvnext_atto:reparam,mrconvnext_atto,talkconvnext_atto,talkconvnext2d_atto,lightconvnext_atto,dynconvnext_atto
  size=(--device cpu -b 2 --img-size 64)
  bench=(--device cpu --batch-size 2 --img-size 64 --num-bench-iter 1)
  dwconv=(--device cpu --batch 2 --img-size 64 --repeats 1)
  ops=(--accounting)
  backend=eager
else
  default_models=convnext_tiny,mrconvnext_t:reparam,mrconvnext_t,talkconvnext_t,talkconvnext2d_t,lightconvnext_t,dynconvnext_t
  size=(--device cuda -b 128 --img-size 224)
  bench=(--device cuda --batch-size 128 --img-size 224 --num-bench-iter 10)
  dwconv=(--device cuda --batch 128 --img-size 224)
  ops=()
  backend=inductor
fi
IFS=, read -r -a model_list <<< "${models:-$default_models}"

want() { case ,$steps, in *,$1,*) return 0 ;; *) return 1 ;; esac; }

left() { echo $(( budget - ($(date +%s) - start) )); }

# step NAME CAP_SECONDS COMMAND...: runs COMMAND with at most min(CAP, time left) seconds, output to NAME.txt
step() {
  local name=$1 cap=$2 remaining t0 rc
  shift 2
  want "${name:0:2}" || return 0
  remaining=$(left)
  if [ "$remaining" -lt 5 ]; then
    printf '%s\tskipped\t0\n' "$name" >> "$out/steps.tsv"
    echo "gpu_check: $name skipped: the budget is spent" | tee -a "$out/log.txt"
    return 0
  fi
  [ "$cap" -lt "$remaining" ] || cap=$remaining
  echo "gpu_check: $name (at most $cap s; $remaining s left)" | tee -a "$out/log.txt"
  t0=$(date +%s)
  timeout --kill-after=10 "$cap" "$@" > "$out/$name.txt" 2>&1
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" >> "$out/steps.tsv"
  [ "$rc" = 0 ] || echo "gpu_check: $name failed (exit $rc; 124: cut by its time cap): see $out/$name.txt" | tee -a "$out/log.txt"
  return 0
}

versions() {
  if command -v nvidia-smi > /dev/null; then nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; fi
  # and the engines report; it would build the native CPU kernels to say what the CPU runs (40 s of the H200 run
  # of 2026-11-26)
  MRCONVNEXT_DISABLE_NATIVE=1 "$PY" scripts/versions.py --engines
}

export -f versions
export PY
step 01_versions 120 bash -c versions

mkdir -p "$out/smoke"
passed=()
for m in "${model_list[@]}"; do
  name="02_smoke_${m//[:\/]/_}"
  step "$name" 150 "$PY" -m mrconvnext.tools.benchmark --models "$m" "${size[@]}" --amp --amp-dtype bfloat16 \
    --channels-last --num-warm-iter 1 --num-bench-iter 3 --results-file "$out/smoke/${m//[:\/]/_}.csv"
  if ! want 02 || [ "$(tail -n 1 "$out/steps.tsv" | cut -f2)" = 0 ]; then passed+=("$m"); fi
done

if [ ${#passed[@]} -gt 0 ]; then
  step 03_eager_table 240 "$PY" scripts/bench_gpu.py --modes eager --models "${passed[@]}" "${bench[@]}" \
    --out "$out/eager"
elif want 03; then
  printf '03_eager_table\tskipped\t0\n' >> "$out/steps.tsv"
fi
step 04_dwconv_budget 90 "$PY" scripts/bench_dwconv_gpu.py "${dwconv[@]}" --out "$out"
# four workers where pytest-xdist is there: the suite's time is mostly Triton's compiles, on the CPU (not in a dry
# run, where every CUDA test skips and four workers would only start four interpreters)
xdist=()
[ "$dry" = 0 ] && "$PY" -c 'import xdist' 2> /dev/null && xdist=(-n 4)
step 05_cuda_suite 300 "$PY" -m pytest -m cuda -q -rs -p no:cacheprovider ${xdist[@]+"${xdist[@]}"} tests/cuda \
  -k 'not compile'
step 06_ops_talk 120 "$PY" scripts/bench_talk_gpu.py ${ops[@]+"${ops[@]}"} --out "$out"
step 06_ops_dynconv 120 "$PY" scripts/bench_dynconv_gpu.py ${ops[@]+"${ops[@]}"} --out "$out"
step 06_ops_longconv 120 "$PY" scripts/bench_longconv_gpu.py ${ops[@]+"${ops[@]}"} --out "$out"
# deployed mrconvnext_t and the baseline first: the comparison that matters most if the budget cuts the rest
compiled=()
for m in ${passed[@]+"${passed[@]}"}; do case $m in *:reparam) compiled=("$m" ${compiled[@]+"${compiled[@]}"}) ;; esac; done
for m in ${passed[@]+"${passed[@]}"}; do case $m in convnext_*) compiled+=("$m") ;; esac; done
for m in ${passed[@]+"${passed[@]}"}; do case $m in *:reparam|convnext_*) ;; *) compiled+=("$m") ;; esac; done
for m in ${compiled[@]+"${compiled[@]}"}; do
  step "07_compiled_${m//[:\/]/_}" 180 "$PY" scripts/bench_gpu.py --modes compiled --models "$m" "${bench[@]}" \
    --compile-backend "$backend" --out "$out/compiled/${m//[:\/]/_}"
done
"$PY" scripts/gpu_check_report.py "$out" | tee "$out/summary.md"
failed=$(awk -F'\t' '$2 != "0" && $2 != "skipped" {print $1}' "$out/steps.tsv" | tr '\n' ' ')
echo "gpu_check: done in $(( $(date +%s) - start )) s of a $budget s budget; results in $out${failed:+; failed: $failed}"
# exit status 1 when a step failed (a skipped step, cut by the budget, is not a failure)
[ -z "$failed" ]
