"""scripts/bench_onnx.py: every model exported, checked against PyTorch and timed in ONNX Runtime beside the ConvNeXt
of its size, the table written with its ratios."""

import csv
import importlib.util
import sys

import pytest

from .conftest import REPO


def test_exports_check_and_ratios(tmp_path):
    pytest.importorskip('onnxruntime')
    pytest.importorskip('onnxscript')
    sys.path.insert(0, str(REPO / 'scripts'))
    try:
        spec = importlib.util.spec_from_file_location('bench_onnx', REPO / 'scripts' / 'bench_onnx.py')
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
        argv = ['--families', 'mrconvnext', '--batches', '1', '2', '--rounds', '2', '--img-size', '64']
        rows = bench.run(argv + ['--out', str(tmp_path)])
    finally:
        sys.path.remove(str(REPO / 'scripts'))
    assert [r['model'] for r in rows] == ['convnext_atto', 'mrconvnext_atto']
    for r in rows:
        assert r['rel_error'] < 1e-4 and r['nodes'] > 0 and r['b1_ms'] > 0 and r['b2_ms'] > 0
    base, mr = rows
    assert base['b1_ratio'] == base['b2_ratio'] == 1.0
    assert mr['b1_ratio'] == pytest.approx(base['b1_ms'] / mr['b1_ms'], rel=1e-2)
    with open(tmp_path / 'onnx_cpu.csv', newline='') as f:
        assert [r['model'] for r in csv.DictReader(f)] == ['convnext_atto', 'mrconvnext_atto']
    assert 'onnxruntime' in (tmp_path / 'onnx_cpu.md').read_text()
