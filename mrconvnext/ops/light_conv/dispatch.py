"""DynamicConv's and LightConv's dispatch: which engine runs a call, from what can run here
(:mod:`mrconvnext.ops.availability`)."""

from __future__ import annotations

import torch

from .. import availability
from ..checks import check_choice
from ..symbolic import known_true

__all__ = [
    'DYNAMIC_CONV_ENGINES',
    'LIGHT_CONV_ENGINES',
    'LIGHT_TRITON_MIN_BATCH',
    'ONNX_BAND_CHUNK',
    'dynamic_conv_onnx_chunk',
    'dynamic_conv_engine',
    'dynamic_conv_engine_constant',
    'light_conv_engine',
    'light_conv_engine_constant',
]

DYNAMIC_CONV_ENGINES = ('auto', 'torch', 'triton', 'onnx')


LIGHT_CONV_ENGINES = ('auto', 'torch', 'triton')

# The ONNX form of DynamicConv cuts the sequence into chunks of this many positions, each one band matrix per image
# and head over its window of chunk + K - 1 inputs (a whole-sequence band grows as L^2, the one-hot tap bank writes K
# copies of the input). ONNX Runtime 1.32, 2 threads, batch 1 / 8 (docs/benchmarks.md's ONNX forms table, 'band'
# against 'taps' and 'whole band'): 784 positions, 15 taps 0.83 / 4.5 ms against the tap bank's 1.43 / 9.4; 196
# positions, 31 taps 0.61 / 4.2 against the whole band's 0.89 / 4.5; 3136 positions, 7 taps 1.0 / 7.1 against
# 0.9 / 8.4. A sequence of at most two chunks stays one band (49 positions, 31 taps, in the table's run before this
# rule: 0.18 / 1.35 ms whole against 0.25 / 2.1 in chunks of 32).
ONNX_BAND_CHUNK = 32


def dynamic_conv_onnx_chunk(length: int, taps: int) -> int:
    """The chunk length of DynamicConv's ONNX form for ``length`` positions and ``taps`` taps: ``ONNX_BAND_CHUNK``,
    at least ``taps - 1`` (a window reaches into the next chunk only); the whole sequence where it is at most two
    chunks long."""
    chunk = max(ONNX_BAND_CHUNK, taps - 1)
    return length if length <= 2 * chunk else chunk


def dynamic_conv_engine(device: torch.device | str, engine: str = 'auto') -> str:
    """The DynamicConv engine ``engine`` resolves to for tensors on ``device``: 'triton', 'torch' or 'onnx'.

    ``'auto'``: ``'onnx'`` under :func:`~mrconvnext.ops.availability.onnx_exporting`, else the Triton kernels (channels-last, fused softmax) on
    CUDA where Triton runs, else the PyTorch tap loop (on the CPU, and on CUDA without Triton after a one-time
    warning). ``'triton'`` raises RuntimeError, saying why, where its kernels cannot run (CPU tensors need
    ``TRITON_INTERPRET=1``).
    """
    check_choice('dynamic_conv1d', 'engine', engine, DYNAMIC_CONV_ENGINES)
    if engine in ('torch', 'onnx'):
        return engine
    if engine == 'auto' and availability.onnx_exporting():
        return 'onnx'
    device = torch.device(device)
    if engine == 'triton' or device.type == 'cuda':
        reason = availability.triton_unavailable(device.type)
        if engine == 'triton' and reason is not None:
            raise RuntimeError(f'Triton DynamicConv kernels unavailable for {device}: {reason}')
        if reason is None:
            return 'triton'
        availability.warn_once(
            'dynconv-fallback', f'mrconvnext: {reason}; DynamicConv uses the PyTorch tap loop on {device}'
        )
    return 'torch'


@torch.compiler.assume_constant_result
def dynamic_conv_engine_constant(device_type: str, engine: str) -> str:
    """:func:`dynamic_conv_engine` as a constant for torch.compile."""
    return dynamic_conv_engine(device_type, engine)


# What LightConv's 'auto' runs on CUDA, measured on an H200 by `scripts/gpu_profile.py` (lightconvnext_t, bf16
# autocast, channels-last, eager; docs/gpu/h200_2026-11-27/README.md): the Triton kernels in batches of at least
# LIGHT_TRITON_MIN_BATCH (at 128 they ran the eval forward and the training step faster than the grouped conv), the
# grouped conv below it (at batch 1 and 8 the forward is host-bound, and the grouped conv, which costs the host less
# per call, ran it faster). The crossover lies between the batches measured; under torch.compile with a symbolic batch
# (dynamic shapes) the batch is not known to be large: the grouped conv. (torch.compile's automatic dynamic shapes make
# the batch symbolic once a batch of another size arrives, a last partial batch say: the graphs compiled from then on
# take the grouped conv at every batch; `torch.compile(dynamic=False)` keeps one graph per batch size.)
LIGHT_TRITON_MIN_BATCH = 64


def light_conv_engine(device: torch.device | str, engine: str = 'auto', batch: int | None = None) -> str:
    """The LightConv engine ``engine`` resolves to for ``batch`` sequences (None: not known) on ``device``: 'torch'
    or 'triton'.

    ``'auto'``: DynamicConv's channels-last Triton kernels with the weights shared by every position on CUDA where
    Triton runs, in batches of at least ``LIGHT_TRITON_MIN_BATCH`` (its comment has the measurements); else
    ``'torch'``, one grouped ``F.conv1d`` (smaller batches, the CPU, under
    :func:`~mrconvnext.ops.availability.onnx_exporting`, where it is a standard ``Conv``, and CUDA without Triton,
    after a one-time warning). ``'triton'`` raises RuntimeError, saying why, where its kernels cannot run.
    """
    check_choice('light_conv1d', 'engine', engine, LIGHT_CONV_ENGINES)
    return _light_conv_engine(
        torch.device(device), engine, batch is not None and known_true(batch >= LIGHT_TRITON_MIN_BATCH)
    )


def _light_conv_engine(device: torch.device, engine: str, large_batch: bool) -> str:
    if engine == 'torch' or (engine == 'auto' and availability.onnx_exporting()):
        return 'torch'
    if engine == 'auto' and not (device.type == 'cuda' and large_batch):
        return 'torch'
    reason = availability.triton_unavailable(device.type)
    if reason is None:
        return 'triton'
    if engine == 'triton':
        raise RuntimeError(f'Triton LightConv kernels unavailable for {device}: {reason}')
    availability.warn_once('lightconv-fallback', f'mrconvnext: {reason}; LightConv uses the grouped conv1d on {device}')
    return 'torch'


@torch.compiler.assume_constant_result
def light_conv_engine_constant(device_type: str, engine: str, large_batch: bool) -> str:
    """:func:`light_conv_engine` as a constant for torch.compile, told whether the batch is known to be at least
    ``LIGHT_TRITON_MIN_BATCH``."""
    check_choice('light_conv1d', 'engine', engine, LIGHT_CONV_ENGINES)
    return _light_conv_engine(torch.device(device_type), engine, large_batch)
