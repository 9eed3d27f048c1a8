"""What runs where, asked in one place: :func:`resolve` says which ``(method, engine)`` ``'auto'`` (or a given choice)
runs for an operator, device, dtype and size. Each family decides in its own dispatch module, which owns its policy
constants and answers every call with one plan that the operator runs as it is:
:mod:`mrconvnext.ops.long_conv.dispatch`, :mod:`mrconvnext.ops.talk.dispatch`,
:mod:`mrconvnext.ops.light_conv.dispatch`. What can run here (native builds, Triton, flashfftconv, ONNX export) is
:mod:`mrconvnext.ops.availability`.

Vocabulary (the same in every family)
    ``method``: the algorithm; methods differ only in cost. Long convolutions: ``'fft'``, ``'direct'``,
    ``'toeplitz'``, ``'rowdft'``.
    ``engine``: the implementation that runs it: ``'native'`` (the C++ CPU kernels of ``kernels/``), ``'triton'``
    (CUDA, or CPU tensors under ``TRITON_INTERPRET=1``), ``'torch'`` (PyTorch ops, every device),
    ``'reference'`` (the specification: autograd through the naive form), ``'flashfft'`` (the optional CUDA package
    ``flashfftconv``), ``'onnx'`` (standard ATen ops chosen for what ONNX runtimes run fast). ``'auto'`` resolves
    both. An explicit engine that cannot run raises ``RuntimeError`` saying why.

Operators dispatch per device as ATen's do: ``mrconvnext::talk1d`` runs the native kernel on the CPU and the
Triton kernel on CUDA; ``mrconvnext::fft_conv`` the native kernel on the CPU and torch.fft elsewhere. Engines that
are not a device's own are operators of their own (``mrconvnext::talk1d_torch``, ``mrconvnext::fft_conv_torch``,
the ``triton_op`` ``mrconvnext::talk1d_triton``), reached with an explicit ``engine=``. An exported graph of
``engine='auto'`` calls therefore holds the per-device operators and runs on either device, except where CUDA's
``'auto'`` is a Triton operator of its own (DynamicConv's, and LightConv's in large batches): a graph exported on
CUDA then holds it and runs on CUDA.

The deprecated ``backend=`` keyword is translated by :func:`from_backend`, once, where a user passes it (a model,
a layer or an operator function); nothing passes it further down.

``python -m mrconvnext.engines`` prints, for each operator and device, what ``'auto'`` picks, and the build status.
"""

from __future__ import annotations

import warnings

import torch

from . import availability
from .checks import check_choice
from .light_conv import dispatch as light_conv_dispatch
from .long_conv import dispatch as long_conv_dispatch
from .talk import dispatch as talk_dispatch

__all__ = ['BACKEND_REMOVAL', 'from_backend', 'resolve', 'reset']

# The release that removes the deprecated ``backend=`` keyword.
BACKEND_REMOVAL = '0.2.0'

# The old single ``backend`` keyword: an algorithm for MRConv, an implementation for TaLK.
_LONG_CONV_BACKENDS = {
    'auto': ('auto', 'auto'),
    'fft': ('fft', 'auto'),
    'direct': ('direct', 'auto'),
    'flashfft': ('fft', 'flashfft'),
}


def from_backend(owner: str, family: str, backend: str, method: str, engine: str) -> tuple[str, str]:
    """``(method, engine)`` for the deprecated ``backend=`` keyword of ``family`` (``'long_conv'`` or ``'talk'``),
    with a ``DeprecationWarning``; it may not be combined with a non-default ``method`` / ``engine``."""
    if method != 'auto' or engine != 'auto':
        raise ValueError(f'{owner}: backend= is the old spelling of method= / engine=; give one or the other')
    if family == 'talk':
        new = ('auto', check_choice(owner, 'backend', backend, talk_dispatch.TALK_ENGINES))
        spelled = f'engine={backend!r}'
    else:
        new = _LONG_CONV_BACKENDS.get(backend) if isinstance(backend, str) else None
        if new is None:
            raise ValueError(f'{owner}: backend must be one of {tuple(_LONG_CONV_BACKENDS)}, got {backend!r}')
        spelled = ', '.join(f'{k}={v!r}' for k, v in zip(('method', 'engine'), new) if v != 'auto') or "method='auto'"
    warnings.warn(
        f'{owner}: backend={backend!r} is deprecated and will be removed in mrconvnext {BACKEND_REMOVAL}; use {spelled}',
        DeprecationWarning,
        stacklevel=3,
    )
    return new


def resolve(
    op: str,
    device: torch.device | str,
    dtype: torch.dtype = torch.float32,
    *,
    method: str = 'auto',
    engine: str = 'auto',
    length: int = 3136,
    taps: int = 3136,
    batch: int | None = None,
    grad: bool = False,
    channels: int | None = None,
) -> tuple[str, str]:
    """``(method, engine)`` that ``op`` runs on ``device`` for ``dtype`` inputs, a sequence of ``length``, (long
    convolutions) a kernel of ``taps`` centred taps, ``batch`` sequences of ``channels`` convolutions each (None: not
    known) and ``grad`` (a backward to come). ``op``: ``'long_conv1d'``, ``'branch_conv_bn_sum'``,
    ``'talk1d'``, ``'talk2d'``, ``'dynamic_conv1d'``, ``'light_conv1d'`` (one method each but the long convolution's:
    ``'-'``)."""
    device = torch.device(device)
    if op == 'long_conv1d':
        plan = long_conv_dispatch.long_conv_plan(
            device.type, dtype, length, taps, taps // 2, method, engine, batch, grad, channels
        )
        return plan.method, plan.engine
    if op == 'branch_conv_bn_sum':
        form = long_conv_dispatch.branch_sum_form(
            device.type, dtype, method, engine, batch_stats=True, plain=True, synchronized=False
        )
        return '-', ('native' if form == 'fused' else f'none (the layers train in the {form!r} form)')
    if op in ('talk1d', 'talk2d'):
        return '-', talk_dispatch.talk_engine(device, engine)
    if op == 'dynamic_conv1d':
        return '-', light_conv_dispatch.dynamic_conv_engine(device, engine)
    if op == 'light_conv1d':
        return '-', light_conv_dispatch.light_conv_engine(device, engine, batch)
    raise ValueError(
        "resolve: op must be one of ('long_conv1d', 'branch_conv_bn_sum', 'talk1d', 'talk2d', 'dynamic_conv1d', "
        f"'light_conv1d'), got {op!r}"
    )


def reset(native: bool = False) -> None:
    """Forget what this process learnt about availability (:func:`mrconvnext.ops.availability.reset`)."""
    availability.reset(native)
