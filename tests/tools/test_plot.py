"""Figures: reparameterized kernels per stage (Fig. 5), alpha norms per depth (Fig. 3), accuracy vs throughput."""

import pytest
import timm

from mrconvnext.tools import plot
from mrconvnext.tools.common import model_from_source

PNG = b'\x89PNG\r\n\x1a\n'

pytest.importorskip('matplotlib')


def _png(path):
    data = path.read_bytes()
    assert data[:8] == PNG and len(data) > 5000, path
    return data


def test_kernel_and_alpha_figures_from_a_checkpoint(trained_run, tmp_path):
    ckpt = trained_run['checkpoint']
    _png(plot.run(['kernels', '--checkpoint', ckpt, '-o', str(tmp_path / 'kernels.png')]))
    _png(plot.run(['alpha', '--checkpoint', ckpt, '-o', str(tmp_path / 'alpha.png')]))
    model, _ = model_from_source(None, ckpt)
    rows = plot.alpha_fractions(model)
    assert len(rows) == len(model.mixers())  # one bar per depth
    assert all(abs(sum(r['fractions']) - 1) < 1e-5 and len(r['fractions']) == len(r['reach']) for r in rows)
    with pytest.raises(ValueError, match='deployed'):
        plot.alpha_fractions(timm.utils.reparameterize_model(model))


def test_tradeoff_chart_from_benchmark_and_validate_results(tmp_path, validated):
    bench = [
        {'model': 'convnext_atto', 'infer_img_s': 1200.0, 'device': 'cpu', 'batch_size': 32},
        {'model': 'mrconvnext_atto', 'infer_img_s': 900.0},
        {'model': 'mrconvnext_atto:reparam', 'infer_img_s': 1150.0},
        {'model': 'dynconvnext_atto', 'infer_img_s': 500.0},  # no accuracy: left out
    ]
    path, points = plot.plot_tradeoff(
        bench, [validated['branched'], validated['reparam']], tmp_path / 't.png', {'convnext_atto': 97.0}
    )
    _png(path)
    got = {p['model']: p['top1'] for p in points}
    assert got == {
        'convnext_atto': 97.0,
        'mrconvnext_atto': validated['branched']['top1'],
        'mrconvnext_atto:reparam': validated['reparam']['top1'],
    }
