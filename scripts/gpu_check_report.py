"""The summary of a ``scripts/gpu_check.sh`` results folder, as markdown on stdout: each step's exit status and time,
the per-model smoke table and the compiled table (each model ran in its own process), with ratios to the ConvNeXt
baseline (the first ``convnext_*`` model), and where the eager table and the 7x7 budget are.

    python scripts/gpu_check_report.py results/gpu_check
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path


def _rows(paths: list[Path]) -> list[dict]:
    rows = []
    for path in sorted(paths):
        with open(path, newline='') as f:
            rows += list(csv.DictReader(f))
    return rows


def _num(row: dict, key: str) -> float | None:
    try:
        return float(row[key])
    except (KeyError, TypeError, ValueError):
        return None


def _table(rows: list[dict], title: str) -> list[str]:
    """Throughput, step time and peak memory per model, and their ratios to the baseline's."""
    if not rows:
        return [f'## {title}', '', 'no results (every run failed or was cut: see steps above)', '']
    base = next((r for r in rows if r['model'].startswith('convnext_')), rows[0])
    out = [f'## {title}', '', f'ratios to {base["model"]}', '']
    out += ['| model | eval img/s | eval ratio | train step ms | step time ratio | train peak MB | memory ratio |']
    out += ['| --- | --- | --- | --- | --- | --- | --- |']
    for r in rows:
        infer, train, mem = _num(r, 'infer_img_s'), _num(r, 'train_img_s'), _num(r, 'train_peak_mb')
        b_infer, b_train, b_mem = _num(base, 'infer_img_s'), _num(base, 'train_img_s'), _num(base, 'train_peak_mb')
        batch = _num(r, 'batch_size')
        step_ms = _num(r, 'train_step_ms') or (1000 * batch / train if train and batch else None)
        cells = [
            r['model'],
            f'{infer:.1f}' if infer else '-',
            f'{infer / b_infer:.3f}' if infer and b_infer else '-',
            f'{step_ms:.2f}' if step_ms else '-',
            f'{b_train / train:.3f}' if train and b_train else '-',
            f'{mem:.0f}' if mem else '-',
            f'{mem / b_mem:.3f}' if mem and b_mem else '-',
        ]
        out.append('| ' + ' | '.join(cells) + ' |')
    return out + ['']


def report(folder: Path) -> list[str]:
    lines = [f'# GPU check: {folder}', '']
    versions = folder / '01_versions.txt'
    if versions.exists():
        lines += ['```', *versions.read_text().splitlines()[:3], '```', '']
    lines += ['| step | exit status | seconds |', '| --- | --- | --- |']
    steps = (folder / 'steps.tsv').read_text().splitlines() if (folder / 'steps.tsv').exists() else []
    lines += ['| ' + ' | '.join(s.split('\t')) + ' |' for s in steps]
    lines += ['', '(exit status 124: cut by its time cap; skipped: the budget was spent)', '']
    lines += _table(_rows(list((folder / 'smoke').glob('*.csv'))), 'Smoke (eager, each model in its own process)')
    compiled = [p for p in (folder / 'compiled').glob('*/gpu_*.csv') if not p.name.endswith('_raw.csv')]
    lines += _table(_rows(compiled), 'Compiled (each model in its own process)')
    eager = [p for p in (folder / 'eager').glob('gpu_*.md')]
    lines += [f'Eager table (interleaved rounds, one process): {eager[0]}' if eager else 'Eager table: not produced']
    budget = folder / 'dwconv_budget.md'
    lines += [f'The 7x7 budget: {budget}' if budget.exists() else 'The 7x7 budget: not produced']
    return lines


if __name__ == '__main__':
    print('\n'.join(report(Path(sys.argv[1]))))
