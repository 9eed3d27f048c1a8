"""scripts/bench_talk_gpu.py: the per-stage byte model beside the depthwise conv's, and its refusal to time without a
GPU."""

import subprocess
import sys

import pytest
import torch

from tests.limits import HANG_LIMIT_S

from .conftest import REPO

SCRIPT = REPO / 'scripts' / 'bench_talk_gpu.py'


def test_accounting_per_stage():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), '--accounting'], capture_output=True, text=True, timeout=HANG_LIMIT_S
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line.split('|')[1:-1] for line in out.stdout.splitlines() if line.startswith('| ') and line[2].isdigit()]
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4]
    for stage, _C, _hw, one_d, two_d, dw in rows:
        # 1-D rows of <= 256 positions (stages 3, 4) run the plane kernels: x and y once, no table
        assert float(one_d) == pytest.approx(4 + 0.5 if int(stage) >= 3 else 12 + 0.5)
        assert float(two_d) == pytest.approx(12 + 1.0) and float(dw) == 10


@pytest.mark.skipif(torch.cuda.is_available(), reason='checks the message shown without a GPU')
def test_timing_needs_a_gpu():
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=HANG_LIMIT_S)
    assert out.returncode != 0 and 'no CUDA device visible' in out.stderr
