"""Benchmark: several models side by side in one run, ratio columns against the first, CSV output."""

import csv

from mrconvnext.tools import benchmark


def test_default_models_compare_convnext_t_with_mrconvnext_t_and_the_zoo():
    models = benchmark.default_models()
    assert models[:3] == ['convnext_tiny', 'mrconvnext_t', 'mrconvnext_t:reparam']
    assert {'talkconvnext_t', 'lightconvnext_t', 'dynconvnext_t'} <= set(models)


def test_table_with_ratio_columns_and_csv(tmp_path, capsys):
    out = tmp_path / 'bench.csv'
    specs = ['convnext_atto', 'mrconvnext_atto', 'mrconvnext_atto:reparam']
    argv = ['--models', *specs, '--img-size', '32', '-b', '8', '--num-classes', '10']
    argv += ['--num-warm-iter', '1', '--num-bench-iter', '3', '--threads', '1', '--results-file', str(out)]
    rows = benchmark.run(argv)
    assert [r['model'] for r in rows] == specs
    base, branched, rep = rows
    assert base['infer_ratio'] == 1.0 and base['train_ratio'] == 1.0
    for r in rows:
        assert r['infer_img_s'] > 0 and r['infer_ratio'] > 0 and r['infer_peak_mb'] > 0
    assert branched['train_img_s'] > 0 and branched['train_ratio'] > 0 and branched['train_peak_mb'] > 0
    assert rep['train_img_s'] is None  # training is measured in the branched form only
    assert branched['gmacs'] > rep['gmacs'] > 0 and base['gmacs'] > 0  # branched: also builds its kernels
    printed = capsys.readouterr().out
    assert 'ratio' in printed and all(s in printed for s in specs)
    with open(out) as f:
        table = list(csv.DictReader(f))
    assert [r['model'] for r in table] == specs and {'infer_ratio', 'train_ratio', 'train_mem_ratio'} <= set(table[0])
    assert table[0]['timer'] == 'wall-clock' and table[0]['memory'] == 'rss-peak-growth'


def test_profile_lists_the_top_operators_of_each_step(capsys):
    argv = ['--models', 'convnext_atto', '--img-size', '32', '-b', '2', '--num-classes', '10', '--no-memory']
    argv += ['--num-warm-iter', '1', '--num-bench-iter', '1', '--threads', '1', '--results-file', '', '--profile', '3']
    benchmark.run(argv)
    printed = capsys.readouterr().out
    for step in ('eval', 'training step'):
        section = printed.split(f'profile of convnext_atto, one {step}:\n')[1].split('\n\n')[0].splitlines()
        assert section[0].strip().endswith('ms of aten ops') and section[1].strip().startswith('top aten ops')
        top_ops, operators = section[2:5], section[6:9]
        assert section[5].strip().startswith('top operators') and len(section) == 9, section
        # convnext_atto's time goes to its convolutions; a training step also runs their backward
        assert any('convolution' in line for line in top_ops), top_ops
        assert all(float(line.split()[0]) >= float(nxt.split()[0]) for line, nxt in zip(operators, operators[1:]))
    assert 'convolution_backward' in printed.split('one training step')[1]
