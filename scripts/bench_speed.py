"""The speed targets of MRConvNeXt-T and TaLK-ConvNeXt-T against timm's ConvNeXt-T (not a test: a measurement).

    python scripts/bench_speed.py                     # fp32, 224x224, batch 16, 2 threads, 5 runs x 9 rounds (~10 min)
    python scripts/bench_speed.py --baseline convnext_atto --mr-model mrconvnext_atto \\
        --talk-model talkconvnext_atto --img-size 64 -b 4 --runs 2 --num-bench-iter 2   # a quick check

Targets (ratios against ``--baseline``, measured side by side in the same process):

* reparameterized ``--mr-model`` eval throughput / baseline eval throughput: >= 1.00x (floor 0.90x);
* ``--mr-model`` training step time (forward + backward + optimizer step, branched with BatchNorm, as built)
  / baseline step time: <= 1.25x (floor 1.50x); a time ratio, lower is better;
* ``--talk-model`` eval throughput / baseline eval throughput: >= 1.00x (floor 0.95x);
* peak memory of a ``--mr-model`` training step / the baseline's: <= 1.5x (floor 2x).

Method: ``--runs`` independent runs, each two fresh ``python -m mrconvnext.tools.benchmark`` processes (see
``mrconvnext/tools/benchmark.py``): ``--bench inference --models BASELINE MR:reparam TALK`` for the eval
ratios and ``--bench train --models BASELINE MR`` for step time and memory (eval batches are not timed
between multi-GB training steps). In each, every model is built and warmed up (``--num-warm-iter``), then
timed in ``--num-bench-iter`` interleaved rounds (one batch of every model per round, rotating order, so
background load on a shared machine hits all models alike) with the wall clock; throughput = batch /
median batch time. Peak memory is the growth of the peak resident set size of a fresh
process per model (weights + activations + allocator overhead; the training peak includes an inference run
before it). Each run gives the four ratios; the table reports their median over runs, the min-max, and a
verdict on the median: ``target met``, ``floor met`` or ``missed by X%`` (how far the median lies beyond
the floor, in percent of the floor). A second table gives each run's raw img/s and MB.

Written: ``--out-prefix`` + ``.csv`` (one row per target) and ``.md`` (both tables, for a README). The exit
code is 0 whether or not the targets are met.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _bench import ROOT, Column, format_table, write_csv, write_doc_section


@dataclass(frozen=True)
class Target:
    """One speed target: ``key`` of a per-run ratio; ``higher_is_better`` says which way target and floor point."""

    key: str
    what: str
    target: float
    floor: float
    higher_is_better: bool

    def bound(self, value: float) -> str:
        return f'{">=" if self.higher_is_better else "<="} {value:.2f}x'


def make_targets(baseline: str, mr: str, talk: str) -> list[Target]:
    """The four targets of the Speed issue, labelled with the models compared."""
    return [
        Target('reparam_eval', f'reparameterized {mr} eval throughput vs {baseline}', 1.00, 0.90, True),
        Target('train_step_time', f'{mr} training step time (branched, BN) vs {baseline}', 1.25, 1.50, False),
        Target('talk_eval', f'{talk} eval throughput vs {baseline}', 1.00, 0.95, True),
        Target('train_memory', f'{mr} training-step peak memory vs {baseline}', 1.5, 2.0, False),
    ]


def _div(a: Any, b: Any) -> float | None:
    return a / b if a is not None and b else None


def _by_model(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r['model']: r for r in rows}


def ratios_from_rows(rows: Sequence[dict[str, Any]], baseline: str, mr: str, talk: str) -> dict[str, float | None]:
    """The four target ratios of one benchmark run (rows as ``mrconvnext.tools.benchmark.run`` returns them).

    Eval and memory ratios are model / baseline; ``train_step_time`` is a time ratio, baseline img/s / model
    img/s (= model step time / baseline step time). ``None`` where a number is missing.
    """
    by = _by_model(rows)
    base, branched, rep, tk = by[baseline], by[mr], by[f'{mr}:reparam'], by[talk]
    return {
        'reparam_eval': _div(rep.get('infer_img_s'), base.get('infer_img_s')),
        'train_step_time': _div(base.get('train_img_s'), branched.get('train_img_s')),
        'talk_eval': _div(tk.get('infer_img_s'), base.get('infer_img_s')),
        'train_memory': _div(branched.get('train_peak_mb'), base.get('train_peak_mb')),
    }


RAW_KEYS = (
    ('base_eval', 'baseline', 'infer_img_s'),
    ('reparam_eval', 'reparam', 'infer_img_s'),
    ('talk_eval', 'talk', 'infer_img_s'),
    ('base_train', 'baseline', 'train_img_s'),
    ('mr_train', 'mr', 'train_img_s'),
    ('base_mb', 'baseline', 'train_peak_mb'),
    ('mr_mb', 'mr', 'train_peak_mb'),
)


def raw_from_rows(rows: Sequence[dict[str, Any]], baseline: str, mr: str, talk: str) -> dict[str, float | None]:
    """The raw numbers behind the ratios of one run: img/s (eval, train) and training peak MB."""
    by = _by_model(rows)
    spec = {'baseline': baseline, 'mr': mr, 'reparam': f'{mr}:reparam', 'talk': talk}
    return {key: by[spec[who]].get(field) for key, who, field in RAW_KEYS}


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def verdict(value: float | None, target: float, floor: float, higher_is_better: bool) -> str:
    """``target met``, ``floor met``, ``missed by X%`` (distance beyond the floor in % of it), or ``no data``."""
    if not _finite(value):
        return 'no data'
    sign = 1.0 if higher_is_better else -1.0
    if sign * (value - target) >= 0:
        return 'target met'
    if sign * (value - floor) >= 0:
        return 'floor met'
    pct = 100.0 * sign * (floor - value) / floor
    return f'missed by {pct:.1f}%' if pct >= 0.05 else 'missed by <0.1%'


def summarize(per_run: Sequence[dict[str, float | None]], targets: Sequence[Target]) -> list[dict[str, Any]]:
    """One row per target: median / min / max of its ratio over the runs (missing values skipped), verdict."""
    out = []
    for t in targets:
        values = [r.get(t.key) for r in per_run]
        ok = [v for v in values if _finite(v)]
        med = statistics.median(ok) if ok else None
        out.append(
            {
                'key': t.key,
                'what': t.what,
                'target': t.bound(t.target),
                'floor': t.bound(t.floor),
                'median': med,
                'min': min(ok) if ok else None,
                'max': max(ok) if ok else None,
                'runs': len(ok),
                'per_run': ';'.join(f'{v:.4f}' if _finite(v) else '' for v in values),
                'verdict': verdict(med, t.target, t.floor, t.higher_is_better),
            }
        )
    return out


# ------------------------------------------------------------------------------------------------ tables


def _round(v: float | None, nd: int = 4) -> float | None:
    return round(v, nd) if _finite(v) else None


def _num(v: Any, nd: int) -> str:
    return f'{v:.{nd}f}' if _finite(v) else '-'


def _spread(row: dict[str, Any]) -> str:
    return f'{_num(row["min"], 2)}-{_num(row["max"], 2)}' if row['runs'] else '-'


def summary_columns(width: int) -> list[Column]:
    return [
        Column('what', width, 'what', align='<'),
        Column('target', 9, 'target', gap=2),
        Column('floor', 9, 'floor', gap=2),
        Column('median', 7, lambda r: _num(r['median'], 2) + 'x' if _finite(r['median']) else '-', gap=2),
        Column('min-max', 11, _spread, gap=2),
        Column('verdict', 16, 'verdict', align='<', gap=2),
    ]


RAW_COLUMNS = [
    Column('run', 3, 'run'),
    *(
        Column(h, len(h), lambda r, k=k, nd=nd: _num(r[k], nd), gap=2)
        for k, h, nd in (
            ('base_eval', 'base eval img/s', 1),
            ('reparam_eval', 'reparam eval img/s', 1),
            ('talk_eval', 'talk eval img/s', 1),
            ('base_train', 'base train img/s', 1),
            ('mr_train', 'mr train img/s', 1),
            ('base_mb', 'base train MB', 0),
            ('mr_mb', 'mr train MB', 0),
            ('r_reparam_eval', 'eval x', 2),
            ('r_train_step_time', 'step x', 2),
            ('r_talk_eval', 'talk x', 2),
            ('r_train_memory', 'mem x', 2),
        )
    ),
]


def _cell(c: Column, row: dict[str, Any]) -> str:
    v = c.value(row) if callable(c.value) else row[c.value]
    return format(v, c.fmt) if isinstance(v, (int, float)) and c.fmt else str(v)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> list[str]:
    """The same columns as a GitHub markdown table (left-aligned text, right-aligned numbers)."""
    rule = ['---' if c.align == '<' else '---:' for c in columns]
    lines = ['| ' + ' | '.join(c.header for c in columns) + ' |', '| ' + ' | '.join(rule) + ' |']
    return lines + ['| ' + ' | '.join(_cell(c, r) for c in columns) + ' |' for r in rows]


def per_run_rows(raw: Sequence[dict[str, Any]], ratios: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of the per-run table: raw numbers plus the ratios (``r_`` prefix)."""
    return [
        dict(run=i + 1, **rw, **{f'r_{k}': v for k, v in rt.items()}) for i, (rw, rt) in enumerate(zip(raw, ratios))
    ]


# ------------------------------------------------------------------------------------------------ running


def benchmark_commands(args: argparse.Namespace, tmp: Path) -> list[tuple[list[str], Path]]:
    """The two processes of one run: eval throughput (baseline, reparameterized MR, TaLK; no training steps in
    between, whose multi-GB allocations would disturb the eval timings) and training (baseline, branched MR:
    step time and peak memory)."""
    common = ['-b', str(args.batch_size), '--threads', str(args.threads), '--img-size', str(args.img_size)]
    common += ['--num-warm-iter', str(args.num_warm_iter), '--num-bench-iter', str(args.num_bench_iter)]
    common += ['--device', args.device]
    tool = [sys.executable, '-m', 'mrconvnext.tools.benchmark']
    evals = [args.baseline, f'{args.mr_model}:reparam', args.talk_model]
    out = []
    for kind, models, extra in (('inference', evals, ['--no-memory']), ('train', [args.baseline, args.mr_model], [])):
        path = tmp / f'{kind}.json'
        out.append(([*tool, '--models', *models, '--bench', kind, *common, *extra, '--results-file', str(path)], path))
    return out


def merge_rows(*runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of several processes merged per model; a number (not None) from a later process wins."""
    merged: dict[str, dict[str, Any]] = {}
    for rows in runs:
        for row in rows:
            dst = merged.setdefault(row['model'], {})
            dst.update({k: v for k, v in row.items() if v is not None or k not in dst})
    return list(merged.values())


def run_once(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One run: the eval and the training process (fresh, this checkout's package); their merged rows."""
    env = dict(os.environ)
    env['PYTHONPATH'] = str(ROOT) + (os.pathsep + env['PYTHONPATH'] if env.get('PYTHONPATH') else '')
    runs = []
    with tempfile.TemporaryDirectory(prefix='bench_speed_') as tmp:
        for cmd, out in benchmark_commands(args, Path(tmp)):
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
            if proc.returncode != 0 or not out.exists():
                raise RuntimeError(f'benchmark run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}')
            if 'memory measurement' in proc.stderr:  # the tool logs a failed memory subprocess and goes on
                print(proc.stderr.strip()[-1000:], file=sys.stderr)
            data = json.loads(out.read_text())
            runs.append(data if isinstance(data, list) else [data])  # write_results stores one row as a dict
    return merge_rows(*runs)


def _cpu_name() -> str:
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def header_line(args: argparse.Namespace, threads: Any, command: str) -> str:
    return (
        f'{args.device}: {_cpu_name()} ({os.cpu_count()} CPUs), {threads} torch thread(s); fp32, batch {args.batch_size} '
        f'at {args.img_size}x{args.img_size}; {args.runs} runs (each an eval and a training process) x '
        f'{args.num_bench_iter} interleaved rounds after {args.num_warm_iter} warm-up; models: base = {args.baseline}, '
        f'mr = {args.mr_model}, reparam = {args.mr_model}:reparam, talk = {args.talk_model}; command: {command}'
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--baseline', default='convnext_tiny')
    p.add_argument('--mr-model', default='mrconvnext_t')
    p.add_argument('--talk-model', default='talkconvnext_t')
    p.add_argument('-b', '--batch-size', type=int, default=16)
    p.add_argument('--threads', type=int, default=2)
    p.add_argument('--img-size', type=int, default=224)
    p.add_argument('--num-warm-iter', type=int, default=1)
    p.add_argument('--num-bench-iter', type=int, default=9, help='interleaved timed rounds per run')
    p.add_argument('--runs', type=int, default=5, help='independent runs, each an eval and a training process')
    p.add_argument('--device', default='cpu', help='the targets are CPU targets; the header names the CPU')
    p.add_argument('--out-prefix', default='results/speed_targets', help='writes PREFIX.csv and PREFIX.md')
    p.add_argument('--doc', action='store_true', help='also write the tables as a section of docs/benchmarks.md')
    return p


CSV_FIELDS = ['key', 'what', 'target', 'floor', 'median', 'min', 'max', 'runs', 'per_run', 'verdict']
CONFIG_FIELDS = ['baseline', 'mr_model', 'talk_model', 'batch_size', 'img_size', 'threads', 'num_warm_iter']
CONFIG_FIELDS += ['num_bench_iter', 'device', 'cpu', 'cpu_count', 'command']


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Runs the benchmark ``--runs`` times, prints and writes the target table; returns its rows."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    command = shlex.join(['python', 'scripts/bench_speed.py', *argv])
    names = (args.baseline, args.mr_model, args.talk_model)
    raw, ratios, threads = [], [], args.threads
    for i in range(args.runs):
        t0 = time.perf_counter()
        rows = run_once(args)
        threads = rows[0].get('threads', threads)
        raw.append(raw_from_rows(rows, *names))
        ratios.append(ratios_from_rows(rows, *names))
        shown = ', '.join(f'{k} {_num(v, 2)}x' for k, v in ratios[-1].items())
        print(f'run {i + 1}/{args.runs} ({time.perf_counter() - t0:.0f} s): {shown}', flush=True)

    targets = make_targets(*names)
    summary = summarize(ratios, targets)
    per_run = per_run_rows(raw, ratios)
    header = header_line(args, threads, command)
    columns = summary_columns(max(len(t.what) for t in targets))
    print('\n' + header)
    print('\n'.join(line.rstrip() for line in format_table(summary, columns)))
    print('\nper run (img/s = batch / median batch time; MB = training peak RSS growth; x = ratios above)')
    print('\n'.join(format_table(per_run, RAW_COLUMNS)))

    prefix = Path(args.out_prefix)
    config = {k: getattr(args, k) for k in CONFIG_FIELDS if hasattr(args, k)}
    config.update(threads=threads, cpu=_cpu_name(), cpu_count=os.cpu_count(), command=command)
    csv_rows = [dict(r, **{k: _round(r[k]) for k in ('median', 'min', 'max')}, **config) for r in summary]
    csv_path = write_csv(prefix.with_name(prefix.name + '.csv'), csv_rows, CSV_FIELDS + CONFIG_FIELDS)
    md_header = header.replace(f'command: {command}', f'command: `{command}`')
    md = [md_header, '', *markdown_table(summary, columns), '', 'Per run:', '', *markdown_table(per_run, RAW_COLUMNS)]
    md_path = prefix.with_name(prefix.name + '.md')
    md_path.write_text('\n'.join(md) + '\n')
    print(f'\nwrote {csv_path} and {md_path}')
    if args.doc:
        shown = [a for a in argv if a != '--doc']
        if '--out-prefix' in shown:  # where the files went is not part of the measurement
            del shown[shown.index('--out-prefix') : shown.index('--out-prefix') + 2]
        title = f'Speed targets on the CPU: {args.mr_model} and {args.talk_model} against {args.baseline}'
        lines = [
            md_header.split('; command:')[0],  # the section names its command itself
            '',
            *markdown_table(summary, columns),
            '',
            'Per run:',
            '',
            *markdown_table(per_run, RAW_COLUMNS),
        ]
        doc = write_doc_section('speed_targets', title, shlex.join(['python', 'scripts/bench_speed.py', *shown]), lines)
        print(f'wrote {doc}')
    return summary


if __name__ == '__main__':
    main()
