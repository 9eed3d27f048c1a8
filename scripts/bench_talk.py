"""CPU benchmark of the TaLK mixers: the ops by engine, and TaLK-ConvNeXt model throughput.

Part ``ops``: ``mrconvnext.ops.talk.talk1d`` / ``talk2d`` with ``engine='native'`` (C++ kernel),
``'torch'`` (fused PyTorch fallback) and the pure reference ``talk1d_reference`` / ``talk2d_reference``
(autograd through cumsum + gather), at the first ConvNeXt-T stage: B=16, C=96, 56x56, 6 heads (16 channels
per head), maximum offsets as the models set them (1D over the flattened map: ``max_left = max_right =
L // 2``; 2D: left/right ``W // 2``, top/bottom ``H // 2``), offsets uniform in [0, 1) (what the sigmoid
yields). Modes: ``fwd`` = forward under ``torch.no_grad()``; ``fwd+bwd`` = forward + backward of
``y.sum()`` with gradients for x and the offsets. The offset projection is not part of the op and not
timed. ``--reference-batch`` runs the reference at a smaller batch (labelled by its B; native then also
runs at that batch, so that every ratio compares equal batches).

Method (``scripts/_bench.py``): every (op, impl, mode) case runs in fresh subprocesses, each after
``--warmup`` untimed calls: ``--rounds`` of them time ``--repeats`` calls each (the sweep over the cases
runs forwards, then backwards, ...; the table pools all timed calls: median, min, max), one measures the
peak extra resident memory of one call (``VmHWM - VmRSS`` after resetting the peak mark, glibc mmap
threshold fixed so that freed tensors leave the RSS; inputs excluded). Pooling rounds taken minutes apart
keeps one burst of background load on a shared machine from deciding a case's median.

Part ``models``: eval-mode, ``no_grad`` throughput (img/s) of ``--models`` (default timm
``convnext_tiny``, ``talkconvnext_t``, ``talkconvnext2d_t``; randomly initialized) on a
``--batch`` x 3 x ``--img-size``^2 input. All models live in ONE fresh worker process and are timed
interleaved: after ``--warmup`` calls of each, ``--repeats`` rounds, each calling every model once, the
order rotating from round to round. A shared machine's background load drifts over seconds, and interleaving
makes the drift hit every model alike, which a process per model run one after the other would not. The
table gives the median batch time, its spread, img/s = batch / median, and the ratio of img/s to the first
model (``convnext_tiny`` by default), with the min-max of the per-round ratios.

    python scripts/bench_talk.py [--part ops|models|all] [--repeats 5] [--rounds 2] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from _bench import (
    Column,
    measure,
    print_table,
    ratio,
    run_case,
    serve_worker,
    setup_torch,
    spawn,
    spread,
    timing_stats,
    write_csv,
)

OPS = ('talk1d', 'talk2d')
IMPLS = ('native', 'torch', 'reference')
MODES = ('fwd', 'fwd+bwd')
MODELS = ('convnext_tiny', 'talkconvnext_t', 'talkconvnext2d_t')

OP_FIELDS = [
    'op',
    'mode',
    'impl',
    'median_ms',
    'min_ms',
    'max_ms',
    'peak_extra_mb',
    'time_ratio_vs_native',
    'mem_ratio_vs_native',
    'B',
    'C',
    'Hh',
    'Ww',
    'L',
    'heads',
    'max_offsets',
    'threads',
    'repeats',
    'rounds',
    'load_avg_1m',
]
OP_COLUMNS = [
    Column('op', 8, 'op', align='<'),
    Column('mode', 9, 'mode', align='<'),
    Column('impl', 10, 'impl', align='<'),
    Column('B', 4, 'B'),
    Column('median ms', 11, 'median_ms', '.1f'),
    Column('min-max ms', 18, spread),
    Column('peak MB', 10, 'peak_extra_mb', '.1f'),
    Column('t/native', 10, lambda r: _fmt_ratio(r['time_ratio_vs_native'])),
    Column('mem/native', 11, lambda r: _fmt_ratio(r['mem_ratio_vs_native'])),
]
MODEL_FIELDS = [
    'model',
    'median_ms',
    'min_ms',
    'max_ms',
    'img_per_s',
    'ratio_vs_base',
    'round_ratio_min',
    'round_ratio_max',
    'base',
    'params_m',
    'talk_backend',
    'batch',
    'img_size',
    'threads',
    'warmup',
    'repeats',
    'load_avg_1m',
]
MODEL_COLUMNS = [
    Column('model', 18, 'model', align='<'),
    Column('params M', 9, 'params_m', '.1f'),
    Column('TaLK op', 9, 'talk_backend'),
    Column('median ms', 11, 'median_ms', '.0f'),
    Column('min-max ms', 15, lambda r: spread(r, 0)),
    Column('img/s', 8, 'img_per_s', '.1f'),
    Column('vs base', 9, 'ratio_vs_base', '.2f'),
    Column('rounds min-max', 16, lambda r: f'{r["round_ratio_min"]:.2f}-{r["round_ratio_max"]:.2f}'),
]


def _fmt_ratio(v: float | None) -> str:
    return '-' if v is None else f'{v:.2f}'


def _load_range(start: float) -> str:
    """1-minute load average at the start and the end of a part: the machine is shared, so a load above the
    core count means other processes compete with the measured threads."""
    return f'{start:.1f}-{os.getloadavg()[0]:.1f}'


# ------------------------------------------------------------------------------------------------- workers


def ops_worker(case: dict) -> dict:
    """One (op, impl, mode) case, one phase, in this fresh process."""
    import torch

    from mrconvnext.ops import talk

    threads = setup_torch(case['threads'])
    B, C, S, H = case['B'], case['C'], case['size'], case['heads']
    train = case['mode'] == 'fwd+bwd'
    # In-place initialisation so that setup leaves no freed temporaries that could hide the peak.
    if case['op'] == 'talk1d':
        L = S * S
        x, off, maxes = torch.randn(B, C, L), torch.rand(B, H, L, 2), (L // 2, L // 2)
        fn = talk.talk1d_reference if case['impl'] == 'reference' else talk.talk1d
    else:
        x, off, maxes = torch.randn(B, C, S, S), torch.rand(B, H, S, S, 4), (S // 2, S // 2, S // 2, S // 2)
        fn = talk.talk2d_reference if case['impl'] == 'reference' else talk.talk2d
    kw = {} if case['impl'] == 'reference' else {'engine': case['impl']}
    x.requires_grad_(train)
    off.requires_grad_(train)

    def call() -> None:
        if train:
            x.grad = off.grad = None
            fn(x, off, *maxes, **kw).sum().backward()
        else:
            with torch.no_grad():
                fn(x, off, *maxes, **kw)

    def drop_grads() -> None:
        x.grad = off.grad = None  # the measured call allocates its gradients afresh

    # After the warm-up, one-time costs (extension loading, library pages) are not counted.
    return dict(measure(case, call, drop_grads), threads=threads)


def models_worker(case: dict) -> dict:
    """All models of the case in this fresh process, timed in interleaved, rotating rounds."""
    import timm
    import torch

    import mrconvnext  # noqa: F401 - registers the TaLK-ConvNeXt models with timm
    from mrconvnext.ops.talk.dispatch import talk_engine

    threads = setup_torch(case['threads'])
    names = case['models']
    models = {n: timm.create_model(n, pretrained=False).eval() for n in names}
    x = torch.randn(case['batch'], 3, case['img_size'], case['img_size'])
    info = {}
    for n, m in models.items():
        is_talk = any('TaLK' in type(mod).__name__ for mod in m.modules())
        info[n] = {
            'params_m': sum(p.numel() for p in m.parameters()) / 1e6,
            'talk_backend': talk_engine('cpu', 'auto') if is_talk else '-',
        }
    times: dict[str, list[float]] = {n: [] for n in names}
    with torch.no_grad():
        for n in names:
            for _ in range(case['warmup']):
                models[n](x)
        for r in range(case['repeats']):
            order = names[r % len(names) :] + names[: r % len(names)]
            for n in order:
                t0 = time.perf_counter()
                models[n](x)
                times[n].append((time.perf_counter() - t0) * 1e3)
    return {'times': times, 'info': info, 'threads': threads}


# ------------------------------------------------------------------------------------------------- parents


def _op_cases(args: argparse.Namespace) -> list[dict]:
    """All (op, mode, impl, B) cases; native also at the reference's batch when that differs (equal-B ratios)."""
    ref_B = args.reference_batch or args.batch
    base = {'C': args.channels, 'size': args.size, 'heads': args.heads, 'threads': args.threads}
    common = {'kind': 'ops', 'repeats': args.repeats, 'warmup': args.warmup}
    cases = []
    for op in args.ops:
        for mode in args.modes:
            impl_b = [(impl, ref_B if impl == 'reference' else args.batch) for impl in args.impls]
            if 'reference' in args.impls and 'native' in args.impls and ref_B != args.batch:
                impl_b.insert(1, ('native', ref_B))
            cases += [dict(base, **common, op=op, mode=mode, impl=impl, B=B) for impl, B in impl_b]
    return cases


def bench_ops(args: argparse.Namespace) -> None:
    S = args.size
    load0 = os.getloadavg()[0]
    cases = _op_cases(args)
    key = lambda c: (c['op'], c['mode'], c['impl'], c['B'])
    res: dict[tuple, dict] = {}
    # Round 0 times and measures memory (deterministic, once); later rounds time again, in reverse order on odd
    # rounds, so that a burst of background load does not land on the same cases every round.
    for rnd in range(args.rounds):
        for case in cases if rnd % 2 == 0 else cases[::-1]:
            r = run_case(__file__, case, memory=rnd == 0)
            if rnd == 0:
                res[key(case)] = r
            else:
                res[key(case)]['times_ms'] += r['times_ms']
            print(
                f'  round {rnd + 1}/{args.rounds} {case["op"]} {case["mode"]} {case["impl"]} B={case["B"]}: '
                f'{r["median_ms"]:.1f} ms',
                file=sys.stderr,
            )
    for r in res.values():
        r.update(timing_stats(r['times_ms']))  # pooled over the rounds

    rows = []
    for case in cases:
        op, mode, impl, B = key(case)
        r, nat = res[key(case)], res.get((op, mode, 'native', B))
        rows.append(
            {
                'op': op,
                'mode': mode,
                'impl': impl,
                'median_ms': round(r['median_ms'], 2),
                'min_ms': round(r['min_ms'], 2),
                'max_ms': round(r['max_ms'], 2),
                'peak_extra_mb': round(r['peak_extra_mb'], 1),
                'time_ratio_vs_native': nat and ratio(r['median_ms'], nat['median_ms']),
                # no ratio to a peak below the measurement's resolution (tiny test shapes)
                'mem_ratio_vs_native': (
                    ratio(r['peak_extra_mb'], nat['peak_extra_mb']) if nat and nat['peak_extra_mb'] >= 0.1 else None
                ),
                'B': B,
                'C': args.channels,
                'Hh': S,
                'Ww': S,
                'L': S * S,
                'heads': args.heads,
                'max_offsets': f'{S * S // 2}/{S * S // 2}' if op == 'talk1d' else '/'.join([str(S // 2)] * 4),
                'threads': r['threads'],
                'repeats': args.repeats,
                'rounds': args.rounds,
            }
        )
    load = _load_range(load0)
    for r in rows:
        r['load_avg_1m'] = load
    out = write_csv(args.out_ops, rows, OP_FIELDS)
    print(
        f'TaLK ops: C={args.channels} {S}x{S} (L={S * S}) heads={args.heads} threads={rows[0]["threads"]} '
        f'warmup={args.warmup} repeats={args.repeats} x rounds={args.rounds} (times pooled); max offsets 1D '
        f'{S * S // 2}/{S * S // 2}, 2D {S // 2}/{S // 2}/{S // 2}/{S // 2}; peak = extra resident memory of one '
        f'call (VmHWM - VmRSS); ratios vs native at the same B; load avg (1 min, start-end) {load} on '
        f'{os.cpu_count()} CPUs'
    )
    print_table(rows, OP_COLUMNS)
    print(f'wrote {out}')


def bench_models(args: argparse.Namespace) -> None:
    names = list(args.models)
    case = {
        'kind': 'models',
        'models': names,
        'batch': args.batch,
        'img_size': args.img_size,
        'threads': args.threads,
        'warmup': args.model_warmup,
        'repeats': args.repeats,
    }
    print(f'  running models {names} (one worker, interleaved rounds)', file=sys.stderr)
    load0 = os.getloadavg()[0]
    res = spawn(__file__, case)
    load = _load_range(load0)
    times, base = res['times'], names[0]
    base_med = statistics.median(times[base])
    rows = []
    for n in names:
        t = times[n]
        med = statistics.median(t)
        per_round = [tb / tm for tb, tm in zip(times[base], t)]  # paired: same round, same background load
        rows.append(
            {
                'model': n,
                'median_ms': round(med, 1),
                'min_ms': round(min(t), 1),
                'max_ms': round(max(t), 1),
                'img_per_s': round(args.batch / (med / 1e3), 2),
                'ratio_vs_base': ratio(base_med, med, 3),
                'round_ratio_min': round(min(per_round), 3),
                'round_ratio_max': round(max(per_round), 3),
                'base': base,
                'params_m': round(res['info'][n]['params_m'], 2),
                'talk_backend': res['info'][n]['talk_backend'],
                'batch': args.batch,
                'img_size': args.img_size,
                'threads': res['threads'],
                'warmup': args.model_warmup,
                'repeats': args.repeats,
                'load_avg_1m': load,
            }
        )
    out = write_csv(args.out_models, rows, MODEL_FIELDS)
    print(
        f'Models, eval no_grad: batch={args.batch} {args.img_size}x{args.img_size} threads={res["threads"]} '
        f'warmup={args.model_warmup} repeats={args.repeats} (interleaved rounds, one process); '
        f'vs base = img/s ratio to {base} (ratio of medians), rounds = per-round paired ratios; '
        f'load avg (1 min, start-end) {load} on {os.cpu_count()} CPUs'
    )
    print_table(rows, MODEL_COLUMNS)
    print(f'wrote {out}')


def worker(case: dict) -> dict:
    return models_worker(case) if case['kind'] == 'models' else ops_worker(case)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--part', choices=['ops', 'models', 'all'], default='all')
    ap.add_argument('--repeats', type=int, default=5, help='timed calls per op case / rounds of the models')
    ap.add_argument('--warmup', type=int, default=1, help='untimed calls per op case before measuring')
    ap.add_argument('--rounds', type=int, default=2, help='timing processes per op case (times pooled)')
    ap.add_argument('--model-warmup', type=int, default=2, help='untimed calls per model before the rounds')
    ap.add_argument('--threads', type=int, default=2, help='torch threads (0: torch default)')
    ap.add_argument('--batch', type=int, default=16)
    # ops
    ap.add_argument('--channels', type=int, default=96)
    ap.add_argument('--size', type=int, default=56, help='square feature map side; L = size**2')
    ap.add_argument('--heads', type=int, default=6)
    ap.add_argument('--ops', nargs='+', default=list(OPS), choices=OPS)
    ap.add_argument('--impls', nargs='+', default=list(IMPLS), choices=IMPLS)
    ap.add_argument('--modes', nargs='+', default=list(MODES), choices=MODES)
    ap.add_argument('--reference-batch', type=int, default=0, help='batch of the reference (0: --batch)')
    ap.add_argument('--out-ops', default='results/bench_talk_ops.csv')
    # models
    ap.add_argument('--models', nargs='+', default=list(MODELS), help='timm names; the first is the base')
    ap.add_argument('--img-size', type=int, default=224)
    ap.add_argument('--out-models', default='results/bench_talk_models.csv')
    ap.add_argument('--worker', help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        serve_worker(worker, args.worker)
        return
    if args.part in ('ops', 'all'):
        bench_ops(args)
    if args.part in ('models', 'all'):
        if args.part == 'all':
            print()
        bench_models(args)


if __name__ == '__main__':
    main()
