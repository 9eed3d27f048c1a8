"""CPU benchmark of the MRConv layer and its FFT engine (not a test: run it, read the table).

    python scripts/bench_mrconv.py                    # layer: train / branched / reparameterized, both engines
    python scripts/bench_mrconv.py --fft-sizes        # FFT-size policy: exact vs power of two vs 7-smooth
    python scripts/bench_mrconv.py --crossover        # direct vs FFT by kernel length
    python scripts/bench_mrconv.py --fourier          # Fourier branch kernels: irfft vs the cached-basis matmul
    python scripts/bench_mrconv.py --synthesis        # all branch kernels: per branch vs batched (kernel_bank)
    python scripts/bench_mrconv.py --shared --groups 4 # reduced-dimension layers: shared filters vs expanded
    python scripts/bench_mrconv.py --chunks           # torch.fft engine: CPU chunk size (engine_torch.CHUNK_ELEMS)
    python scripts/bench_mrconv.py --pad --threads 1  # direct method: conv1d's own padding vs F.pad (CPU_NATIVE_PAD_MAX)

Every case is timed side by side in the same process: warm-up, then ``--repeats`` runs; the table
gives the median and the spread (min-max) in milliseconds, and ratios of medians. Results are
also written as CSV to ``--out``, and with ``--doc`` as a section of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import csv
import functools
import statistics
import sys
import time
from pathlib import Path

import torch

from mrconvnext.layers import MRConv2d
from mrconvnext.layers.kernel_params import FourierKernel
from mrconvnext.ops import long_conv1d
from mrconvnext.ops.long_conv import circular_kernel

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import markdown_rows, write_doc_section  # noqa: E402

TITLES = {
    'layer': 'MRConv layer (CPU): training, branched and deployed forward per FFT engine',
    'fft_sizes': 'FFT sizes of the long convolution (CPU): exact, power of two, 7-smooth',
    'crossover': "The long convolution's direct / FFT crossover by kernel length (CPU): `DIRECT_MAX_TAPS`",
    'fourier': 'Fourier branch kernels (CPU): irfft against the cached-basis product',
    'synthesis': 'Branch kernel synthesis (CPU): per branch against batched',
    'shared': 'Shared filters (`groups`, CPU): groups as batch on the matmul methods, against expanded filters',
    'chunks': "The torch.fft engine's chunk size on the CPU: `engine_torch.CHUNK_ELEMS`",
    'pad': "The direct method's padding on the CPU: `engine_torch.CPU_NATIVE_PAD_MAX`",
}


def timeit(fn, repeats: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def row(name: str, times: list[float], base: float | None = None) -> dict:
    med = statistics.median(times)
    r = {'case': name, 'median_ms': round(med, 2), 'min_ms': round(min(times), 2), 'max_ms': round(max(times), 2)}
    r['ratio'] = round(med / base, 3) if base else 1.0
    return r


def bench_layer(args) -> list[dict]:
    B, C, H, W = args.batch, args.dim, args.size, args.size
    # channels-last, as ConvNeXt hands its mixers their input
    x = torch.randn(B, C, H, W).contiguous(memory_format=torch.channels_last)
    kw = dict(kernel_size=args.kernel_size, kernel_type=args.kernel_type, num_modes=args.modes, num_taps=args.taps)
    rows = []
    dw = torch.nn.Conv2d(C, C, 7, padding=3, groups=C)  # the 7x7 depthwise conv MRConv replaces, for scale
    with torch.no_grad():
        t_dw = timeit(lambda: dw(x), args.repeats)
    base = statistics.median(t_dw)
    rows.append(row('depthwise 7x7 conv (eval, reference)', t_dw))
    torch.manual_seed(0)
    for engine in args.engines:
        # 'native': the fused CPU kernels (kernels/fftconv) and the fused BatchNorm training form, as 'auto' runs
        # them here; 'torch': the torch.fft engine and the F.batch_norm training path
        layer = MRConv2d(C, (H, W), engine=engine, **kw)
        layer.load_state_dict(MRConv2d(C, (H, W), **kw).state_dict())  # same weights each time
        torch.manual_seed(0)

        def train_step(layer=layer):
            layer.train()
            xr = x.detach().requires_grad_(True)
            layer(xr).sum().backward()

        t_train = timeit(train_step, args.repeats)
        layer.eval()
        with torch.no_grad():
            t_branched = timeit(functools.partial(layer, x), args.repeats)
            y_branched = layer(x)
            deployed = MRConv2d(C, (H, W), engine=engine, **kw)
            deployed.load_state_dict(layer.state_dict())
            deployed.eval().reparameterize()
            t_rep = timeit(functools.partial(deployed, x), args.repeats)
            err = ((deployed(x) - y_branched).abs().max() / y_branched.abs().max()).item()
        n = layer.num_branches
        rows.append(row(f'[{engine}] MRConv {args.kernel_type} train fwd+bwd (bn, {n} branches)', t_train, base))
        rows.append(row(f'[{engine}] MRConv branched eval', t_branched, base))
        rows.append(row(f'[{engine}] MRConv reparameterized eval', t_rep, base))
        print(f'[{engine}] reparameterized vs branched max relative difference: {err:.2e}')
    return rows


def _sizes(required: int) -> dict[str, int]:
    from mrconvnext.ops import fft_size

    return {'exact': required, 'pow2': 1 << (required - 1).bit_length(), '7-smooth': fft_size(required)}


def _fft_conv_at(x: torch.Tensor, kernel_circ: torch.Tensor, n: int) -> torch.Tensor:
    return torch.fft.irfft(torch.fft.rfft(x, n=n) * torch.fft.rfft(kernel_circ, n=n), n=n)[..., : x.shape[-1]]


def bench_fft_sizes(args) -> list[dict]:
    rows = []
    for C, L in [(96, 3136), (192, 784), (384, 196), (768, 49)]:
        x = torch.randn(args.batch, C, L)
        k = torch.randn(C, 2 * L - 1)
        sizes = _sizes(2 * L - 1)
        times = {}
        for name, n in sizes.items():
            times[name] = timeit(functools.partial(_fft_conv_at, x, circular_kernel(k, L - 1, n), n), args.repeats)
        base = statistics.median(times['pow2'])
        for name, t in times.items():
            rows.append(row(f'L={L} C={C} n={sizes[name]} ({name})', t, base))
    return rows


def bench_chunks(args) -> list[dict]:
    """The torch.fft engine's CPU chunk size (``engine_torch.CHUNK_ELEMS``, sequences x FFT size per chunk) at
    ConvNeXt-T's stages: forward, and forward + backward, of a full-length kernel; ratios to the constant's value."""
    from mrconvnext.ops.long_conv import engine_torch

    chosen, rows = engine_torch.CHUNK_ELEMS, []
    try:
        for C, L in [(96, 3136), (192, 784), (384, 196), (768, 49)]:
            x = torch.randn(args.batch, C, L, requires_grad=True)
            k = torch.randn(C, 2 * L - 1, requires_grad=True)

            def train(x=x, k=k, L=L):
                long_conv1d(x, k, zero_lag=L - 1, method='fft', engine='torch').sum().backward()

            def infer(x=x, k=k, L=L):
                with torch.no_grad():
                    long_conv1d(x, k, zero_lag=L - 1, method='fft', engine='torch')

            for name, fn in (('forward', infer), ('train', train)):
                times = {}
                for log2 in (15, 18, 20, 22, 24):
                    engine_torch.CHUNK_ELEMS = 1 << log2
                    times[log2] = timeit(fn, args.repeats)
                base = statistics.median(times[chosen.bit_length() - 1])
                rows += [row(f'L={L} C={C} {name} 2^{e}', ts, base) for e, ts in times.items()]
    finally:
        engine_torch.CHUNK_ELEMS = chosen
    return rows


def bench_pad(args) -> list[dict]:
    """The direct method on the CPU: ``conv1d``'s own zero padding against ``F.pad`` then an unpadded ``conv1d``
    (``engine_torch.CPU_NATIVE_PAD_MAX``: the largest padding left to ``conv1d``), at stage 1 of ConvNeXt-T."""
    from mrconvnext.ops.long_conv import engine_torch

    chosen, rows = engine_torch.CPU_NATIVE_PAD_MAX, []
    C, L = args.dim, args.size * args.size
    x = torch.randn(args.batch, C, L)
    try:
        for taps in (7, 13, 15, 31, 63):
            k = torch.randn(C, taps)
            times = {}
            for name, limit in (('F.pad', -1), ('conv1d padding', taps)):
                engine_torch.CPU_NATIVE_PAD_MAX = limit
                times[name] = timeit(functools.partial(long_conv1d, x, k, zero_lag=taps // 2, method='direct'),
                                     args.repeats)  # fmt: skip
            base = statistics.median(times['F.pad'])
            rows += [row(f'L={L} C={C} K={taps} {name}', ts, base) for name, ts in times.items()]
    finally:
        engine_torch.CPU_NATIVE_PAD_MAX = chosen
    return rows


def bench_crossover(args) -> list[dict]:
    rows = []
    for C, L in [(96, 3136), (384, 196), (768, 49)]:
        x = torch.randn(args.batch, C, L)
        for taps in (7, 15, 31, 63, 97, 127, 255, 391):
            if taps > 2 * L - 1:
                continue
            k = torch.randn(C, taps)
            t_fft = timeit(functools.partial(long_conv1d, x, k, zero_lag=taps // 2, method='fft'), args.repeats)
            t_dir = timeit(functools.partial(long_conv1d, x, k, zero_lag=taps // 2, method='direct'), args.repeats)
            rows.append(row(f'L={L} C={C} K={taps} fft', t_fft))
            rows.append(row(f'L={L} C={C} K={taps} direct', t_dir, statistics.median(t_fft)))
    return rows


def _irfft_kernel(k: FourierKernel) -> torch.Tensor:
    """The Fourier branch kernel by torch.fft.irfft + roll (the synthesis FourierKernel used before its matmul)."""
    modes = torch.view_as_complex(k.modes)
    return torch.roll(torch.fft.irfft(modes, n=k.size, norm='ortho'), k.zero_lag, dims=-1)


def _synth_fwd_bwd(synth, branches: list[FourierKernel], grads: list[torch.Tensor]) -> None:
    sum((synth(b) * g).sum() for b, g in zip(branches, grads)).backward()


def bench_fourier(args) -> list[dict]:
    """Forward + backward of all Fourier branch kernels of one mixer per mrconvnext_t stage (bidirectional)."""
    from mrconvnext.models.mrconvnext import mrconv_kernel_size

    rows = []
    for C, side in [(96, 56), (192, 28), (384, 14), (768, 7)]:
        L = side * side
        layer = MRConv2d(
            C, (side, side), kernel_size=mrconv_kernel_size(L), kernel_type='fourier', num_modes=args.modes
        )
        branches = list(layer.branches)
        grads = [torch.randn(C, b.size) for b in branches]

        t_fft = timeit(functools.partial(_synth_fwd_bwd, _irfft_kernel, branches, grads), args.repeats)
        t_mm = timeit(functools.partial(_synth_fwd_bwd, lambda b: b(), branches, grads), args.repeats)
        sizes = '+'.join(str(b.size) for b in branches)
        rows.append(row(f'C={C} P={sizes} irfft fwd+bwd', t_fft))
        rows.append(row(f'C={C} P={sizes} matmul fwd+bwd', t_mm, statistics.median(t_fft)))
    return rows


def _stack_fwd_bwd(branches: list, reach: int, grad: torch.Tensor, batched: bool) -> None:
    from mrconvnext.layers.kernel_bank import stack_branch_kernels

    (stack_branch_kernels(branches, reach, False, batched=batched) * grad).sum().backward()


def bench_synthesis(args) -> list[dict]:
    """Forward + backward of one mixer's ``(N, C, P)`` branch kernels per mrconvnext_t stage: each branch's forward,
    zero-padded, against the batched synthesis (``stack_branch_kernels(batched=...)``)."""
    from mrconvnext.models.mrconvnext import mrconv_kernel_size

    rows = []
    for C, side in [(96, 56), (192, 28), (384, 14), (768, 7)]:
        L = side * side
        kw = dict(kernel_type=args.kernel_type, num_modes=args.modes, num_taps=args.taps)
        layer = MRConv2d(C, (side, side), kernel_size=mrconv_kernel_size(L), **kw)
        branches = list(layer.branches)
        grad = torch.randn(len(branches), C, 2 * layer.reach - 1)

        t_loop = timeit(functools.partial(_stack_fwd_bwd, branches, layer.reach, grad, False), args.repeats)
        t_bank = timeit(functools.partial(_stack_fwd_bwd, branches, layer.reach, grad, True), args.repeats)
        case = f'C={C} N={len(branches)} P={grad.shape[-1]} {args.kernel_type}'
        rows.append(row(f'{case} per branch fwd+bwd', t_loop))
        rows.append(row(f'{case} batched fwd+bwd', t_bank, statistics.median(t_loop)))
    return rows


def _shared_stage(args, C: int, side: int, method: str) -> list[dict]:
    B, G, N = args.batch, args.groups, 5
    L, M = side * side, C // G
    x = torch.randn(B, C, L, requires_grad=True)
    filters = (torch.randn(N, M, 2 * L - 1) / L).requires_grad_()
    scale = torch.randn(N, C, 1)
    grad = torch.randn(B, N, C, L)

    def branches(k: torch.Tensor) -> torch.Tensor:
        return long_conv1d(x, k, zero_lag=L - 1, method=method, engine='torch')

    def fwd_bwd(shared: bool) -> None:
        torch.autograd.grad(branches(filters if shared else filters.repeat(1, G, 1)), (x, filters), grad)

    case = f'C={C} L={L} G={G} {method}'
    t_exp = timeit(functools.partial(fwd_bwd, False), args.repeats)
    t_sh = timeit(functools.partial(fwd_bwd, True), args.repeats)
    with torch.no_grad():
        merged = (scale * filters.repeat(1, G, 1)).sum(0)
        t_merged = timeit(lambda: branches(merged), args.repeats)
        t_grouped = timeit(lambda: (scale * branches(filters)).sum(1), args.repeats)
    return [
        row(f'{case} branches expanded fwd+bwd', t_exp),
        row(f'{case} branches shared fwd+bwd', t_sh, statistics.median(t_exp)),
        row(f'{case} deployed merged (C, P)', t_merged),
        row(f'{case} deployed kept grouped', t_grouped, statistics.median(t_merged)),
    ]


def bench_shared(args) -> list[dict]:
    """Reduced-dimension MRConv (``groups``) per mrconvnext_t stage (5 branches), the convolutions alone: forward +
    backward of the branch convolutions with the ``C / G`` shared filters (groups as a batch dimension) against the
    same filters expanded to ``C`` channels; and for the deployed form, the merged ``(C, P)`` kernel (one convolution,
    what ``reparameterize()`` keeps) against keeping the filters grouped (``N`` shared-filter convolutions and a
    per-channel weighted sum). Stages 1-2 on the FFT method, 3-4 on the Toeplitz product (CUDA's half-precision
    choice), all on the 'torch' engine."""
    rows = []
    for C, side, method in [(96, 56, 'fft'), (192, 28, 'fft'), (384, 14, 'toeplitz'), (768, 7, 'toeplitz')]:
        rows += _shared_stage(args, C, side, method)
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--fft-sizes', action='store_true')
    p.add_argument('--crossover', action='store_true')
    p.add_argument('--chunks', action='store_true')
    p.add_argument('--pad', action='store_true')
    p.add_argument('--fourier', action='store_true')
    p.add_argument('--synthesis', action='store_true')
    p.add_argument('--shared', action='store_true')
    p.add_argument('--groups', type=int, default=4, help='--shared: channels per shared filter')
    p.add_argument('--batch', type=int, default=16)
    p.add_argument('--dim', type=int, default=96)
    p.add_argument('--size', type=int, default=56)
    p.add_argument('--kernel-size', type=int, default=196)
    p.add_argument('--kernel-type', default='fourier_sparse')
    p.add_argument('--modes', type=int, default=37, help="Fourier modes per branch (mrconvnext_t's)")
    p.add_argument('--taps', type=int, default=80, help="sparse taps per branch (mrconvnext_t's)")
    p.add_argument(
        '--engines', nargs='+', default=['native', 'torch'], choices=['native', 'torch'], help='layer: FFT engines'
    )
    p.add_argument('--repeats', type=int, default=7)
    p.add_argument('--threads', type=int, default=None)
    p.add_argument('--out', default=None)
    p.add_argument('--doc', action='store_true', help='also write the table as a section of docs/benchmarks.md')
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f'torch {torch.__version__}, {torch.get_num_threads()} threads')
    if args.fft_sizes:
        kind, rows = 'fft_sizes', bench_fft_sizes(args)
    elif args.crossover:
        kind, rows = 'crossover', bench_crossover(args)
    elif args.chunks:
        kind, rows = 'chunks', bench_chunks(args)
    elif args.pad:
        kind, rows = 'pad', bench_pad(args)
    elif args.fourier:
        kind, rows = 'fourier', bench_fourier(args)
    elif args.synthesis:
        kind, rows = 'synthesis', bench_synthesis(args)
    elif args.shared:
        kind, rows = 'shared', bench_shared(args)
    else:
        kind, rows = 'layer', bench_layer(args)
    width = max(len(r['case']) for r in rows)
    print(f'{"case":<{width}}  median_ms  (min-max)        ratio')
    for r in rows:
        print(f'{r["case"]:<{width}}  {r["median_ms"]:9.2f}  ({r["min_ms"]:.2f}-{r["max_ms"]:.2f})  {r["ratio"]:6.3f}')
    out = Path(args.out or f'results/bench_mrconv_{kind}.csv')
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open('w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f'wrote {out}')
    if args.doc:
        given = list(sys.argv[1:] if argv is None else argv)
        if '--out' in given:  # where the CSV went is not part of the measurement
            del given[given.index('--out') : given.index('--out') + 2]
        command = ' '.join(['python scripts/bench_mrconv.py', *given])
        shown = [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()} for r in rows]
        print(f'wrote {write_doc_section(f"mrconv_{kind}", TITLES[kind], command, markdown_rows(shown))}')


if __name__ == '__main__':
    main()
