"""scripts/bench_speed.py: target ratios and verdicts from benchmark rows, and one tiny end-to-end run."""

from __future__ import annotations

import csv
import importlib.util
import math
import re
import sys

import pytest

from .conftest import REPO, run_script_main

SCRIPT = REPO / 'scripts' / 'bench_speed.py'
NAMES = ('base', 'mr', 'talk')
KEYS = ['reparam_eval', 'train_step_time', 'talk_eval', 'train_memory']


@pytest.fixture(scope='module')
def bs():
    """The script as a module (it imports its sibling ``_bench``, hence ``scripts/`` on the path)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(SCRIPT.parent))
        spec = importlib.util.spec_from_file_location('bench_speed_under_test', SCRIPT)
        module = importlib.util.module_from_spec(spec)
        mp.setitem(sys.modules, spec.name, module)  # dataclasses look their module up while it executes
        spec.loader.exec_module(module)
    return module


def _rows(base_infer, base_train, base_mb, rep_infer, mr_train, mr_mb, talk_infer) -> list[dict]:
    """Rows as the benchmark tool returns them (only the keys the script reads, plus noise)."""
    return [
        {'model': 'base', 'infer_img_s': base_infer, 'train_img_s': base_train, 'train_peak_mb': base_mb},
        {'model': 'mr', 'infer_img_s': 1.0, 'train_img_s': mr_train, 'train_peak_mb': mr_mb},
        {'model': 'mr:reparam', 'infer_img_s': rep_infer, 'train_img_s': None},
        {'model': 'talk', 'infer_img_s': talk_infer, 'train_img_s': 99.0, 'train_peak_mb': 1.0},
    ]


# run 1 sits on the boundaries (inclusive); run 2 misses or meets the other side
RUN1 = _rows(100.0, 20.0, 100.0, rep_infer=90.0, mr_train=16.0, mr_mb=150.0, talk_infer=96.0)
RUN2 = _rows(100.0, 20.0, 100.0, rep_infer=80.0, mr_train=12.5, mr_mb=250.0, talk_infer=110.0)


def test_ratios_from_rows(bs):
    r1 = bs.ratios_from_rows(RUN1, *NAMES)
    assert list(r1) == KEYS
    # eval: model / baseline img/s; step time: baseline img/s / model img/s; memory: model MB / baseline MB
    assert r1 == pytest.approx({'reparam_eval': 0.9, 'train_step_time': 1.25, 'talk_eval': 0.96, 'train_memory': 1.5})
    r2 = bs.ratios_from_rows(RUN2, *NAMES)
    assert r2 == pytest.approx({'reparam_eval': 0.8, 'train_step_time': 1.6, 'talk_eval': 1.1, 'train_memory': 2.5})
    raw = bs.raw_from_rows(RUN2, *NAMES)
    assert raw == {
        'base_eval': 100.0,
        'reparam_eval': 80.0,
        'talk_eval': 110.0,
        'base_train': 20.0,
        'mr_train': 12.5,
        'base_mb': 100.0,
        'mr_mb': 250.0,
    }


def test_merge_rows_of_the_eval_and_training_processes(bs):
    evals = [
        {'model': 'base', 'infer_img_s': 100.0, 'train_img_s': None},
        {'model': 'mr:reparam', 'infer_img_s': 90.0, 'train_img_s': None},
        {'model': 'talk', 'infer_img_s': 96.0, 'train_img_s': None},
    ]
    trains = [
        {'model': 'base', 'infer_img_s': None, 'train_img_s': 20.0, 'train_peak_mb': 100.0},
        {'model': 'mr', 'infer_img_s': None, 'train_img_s': 16.0, 'train_peak_mb': 150.0},
    ]
    merged = {r['model']: r for r in bs.merge_rows(evals, trains)}
    assert merged['base'] == {'model': 'base', 'infer_img_s': 100.0, 'train_img_s': 20.0, 'train_peak_mb': 100.0}
    assert merged['mr']['train_img_s'] == 16.0 and merged['mr:reparam']['infer_img_s'] == 90.0
    assert bs.ratios_from_rows(list(merged.values()), *NAMES) == pytest.approx(
        {'reparam_eval': 0.9, 'train_step_time': 1.25, 'talk_eval': 0.96, 'train_memory': 1.5}
    )


def test_missing_memory_gives_no_ratio_and_no_data(bs):
    rows = [dict(r) for r in RUN1]
    del rows[1]['train_peak_mb']  # the tool leaves the keys out when a memory subprocess fails
    assert bs.ratios_from_rows(rows, *NAMES)['train_memory'] is None
    mem = bs.summarize([{'train_memory': None}], bs.make_targets(*NAMES))[3]
    assert mem['key'] == 'train_memory' and mem['median'] is None and mem['runs'] == 0
    assert mem['verdict'] == 'no data'


@pytest.mark.parametrize(
    'value, target, floor, higher, expected',
    [
        (1.0, 1.0, 0.9, True, 'target met'),
        (0.95, 1.0, 0.9, True, 'floor met'),
        (0.9, 1.0, 0.9, True, 'floor met'),
        (0.45, 1.0, 0.9, True, 'missed by 50.0%'),  # (0.9 - 0.45) / 0.9
        (0.8999, 1.0, 0.9, True, 'missed by <0.1%'),
        (1.2, 1.25, 1.5, False, 'target met'),
        (1.5, 1.25, 1.5, False, 'floor met'),
        (1.8, 1.25, 1.5, False, 'missed by 20.0%'),  # (1.8 - 1.5) / 1.5
        (3.0, 1.5, 2.0, False, 'missed by 50.0%'),
        (None, 1.0, 0.9, True, 'no data'),
        (math.nan, 1.0, 0.9, True, 'no data'),
    ],
)
def test_verdict(bs, value, target, floor, higher, expected):
    assert bs.verdict(value, target, floor, higher) == expected


def test_summarize_two_runs(bs):
    per_run = [bs.ratios_from_rows(RUN1, *NAMES), bs.ratios_from_rows(RUN2, *NAMES)]
    targets = bs.make_targets(*NAMES)
    rows = {r['key']: r for r in bs.summarize(per_run, targets)}
    assert list(rows) == KEYS
    expected = {  # key: (median, min, max, verdict)
        'reparam_eval': (0.85, 0.8, 0.9, 'missed by 5.6%'),  # (0.9 - 0.85) / 0.9 = 5.56%
        'train_step_time': (1.425, 1.25, 1.6, 'floor met'),
        'talk_eval': (1.03, 0.96, 1.1, 'target met'),
        'train_memory': (2.0, 1.5, 2.5, 'floor met'),  # the floor itself counts
    }
    for key, (med, lo, hi, verdict) in expected.items():
        r = rows[key]
        assert (r['median'], r['min'], r['max']) == pytest.approx((med, lo, hi)), key
        assert r['verdict'] == verdict and r['runs'] == 2
    assert rows['reparam_eval']['target'] == '>= 1.00x' and rows['reparam_eval']['floor'] == '>= 0.90x'
    assert rows['train_step_time']['target'] == '<= 1.25x' and rows['train_step_time']['floor'] == '<= 1.50x'
    assert rows['train_memory']['per_run'] == '1.5000;2.5000'
    table = bs.markdown_table(list(rows.values()), bs.summary_columns(10))
    assert table[0].startswith('| what |') and len(table) == 2 + 4
    assert '| 0.85x | 0.80-0.90 | missed by 5.6% |' in table[2]


def test_per_run_table_of_two_runs(bs):
    raw = [bs.raw_from_rows(RUN1, *NAMES), bs.raw_from_rows(RUN2, *NAMES)]
    ratios = [bs.ratios_from_rows(RUN1, *NAMES), bs.ratios_from_rows(RUN2, *NAMES)]
    rows = bs.per_run_rows(raw, ratios)
    assert [r['run'] for r in rows] == [1, 2]
    assert rows[1]['mr_train'] == 12.5 and rows[1]['r_train_step_time'] == pytest.approx(1.6)
    table = bs.markdown_table(rows, bs.RAW_COLUMNS)
    assert len(table) == 2 + 2 and table[2].startswith('| 1 |') and table[3].startswith('| 2 |')


def test_tiny_run_writes_csv_and_markdown(tmp_path):
    """End to end with atto models at 64x64, one run (an eval and a training process, each fresh; the script's own
    main in this process); what several runs add, the summary and the per-run table, is tested above."""
    prefix = tmp_path / 'out' / 'speed'
    argv = ['--baseline', 'convnext_atto', '--mr-model', 'mrconvnext_atto', '--talk-model', 'talkconvnext_atto']
    argv += ['--img-size', '64', '-b', '2', '--runs', '1', '--num-bench-iter', '2', '--num-warm-iter', '1']
    argv += ['--threads', '1', '--out-prefix', str(prefix)]
    proc = run_script_main(SCRIPT, *argv)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'run 1/1' in proc.stdout and 'verdict' in proc.stdout and 'per run' in proc.stdout

    with open(prefix.with_suffix('.csv'), newline='') as f:
        rows = list(csv.DictReader(f))
    assert [r['key'] for r in rows] == KEYS
    verdicts = re.compile(r'target met|floor met|missed by (<0\.1|\d+\.\d)%')
    for r in rows:
        med, lo, hi = (float(r[k]) for k in ('median', 'min', 'max'))
        assert all(math.isfinite(v) and v > 0 for v in (med, lo, hi)) and lo <= med <= hi
        assert r['runs'] == '1' and verdicts.fullmatch(r['verdict'])
        assert r['batch_size'] == '2' and r['img_size'] == '64' and r['threads'] == '1'

    md = prefix.with_suffix('.md').read_text()
    for r in rows:
        line = f'| {r["what"]} | {r["target"]} | {r["floor"]} | '
        assert re.search(re.escape(line) + r'\d+\.\d\dx \| \d+\.\d\d-\d+\.\d\d \| ' + re.escape(r['verdict']), md)
    assert 'Per run:' in md and md.count('\n| 1 |') == 1
