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
peak, and tracemalloc does not see torch, hence RSS.

    python scripts/bench_light_conv.py [--out results/bench_light_conv.csv] [--repeats 5]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing the package
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


def _status_kb(key: str) -> int:
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith(key + ':'):
                return int(line.split()[1])
    raise RuntimeError(f'{key} not found in /proc/self/status')


def worker(case: dict) -> dict:
    """Runs one case in this (fresh) process and returns its measurements."""
    import torch

    from mrconvnext.ops import light_conv as ops

    if case['threads']:
        torch.set_num_threads(case['threads'])
    torch.manual_seed(0)
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

    for _ in range(case['warmup']):
        call()
    if case['phase'] == 'memory':
        # After the warm-up, one-time costs (library code pages, oneDNN JIT) are not counted.
        x.grad = w.grad = None  # the measured call allocates its gradients afresh
        rss_before = _status_kb('VmRSS')
        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')  # reset the peak-RSS mark to the current RSS
        call()
        return {'peak_extra_mb': (_status_kb('VmHWM') - rss_before) / 1024}

    times = []
    for _ in range(case['repeats']):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
    return {
        'median_ms': statistics.median(times),
        'min_ms': min(times),
        'max_ms': max(times),
        'threads': torch.get_num_threads(),
    }


def _spawn(case: dict, env: dict[str, str]) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, '--worker', json.dumps(case)], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f'case {case} failed:\n{proc.stderr}')
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_case(case: dict) -> dict:
    """Times the case with the default allocator, then measures its peak in a second process."""
    result = _spawn(dict(case, phase='time'), dict(os.environ))
    # A fixed glibc mmap threshold turns off the dynamic threshold, so every large buffer is
    # mmap-ed and returned to the OS when freed: RSS then tracks the live tensors. (It also
    # makes repeated large allocations slow, hence the separate timing process.)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_='131072')
    result.update(_spawn(dict(case, phase='memory'), env))
    return result


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
        print(json.dumps(worker(json.loads(args.worker))))
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
                    res[impl] = run_case(case)
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
                            'time_ratio_vs_ours': round(r['median_ms'] / res['ours']['median_ms'], 2),
                            'mem_ratio_vs_ours': round(r['peak_extra_mb'] / max(res['ours']['peak_extra_mb'], 1e-9), 2),
                            **base,
                            'threads': r['threads'],
                            'repeats': args.repeats,
                        }
                    )

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open('w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)

    print(
        f'B={base["B"]} C={base["C"]} L={base["L"]} H={base["H"]} threads={rows[0]["threads"]} '
        f'repeats={args.repeats}; peak = extra resident memory of one call (VmHWM - VmRSS)'
    )
    header = (
        f'{"op":<8}{"K":>4}  {"mode":<8}{"impl":<8}{"median ms":>10}{"min-max ms":>20}'
        f'{"peak MB":>10}{"t/ours":>8}{"mem/ours":>9}'
    )
    print(header)
    print('-' * len(header))
    for r in rows:
        spread = f'{r["min_ms"]:.1f}-{r["max_ms"]:.1f}'
        print(
            f'{r["op"]:<8}{r["kernel_size"]:>4}  {r["mode"]:<8}{r["impl"]:<8}{r["median_ms"]:>10.1f}{spread:>20}'
            f'{r["peak_extra_mb"]:>10.1f}{r["time_ratio_vs_ours"]:>8.2f}{r["mem_ratio_vs_ours"]:>9.2f}'
        )
    print(f'wrote {out}')


if __name__ == '__main__':
    main()
