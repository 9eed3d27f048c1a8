"""Cost of the size rules: eval time of an MRConvNeXt at a non-nominal size under each ``lag_remap``, side by side.

    python scripts/bench_resolution.py [--model mrconvnext_atto] [--nominal 224] [--size 256] [-b 8] [--rounds 7]

One model built at ``--nominal``, run at ``--size`` (and at the nominal size for reference), branched and
reparameterized, under ``lag_remap`` ``'none'``, ``'split'`` and ``'conv2d'`` (the same weights). Rounds are
interleaved (each configuration once per round) and the median per configuration is reported with its ratio to the
``'none'`` run at the same size. A deployed layer keeps its adapted kernel per size (CPU), so its adaptation is paid
once; a branched layer adapts its branch kernels at every call; ``'conv2d'`` also convolves a longer, column-padded
sequence.
"""

from __future__ import annotations

import argparse
import statistics
import time

import timm
import torch

import mrconvnext  # noqa: F401  (registers the models)
from mrconvnext.layers import MRConv2d

RULES = ('none', 'split', 'conv2d')


def _set_rule(model: torch.nn.Module, rule: str) -> None:
    for m in model.modules():
        if isinstance(m, MRConv2d):
            m.lag_remap = rule


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--model', default='mrconvnext_atto')
    p.add_argument('--nominal', type=int, default=224)
    p.add_argument('--size', type=int, default=256)
    p.add_argument('-b', '--batch-size', type=int, default=8)
    p.add_argument('--rounds', type=int, default=7)
    p.add_argument('--threads', type=int, default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    branched = timm.create_model(args.model, img_size=args.nominal).eval()
    deployed = timm.create_model(args.model, img_size=args.nominal).eval()
    deployed.load_state_dict(branched.state_dict())
    deployed.reparameterize()
    x_nom = torch.randn(args.batch_size, 3, args.nominal, args.nominal)
    x = torch.randn(args.batch_size, 3, args.size, args.size)
    configs = []
    for form, model in (('branched', branched), ('deployed', deployed)):
        configs.append((form, args.nominal, 'conv2d', model, x_nom))
        configs += [(form, args.size, rule, model, x) for rule in RULES]
    times: dict[int, list[float]] = {i: [] for i in range(len(configs))}
    with torch.inference_mode():
        for _, _, rule, model, xi in configs:  # warm-up (builds, plans, adapted kernels)
            _set_rule(model, rule)
            model(xi)
        for _ in range(args.rounds):
            for i, (_, _, rule, model, xi) in enumerate(configs):
                _set_rule(model, rule)
                t0 = time.perf_counter()
                model(xi)
                times[i].append((time.perf_counter() - t0) * 1e3)
    print(f'{args.model} built at {args.nominal}, batch {args.batch_size}, {torch.get_num_threads()} threads, '
          f'median of {args.rounds} interleaved rounds (ms)')  # fmt: skip
    print(f'{"form":10} {"size":>5} {"rule":>7} {"ms":>9} {"vs none":>8}')
    for i, (form, size, rule, _, _) in enumerate(configs):
        med = statistics.median(times[i])
        base = next((j for j, c in enumerate(configs) if c[0] == form and c[1] == size and c[2] == 'none'), None)
        ratio = f'{med / statistics.median(times[base]):.2f}' if base is not None and size != args.nominal else ''
        print(f'{form:10} {size:>5} {rule if size != args.nominal else "any":>7} {med:9.1f} {ratio:>8}')


if __name__ == '__main__':
    main()
