"""The package's operators written in standard PyTorch ops, for exporters that cannot call them (ONNX).

:func:`decompositions` extends ``torch.export.default_decompositions()``; pass it to
``ExportedProgram.run_decompositions`` and the program holds only ATen ops::

    ep = torch.export.export(model.eval(), (x,)).run_decompositions(decompositions())
    torch.onnx.export(ep, (x,), 'model.onnx', dynamo=True)

Each entry computes what its operator computes (the specification implementations: TaLK as prefix sums + gathers,
DynamicConv as K shifted multiply-adds, the FFT convolution as a direct one); they are tested against the operators.
Training-only operators (backwards, the fused BatchNorm) have no entry: exported programs are inference graphs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .light_conv import dynamic_conv_decomposition
from .long_conv import crop_kernel, direct_conv1d
from .talk import talk1d_reference, talk2d_reference
from .talk.checks import acc_dtype

__all__ = ['decompositions']


def _talk2d(x, offsets, max_left, max_right, max_top, max_bottom):
    y = talk2d_reference(x, offsets, max_left, max_right, max_top, max_bottom)
    P = F.pad(
        x.to(acc_dtype(x.dtype)).cumsum(2).cumsum(3), (1, 0, 1, 0)
    )  # the integral image the operator also returns
    return y, P


def _talk2d_triton(x, offsets, max_left, max_right, max_top, max_bottom):
    from .talk.engine_triton import saves_input  # registered once its module was imported

    if saves_input(x):  # as the operator: the table left out, so none is built
        y = talk2d_reference(x, offsets, max_left, max_right, max_top, max_bottom)
        return y, x.new_empty(0, dtype=acc_dtype(x.dtype))
    return _talk2d(x, offsets, max_left, max_right, max_top, max_bottom)


def _fft_conv(x, kernel, zero_lag, bias=None):
    # A direct convolution with the kernel cropped to the lags that reach an output: exact, and no complex
    # arithmetic, which ONNX lacks.
    kernel, zero_lag = crop_kernel(kernel, zero_lag, x.shape[-1])
    y = direct_conv1d(x, kernel, zero_lag)
    return y if bias is None else y + bias[:, None]


def decompositions() -> dict:
    """``torch.export.default_decompositions()`` plus one entry per inference operator of the package."""
    ops = torch.ops.mrconvnext
    table = torch.export.default_decompositions()
    names = ['talk1d', 'talk1d_torch', 'talk1d_triton']  # the Triton operators exist once their module was imported
    for name in names:
        if hasattr(ops, name):
            table[getattr(ops, name).default] = talk1d_reference
            table[getattr(ops, name.replace('1d', '2d')).default] = _talk2d_triton if 'triton' in name else _talk2d
    table[ops.dynamic_conv.default] = dynamic_conv_decomposition
    table[ops.fft_conv.default] = _fft_conv
    table[ops.fft_conv_torch.default] = _fft_conv
    return table
