"""GPU benchmark of DynamicConv and LightConv per ConvNeXt-T stage, beside timm's 7x7 depthwise conv, with bytes moved.

Per stage (C, H x W) = (96, 56²), (192, 28²), (384, 14²), (768, 7²), kernel sizes (7, 15, 31, 31) and one head per 16
channels (``dynconvnext_t``), a channels-last float32 input under bf16 autocast, as in a ConvNeXt block:

- ``dwconv7x7``: the mixer ConvNeXt-T has there (timm's ``create_conv2d(C, C, 7, depthwise=True)``);
- ``dynconv/<engine>``: the whole ``DynamicConv2d`` mixer (logits GEMM, softmax, taps) on the Triton kernels or the
  PyTorch tap loop;
- ``kernel/triton``: the fused operator alone on precomputed bf16 logits;
- ``lightconv/<engine>``: the whole ``LightConv2d`` mixer (``lightconvnext_t``'s settings) on the grouped conv
  (``'torch'``) or the DynamicConv kernels with shared weights (``'triton'``, what ``'auto'`` runs on CUDA from a batch
  of ``LIGHT_TRITON_MIN_BATCH``): the per-stage side of the measurement behind that rule
  (``mrconvnext.ops.light_conv.dispatch``).

Modes ``fwd`` (no_grad) and ``fwd+bwd`` (gradients of x and the parameters for a random cotangent). Times are
``triton.testing.do_bench`` medians (CUDA events, after warm-up); ratios are over ``dwconv7x7`` of the same stage and
mode. ``bytes/elem`` is the traffic the design needs per map element (``--accounting`` prints the model alone, without
a GPU): reading a float32 x and casting it (6 B, as the depthwise conv does), the GEMM reading the bf16 copy (2 B)
and writing the logits (2 K / 16 B), the kernel reading both (2 + 2 K / 16 B), writing y (2 B) and the log-sum-exp
(4 / 16 B); ConvNeXt's conv is 10 B (``../shared/notes/gpu-design.md``). LightConv on the Triton kernels reads the
float32 x and writes a float32 y (8 B; its softmax-normalized weights are float32).

    python scripts/bench_dynconv_gpu.py [--batch 128] [--out results]
    python scripts/bench_dynconv_gpu.py --accounting
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing the package

import torch  # noqa: E402
from _bench import gpu_time_and_peak, markdown_report  # noqa: E402

STAGES = [(96, 56, 7), (192, 28, 15), (384, 14, 31), (768, 7, 31)]  # (C, side, K)
HEAD_DIM = 16


def bytes_per_element(K: int) -> dict[str, float]:
    """Forward bytes per map element of the Triton mixer under bf16 autocast, and of the 7x7 depthwise conv."""
    logits = 2 * K / HEAD_DIM
    fwd = 6 + (2 + logits) + (2 + logits + 2 + 4 / HEAD_DIM)
    return {'dynconv_fwd': fwd, 'dwconv_fwd': 10.0, 'lightconv_fwd': 8.0}


def accounting() -> list[str]:
    lines = ['| stage | C | L | K | dynconv fwd B/elem | lightconv fwd B/elem | dwconv fwd B/elem | ratio |']
    lines.append('|' + ' --- |' * 8)
    for i, (C, S, K) in enumerate(STAGES):
        b = bytes_per_element(K)
        lines.append(
            f'| {i + 1} | {C} | {S * S} | {K} | {b["dynconv_fwd"]:.2f} | {b["lightconv_fwd"]:.0f} | '
            f'{b["dwconv_fwd"]:.0f} | {b["dynconv_fwd"] / b["dwconv_fwd"]:.2f} |'
        )
    return lines


def _runner(module, x, mode: str):
    if mode == 'fwd':

        def run():
            with torch.no_grad(), torch.autocast('cuda', dtype=torch.bfloat16):
                module(x)

        return run
    xg = x.detach().requires_grad_()
    params = [p for p in module.parameters() if p.requires_grad]

    def run():
        with torch.autocast('cuda', dtype=torch.bfloat16):
            y = module(xg)
        torch.autograd.grad(y, [xg, *params], torch.ones_like(y))

    return run


class _Kernel(torch.nn.Module):
    """The fused operator alone on fixed bf16 logits."""

    def __init__(self, layer, x):
        super().__init__()
        with torch.no_grad(), torch.autocast('cuda', dtype=torch.bfloat16):  # the logits as the model makes them
            self.logits = layer.logits(x.flatten(2))
        self.K = layer.kernel_size

    def forward(self, x):
        from mrconvnext.ops import dynamic_softmax_conv1d

        B, C, H, W = x.shape
        y = dynamic_softmax_conv1d(x.flatten(2).to(torch.bfloat16), self.logits, engine='triton')
        return y.view(B, C, H, W)


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--batch', type=int, default=128)
    p.add_argument('--accounting', action='store_true', help='print the byte model only (no GPU needed)')
    p.add_argument('--out', default='results', help="directory of gpu_dynconv_ops.{md,csv} ('' to skip)")
    args = p.parse_args(argv)
    if args.accounting:
        print('\n'.join(accounting()))
        return []
    if not torch.cuda.is_available():
        sys.exit('bench_dynconv_gpu: no CUDA device visible (--accounting needs none)')
    from timm.layers import create_conv2d

    from mrconvnext.layers import DynamicConv2d, LightConv2d

    rows = []
    for stage, (C, S, K) in enumerate(STAGES, 1):
        x = torch.randn(args.batch, C, S, S, device='cuda').contiguous(memory_format=torch.channels_last)
        dw = create_conv2d(C, C, 7, depthwise=True).cuda().to(memory_format=torch.channels_last)
        cases = {'dwconv7x7': dw}
        for engine in ('triton', 'torch'):
            torch.manual_seed(0)
            cases[f'dynconv/{engine}'] = DynamicConv2d(C, (S, S), kernel_size=K, num_heads=C // HEAD_DIM, engine=engine)
        cases['kernel/triton'] = _Kernel(cases['dynconv/triton'].cuda(), x)
        for engine in ('torch', 'triton'):
            cases[f'lightconv/{engine}'] = LightConv2d(C, (S, S), kernel_size=K, num_heads=C // HEAD_DIM, engine=engine)
        elements = args.batch * C * S * S
        for mode in ('fwd', 'fwd+bwd'):
            base = None
            for name, module in cases.items():
                module = module.cuda()
                run = _runner(module, x, mode)
                ms, peak = gpu_time_and_peak(run)
                base = ms if name == 'dwconv7x7' else base
                row = dict(stage=stage, B=args.batch, C=C, L=S * S, K=K, mode=mode, case=name)
                row.update(median_ms=round(ms, 4), ratio_vs_dwconv=round(ms / base, 3), peak_extra_mb=round(peak, 1))
                if mode == 'fwd' and name not in ('dynconv/torch', 'lightconv/torch'):
                    kind = {'dwconv7x7': 'dwconv_fwd', 'lightconv/triton': 'lightconv_fwd'}.get(name, 'dynconv_fwd')
                    b = bytes_per_element(K)[kind]
                    row['model_GBps'] = round(elements * b / (ms * 1e-3) / 1e9, 1)
                rows.append(row)
                print(' '.join(f'{k}={v}' for k, v in row.items()), flush=True)
        del x, cases
    title = (
        f'DynamicConv per stage on {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}'
    )
    print('\n'.join(markdown_report(rows, title, args.out, 'gpu_dynconv_ops', accounting())))
    return rows


if __name__ == '__main__':
    main()
