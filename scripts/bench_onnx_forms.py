"""The candidate ONNX forms of each mixer operator, one against another in ONNX Runtime on the CPU, at stage shapes.

    python scripts/bench_onnx_forms.py                   # every operator, batch 1 and 8, 2 threads
    python scripts/bench_onnx_forms.py --ops long_conv   # one family

Each form is a plain PyTorch function of the package (the engines ``'auto'`` picks under ``torch.onnx.export`` and
the alternatives they were chosen against), exported alone with ``torch.onnx.export(..., dynamo=True)`` and timed
in ONNX Runtime (``--threads`` intra-op threads, median of ``--repeats`` runs after three warm-up runs). The shapes are
ConvNeXt-atto's and -T's stages (channels, map); each is exported at its batch (a static batch: the ONNX engine's
row products take the form that batch picks, ``engine_onnx.ONNX_DFT_MAX_BATCH``; ``blocks`` and ``dft`` force
one). The maximum error against the float64 specification, relative to
the largest output, is checked (< 1e-4). This is what chose ``mrconvnext.ops.long_conv.dispatch.ONNX_DIRECT_MAX_LENGTH`` and the TaLK and
DynamicConv forms (and TaLK 2-D's ``ONNX_DENSE_MAX_POSITIONS``). ``--doc`` writes the table as a section of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing the package

import torch  # noqa: E402


class _Call(torch.nn.Module):
    """``fn(*inputs, *weights, *consts)`` with the weights as buffers: constants of the exported graph, as a deployed
    model's kernels are (ONNX Runtime folds what depends on them alone)."""

    def __init__(self, fn, weights: tuple, consts: tuple) -> None:
        super().__init__()
        self.fn, self.consts = fn, consts
        for i, w in enumerate(weights):
            self.register_buffer(f'w{i}', w)
        self.n = len(weights)

    def forward(self, *inputs):
        return self.fn(*inputs, *(getattr(self, f'w{i}') for i in range(self.n)), *self.consts)


def _time(fn, tensors: tuple, weights: tuple, consts: tuple, threads: int, repeats: int, folder: Path):
    import onnxruntime as ort

    path = folder / 'form.onnx'
    module = _Call(fn, weights, consts)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        torch.onnx.export(module, tensors, str(path), dynamo=True, external_data=False, verbose=False)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(path), options, providers=['CPUExecutionProvider'])
    feed = {i.name: t.numpy() for i, t in zip(session.get_inputs(), tensors)}
    for _ in range(3):
        y = session.run(None, feed)[0]
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times), torch.from_numpy(y)


def cases(ops: list[str], batches: list[int], limit: int | None = None):
    """``(op, shape, {form: fn}, inputs, weights, consts, reference fn)`` per operator, shape and batch (the first
    ``limit`` shapes of each operator)."""
    from mrconvnext.ops.light_conv.engine_onnx import dynamic_conv_band, dynamic_conv_taps
    from mrconvnext.ops.light_conv.operators import dynamic_conv_decomposition
    from mrconvnext.ops.long_conv import engine_onnx, engine_torch
    from mrconvnext.ops.long_conv.engine_onnx import onnx_grid
    from mrconvnext.ops.long_conv.grid import row_grid
    from mrconvnext.ops.talk import talk1d_reference, talk2d_reference
    from mrconvnext.ops.talk.engine_onnx import talk1d_onnx, talk2d_dense, talk2d_separable, talk2d_table

    g = torch.Generator().manual_seed(0)
    for B in batches:
        if 'long_conv' in ops:  # (C, L): atto and T stages 1-4
            shapes = [(40, 3136), (80, 784), (160, 196), (320, 49), (96, 3136), (192, 784), (384, 196), (768, 49)]
            for C, L in shapes[:limit]:
                x, k = torch.randn(B, C, L, generator=g), torch.randn(1, C, 2 * L - 1, generator=g) / L
                forms = {'toeplitz': engine_torch.toeplitz_conv, 'rowdft/torch': engine_torch.rowdft_conv,
                         'rowdft/onnx blocks': lambda x, k, z: engine_onnx.rowdft_conv(x, k, z, rows='blocks'),
                         'rowdft/onnx dft': lambda x, k, z: engine_onnx.rowdft_conv(x, k, z, rows='dft')}  # fmt: skip
                if L > 1000:
                    del forms['toeplitz']  # an L x L matrix per channel: gigabytes
                if L <= 200:  # the direct method on the ONNX engine: one depthwise Conv of the folded map
                    forms['direct/onnx folded'] = engine_onnx.folded_conv2d
                square = row_grid(L)
                if onnx_grid(L) != square:  # the ONNX engine's short rows against the square grid
                    forms['rowdft/onnx square'] = lambda x, k, z, g=square: engine_onnx.rowdft_conv(x, k, z, g)
                yield 'long_conv', (B, C, L), forms, (x,), (k,), (L - 1,), engine_torch.toeplitz_conv
        if 'talk' in ops:  # (C, heads, H, W)
            talk_shapes = [(40, 4, 56, 56), (160, 16, 14, 14), (192, 12, 28, 28), (384, 24, 14, 14), (768, 48, 7, 7)]
            for C, heads, H, W in talk_shapes[:limit]:
                x, off = torch.randn(B, C, H * W, generator=g), torch.rand(B, heads, H * W, 2, generator=g)
                forms = {'reference': talk1d_reference, 'onnx': talk1d_onnx}
                yield 'talk1d', (B, C, H * W), forms, (x, off), (), (30, 30), talk1d_reference
                x, off = torch.randn(B, C, H, W, generator=g), torch.rand(B, heads, H, W, 4, generator=g)
                forms = {'reference': talk2d_reference, 'dense': talk2d_dense, 'separable': talk2d_separable,
                         'table': talk2d_table}  # fmt: skip
                if H * W > 1000:  # an HW x HW matrix per image and head (separable: an (R H, HW) one): gigabytes
                    del forms['dense'], forms['separable']
                yield (
                    'talk2d',
                    (B, C, H, W),
                    forms,
                    (x, off),
                    (),
                    (3, 3, 3, 3),
                    talk2d_reference,
                )
        if 'dynamic_conv' in ops:  # (heads, R, L, K); x (B, H R, L)
            for H, R, L, K in [(10, 16, 196, 31), (20, 16, 49, 31), (5, 16, 784, 15), (2, 20, 3136, 7)][:limit]:
                x = torch.randn(B, H * R, L, generator=g)
                logits = torch.randn(B, H, K, L, generator=g)
                forms = {'tap loop': lambda x, w, z, H=H: dynamic_conv_decomposition(
                             x.unflatten(1, (H, -1)), w.transpose(2, 3), z).flatten(1, 2),
                         'taps': dynamic_conv_taps, 'band': dynamic_conv_band,
                         'whole band': lambda x, w, z, n=L: dynamic_conv_band(x, w, z, chunk=n)}  # fmt: skip
                if L > 256:
                    del forms['whole band']  # an L x L matrix per image and head: gigabytes
                # the weights as the layers make them (a softmax over the taps of tap-major logits, transposed)
                forms = {k: _from_logits(f) for k, f in forms.items()}
                yield 'dynamic_conv', (B, H * R, L, K), forms, (x, logits), (), ((K - 1) // 2,), forms['tap loop']


def _from_logits(fn):
    return lambda x, logits, z: fn(x, torch.softmax(logits, 2).transpose(2, 3), z)


def run(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--ops', nargs='+', default=['long_conv', 'talk', 'dynamic_conv'])
    p.add_argument('--batches', nargs='+', type=int, default=[1, 8])
    p.add_argument('--threads', type=int, default=2)
    p.add_argument('--repeats', type=int, default=11)
    p.add_argument('--limit', type=int, default=None, help='the first N shapes of each operator only')
    p.add_argument('--doc', action='store_true', help='also write the table as a section of docs/benchmarks.md')
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for op, shape, forms, tensors, weights, consts, reference in cases(args.ops, args.batches, args.limit):
            with torch.no_grad():
                ref = reference(*(t.double() for t in tensors + weights), *consts)
            row = {'op': op, 'shape': shape}
            for name, fn in forms.items():
                ms, y = _time(fn, tensors, weights, consts, args.threads, args.repeats, Path(tmp))
                err = float((y.double() - ref).abs().max() / ref.abs().max())
                if not err < 1e-4:
                    raise SystemExit(f'{op} {shape} {name}: error {err:.2e} against float64')
                row[name] = round(ms, 2)
            rows.append(row)
            print(' | '.join(f'{k} {v}' for k, v in row.items()), flush=True)
    if args.doc:
        import onnxruntime
        from _bench import markdown_rows, write_doc_section

        command = ' '.join(['python scripts/bench_onnx_forms.py', *(sys.argv[1:] if argv is None else argv)])
        notes = [
            '',
            f'ONNX Runtime {onnxruntime.__version__}, {args.threads} intra-op threads; ms, median of {args.repeats} '
            'runs per form; shape: (batch, channels, positions[, taps]). Every form is within 1e-4 of the float64 '
            'specification.',
        ]
        doc = write_doc_section(
            'onnx_forms_' + '_'.join(args.ops), 'ONNX forms of the mixer operators (ONNX Runtime, CPU): ' + ', '.join(
                args.ops), command, markdown_rows(rows) + notes
        )  # fmt: skip
        print(f'wrote {doc}')
    return rows


if __name__ == '__main__':
    run()
