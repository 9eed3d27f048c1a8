"""scripts/bench_dynconv_gpu.py: the per-stage byte model beside the depthwise conv's, and its refusal to time without
a GPU."""

import subprocess
import sys

import pytest
import torch

from tests.limits import HANG_LIMIT_S

from .conftest import REPO

SCRIPT = REPO / 'scripts' / 'bench_dynconv_gpu.py'


def test_accounting_per_stage():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), '--accounting'], capture_output=True, text=True, timeout=HANG_LIMIT_S
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line.split('|')[1:-1] for line in out.stdout.splitlines() if line.startswith('| ') and line[2].isdigit()]
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4]
    for _stage, _C, _L, K, dyn, dw, ratio in rows:
        # a float32 x read and cast (6 B), the GEMM's bf16 read (2 B), the kernel's read and write (4 B), the bf16
        # logits written and read (2 x 2K/16 B), the log-sum-exp (4/16 B)
        assert float(dyn) == pytest.approx(6 + 2 + 4 + 4 * int(K) / 16 + 0.25, abs=0.01)
        assert float(dw) == 10 and float(ratio) == pytest.approx(float(dyn) / 10, abs=0.01)


@pytest.mark.skipif(torch.cuda.is_available(), reason='checks the message shown without a GPU')
def test_timing_needs_a_gpu():
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=HANG_LIMIT_S)
    assert out.returncode != 0 and 'no CUDA device visible' in out.stderr
