"""scripts/gpu_check.sh: the dry run proves every step's plumbing on the CPU; a failing step does not stop the later
ones; a spent budget skips what is left, and the summary still comes out."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest
import torch

from tests.limits import HANG_LIMIT_S

from .conftest import REPO

SCRIPT = REPO / 'scripts' / 'gpu_check.sh'
STEPS = ['01_versions', '03_eager_table', '04_dwconv_budget', '05_cuda_suite', '06_ops_talk', '06_ops_dynconv']
STEPS += ['06_ops_longconv', '07_compiled_mrconvnext_atto_reparam']
# the script's steps run $PYTHON (else the first `python` on PATH): the interpreter of this test run, whether or not
# its environment is activated
ENV = dict(os.environ, PYTHON=sys.executable)


def _run(tmp_path, *args: str, status: int = 0) -> dict[str, str]:
    proc = subprocess.run(
        ['bash', str(SCRIPT), '--dry-run', '--out', str(tmp_path), *args],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=HANG_LIMIT_S,
    )
    assert proc.returncode == status, proc.stdout[-2000:] + proc.stderr[-2000:]
    steps = dict(line.split('\t')[:2] for line in (tmp_path / 'steps.tsv').read_text().splitlines())
    assert (tmp_path / 'summary.md').read_text() in proc.stdout
    return steps


def test_dry_run_runs_every_step_and_a_failing_model_does_not_stop_the_rest(tmp_path):
    steps = _run(tmp_path, '--models', 'not_a_model,mrconvnext_atto:reparam', status=1)  # 1: a step failed
    assert steps.pop('02_smoke_not_a_model') == '1', 'an unknown model fails its own smoke step'
    assert steps == {'02_smoke_mrconvnext_atto_reparam': '0', **dict.fromkeys(STEPS, '0')}, steps
    # the eager table holds the models whose smoke passed, and every step wrote its output
    (table,) = (tmp_path / 'eager').glob('gpu_*_eager_raw.csv')
    with open(table, newline='') as f:
        assert [r['model'] for r in csv.DictReader(f)] == ['mrconvnext_atto:reparam']
    for name in steps:
        assert (tmp_path / f'{name}.txt').stat().st_size > 0, name
    assert 'stage' in (tmp_path / 'dwconv_budget.md').read_text()
    summary = (tmp_path / 'summary.md').read_text()
    assert '| 02_smoke_not_a_model | 1 |' in summary and '| mrconvnext_atto:reparam |' in summary


def test_a_spent_budget_skips_the_remaining_steps(tmp_path):
    steps = _run(tmp_path, '--models', 'convnext_atto', '--budget', '2')  # 0: skipped steps are not failures
    assert set(steps.values()) == {'skipped'} and '01_versions' in steps, steps


@pytest.mark.skipif(torch.cuda.is_available(), reason='a GPU is visible: the script would run for real')
def test_without_a_gpu_it_runs_nothing_and_says_so(tmp_path):
    proc = subprocess.run(['bash', str(SCRIPT), '--out', str(tmp_path)], capture_output=True, text=True, env=ENV)
    assert proc.returncode == 1 and 'no CUDA GPU is visible' in proc.stderr, proc.stderr
    assert not (tmp_path / 'steps.tsv').exists()


def test_steps_selects_only_the_named_steps_and_rejects_others(tmp_path):
    # a spent budget records each selected step as skipped without running it (the first test runs every step): the
    # selection is what is checked here
    steps = _run(tmp_path, '--models', 'convnext_atto', '--steps', '01,04', '--budget', '0')
    assert steps == {'01_versions': 'skipped', '04_dwconv_budget': 'skipped'}, steps
    proc = subprocess.run(
        ['bash', str(SCRIPT), '--dry-run', '--out', str(tmp_path), '--steps', '01,8'],
        text=True,
        capture_output=True,
        env=ENV,
    )
    assert proc.returncode == 2 and "got '01,8'" in proc.stderr, proc.stderr
