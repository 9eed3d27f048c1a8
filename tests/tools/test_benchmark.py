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
