"""The elementwise nodes of an ONNX file that broadcast along short runs, the ones ONNX Runtime's CPU kernels run slowly.

    python scripts/onnx_broadcasts.py model.onnx [--batch 8] [--max-span 63] [--min-runs 1000]

ONNX Runtime's binary elementwise kernels (``Add``, ``Mul``, ``Where``, ...) walk the output in spans over which each
operand is either read in full or repeats one value, and pay a fixed cost per span, about 13 ns on this project's CPU
(docs/deployment.md): ``(1, 3136, 2) - (3136, 1)`` took 45 us where the same shapes without a broadcast took 2-3.
A node is listed where its span (the innermost output dimensions over which no operand changes between read and
repeated) holds at most ``--max-span`` values and the output has at least ``--min-runs`` spans. Shapes come from ONNX
shape inference, a symbolic dimension (the batch) taken as ``--batch``. Each row: how many nodes share it, the op,
the output shape, the operands' shapes (broadcast to the output's rank), the span and the number of spans.
"""

from __future__ import annotations

import argparse
import collections
import math

ELEMENTWISE = (
    'Add', 'Sub', 'Mul', 'Div', 'Pow', 'Where', 'Max', 'Min', 'Mod', 'And', 'Or', 'Xor', 'Equal', 'Less', 'Greater',
    'LessOrEqual', 'GreaterOrEqual', 'PRelu', 'BitShift',
)  # fmt: skip


def broadcast_span(out: list[int], operands: list[list[int]]) -> int | None:
    """Values per span of an elementwise op with output shape ``out``: the product of the innermost dimensions over
    which every operand keeps one pattern (read along the dimension, or repeated along it); dimensions of size 1
    belong to any span. None where no operand broadcasts (one span of the whole output) or the output is a scalar."""
    full = [[1] * (len(out) - len(s)) + list(s) for s in operands]
    if all(f == list(out) or math.prod(f) == 1 for f in full):
        return None  # no broadcast, or a scalar: the kernels' fast paths
    span, d = 1, len(out) - 1
    pattern = None
    while d >= 0:
        if out[d] != 1:
            here = tuple(f[d] == out[d] for f in full)
            if pattern is None:
                pattern = here
            elif here != pattern:
                break
        span *= out[d]
        d -= 1
    return None if d < 0 else span


def scan(path: str, batch: int = 8, max_span: int = 63, min_runs: int = 1000) -> list[tuple]:
    """``(count, op, out, operands, span, runs)`` per distinct short-span broadcast of the file, most frequent first."""
    import onnx
    from onnx import shape_inference

    model = shape_inference.infer_shapes(onnx.load(path))
    shapes = {}
    for info in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        dims = info.type.tensor_type.shape.dim
        shapes[info.name] = [d.dim_value if d.HasField('dim_value') else batch for d in dims]
    for init in model.graph.initializer:
        shapes[init.name] = list(init.dims)
    found = collections.Counter()
    for node in model.graph.node:
        if node.op_type not in ELEMENTWISE or node.output[0] not in shapes:
            continue
        operands = [shapes.get(name) for name in node.input]
        if any(s is None for s in operands):
            continue
        out = shapes[node.output[0]]
        span = broadcast_span(out, operands)
        if span is None or span > max_span or math.prod(out) // span < min_runs:
            continue
        full = tuple(tuple([1] * (len(out) - len(s)) + list(s)) for s in operands)
        found[(node.op_type, tuple(out), full, span, math.prod(out) // span)] += 1
    return [(count, *key) for key, count in found.most_common()]


def main(argv: list[str] | None = None) -> list[tuple]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('path')
    p.add_argument('--batch', type=int, default=8, help='the size taken for a symbolic dimension')
    p.add_argument('--max-span', type=int, default=63)
    p.add_argument('--min-runs', type=int, default=1000)
    args = p.parse_args(argv)
    rows = scan(args.path, args.batch, args.max_span, args.min_runs)
    for count, op, out, operands, span, runs in rows:
        print(f'{count} x {op} out {out} operands {operands} span {span} runs {runs}')
    if not rows:
        print('no short-span broadcasts')
    return rows


if __name__ == '__main__':
    main()
