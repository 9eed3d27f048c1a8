"""First-run demo: build an MRConvNeXt, train it briefly, reparameterize it, check it, time it.

    python -m mrconvnext.demo [--model mrconvnext_atto] [--img-size 128] [--batch 8]

Prints the largest relative difference between the branched and the reparameterized model
(float32; expected around 1e-6) and eval throughput of the branched model, the reparameterized
model and timm's ConvNeXt of the same size, measured side by side (median of repeats).
"""

from __future__ import annotations

import argparse
import statistics
import time

import timm
import torch

import mrconvnext  # noqa: F401  (registers the models with timm)

_BASELINES = {
    'mrconvnext_atto': 'convnext_atto',
    'mrconvnext_femto': 'convnext_femto',
    'mrconvnext_pico': 'convnext_pico',
    'mrconvnext_nano': 'convnext_nano',
    'mrconvnext_t': 'convnext_tiny',
    'mrconvnext_s': 'convnext_small',
    'mrconvnext_b': 'convnext_base',
}


def throughput(model: torch.nn.Module, x: torch.Tensor, repeats: int) -> list[float]:
    with torch.no_grad():
        model(x)
        rates = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            model(x)
            rates.append(x.shape[0] / (time.perf_counter() - t0))
    return rates


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--model', default='mrconvnext_atto')
    p.add_argument('--img-size', type=int, default=128)
    p.add_argument('--batch', type=int, default=8)
    p.add_argument('--steps', type=int, default=3)
    p.add_argument('--repeats', type=int, default=5)
    args = p.parse_args(argv)
    torch.manual_seed(0)

    model = timm.create_model(args.model, num_classes=10, img_size=args.img_size)
    n_params = sum(p.numel() for p in model.parameters())
    print(f'{args.model}: {n_params / 1e6:.2f}M parameters, input {args.img_size}x{args.img_size}')
    x = torch.randn(args.batch, 3, args.img_size, args.img_size)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    for step in range(args.steps):  # moves BatchNorm statistics so the fold below is not trivial
        loss = torch.nn.functional.cross_entropy(model(x), torch.randint(0, 10, (args.batch,)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f'train step {step}: loss {loss.item():.4f}')

    model.eval()
    with torch.no_grad():
        y = model(x)
    deployed = timm.utils.reparameterize_model(model)
    with torch.no_grad():
        y_rep = deployed(x)
    rel = ((y - y_rep).abs().max() / y.abs().max()).item()
    verdict = 'agree' if rel <= 1e-5 else 'DISAGREE'
    print(f'branched vs reparameterized outputs {verdict}: max relative difference {rel:.2e} (tolerance 1e-5)')

    rows = [('branched', model), ('reparameterized', deployed)]
    baseline = _BASELINES.get(args.model)
    if baseline:
        rows.append((baseline, timm.create_model(baseline, num_classes=10).eval()))
    results = {name: statistics.median(throughput(m, x, args.repeats)) for name, m in rows}
    ref = results.get(baseline) if baseline else None
    for name, rate in results.items():
        ratio = f'  ({rate / ref:.2f}x {baseline})' if ref else ''
        print(f'eval throughput {name:>18}: {rate:8.1f} img/s{ratio}')
    if rel > 1e-5:
        raise SystemExit(1)


if __name__ == '__main__':
    main()
