"""TaLK's dispatch: which engine runs a call (:func:`talk_engine`), from what can run here
(:mod:`mrconvnext.ops.availability`)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch

from .. import availability
from ..checks import check_choice

__all__ = [
    'TALK_ENGINES',
    'ONNX_DENSE_MAX_POSITIONS',
    'onnx_deform_conv',
    'talk2d_onnx_method',
    'talk_engine',
    'talk_engine_constant',
]

TALK_ENGINES = ('auto', 'native', 'triton', 'torch', 'reference', 'onnx')

# TaLK 2-D's ONNX form by the map's positions: up to ONNX_DENSE_MAX_POSITIONS one dense box matrix per image and head
# and a MatMul; larger maps the integral image's sixteen lookups (engine_onnx's channels-last tables). The dense matrix
# against the specification's lookups (`python scripts/bench_onnx_forms.py --doc`, docs/benchmarks.md, ms, ONNX
# Runtime, 2 threads): 7 x 7 at batch 1 / 8 0.41 / 3.5 against 1.37 / 12.8; 28 x 28 loses (the matrix grows with the
# map's square). At 14 x 14 the separable form (engine_onnx.talk2d_separable: the column weights by a MatMul, the row
# weights by a product and a sum) won inside the models until the cells' weights were laid out cells-first
# (2026-12-03); since then the dense matrix wins there (interleaved A/B of the exported models, the time with the
# dense matrix over the time with the separable form: talkconvnext2d_atto 0.95 at batch 1 and 0.99 at batch 8,
# talkconvnext2d_t 0.99 and 0.96).
ONNX_DENSE_MAX_POSITIONS = 196


# Whether exports take the 'deform' form past ONNX_DENSE_MAX_POSITIONS (onnx_deform_conv); off by default, so that
# every runtime loads the file: OpenVINO 2026.4's ONNX frontend has no DeformConv
_ONNX_DEFORM = contextvars.ContextVar('mrconvnext_talk2d_onnx_deform', default=False)


@contextlib.contextmanager
def onnx_deform_conv(enabled: bool = True) -> Iterator[None]:
    """While active, TaLK 2-D's ONNX form on maps past :data:`ONNX_DENSE_MAX_POSITIONS` positions is one ONNX
    ``DeformConv`` (``'deform'``: the integral image sampled bilinearly at the four corners of every box; opset 19 or
    later) instead of the tables' gather and products. ONNX Runtime runs it; runtimes without ``DeformConv``
    (OpenVINO 2026.4) cannot load the file. :func:`mrconvnext.tools.export.export_onnx` (``deform_conv=True``) and
    ``mrconvnext-export --onnx --onnx-deform-conv`` set it around the export."""
    if not isinstance(enabled, bool):
        raise TypeError(f'onnx_deform_conv: enabled must be a bool, got {type(enabled).__name__}')
    token = _ONNX_DEFORM.set(enabled)
    try:
        yield
    finally:
        _ONNX_DEFORM.reset(token)


def talk2d_onnx_method(positions: int) -> str:
    """The algorithm of TaLK 2-D's ONNX form for a map of ``positions`` (``H * W``): ``'dense'`` up to
    :data:`ONNX_DENSE_MAX_POSITIONS`, beyond ``'table'``, or ``'deform'`` inside :func:`onnx_deform_conv`."""
    if positions <= ONNX_DENSE_MAX_POSITIONS:
        return 'dense'
    return 'deform' if _ONNX_DEFORM.get() else 'table'


def talk_engine(device: torch.device | str, engine: str = 'auto') -> str:
    """The TaLK engine ``engine`` resolves to for tensors on ``device``: 'triton', 'native', 'torch', 'reference' or
    'onnx'.

    ``'auto'``: ``'onnx'`` under :func:`~mrconvnext.ops.availability.onnx_exporting`, else Triton on CUDA, the native kernel on the CPU where it
    builds, else ``'torch'`` with a one-time warning. ``'triton'`` and ``'native'`` raise RuntimeError, saying why,
    where their kernels cannot run.
    """
    check_choice('talk', 'engine', engine, TALK_ENGINES)
    if engine in ('torch', 'reference', 'onnx'):
        return engine
    if engine == 'auto' and availability.onnx_exporting():
        return 'onnx'
    device = torch.device(device)
    triton_reason = (
        availability.triton_unavailable(device.type) if engine == 'triton' or device.type == 'cuda' else None
    )
    if engine == 'triton':
        if triton_reason is not None:
            raise RuntimeError(f'Triton TaLK kernels unavailable for {device}: {triton_reason}')
        return 'triton'
    if engine == 'auto' and device.type == 'cuda' and triton_reason is None:
        return 'triton'
    if device.type == 'cpu' and availability.load_native(availability.TALK_EXT) is not None:
        return 'native'
    if device.type == 'meta' and engine == 'auto':
        return 'torch'  # shapes only: no kernel runs, nothing to warn about
    reason = (
        availability.native_reason(availability.TALK_EXT)
        if device.type == 'cpu'
        else f'no native kernel for {device.type} tensors'
    )
    if triton_reason is not None:
        reason = f'{reason}; {triton_reason}'
    if engine == 'native':
        raise RuntimeError(f'native TaLK kernels unavailable for {device}: {reason}')
    availability.warn_once(
        f'talk-fallback-{device.type}',
        f'mrconvnext: no native TaLK kernel for {device.type} tensors ({reason}); using the PyTorch implementation',
    )
    return 'torch'


@torch.compiler.assume_constant_result
def talk_engine_constant(device_type: str, engine: str) -> str:
    """:func:`talk_engine` as a constant for torch.compile: the loaders behind it (locks, imports, builds) cannot
    be traced."""
    return talk_engine(device_type, engine)
