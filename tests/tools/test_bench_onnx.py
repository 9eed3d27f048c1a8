"""scripts/bench_onnx.py: every model exported, checked against PyTorch and timed in ONNX Runtime beside the ConvNeXt
of its size, the table written with its ratios."""

import csv
import importlib.util
import statistics
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
        runs = []  # (model, batch, seconds) of every timed run, in order
        timed = bench._timed

        def recording(name, session, x, pause):
            runs.append((name, len(x), timed(name, session, x, pause)))
            return runs[-1][2]

        bench._timed = recording
        argv = ['--families', 'mrconvnext', '--batches', '1', '2', '--rounds', '3', '--img-size', '64']
        rows = bench.run(argv + ['--out', str(tmp_path)])
    finally:
        sys.path.remove(str(REPO / 'scripts'))
    assert [r['model'] for r in rows] == ['convnext_atto', 'mrconvnext_atto']
    for r in rows:
        assert r['rel_error'] < 1e-4 and r['nodes'] > 0 and r['b1_ms'] > 0 and r['b2_ms'] > 0
    base, mr = rows
    assert base['b1_ratio'] == base['b2_ratio'] == 1.0 and base['b1_ratio_iqr'] == 0.0
    # every model run is paired with a run of its ConvNeXt right before or after it, the order alternating by round
    assert len(runs) == 3 * 2 * 2
    pairs = [runs[k : k + 2] for k in range(0, len(runs), 2)]
    assert [p[0][0] for p in pairs] == ['convnext_atto'] * 2 + ['mrconvnext_atto'] * 2 + ['convnext_atto'] * 2
    for b in (1, 2):
        seconds = [{name: s for name, x, s in p} for p in pairs if p[0][1] == p[1][1] == b]
        assert len(seconds) == 3 and all(len(s) == 2 for s in seconds)
        paired = [s['convnext_atto'] / s['mrconvnext_atto'] for s in seconds]
        assert mr[f'b{b}_ratio'] == pytest.approx(statistics.median(paired), abs=1e-3)
        q1, _, q3 = statistics.quantiles(paired, n=4)
        assert mr[f'b{b}_ratio_iqr'] == pytest.approx(q3 - q1, abs=1e-3)
        assert mr[f'b{b}_ms'] == pytest.approx(
            1e3 * statistics.median(s for n, x, s in runs if n != 'convnext_atto' and x == b), abs=1e-2
        )
    with open(tmp_path / 'onnx_cpu.csv', newline='') as f:
        assert [r['model'] for r in csv.DictReader(f)] == ['convnext_atto', 'mrconvnext_atto']
    assert 'onnxruntime' in (tmp_path / 'onnx_cpu.md').read_text()
