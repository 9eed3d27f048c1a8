"""scripts/bench_onnx_forms.py: each candidate ONNX form exported alone, checked against float64 and timed."""

import importlib.util

import pytest

from .conftest import REPO


def test_forms_are_checked_and_timed():
    pytest.importorskip('onnxruntime')
    pytest.importorskip('onnxscript')
    spec = importlib.util.spec_from_file_location('bench_onnx_forms', REPO / 'scripts' / 'bench_onnx_forms.py')
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.run(['--ops', 'talk', 'dynamic_conv', '--batches', '1', '--repeats', '1', '--limit', '1'])
    assert [r['op'] for r in rows] == ['talk1d', 'talk2d', 'dynamic_conv']
    forms = {
        'talk1d': ('reference', 'onnx'),
        'talk2d': ('reference',),
        'dynamic_conv': ('tap loop', 'taps', 'band', 'whole band'),
    }
    for r in rows:
        assert all(r[f] > 0 for f in forms[r['op']]), r
