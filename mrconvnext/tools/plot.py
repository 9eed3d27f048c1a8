"""PNG figures: learned kernels (paper Fig. 5), alpha norms by depth (Fig. 3 right), throughput vs accuracy.

    mrconvnext-plot kernels  --checkpoint run/model_best.pth.tar -o kernels.png [--block 0] [--channels 32]
    mrconvnext-plot alpha    --checkpoint run/model_best.pth.tar -o alpha.png
    mrconvnext-plot tradeoff --benchmark benchmark.csv --results val.json val_reparam.json -o tradeoff.png

``kernels``: the model is reparameterized and, for one block per stage (``--block``, default the
first), the merged long kernel of the MRConv mixer is drawn three ways: a heat map of the first
``--channels`` channels over the lags (1D, the flattened sequence), the channel-mean |kernel| over
the lags (log scale), and the mixer's 2D impulse response on its stage's nominal feature map (a unit
impulse at the centre pixel, channel-mean |response|), which shows where the flattened 1D kernel
reaches in the image.

``alpha``: for every block (depth) of a branched MRConvNeXt, the L2 norm over channels of each
branch's weight ``alpha_i`` (``beta_i`` for ``combine='scale'``), normalized to sum to 1 over the
branches, as a stacked bar per depth; branch ``i`` has reach ``l0 * 2**i``. A deployed checkpoint has
no alpha (it is folded into the kernel): use the training checkpoint.

``tradeoff``: inference throughput from ``mrconvnext-benchmark`` results against top-1 from
``mrconvnext-validate`` results, matched by model name (``NAME:reparam`` rows take a result with
``reparam: true`` when there is one); ``--accuracy NAME=TOP1`` adds accuracies by hand (e.g. published
numbers for a baseline). Rows without an accuracy are listed and skipped.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch
from timm.utils import reparameterize_model

from . import common
from .cli_args import plot_parser as build_parser

__all__ = ['main', 'run', 'build_parser', 'plot_kernels', 'plot_alpha', 'plot_tradeoff', 'alpha_fractions']

_logger = logging.getLogger('mrconvnext.plot')


def _pyplot():
    try:
        import matplotlib
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("plotting needs matplotlib: pip install matplotlib (or '.[tools]')") from e
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    return plt


def _mrconv_blocks(model: torch.nn.Module) -> list[list[torch.nn.Module]]:
    from mrconvnext.layers import MRConv1d

    stages = []
    for stage in getattr(model, 'stages', []):
        stages.append([b.conv_dw for b in stage.blocks if isinstance(getattr(b, 'conv_dw', None), MRConv1d)])
    if not any(stages):
        raise ValueError(f'{type(model).__name__} has no MRConv mixers (kernels and alpha exist for MRConvNeXt only)')
    return stages


@torch.no_grad()
def _impulse_response(mixer: torch.nn.Module) -> torch.Tensor:
    H, W = mixer.input_size
    x = torch.zeros(1, mixer.dim, H, W)
    zero = mixer(x)
    x[..., H // 2, W // 2] = 1.0
    return (mixer(x) - zero)[0]  # (C, H, W)


def plot_kernels(
    model: torch.nn.Module, output: str | Path, block: int = 0, channels: int = 32, title: str = ''
) -> Path:
    """Figure 5: the reparameterized kernel of one block per stage (heat map, |k| profile, 2D reach)."""
    plt = _pyplot()
    deployed = reparameterize_model(model.eval())
    stages = [s for s in _mrconv_blocks(deployed) if s]
    fig, axes = plt.subplots(3, len(stages), figsize=(4.2 * len(stages), 9.5), squeeze=False)
    for col, blocks in enumerate(stages):
        mixer = blocks[min(block, len(blocks) - 1)]
        k, _ = mixer.merged_kernel()
        k = k.detach().float()
        lags = torch.arange(k.shape[-1]) - mixer.zero_lag
        shown = k[:channels]
        vmax = float(shown.abs().max()) or 1.0
        ax = axes[0, col]
        im = ax.imshow(
            shown.numpy(),
            aspect='auto',
            cmap='RdBu_r',
            vmin=-vmax,
            vmax=vmax,
            extent=(float(lags[0]) - 0.5, float(lags[-1]) + 0.5, shown.shape[0] - 0.5, -0.5),
            interpolation='nearest',
        )
        H, W = mixer.input_size
        ax.set_title(f'stage {col}: {H}x{W} map, L={mixer.seq_len}, {mixer.num_branches} res.')
        ax.set_xlabel('lag (flattened positions)')
        ax.set_ylabel('channel')
        fig.colorbar(im, ax=ax, fraction=0.046)
        ax = axes[1, col]
        ax.semilogy(lags.numpy(), k.abs().mean(0).clamp_min(1e-12).numpy(), lw=0.8)
        for r in range(1, H):  # image-row boundaries: lags that are whole rows apart
            if r * W <= lags[-1]:
                ax.axvline(r * W, color='0.85', lw=0.5, zorder=0)
                ax.axvline(-r * W, color='0.85', lw=0.5, zorder=0)
        ax.set_xlabel('lag')
        ax.set_ylabel('mean |k| over channels')
        ax = axes[2, col]
        resp = _impulse_response(mixer).abs().mean(0)
        im = ax.imshow(resp.numpy(), cmap='magma', interpolation='nearest')
        ax.set_title('2D reach: |impulse response| at centre')
        ax.set_xticks([])
        ax.set_yticks([])
        fig.colorbar(im, ax=ax, fraction=0.046)
    fig.suptitle(title or f'Reparameterized MRConv kernels, block {block} of each stage')
    fig.tight_layout()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return output


def alpha_fractions(model: torch.nn.Module) -> list[dict[str, Any]]:
    """Per block (depth): the normalized L2 norms of the branch weights (alpha, or beta for 'scale')."""
    rows = []
    depth = 0
    for s, blocks in enumerate(_mrconv_blocks(model)):
        for b, mixer in enumerate(blocks):
            if getattr(mixer, 'deployed', False):
                raise ValueError('a deployed model has no alpha (folded into the kernel): use the training checkpoint')
            weights = mixer.alpha if hasattr(mixer, 'alpha') else mixer.beta
            norms = weights.detach().float().norm(dim=1)
            frac = norms / norms.sum().clamp_min(1e-12)
            reach = [min(mixer.kernel_size * 2**i, mixer.seq_len) for i in range(mixer.num_branches)]
            rows.append({'depth': depth, 'stage': s, 'block': b, 'fractions': frac.tolist(), 'reach': reach})
            depth += 1
    return rows


def plot_alpha(model: torch.nn.Module, output: str | Path, title: str = '') -> Path:
    """Figure 3 (right): the distribution of the alpha norms over the branches, per depth."""
    plt = _pyplot()
    rows = alpha_fractions(model)
    n_max = max(len(r['fractions']) for r in rows)
    colors = plt.get_cmap('viridis')([i / max(n_max - 1, 1) for i in range(n_max)])
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(rows) + 2), 4.2))
    bottoms = [0.0] * len(rows)
    for i in range(n_max):
        vals = [r['fractions'][i] if i < len(r['fractions']) else 0.0 for r in rows]
        ax.bar([r['depth'] for r in rows], vals, bottom=bottoms, color=colors[i], label=f'branch {i} (l0*2^{i})')
        bottoms = [a + v for a, v in zip(bottoms, vals)]
    stage_starts = [r['depth'] for r in rows if r['block'] == 0]
    for d in stage_starts[1:]:
        ax.axvline(d - 0.5, color='k', lw=0.8, ls='--')
    ax.set_xlabel('depth (block index; dashed: new stage)')
    ax.set_ylabel('normalized ||alpha_i||')
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8, loc='upper left', bbox_to_anchor=(1.0, 1.0))
    ax.set_title(title or 'Distribution of the alpha norms per depth')
    fig.tight_layout()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return output


def _as_float(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f


def _as_bool(v: Any) -> bool:
    return v is True or str(v).lower() in ('true', '1', 'yes')


def plot_tradeoff(
    benchmark_rows: list[dict[str, Any]],
    results: list[dict[str, Any]],
    output: str | Path,
    accuracy: dict[str, float] | None = None,
    title: str = '',
) -> tuple[Path, list[dict[str, Any]]]:
    """Top-1 vs inference throughput; returns the PNG path and the plotted points."""
    plt = _pyplot()
    accuracy = dict(accuracy or {})
    points, skipped = [], []
    for row in benchmark_rows:
        spec = str(row['model'])
        name, _, variant = spec.partition(':')
        rate = _as_float(row.get('infer_img_s'))
        top1 = accuracy.get(spec, accuracy.get(name))
        if top1 is None:
            same = [r for r in results if str(r.get('model')) == name]
            pref = [r for r in same if _as_bool(r.get('reparam')) == (variant == 'reparam')]
            chosen = (pref or same or [None])[0]
            top1 = _as_float(chosen.get('top1')) if chosen else None
        if rate is None or top1 is None:
            skipped.append(spec)
            continue
        points.append({'model': spec, 'infer_img_s': rate, 'top1': top1})
    if not points:
        raise ValueError(f'no benchmark row has an accuracy (rows: {[r["model"] for r in benchmark_rows]})')
    if skipped:
        _logger.info(f'no accuracy for {", ".join(skipped)}: left out of the chart')
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    for p in points:
        marker = 's' if p['model'].endswith(':reparam') else 'o'
        ax.scatter(p['infer_img_s'], p['top1'], marker=marker, s=40)
        ax.annotate(p['model'], (p['infer_img_s'], p['top1']), textcoords='offset points', xytext=(5, 4), fontsize=8)
    device = benchmark_rows[0].get('device', '')
    batch = benchmark_rows[0].get('batch_size', '')
    ax.set_xlabel(f'inference throughput (img/s, {device}, batch {batch})')
    ax.set_ylabel('top-1 accuracy (%)')
    ax.grid(alpha=0.3)
    ax.set_title(title or 'Accuracy vs throughput')
    fig.tight_layout()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return output, points


def run(argv: list[str] | None = None) -> Path:
    """Write the requested figure; returns its path."""
    common.setup_logging()
    args = build_parser().parse_args(argv)
    if args.figure == 'tradeoff':
        bench = common.read_results(args.benchmark)
        results = [r for f in args.results for r in common.read_results(f)]
        manual = {}
        for item in args.accuracy:
            name, _, val = item.rpartition('=')
            manual[name] = float(val)
        path, points = plot_tradeoff(bench, results, args.output, manual, args.title)
        _logger.info(f'{path}: {len(points)} points')
        return path
    model, _ = common.model_from_args(args)
    if args.figure == 'kernels':
        path = plot_kernels(model, args.output, args.block, args.channels, args.title)
    else:
        path = plot_alpha(model, args.output, args.title)
    _logger.info(f'written: {path}')
    return path


def main(argv: list[str] | None = None) -> None:
    """Console entry point (``mrconvnext-plot``): :func:`run` without a return value."""
    run(argv)


if __name__ == '__main__':
    main()
