"""scripts/gpu_profile.py: the dry run (atto models on the CPU) measures every row of a group in a worker process and
writes one JSON line per row with the profile's ops; set_method sets each mixer, and the nofold row turns the fold off
for itself only."""

from __future__ import annotations

import json

from .conftest import REPO, run_script_main

SCRIPT = REPO / 'scripts' / 'gpu_profile.py'


def test_dry_run_writes_a_row_per_measurement(tmp_path):
    args = ['--out', str(tmp_path), '--device', 'cpu', '--img-size', '32', '--batch', '2', '--tiny']
    args += ['--warmup', '1', '--repeats', '1', '--groups', 'convnext,bn']
    proc = run_script_main(SCRIPT, *args)  # its main here; each group's worker is a fresh process
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / 'rows.jsonl').read_text().splitlines()]
    assert [(r['model'], r['mode'], r['method']) for r in rows] == [
        ('convnext_atto', 'eval', 'auto'),
        ('convnext_atto', 'eval', 'auto'),
        ('convnext_atto', 'train', 'auto'),
        *[('mrconvnext_atto', 'train', m) for m in ('fft', 'mixed', 'nofold', 'auto')],
    ]
    assert [r['batch'] for r in rows[:2]] == [1, 2]
    for r in rows:
        assert r['ms'] > 0 and r['times'] and r['ops'], r
        assert all(len(v) == 4 and v[0] > 0 for v in r['ops'].values())  # calls, self device, device, self host
    train = rows[-1]['ops']
    assert 'aten::convolution_backward' in train and 'aten::mul' in train
    # the summary table: one line per row, ratios to the convnext row of the same mode and batch
    table = proc.stdout.split('group            model')[1].splitlines()[1:]
    assert len(table) == len(rows) and table[2].split()[-2] == '1.00'


def test_set_method_sets_every_mixer_and_nofold_lasts_one_row():
    import importlib.util

    import timm

    from mrconvnext.layers import MRConv1d
    from mrconvnext.ops.long_conv import dispatch as long_conv_dispatch

    spec = importlib.util.spec_from_file_location('gpu_profile', SCRIPT)
    gpu_profile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_profile)
    model = timm.create_model('mrconvnext_atto', img_size=96)  # stage 1: L = 576
    package_rule = long_conv_dispatch.NO_FOLD_DEVICES
    try:
        gpu_profile.set_method(model, 'mixed')
        mixers = [m for m in model.modules() if isinstance(m, MRConv1d)]
        assert mixers and all(
            m.method == ('fft' if m.seq_len > long_conv_dispatch.TOEPLITZ_MAX_LENGTH else 'toeplitz') for m in mixers
        )
        assert {m.method for m in mixers} == {'fft', 'toeplitz'}
        gpu_profile.set_method(model, 'nofold+matmul')
        assert all(m.method == long_conv_dispatch.matmul_method(m.seq_len) for m in mixers)
        assert 'cuda' in long_conv_dispatch.NO_FOLD_DEVICES
        gpu_profile.set_method(model, 'fft')
        assert all(m.method == 'fft' for m in mixers) and long_conv_dispatch.NO_FOLD_DEVICES == package_rule
        gpu_profile.set_method(model, 'nofold')  # the methods as they were
        assert all(m.method == 'fft' for m in mixers) and 'cuda' in long_conv_dispatch.NO_FOLD_DEVICES
        gpu_profile.set_method(model, 'auto')
        assert long_conv_dispatch.NO_FOLD_DEVICES == package_rule == ('cpu',)
    finally:
        long_conv_dispatch.NO_FOLD_DEVICES = package_rule
