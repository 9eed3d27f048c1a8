#!/usr/bin/env bash
# The GPU check, one command for a person with a CUDA GPU:
#   1. the CUDA test suite (pytest -m cuda): every op, layer and model family on the GPU against float64 references;
#   2. the TaLK operator benchmark by implementation (scripts/bench_talk_gpu.py), and DynamicConv per stage beside the
#      7x7 depthwise conv (scripts/bench_dynconv_gpu.py);
#   3. the long convolution per ConvNeXt-T stage: 7x7 conv vs torch.fft vs the matmul engine
#      (scripts/bench_longconv_gpu.py);
#   4. the model benchmark, eager and torch.compile (scripts/bench_gpu.py).
# Results go to results/ (gpu_pytest.txt, gpu_talk_ops.{md,csv}, gpu_dynconv_ops.{md,csv}, longconv_gpu.csv, gpu_<gpu>.{md,csv}). It installs nothing: install the
# project with its test extra first (pip install -e '.[test]'). Without a visible GPU it stops before step 1.
#
#   bash scripts/gpu_check.sh [all|tests|talk|dynconv|longconv|models|models-eager|models-compiled]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
STEP=${1:-all}
mkdir -p results

"$PY" - <<'PYEOF'
import sys

try:
    import torch
    import mrconvnext  # noqa: F401
except ImportError as exc:
    sys.exit(f'gpu_check: {exc}. Install the project first: pip install -e ".[test]"')
if not torch.cuda.is_available():
    sys.exit(
        f'gpu_check: no CUDA GPU is visible (torch {torch.__version__}, built for CUDA {torch.version.cuda}, '
        'torch.cuda.is_available() is False). Nothing was run: the CUDA suite and the GPU benchmarks need a GPU.'
    )
try:
    import triton
except ImportError:
    sys.exit('gpu_check: Triton is not importable; it ships with the CUDA wheels of torch on Linux')
print(f'gpu_check: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}, '
      f'Triton {triton.__version__}', flush=True)
PYEOF

if [[ $STEP == all || $STEP == tests ]]; then
  "$PY" -m pytest -m cuda -q -rs tests/cuda 2>&1 | tee results/gpu_pytest.txt
fi
if [[ $STEP == all || $STEP == talk ]]; then
  "$PY" scripts/bench_talk_gpu.py --out results
fi
if [[ $STEP == all || $STEP == dynconv ]]; then
  "$PY" scripts/bench_dynconv_gpu.py --out results
fi
if [[ $STEP == all || $STEP == longconv ]]; then
  "$PY" scripts/bench_longconv_gpu.py --out results | tee results/longconv_gpu.txt
fi
if [[ $STEP == all || $STEP == models ]]; then
  "$PY" scripts/bench_gpu.py --out results
elif [[ $STEP == models-eager || $STEP == models-compiled ]]; then
  "$PY" scripts/bench_gpu.py --out results --modes "${STEP#models-}"
fi
