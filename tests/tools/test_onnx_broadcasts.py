"""scripts/onnx_broadcasts.py: the spans of ONNX elementwise nodes' broadcasts, against values worked out by hand."""

import importlib.util

import pytest

from .conftest import REPO

spec = importlib.util.spec_from_file_location('onnx_broadcasts', REPO / 'scripts' / 'onnx_broadcasts.py')
scanner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(scanner)


@pytest.mark.parametrize(
    'out, operands, span',
    [
        # TaLK's positions before: (B, L, heads) - (L, 1): the (L, 1) operand repeats along heads, the other is read:
        # one span per position, of heads values
        ([8, 3136, 2], [[3136, 1], [8, 3136, 2]], 2),
        # a fraction per position and head times its channels: spans of the 20 channels
        ([8, 3136, 2, 20], [[8, 3136, 2, 1], [8, 3136, 2, 20]], 20),
        # a per-channel scale of an NCHW map: the scale repeats along H W, the map is read: spans of H W = 3136
        ([8, 40, 56, 56], [[1, 40, 1, 1], [8, 40, 56, 56]], 3136),
        # a row vector added to every row: the vector is read along the row, repeated along the rows: spans of 16
        ([100, 16], [[16], [100, 16]], 16),
        # a batch-only broadcast: (L, heads) against (B, L, heads) changes pattern at the batch only
        ([8, 3136, 2], [[3136, 2], [8, 3136, 2]], 6272),
        # size-1 dimensions of the output belong to any span
        ([8, 1, 196, 1, 31], [[8, 1, 196, 1, 1], [8, 1, 196, 1, 31]], 31),
        # no broadcast, and a scalar operand: the kernels' fast paths, no span
        ([8, 3136, 2], [[8, 3136, 2], [8, 3136, 2]], None),
        ([8, 3136, 2], [[8, 3136, 2], []], None),
        # broadcast along every dimension at once (a (1, 1) operand against a (3, 4) one): the scalar path
        ([3, 4], [[1, 1], [3, 4]], None),
    ],
)
def test_broadcast_span(out, operands, span):
    assert scanner.broadcast_span(out, operands) == span


def test_scan_lists_the_short_spans_of_a_file(tmp_path):
    """A graph with one slow broadcast (TaLK's former positions, twice), one long one and one without: the scan
    finds the first, with the symbolic batch taken as 8."""
    onnx = pytest.importorskip('onnx')
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info('x', TensorProto.FLOAT, ['batch', 3136, 2])
    y = helper.make_tensor_value_info('y', TensorProto.FLOAT, ['batch', 3136, 2])
    pos = numpy_helper.from_array(np.arange(3136, dtype=np.float32).reshape(3136, 1), 'pos')
    full = numpy_helper.from_array(np.ones((3136, 2), dtype=np.float32), 'full')
    nodes = [
        helper.make_node('Sub', ['pos', 'x'], ['a']),
        helper.make_node('Add', ['pos', 'a'], ['b']),
        helper.make_node('Mul', ['b', 'full'], ['c']),
        helper.make_node('Add', ['c', 'x'], ['y']),
    ]
    graph = helper.make_graph(nodes, 'g', [x], [y], initializer=[pos, full])
    path = tmp_path / 'g.onnx'
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid('', 18)]), str(path))
    rows = scanner.scan(str(path))
    assert rows == [(1, 'Sub', (8, 3136, 2), ((1, 3136, 1), (8, 3136, 2)), 2, 25088),
                    (1, 'Add', (8, 3136, 2), ((1, 3136, 1), (8, 3136, 2)), 2, 25088)]  # fmt: skip
    assert scanner.scan(str(path), batch=1, min_runs=4000) == []  # 3136 spans at batch 1
