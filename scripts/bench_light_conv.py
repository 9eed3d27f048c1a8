"""CPU benchmark: LightConv / DynamicConv ops vs their unfold baselines (time and peak memory).

Default shape: the first ConvNeXt-T stage, B=16, C=96, 56x56 (L=3136), H=8 heads, K in {7, 31}.
The ops are fed already-normalized kernels (the softmax / linear map is identical for both
implementations and not timed): LightConv ``(H, K)``, DynamicConv ``(B, H, L, K)``.

Modes: ``fwd`` = forward under ``torch.no_grad()``; ``fwd+bwd`` = forward + backward of
``y.sum()`` with gradients for x and the kernel.

Method: every (op, K, impl, mode) case runs in two fresh subprocesses, each after ``--warmup``
untimed calls. Time: default allocator, ``--repeats`` timed calls; median, min, max (timings on
a shared machine are noisy: read the spread). Memory: glibc mmap threshold fixed at 128 KiB so
freed tensors leave the RSS; the kernel's peak-RSS mark is reset (``echo 5 >
/proc/self/clear_refs``, Linux >= 4.0), one call runs, and ``VmHWM - VmRSS(before)`` from
``/proc/self/status`` is the peak extra resident memory of that call (outputs, saved tensors,
gradients, temporaries; inputs excluded). torch's profiler reports allocation totals, not a CPU
peak, and tracemalloc does not see torch, hence RSS. (Machinery shared with the other op benchmarks:
``scripts/_bench.py``.)

    python scripts/bench_light_conv.py [--out results/bench_light_conv.csv] [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys

from _bench import Column, measure, print_table, ratio, run_case, serve_worker, setup_torch, spread, write_csv

FIELDS = [
    'op',
    'kernel_size',
    'mode',
    'impl',
    'median_ms',
    'min_ms',
    'max_ms',
    'peak_extra_mb',
    'time_ratio_vs_ours',
    'mem_ratio_vs_ours',
    'B',
    'C',
    'L',
    'H',
    'threads',
    'repeats',
]
COLUMNS = [
    Column('op', 8, 'op', align='<'),
    Column('K', 4, 'kernel_size'),
    Column('mode', 8, 'mode', align='<', gap=2),
    Column('impl', 8, 'impl', align='<'),
    Column('median ms', 10, 'median_ms', '.1f'),
    Column('min-max ms', 20, spread),
    Column('peak MB', 10, 'peak_extra_mb', '.1f'),
    Column('t/ours', 8, 'time_ratio_vs_ours', '.2f'),
    Column('mem/ours', 9, 'mem_ratio_vs_ours', '.2f'),
]


def worker(case: dict) -> dict:
    """Runs one case in this (fresh) process and returns its measurements."""
    import torch

    from mrconvnext.ops import light_conv as ops

    threads = setup_torch(case['threads'])
    B, C, L, H, K = case['B'], case['C'], case['L'], case['H'], case['K']
    train = case['mode'] == 'fwd+bwd'
    # In-place initialisation so that setup leaves no freed temporaries that could hide the peak.
    x = torch.randn(B, C, L).requires_grad_(train)
    if case['op'] == 'light':
        w = torch.rand(H, K)
        fn = ops.light_conv1d if case['impl'] == 'ours' else ops.light_conv1d_unfold
        kw = {'num_heads': H}
    else:
        w = torch.rand(B, H, L, K)
        fn = ops.dynamic_conv1d if case['impl'] == 'ours' else ops.dynamic_conv1d_unfold
        kw = {}
    w.div_(w.sum(-1, keepdim=True)).requires_grad_(train)

    def call() -> None:
        if train:
            x.grad = None
            w.grad = None
            fn(x, w, **kw).sum().backward()
        else:
            with torch.no_grad():
                fn(x, w, **kw)

    def drop_grads() -> None:
        x.grad = w.grad = None  # the measured call allocates its gradients afresh

    # After the warm-up, one-time costs (library code pages, oneDNN JIT) are not counted.
    return dict(measure(case, call, drop_grads), threads=threads)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--batch', type=int, default=16)
    ap.add_argument('--channels', type=int, default=96)
    ap.add_argument('--size', type=int, default=56, help='square feature map side; L = size**2')
    ap.add_argument('--heads', type=int, default=8)
    ap.add_argument('--kernel-sizes', type=int, nargs='+', default=[7, 31])
    ap.add_argument('--ops', nargs='+', default=['light', 'dynamic'], choices=['light', 'dynamic'])
    ap.add_argument('--modes', nargs='+', default=['fwd', 'fwd+bwd'], choices=['fwd', 'fwd+bwd'])
    ap.add_argument('--repeats', type=int, default=5)
    ap.add_argument('--warmup', type=int, default=1)
    ap.add_argument('--threads', type=int, default=0, help='torch threads (0: torch default)')
    ap.add_argument('--out', default='results/bench_light_conv.csv')
    ap.add_argument('--worker', help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        serve_worker(worker, args.worker)
        return

    base = {'B': args.batch, 'C': args.channels, 'L': args.size**2, 'H': args.heads}
    rows = []
    for op in args.ops:
        for K in args.kernel_sizes:
            for mode in args.modes:
                res = {}
                for impl in ('ours', 'unfold'):
                    case = dict(
                        base,
                        op=op,
                        K=K,
                        mode=mode,
                        impl=impl,
                        repeats=args.repeats,
                        warmup=args.warmup,
                        threads=args.threads,
                    )
                    res[impl] = run_case(__file__, case)
                    print(f'  done {op} K={K} {mode} {impl}: {res[impl]["median_ms"]:.1f} ms', file=sys.stderr)
                for impl in ('ours', 'unfold'):
                    r = res[impl]
                    rows.append(
                        {
                            'op': op,
                            'kernel_size': K,
                            'mode': mode,
                            'impl': impl,
                            'median_ms': round(r['median_ms'], 2),
                            'min_ms': round(r['min_ms'], 2),
                            'max_ms': round(r['max_ms'], 2),
                            'peak_extra_mb': round(r['peak_extra_mb'], 1),
                            'time_ratio_vs_ours': ratio(r['median_ms'], res['ours']['median_ms']),
                            'mem_ratio_vs_ours': ratio(r['peak_extra_mb'], res['ours']['peak_extra_mb']),
                            **base,
                            'threads': r['threads'],
                            'repeats': args.repeats,
                        }
                    )

    out = write_csv(args.out, rows, FIELDS)
    print(
        f'B={base["B"]} C={base["C"]} L={base["L"]} H={base["H"]} threads={rows[0]["threads"]} '
        f'repeats={args.repeats}; peak = extra resident memory of one call (VmHWM - VmRSS)'
    )
    print_table(rows, COLUMNS)
    print(f'wrote {out}')


if __name__ == '__main__':
    main()
