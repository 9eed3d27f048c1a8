"""mrconvnext.ops.map_layout: eagerly a plain reshape (no copy); under torch.onnx.export a channels-last route whose
transposes ONNX Runtime cancels against a position-major form's and the ConvNeXt block's."""

from __future__ import annotations

import warnings

import pytest
import torch

from mrconvnext.ops.map_layout import flatten_map, unflatten_map


@pytest.mark.parametrize('layout', ['contiguous', 'channels_last'])
def test_eager_round_trip_is_a_view_of_the_map(layout):
    x = torch.randn(2, 5, 3, 4)
    if layout == 'channels_last':
        x = x.contiguous(memory_format=torch.channels_last)
    flat = flatten_map(x)
    torch.testing.assert_close(flat, x.reshape(2, 5, 12), rtol=0, atol=0)
    assert flat.data_ptr() == x.data_ptr()  # a view: nothing copied
    back = unflatten_map(flat, (3, 4))
    torch.testing.assert_close(back, x, rtol=0, atol=0)
    assert back.data_ptr() == x.data_ptr() and back.stride() == x.stride()


class _Block(torch.nn.Module):
    """A position-major form between ``flatten`` and ``unflatten``, then the ConvNeXt block's move to channels-last."""

    def __init__(self, flatten, unflatten) -> None:
        super().__init__()
        self.flatten, self.unflatten = flatten, unflatten

    def forward(self, x):
        t = self.flatten(x).transpose(1, 2).cumsum(1)  # (B, L, C), as TaLK's ONNX tables
        y = self.unflatten(t.transpose(1, 2), x.shape[-2:])
        return y.permute(0, 2, 3, 1)


def _transposes(flatten, unflatten, tmp_path) -> int:
    """Transposes left in ONNX Runtime's optimized graph of :class:`_Block`, exported with a dynamic batch."""
    import onnx
    import onnxruntime as ort

    path, optimized = tmp_path / 'block.onnx', tmp_path / 'optimized.onnx'
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        block, x = _Block(flatten, unflatten), torch.randn(2, 8, 3, 5)
        torch.onnx.export(block, (x,), str(path), dynamo=True, dynamic_shapes=({0: 'batch'},), verbose=False)
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(optimized)
    session = ort.InferenceSession(str(path), options, providers=['CPUExecutionProvider'])
    x = torch.randn(3, 8, 3, 5)
    y = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])
    torch.testing.assert_close(y, x.permute(0, 2, 3, 1).reshape(3, 15, 8).cumsum(1).view(3, 3, 5, 8))
    return sum(n.op_type == 'Transpose' for n in onnx.load(str(optimized)).graph.node)


def test_exported_transposes_meet_their_inverses(tmp_path):
    """With a dynamic batch, the helpers leave ONNX Runtime one transpose (into channels-last); the plain reshapes
    leave three (the form's two and the block's), the Reshape between two transposes keeping both."""
    pytest.importorskip('onnxruntime')

    def plain_flatten(x):
        return x.reshape(x.shape[0], x.shape[1], -1)

    def plain_unflatten(y, size):
        return y.reshape(y.shape[0], y.shape[1], *size)

    assert _transposes(flatten_map, unflatten_map, tmp_path) == 1
    assert _transposes(plain_flatten, plain_unflatten, tmp_path) == 3
