"""scripts/bench_longconv_gpu.py: the per-stage byte and flop accounting (fake CUDA tensors) beside the budget, and
its refusal to time without a GPU."""

import csv

import pytest
import torch

from .conftest import REPO, run_script_main

SCRIPT = REPO / 'scripts' / 'bench_longconv_gpu.py'


def test_accounting_per_stage_beside_the_budget(tmp_path):
    out = run_script_main(SCRIPT, '--accounting', '--out', str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    with open(tmp_path / 'longconv_gpu.csv', newline='') as f:
        table = {(r['stage'], r['engine']): r for r in csv.DictReader(f)}
    assert len(table) == 12  # 4 stages x (7x7 conv, torch.fft, matmul)
    for stage, method in (('96x56x56', 'rowdft'), ('192x28x28', 'rowdft'), ('384x14x14', 'toeplitz'),
                          ('768x7x7', 'toeplitz')):  # fmt: skip
        conv, fft, matmul = (table[(stage, e)] for e in ('conv7x7', 'fft', 'matmul'))
        assert matmul['method'] == method
        assert abs(float(conv['bytes_per_elem']) - 10) < 0.5 and float(conv['budget_bytes_per_elem']) == 10
        assert float(fft['bytes_per_elem']) > 70  # today's torch.fft engine: about 80 B per element
        assert float(matmul['bytes_per_elem']) < float(fft['bytes_per_elem']) and float(matmul['gflop']) > 0
    assert 'budget_bytes_per_elem' in out.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason='checks the message shown without a GPU')
def test_timing_needs_a_gpu():
    out = run_script_main(SCRIPT)
    assert out.returncode != 0 and 'no CUDA device visible' in out.stderr
