"""What the deployed layer's cache is worth: eval time with derived kernels kept between calls and recomputed.

    python scripts/bench_cache.py [--model mrconvnext_atto] [--nominal 224] [--sizes 224 256] [--batches 1 128]

A reparameterized model built at ``--nominal``, run at each size and batch size with ``MRConv1d.keep_derived`` on
(the adapted kernel and its spectrum kept between calls, each call checking the kernel against its snapshot) and
off (derived anew every call). Rounds are interleaved; medians per configuration and the ratio off / on.
"""

from __future__ import annotations

import argparse
import statistics
import time

import timm
import torch

import mrconvnext  # noqa: F401  (registers the models)
from mrconvnext.layers import MRConv1d


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--model', default='mrconvnext_atto')
    p.add_argument('--nominal', type=int, default=224)
    p.add_argument('--sizes', type=int, nargs='+', default=[224, 256])
    p.add_argument('--batches', type=int, nargs='+', default=[1, 128])
    p.add_argument('--rounds', type=int, default=5)
    p.add_argument('--threads', type=int, default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = timm.create_model(args.model, img_size=args.nominal).eval()
    model.reparameterize()
    mixers = [m for m in model.modules() if isinstance(m, MRConv1d)]
    configs = [(b, s, keep) for b in args.batches for s in args.sizes for keep in (True, False)]
    inputs = {(b, s): torch.randn(b, 3, s, s) for b in args.batches for s in args.sizes}
    times: dict[tuple, list[float]] = {c: [] for c in configs}
    with torch.no_grad():
        for r in range(args.rounds + 1):  # round 0 warms up
            for b, s, keep in configs:
                for m in mixers:
                    m.keep_derived = keep
                t0 = time.perf_counter()
                model(inputs[b, s])
                if r:
                    times[b, s, keep].append((time.perf_counter() - t0) * 1e3)
    print(f'{args.model} deployed, built at {args.nominal}, {torch.get_num_threads()} threads, '
          f'median of {args.rounds} interleaved rounds (ms)')  # fmt: skip
    print(f'{"batch":>5} {"size":>5} {"kept":>9} {"recomputed":>11} {"ratio":>6}')
    for b in args.batches:
        for s in args.sizes:
            on, off = statistics.median(times[b, s, True]), statistics.median(times[b, s, False])
            print(f'{b:>5} {s:>5} {on:9.1f} {off:11.1f} {off / on:6.2f}')


if __name__ == '__main__':
    main()
