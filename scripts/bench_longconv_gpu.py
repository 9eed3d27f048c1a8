"""The long convolution at each ConvNeXt-T stage, side by side: timm's 7x7 depthwise conv, today's torch.fft engine
and the matmul engine that ``'auto'`` runs on CUDA (``'toeplitz'`` / ``'rowdft'``), batch 128, bf16 autocast,
channels-last, a float32 residual map in (as a ConvNeXt block has), forward only.

    python scripts/bench_longconv_gpu.py [--batch 128] [--out results]   # on a GPU: ms, GB/s, TFLOP/s
    python scripts/bench_longconv_gpu.py --accounting                    # anywhere: bytes and flops per stage
    python scripts/bench_longconv_gpu.py --precision                     # anywhere: error against float64

Timing: ``triton.testing.do_bench`` (CUDA events, median). Accounting (fake CUDA tensors, no GPU needed): the
bytes every ATen op reads and writes (views excluded; every op's operands and results counted as if nothing were
fused or cached: what eager mode moves through memory at most) and the flops ``FlopCounterMode`` counts, per
element of the map (C * L per image), beside the budget of ``gpu-design.md``: the 7x7 conv's 10 B per element
(cast the float32 map to bf16: read 4, write 2; the conv: read 2, write 2). Achieved GB/s and TFLOP/s on a GPU
are those counts over the measured time.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing the package

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from _fake_cuda import fake_cuda_autocast  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from mrconvnext.ops import long_conv1d  # noqa: E402
from mrconvnext.ops.long_conv import dispatch as long_conv_dispatch  # noqa: E402
from mrconvnext.ops.long_conv.engine_torch import SPECTRUM_NORM, fft_forward  # noqa: E402
from mrconvnext.ops.long_conv.layout import kernel_spectrum  # noqa: E402

# ConvNeXt-T at 224 px: (channels, map side); the mixers' kernels reach the whole map both ways (2L - 1 taps)
STAGES = [(96, 56), (192, 28), (384, 14), (768, 7)]
BUDGET_BYTES = 10  # per element, the 7x7 conv with its cast (gpu-design.md, "The budget")
ENGINES = ('conv7x7', 'fft', 'matmul')


def _case(engine: str, C: int, H: int, device: str):
    """``fn``: ``fn(x)`` runs one stage's mixer on the engine for a float32 channels-last ``(B, C, H, H)`` map."""
    L = H * H
    if engine == 'conv7x7':
        w = torch.randn(C, 1, 7, 7, device=device)

        def run(x):
            return F.conv2d(x, w, padding=3, groups=C)

        return run
    k = torch.randn(C, 2 * L - 1, device=device) / (2 * L) ** 0.5
    if engine == 'fft-body':  # what mrconvnext::fft_conv_torch runs inside (an opaque operator to the byte count)

        def run(x):
            B = x.shape[0]
            xc = x.reshape(B, C, L).float()  # long_conv1d computes the FFT path in float32
            k_f, n = kernel_spectrum(k.unsqueeze(0), L - 1, L, SPECTRUM_NORM)
            y = torch.empty_like(xc).unsqueeze(1)
            fft_forward(xc, k_f.contiguous(), n, y, None)
            return y.view(B, C, H, H)

        return run
    # 'matmul': the matrix-product method for the length (what torch.compile takes at large batches)
    method, eng = ('fft', 'torch') if engine == 'fft' else (long_conv_dispatch.matmul_method(L), 'auto')

    def run(x):
        B = x.shape[0]
        return long_conv1d(x.reshape(B, C, L), k, zero_lag=L - 1, method=method, engine=eng).view(B, C, H, H)

    return run


_NO_DATA = (torch.ops.aten.detach.default, torch.ops.aten._unsafe_view.default, torch.ops.prim.device.default)


class _Bytes(TorchDispatchMode):
    """Bytes read and written by every non-view ATen op (operands and results, as if nothing were fused)."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view and func not in _NO_DATA:
            for t in torch.utils._pytree.tree_leaves((args, kwargs, out)):
                if isinstance(t, torch.Tensor):
                    self.bytes += t.numel() * t.element_size()
        return out


def _count(engine: str, C: int, H: int, batch: int) -> tuple[int, int]:
    """``(bytes, flops)`` of one stage's mixer on fake CUDA tensors under bf16 autocast."""
    with FakeTensorMode():
        run = _case(engine, C, H, 'cuda')
        x = torch.randn(batch, C, H, H, device='cuda').to(memory_format=torch.channels_last)
        counter, flops = _Bytes(), FlopCounterMode(display=False)
        with fake_cuda_autocast(), torch.no_grad(), flops, counter:
            run(x)
    return counter.bytes, flops.get_total_flops()


def accounting(batch: int) -> list[dict]:
    """Bytes and flops per stage and engine on fake CUDA tensors under bf16 autocast. The torch.fft engine's bytes
    are those of what its operator runs inside; its flops, the operator's formula (torch.fft has none)."""
    rows = []
    for C, H in STAGES:
        elems = batch * C * H * H
        for engine in ENGINES:
            nbytes, flops = _count(engine, C, H, batch)
            method = engine
            if engine == 'fft':
                nbytes = _count('fft-body', C, H, batch)[0]
            if engine == 'matmul':
                L = H * H
                method = long_conv_dispatch.matmul_method(L)
            rows.append(
                dict(
                    stage=f'{C}x{H}x{H}', engine=engine, method=method, bytes_per_elem=nbytes / elems,
                    budget_bytes_per_elem=BUDGET_BYTES, gflop=flops / 1e9,
                )
            )  # fmt: skip
    return rows


def precision(batch: int = 1) -> list[dict]:
    """max |y - y64| / max |y64| of the matmul methods at the stage shapes (CPU): float32, fp16 and bf16 autocast."""
    rows = []
    for C, H in STAGES:
        L = H * H
        x = torch.randn(batch, C, H, H, dtype=torch.float64).to(memory_format=torch.channels_last).flatten(2)
        k = torch.randn(C, 2 * L - 1, dtype=torch.float64) / (2 * L) ** 0.5
        ref = long_conv1d(x, k, zero_lag=L - 1, method='direct')
        for method in long_conv_dispatch.MATMUL_METHODS:
            if method == 'toeplitz' and L > 1000:
                continue
            errs = {}
            for name in ('float32', 'float16', 'bfloat16-autocast'):
                if name == 'bfloat16-autocast':
                    with torch.autocast('cpu', dtype=torch.bfloat16):
                        y = long_conv1d(x.float(), k.float(), zero_lag=L - 1, method=method)
                else:
                    dtype = getattr(torch, name)
                    y = long_conv1d(x.to(dtype), k.to(dtype), zero_lag=L - 1, method=method)
                errs[name] = ((y.double() - ref).abs().max() / ref.abs().max()).item()
            rows.append(dict(stage=f'{C}x{H}x{H}', method=method, **errs))
    return rows


def timing(batch: int) -> list[dict]:
    from triton.testing import do_bench

    acc = {(r['stage'], r['engine']): r for r in accounting(batch)}
    rows = []
    for C, H in STAGES:
        x = torch.randn(batch, C, H, H, device='cuda').to(memory_format=torch.channels_last)
        for engine in ENGINES:
            run = _case(engine, C, H, 'cuda')

            def step(run=run, x=x):
                with torch.no_grad(), torch.autocast('cuda', dtype=torch.bfloat16):
                    run(x)

            ms = do_bench(step, warmup=25, rep=200, return_mode='median')
            a = acc[(f'{C}x{H}x{H}', engine)]
            elems = batch * C * H * H
            rows.append(
                dict(
                    a, ms=ms, gb_s=a['bytes_per_elem'] * elems / ms / 1e6, tflop_s=a['gflop'] / ms,
                    budget_ms=BUDGET_BYTES * elems / 3.35e12 * 1e3,
                )
            )  # fmt: skip
    return rows


def _print(rows: list[dict]) -> None:
    keys = list(rows[0])
    fmt = [max(len(k), *(len(_cell(r[k])) for r in rows)) for k in keys]
    print('  '.join(k.rjust(w) for k, w in zip(keys, fmt, strict=True)))
    for r in rows:
        print('  '.join(_cell(r[k]).rjust(w) for k, w in zip(keys, fmt, strict=True)))


def _cell(v) -> str:
    return f'{v:.3g}' if isinstance(v, float) else str(v)


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--batch', type=int, default=128)
    p.add_argument('--accounting', action='store_true', help='bytes and flops per stage (no GPU needed)')
    p.add_argument('--precision', action='store_true', help='error against float64 (CPU)')
    p.add_argument('--out', default='', help='directory for longconv_gpu.csv')
    args = p.parse_args(argv)
    if args.precision:
        rows = precision()
    elif args.accounting:
        rows = accounting(args.batch)
    else:
        if not torch.cuda.is_available():
            sys.exit('bench_longconv_gpu: no CUDA device visible (use --accounting or --precision on the CPU)')
        rows = timing(args.batch)
    _print(rows)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        with open(Path(args.out) / 'longconv_gpu.csv', 'w', newline='') as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return rows


if __name__ == '__main__':
    main()
