"""scripts/bench_dynconv_gpu.py and bench_talk_gpu.py: the per-stage byte models beside the depthwise conv's, and
their refusal to time without a GPU."""

import pytest
import torch

from .conftest import REPO, run_script_main


def _accounting_rows(script: str) -> list[list[str]]:
    out = run_script_main(REPO / 'scripts' / script, '--accounting')
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line.split('|')[1:-1] for line in out.stdout.splitlines() if line.startswith('| ') and line[2].isdigit()]
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4]
    return rows


def test_dynconv_accounting_per_stage():
    for _stage, _C, _L, K, dyn, light, dw, ratio in _accounting_rows('bench_dynconv_gpu.py'):
        # a float32 x read and cast (6 B), the GEMM's bf16 read (2 B), the kernel's read and write (4 B), the bf16
        # logits written and read (2 x 2K/16 B), the log-sum-exp (4/16 B); LightConv: float32 x read, y written
        assert float(dyn) == pytest.approx(6 + 2 + 4 + 4 * int(K) / 16 + 0.25, abs=0.01)
        assert float(light) == 8
        assert float(dw) == 10 and float(ratio) == pytest.approx(float(dyn) / 10, abs=0.01)


def test_talk_accounting_per_stage():
    for _stage, _C, _hw, one_d, two_d, dw in _accounting_rows('bench_talk_gpu.py'):
        # x read by the scan and the gathers (2 + 2 B), the float32 table written and read (4 + 4 B), y (2 B), the
        # offsets (4 B per side over 16 channels), at every stage: channels-last maps never take the plane kernels
        assert float(one_d) == pytest.approx(14 + 0.5)
        assert float(two_d) == pytest.approx(14 + 1.0) and float(dw) == 10


@pytest.mark.skipif(torch.cuda.is_available(), reason='checks the message shown without a GPU')
@pytest.mark.parametrize('script', ['bench_dynconv_gpu.py', 'bench_talk_gpu.py'])
def test_timing_needs_a_gpu(script):
    out = run_script_main(REPO / 'scripts' / script)
    assert out.returncode != 0 and 'no CUDA device visible' in out.stderr
