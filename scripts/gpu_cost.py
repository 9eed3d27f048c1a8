"""A GPU cost model that needs no GPU: a model's eval forward or whole training step on fake CUDA tensors (bf16
autocast, channels-last), every dispatched op counted, and a modeled time per op.

    python scripts/gpu_cost.py --model mrconvnext_t [--train] [--batch 128] [--img-size 224] [--gpu h100] [--top 25]
    python scripts/gpu_cost.py --table docs/gpu/cost-model.md      # every family's T model against convnext_tiny
    python scripts/gpu_cost.py --calibrate docs/gpu/cost-model-calibration.md     # measure and fit the constants

Counting (``OpCounter``; nothing is computed, the tensors are ``FakeTensorMode``'s):
- bytes: each op reads the span of every tensor argument and writes the span of every tensor result (a span counts
  each addressed element once: an expanded, stride-0 dimension counts once). Views, metadata and allocations move
  nothing. This is unfused eager: each op goes through memory, nothing stays in L2.
- FLOPs: ``torch.utils.flop_counter``'s formulas (matmuls, convolutions, this package's registered operators);
  other ops count none (they are memory-bound).
- launches: one per op that moves bytes, and the copies a kernel is known to make first (torch's own depthwise
  conv, ``_conv_depthwise2d``, and LayerNorm's CUDA kernels make their strided inputs contiguous); a padding
  (``constant_pad_nd``) is the two kernels ATen runs, a fill of the whole padded tensor and a copy of the input into
  it. A copy between layouts is a transpose (``_copy_class``) unless it moves whole runs of at least
  ``COALESCED_RUN_BYTES`` of an innermost dimension both sides share.
- kernels and layouts the way a GPU picks them, where a fake tensor cannot ask the device: which depthwise conv
  kernel runs (cuDNN's for a channels-last map, torch's own otherwise; ``_conv_class``), the channels-last results
  of cuDNN's bfloat16 convs (``_cudnn_layout``), the materialized indices of an accumulating ``index_put`` (the
  sort its CUDA kernel runs; ``_index_put_accumulate``), and matmuls whose rows cuBLAS cannot read aligned
  (``_unaligned``), and what ATen's CUDA FFTs run besides cuFFT (a C2R transform's clone of its input, a
  normalized transform's scaling pass; ``_FFT_NORMALIZATION_ARG``).
- host: what runs between two ops (a model's forward, this package's operators and plans, a Python backward),
  counted, not timed (:class:`PythonEvents`): the lines of Python executed (with the calls of builtins and other C
  functions that cost about as much) and the calls of torch's op bindings (:func:`torch_binding`), less the way
  into the counter at each op (:func:`dispatch_baseline`), and the ops that launch nothing (views,
  allocations). The count is the same on every run of the same code, where the time this shared machine takes for it
  varied 2x between runs. The backward walk's own bookkeeping and its calls of C++ nodes, which stand for the
  autograd engine's C++, are left out.
- this package's operators: a Triton operator (``torch.library.triton_op``) counts as one launch that reads its
  inputs and writes its outputs (its internal traffic stays unseen; TaLK's are classed by the kernels they pick,
  ``TALK_TRITON_OPS``); any other operator is entered, and the ATen ops its CUDA implementation runs are counted
  instead.
- the training step's backward runs by walking the autograd graph in Python (each node called with its gradients,
  in dependency order; processed nodes are dropped, freeing what they saved). The autograd engine itself cannot
  run on fake CUDA tensors without a GPU (it asks the CUDA driver for a primary context).
- peak memory: the bytes of the storages alive at once (parameters, input, activations, gradients), counted as the
  fake tensors are created and freed.
- caches: the package's tensors that depend on sizes alone (Fourier bases, tap indices) are found in its caches
  after a GPU run's first call; under a fake tensor mode the package bypasses them, so a cache private to the count
  stands in (:func:`steady_caches`): the uncounted first forward fills it, the counted runs find it.

Time: each op's device time is its roofline time, ``max(bytes / bandwidth, FLOPs / rate of its unit)``, over its
class's efficiency, plus its class's latency (:func:`device_time`). Classes (``OP_CLASSES``, by what a profile can
tell apart, and ``PROFILE_CLASS``, by what only the counting can): matmuls and batched matmuls, dense convolutions,
cuDNN's and torch's own depthwise convolutions and their backwards, copies within a layout and between layouts
(``transpose``), gathers, scatters, plain and accumulating ``index_put``, LayerNorm, BatchNorm, FFTs, each Triton
operator of this package, the rest. Units: tensor cores for half-precision matmuls and dense convolutions; for
grouped convolutions the rate measured for cuDNN's depthwise kernels; CUDA cores otherwise. The host issues each op
after what comes before it: ``FREE_S`` per op that launches nothing, ``LINE_S`` per line of Python and ``C_CALL_S``
per call of one of torch's op bindings from Python, and ``ISSUE_S`` of dispatch and launch (:func:`host_times`); the device runs the ops in order, each once it is issued and
the one before it is done (:func:`timeline`): small ops behind a large one cost nothing extra, a run of small ops
costs their host time. Each class's efficiency and latency are measured from per-op GPU profiles, ``ISSUE_S`` and
``FREE_S`` too (:func:`launch_time`, :func:`free_time`); ``LINE_S`` and ``C_CALL_S`` are fitted (``--calibrate``);
they live in
``docs/gpu/cost-model-constants.json``.

What it cannot see (docs/gpu/cost-model.md): fusion under ``torch.compile``, L2 reuse, a Triton kernel's internal
traffic and arithmetic, differences within a class (all transposing copies share one efficiency), host time that
is neither Python nor the same for every op (synchronizations), and the extra kernels some ops launch.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import functools
import heapq
import json
import math
import platform
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / 'scripts'):  # run from a checkout without installing the package; scripts/_bench.py
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _fake_cuda import fake_cuda_autocast  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.multiprocessing.reductions import StorageWeakRef  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils.flop_counter import flop_registry  # noqa: E402

# Bandwidths: the datasheets' (SXM parts); what the kernels achieve of them is each class's efficiency. Tensor cores:
# the bf16 rate measured for an 8192^3 matmul on random data on this workplace's H100 and H200 (798 and 788
# TFLOP/s). CUDA cores: the datasheets' fp32 rate. Grouped and depthwise convolutions run far under it: their rate is
# the one measured for convnext_tiny's 7x7 depthwise convs (forward, dgrad and wgrad; docs/gpu/h200_2026-11-26,
# step 04): 80.8 GFLOP in 9.91 ms. The H100 has the same multiprocessors and clocks.
GROUPED_CONV_FLOPS = 8.2e12
GPUS = {
    'h100': dict(bandwidth=3.35e12, tensor=790e12, simt=60e12, fp64=60e12, grouped=GROUPED_CONV_FLOPS, cpu=math.inf),
    'h200': dict(bandwidth=4.8e12, tensor=790e12, simt=60e12, fp64=60e12, grouped=GROUPED_CONV_FLOPS, cpu=math.inf),
}
UNITS = ('simt', 'tensor', 'fp64', 'grouped', 'cpu')  # 'cpu': an op on CPU tensors, host time only
TRUST = 0.20  # a predicted ratio within 20 % of the measured one is trusted (issue 39)

# Op classes: what each class's kernels achieve of the roofline differs by up to 20x (gathers, scatters, small-tile
# GEMMs, LayerNorm over few channels), so each class has its own efficiency and latency, measured from the H200
# profiles of every family's T model (docs/gpu/h200_2026-11-26b/call1; `--calibrate`, :func:`class_costs`: least
# squares per class over the profiled rows). A Triton operator of this package is a class of its own.
OP_CLASSES = {
    'matmul': {'aten::mm', 'aten::addmm', 'aten::addbmm', 'aten::_scaled_mm'},
    'bmm': {'aten::bmm', 'aten::baddbmm'},
    'conv': {'aten::convolution', 'aten::_convolution', 'aten::cudnn_convolution'},
    'conv_dw_native': {'aten::_conv_depthwise2d'},
    'conv_backward': {'aten::convolution_backward', 'aten::cudnn_convolution_backward'},
    'copy': {'aten::copy_', 'aten::clone', 'aten::_to_copy', 'aten::contiguous', 'aten::cat', 'aten::constant_pad_nd'},
    'gather': {'aten::index', 'aten::gather', 'aten::index_select'},
    'scatter': {'aten::index_add_', 'aten::scatter_add_'},
    'index_put': {'aten::index_put', 'aten::index_put_', 'aten::_index_put_impl_'},
    'layer_norm': {'aten::native_layer_norm', 'aten::native_layer_norm_backward'},
    'fft': {'aten::_fft_r2c', 'aten::_fft_c2r', 'aten::_fft_c2c'},
}
OP_CLASSES['batch_norm'] = {'aten::native_batch_norm', 'aten::native_batch_norm_backward', 'aten::cudnn_batch_norm'}
OP_CLASSES['batch_norm'] |= {'aten::cudnn_batch_norm_backward', 'aten::_native_batch_norm_legit'}
OP_CLASSES['batch_norm'] |= {'aten::_native_batch_norm_legit_no_training', 'aten::_native_batch_norm_legit_functional'}
_CLASS_OF = {name: cls for cls, names in OP_CLASSES.items() for name in names}


def op_class(name: str) -> str:
    """The class of an op by its name (``OP_CLASSES``), a Triton operator's own name, or ``'other'`` (elementwise,
    reductions): what a profile, which knows the names only, can tell."""
    if name.startswith('mrconvnext::'):
        return name
    return _CLASS_OF.get(name, 'other')


def call_class(call: Call) -> str:
    """The class of a counted call: :func:`op_class`, or what the counting saw (a copy between layouts is a
    ``'transpose'``, in the profile's ``'copy'``)."""
    return call.cls or op_class(call.name)


# a counted class -> the class its profiled time is booked under (what the counting tells apart and a profile,
# which knows op names only, does not)
PROFILE_CLASS = {'transpose': 'copy', 'transpose16': 'copy', 'gather16': 'gather', 'conv_dw': 'conv'}
PROFILE_CLASS |= {'conv_dw_backward': 'conv_backward'}
PROFILE_CLASS |= {'conv_dw_native_backward': 'conv_backward', 'index_put_accumulate': 'index_put'}
PROFILE_CLASS |= {'index_put_slices': 'index_put', 'matmul_unaligned': 'matmul', 'bmm_unaligned': 'bmm'}
PROFILE_CLASS |= {'sync': 'copy'}
# the backward's rebuild of the integral image that TaLK 2-D's forward left out on a channels-last map: the tables
# forward's scan alone, never profiled on its own, booked at that forward's efficiency
PROFILE_CLASS |= {'mrconvnext::talk2d_triton_table': 'mrconvnext::talk2d_triton:tables'}


# Per class: (efficiency, latency): a call takes its roofline time over the efficiency plus the latency (launch,
# ramp-up, tail). Measured by --calibrate (docs/gpu/cost-model-constants.json, read below); 'other' also serves the
# classes the profiles lacked.
CLASS_COST: dict[str, tuple[float, float]] = {'other': (0.5, 1.5e-6)}
ISSUE_S = 7e-6  # host seconds per counted op (dispatcher, launch) on the GPU's host: measured by --calibrate
FREE_S = 2e-6  # host seconds per op that launches nothing (a view, an allocation): measured by --calibrate
LINE_S = 1e-7  # the GPU host's seconds per line of Python executed: fitted by --calibrate
C_CALL_S = 1e-6  # the GPU host's seconds per call of one of torch's op bindings from Python: fitted
LATENCY_S = 1.5e-6  # the latency that goes with one efficiency for every class (``efficiency=<float>``)
FAMILIES_T = ['convnext_tiny', 'mrconvnext_t:reparam', 'mrconvnext_t', 'talkconvnext_t', 'talkconvnext2d_t']
FAMILIES_T += ['lightconvnext_t', 'dynconvnext_t']
_FREE = {'aten::detach', 'aten::_unsafe_view', 'prim::device', 'aten::lift_fresh', 'aten::alias', 'aten::empty'}
_FREE |= {'aten::empty_strided', 'aten::empty_like', 'aten::new_empty', 'aten::new_empty_strided', 'aten::set_'}
_FREE |= {'aten::empty_permuted'}
_TENSOR_UNIT = {'aten::mm', 'aten::addmm', 'aten::bmm', 'aten::baddbmm', 'aten::_scaled_mm', 'aten::addbmm'}
_CONV = {'aten::convolution', 'aten::convolution_backward', 'aten::_convolution'}
_WRITE_ONLY = {'aten::copy_', 'aten::fill_', 'aten::zero_', 'aten::zeros_like', 'aten::ones_like', 'aten::full_like'}
_WRITE_ONLY |= {'aten::empty_like', 'aten::rand_like', 'aten::randn_like', 'aten::normal_', 'aten::uniform_'}
_WRITE_ONLY |= {'aten::new_zeros', 'aten::new_ones', 'aten::new_full'}


@dataclass
class Call:
    """One counted op call: its name, bytes read and written, FLOPs, the unit that runs it, its class where the
    name does not say it (``PROFILE_CLASS``: e.g. ``'transpose'``, a copy between memory layouts; ``'sync'``, a copy
    between host and device, which waits for the device), and what the host ran since the op before it: ``lines``
    of Python, ``c_calls`` of C functions from Python (:class:`PythonEvents`) and ``free`` ops that launch nothing
    (views, allocations). An op on CPU tensors has the unit ``'cpu'``: it costs the host its issue time and the
    device nothing."""

    name: str
    read: int
    written: int
    flops: int
    unit: str
    cls: str = ''
    lines: int = 0
    c_calls: int = 0
    free: int = 0


def span_bytes(t: torch.Tensor) -> int:
    """Bytes a tensor's elements occupy: its elements, a stride-0 (expanded) dimension counted once (overlapping
    strides, as from ``unfold``, are counted as if they did not overlap)."""
    n = 1
    for size, stride in zip(t.shape, t.stride()):
        n *= size if stride != 0 else min(size, 1)
    return n * t.element_size()


def _tensors(tree) -> list[torch.Tensor]:
    leaves = [t for t in torch.utils._pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]
    seen, out = set(), []
    for t in leaves:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def _dim_order(t: torch.Tensor) -> tuple[int, ...]:
    """The dimensions of ``t`` from the outermost in memory to the innermost (size-1 dimensions left out)."""
    dims = [d for d in range(t.dim()) if t.shape[d] > 1]
    return tuple(sorted(dims, key=lambda d: -t.stride(d)))


def _copy_class(name: str, args, outs: list[torch.Tensor]) -> str:
    """``'transpose'`` (``'transpose16'`` for 2-byte elements) for a copy whose source and destination are laid out
    in different orders (a padding copies its input into a fresh tensor), else ``''``. A broadcast source (an
    expanded dimension, stride 0, as a batched matmul copies an operand it broadcasts) is read along its other
    dimensions: their order on both sides decides."""
    if name == 'aten::copy_':
        dst, src = args[0], args[1]
    elif name in ('aten::clone', 'aten::_to_copy', 'aten::contiguous', 'aten::constant_pad_nd') and outs:
        dst, src = outs[0], args[0]
    else:
        return ''
    if not isinstance(src, torch.Tensor) or src.dim() != dst.dim():
        return ''
    read = {d for d in range(src.dim()) if src.stride(d) != 0}
    src_order = tuple(d for d in _dim_order(src) if d in read)
    dst_order = tuple(d for d in _dim_order(dst) if d in read)
    if src_order == dst_order:
        return ''
    if _shared_runs(src, dst, src_order, dst_order):
        return ''  # outer dimensions reordered, whole runs of the innermost one moved: a copy's accesses
    # a transpose reads or writes one element per access, so its cost goes by elements: 2-byte ones are a class
    return 'transpose16' if min(src.element_size(), dst.element_size()) <= 2 else 'transpose'


# The shortest run of a shared innermost dimension, in bytes, that makes a copy between layouts a plain copy: one
# warp's 32 four-byte accesses, the width of a fully coalesced load or store.
COALESCED_RUN_BYTES = 128


def _shared_runs(src: torch.Tensor, dst: torch.Tensor, src_order: tuple, dst_order: tuple) -> bool:
    """Whether a copy between two layouts keeps the innermost dimension, with unit stride on both sides and runs of at
    least ``COALESCED_RUN_BYTES`` (a channels-last map into a positions-outermost buffer): then each warp reads and
    writes contiguous runs, as a copy within one layout does. The profiled ``transpose`` rows are all copies that
    change the innermost dimension (docs/gpu/cost-model-calibration.md)."""
    if not src_order or not dst_order or src_order[-1] != dst_order[-1]:
        return False
    d = src_order[-1]
    run = src.shape[d] * min(src.element_size(), dst.element_size())
    return src.stride(d) == 1 and dst.stride(d) == 1 and run >= COALESCED_RUN_BYTES


# Ops whose CUDA kernels make their first tensor arguments contiguous before they run (``expect_contiguous``): a
# copy the dispatch does not show. LayerNorm's forward reads x; its backward the output gradient and x.
_CONTIGUOUS_INPUTS = {'aten::native_layer_norm': 1, 'aten::native_layer_norm_backward': 2}
# ATen's CUDA FFTs (aten/src/ATen/native/cuda/SpectralOps.cpp) run more than cuFFT's kernels: a C2R transform may
# overwrite its input, so it transforms a contiguous clone of it; a normalized transform (the inverse under
# norm='backward', the forward under 'forward', both under 'ortho') then scales its output in place, a pass of its own.
_FFT_NORMALIZATION_ARG = 2  # _fft_r2c / _fft_c2r / _fft_c2c(self, dim, normalization, ...): 0 is none


def _channels_last_strides(t: torch.Tensor) -> bool:
    """Whether torch's ``suggest_memory_format`` calls ``t`` (a 2-D conv's input or weight) channels-last: its
    strides, with size-1 dims resolved as torch's ``is_channels_last_strides_2d`` resolves them."""
    if t.dim() != 4 or t.stride(1) == 0:
        return False
    smallest = 0
    for d in (1, 3, 2, 0):
        if t.shape[d] == 0 or t.stride(d) < smallest or (d == 0 and smallest == t.stride(1)):
            return False
        smallest = t.stride(d) * (t.shape[d] if t.shape[d] > 1 else 1)
    return True


def _cudnn_layout(name: str, args, out):
    """A conv's results in the layout cuDNN gives them on a GPU: without a device, torch cannot ask whether cuDNN
    runs bfloat16 convs (``supportsBFloat16ConvolutionWithCuDNNv8``), picks its slow fallback for a dense bfloat16
    conv and makes a channels-last map's results contiguous, which a GPU's cuDNN returns channels-last (the models
    counted here run half precision; a float64 conv, which cuDNN does not run, would be made channels-last too).
    Converted under the fake mode, uncounted (inside this mode's dispatch)."""
    x, w = (args[0], args[1]) if name == 'aten::convolution' else (args[1], args[2])
    if x.dim() != 4 or not (_channels_last_strides(x) or _channels_last_strides(w)):
        return out

    def fix(t):
        if isinstance(t, torch.Tensor) and t.dim() == 4 and not t.is_contiguous(memory_format=torch.channels_last):
            return t.contiguous(memory_format=torch.channels_last)
        return t

    return tuple(fix(t) for t in out) if isinstance(out, tuple) else fix(out)


def _conv_class(name: str, args) -> str:
    """The kernel a CUDA convolution (forward or backward) runs, as torch's ``use_cudnn_depthwise`` picks it: a
    depthwise conv whose input or weight torch calls channels-last runs cuDNN's depthwise kernels (``'conv_dw'``);
    one in contiguous layout in bfloat16 or float32 (a 1-D conv of a (N, C, L) map) runs torch's own
    ``_conv_depthwise2d`` (``'conv_dw_native'``); any other conv is ``''`` (its name's class)."""
    x, w = (args[0], args[1]) if name == 'aten::convolution' else (args[1], args[2])
    groups = args[8] if name == 'aten::convolution' else args[9]
    if not (groups > 1 and groups == x.shape[1] and w.shape[1] == 1):
        return ''
    # torch makes a 1-D conv's input contiguous first ("avoid accidentally going through NHWC")
    cudnn = x.dtype == torch.float16 or (x.dim() == 4 and (_channels_last_strides(x) or _channels_last_strides(w)))
    kind = 'conv_dw' if cudnn else 'conv_dw_native'
    return kind if name == 'aten::convolution' else f'{kind}_backward'


def _unaligned(tensors: list[torch.Tensor]) -> bool:
    """Whether a matmul operand or result has a leading dimension or offset aligned to fewer than 8 bytes: cuBLAS
    then runs slower kernels. A (B, 196, 55) bfloat16 operand (110-byte rows, 2-byte aligned) is; one of 196-element
    rows (392 bytes, 8-byte aligned) is not: the profiled fold's backward ran the first kind at about half the
    second kind's rate (the eval rows' batched matmuls)."""
    for t in tensors:
        size = t.element_size()
        strides = [st * size for n, st in zip(t.shape, t.stride()) if n > 1 and st != 1]
        if any(v % 8 for v in [t.storage_offset() * size, *strides]):
            return True
    return False


def _index_put_accumulate(name: str, args, kwargs) -> tuple[int, str] | None:
    """For an accumulating ``index_put``: the bytes its sort-based CUDA kernel reads, which materializes the
    broadcast indices (one int64 per index tensor and position) and the values at that size, and its class: with a slice
    of several elements per index position (the backward of a gather along a trailing dim, as a Toeplitz matrix's
    from its kernel), ``'index_put_slices'``, whose kernel walks each destination's duplicates in turn; else
    ``'index_put_accumulate'``. ``None`` if it does not accumulate."""
    accumulate = args[3] if len(args) > 3 else kwargs.get('accumulate', False)
    if name not in OP_CLASSES['index_put'] or not accumulate:
        return None
    dst, values = args[0], args[2]
    indices = [i for i in args[1] if i is not None]
    masks = [i for i in indices if i.dtype in (torch.bool, torch.uint8)]
    # a mask stands for its true elements' coordinates: counted as all of its elements (an upper bound)
    integer = [i.shape for i in indices if i.dtype not in (torch.bool, torch.uint8)]
    positions = math.prod(torch.broadcast_shapes(*integer)) if integer else 1
    positions *= math.prod(m.numel() for m in masks)
    n_index = len(indices) - len(masks) + sum(m.dim() for m in masks)
    indexed, dim = 1, 0  # the product of the indexed dims' sizes (an integer index takes one dim, a mask its own)
    for i in args[1]:
        step = 1 if i is None or i.dtype not in (torch.bool, torch.uint8) else i.dim()
        if i is not None:
            indexed *= math.prod(dst.shape[dim : dim + step])
        dim += step
    per_position = math.prod(dst.shape) // max(1, indexed)
    read = span_bytes(dst) + positions * (8 * n_index + per_position * values.element_size())
    return read, 'index_put_slices' if per_position > 1 else 'index_put_accumulate'


def _is_triton_op(qualname: str) -> bool:
    from torch._library import triton

    return qualname in triton.triton_ops_to_kernels


# TaLK's Triton operators run one of two kernel families (``mrconvnext.ops.talk.engine_triton``): the one-launch plane
# kernels or the scans and gathers of the tables. Each family is a class of its own, ``'<operator>:plane'`` or
# ``'<operator>:tables'``, measured apart (:func:`measured_by_class`); the value: the plane kernel's name
TALK_TRITON_OPS = {
    'mrconvnext::talk1d_triton': 'talk1d_plane_fwd_jit',
    'mrconvnext::talk1d_triton_backward': 'talk1d_plane_bwd_jit',
    'mrconvnext::talk2d_triton': 'talk2d_plane_fwd_jit',
    'mrconvnext::talk2d_triton_backward': 'talk2d_plane_bwd_jit',
}


def talk_variant(name: str, args) -> str:
    """``'plane'`` or ``'tables'``: the kernels the counted code's TaLK Triton operator ``name`` runs for ``args``, by
    that code's own rule (``plane_applies``; a profiled call's older code named it ``_plane_applies``, and code
    before the plane kernels had neither)."""
    try:
        from mrconvnext.ops.talk import engine_triton
    except ImportError:  # code before the engine modules (f100e2a: one early kernel family, scans and gathers)
        return 'tables'
    if name == 'mrconvnext::talk2d_triton_backward':  # the forward's second output: x itself for the plane kernels
        grad_y, saved = args[0], args[1]
        return 'plane' if saved.shape[-2:] == grad_y.shape[-2:] else 'tables'
    x, offsets = (args[0], args[1]) if name in ('mrconvnext::talk1d_triton', 'mrconvnext::talk2d_triton') else args[1:3]
    rule = getattr(engine_triton, 'plane_applies', None) or getattr(engine_triton, '_plane_applies', None)
    return 'plane' if rule is not None and x.numel() > 0 and rule(x.flatten(2), offsets.shape[1]) else 'tables'


def _left_out_table_bytes(x: torch.Tensor, stand_in: torch.Tensor) -> int:
    """Bytes of the integral image ``(B, H + 1, W + 1, C)`` that TaLK 2-D's Triton forward writes and leaves out of
    its outputs (a ``(0,)`` stand-in of its dtype; the backward rebuilds it): counted as written, as when the forward
    returned it, so that the forward is counted the same whether or not it keeps the table, as the profiles that
    measured its efficiency counted it."""
    B, C, H, W = x.shape
    return B * (H + 1) * (W + 1) * C * stand_in.element_size()


def _cuda_impl(qualname: str):
    """The Python CUDA implementation of a ``torch.library.custom_op`` (None for others)."""
    from torch._library.custom_ops import OPDEFS

    opdef = OPDEFS.get(qualname)
    if opdef is None:
        return None
    return opdef._backend_fns.get('cuda') or opdef._init_fn


# C functions that cost about a line of Python where torch's op bindings cost microseconds: builtins (``isinstance``,
# ``len``, ``dict.get``), queries of torch's state (``torch.is_grad_enabled``) and tensor methods that read metadata.
# Counted at the time of torch's op bindings they moved the modeled deployed mrconvnext_t forward at batch 1 13 %
# (20.8 -> 18.0 ms) for a change that saved 2-3 % of its mixers' host time, timed on a CPU (2026-11-28: the int fast
# paths of ops/symbolic.py as committed in 5609f21, 2234 -> 1838 C calls).
_METADATA_METHODS = {'dim', 'ndimension', 'numel', 'nelement', 'size', 'stride', 'storage_offset', 'element_size'}
_METADATA_METHODS |= {'is_floating_point', 'is_complex', 'is_contiguous', 'get_device', 'data_ptr', 'untyped_storage'}
_OP_MODULES = {'torch._C._nn', 'torch._C._fft', 'torch._C._linalg', 'torch._C._special', 'torch._C._nested'}


def torch_binding(fn) -> bool:
    """Whether a C function called from Python is one of torch's op bindings (a tensor method, a ``torch.*``,
    ``torch.nn.functional`` or ``torch.fft`` op), which parse their arguments and enter the dispatcher, rather than
    a builtin, a query of torch's state or a tensor's metadata (see ``_METADATA_METHODS``)."""
    if isinstance(getattr(fn, '__self__', None), torch.Tensor):
        return fn.__name__ not in _METADATA_METHODS
    return getattr(fn, '__qualname__', '').startswith('_VariableFunctionsClass.') or (
        getattr(fn, '__module__', None) in _OP_MODULES
    )


class PythonEvents:
    """A count of the Python that runs while started: the lines it executes (``sys.settrace``) with its calls of C
    functions that cost about as much (:func:`torch_binding`), and its calls of torch's op bindings
    (``sys.setprofile``). Unlike the time they take on this shared machine, the count is the same on every run of
    the same code. Lines of fake tensors' own Python (``.device`` is a Python property of a fake tensor, a C field
    of a real one) are not counted."""

    def __init__(self) -> None:
        self.lines = 0
        self.c_calls = 0
        self._outer: tuple = (None, None)  # the trace and profile functions to give back (a coverage tool's)
        self.active = False

    def _call(self, frame, event, arg):
        return None if frame.f_code.co_filename == _FAKE_TENSOR_FILE else self._line

    def _line(self, frame, event, arg):
        if event == 'line':
            self.lines += 1
        return self._line

    def _profile(self, frame, event, arg):
        if event == 'c_call':
            if torch_binding(arg):
                self.c_calls += 1
            else:
                self.lines += 1

    def start(self) -> None:
        if not self.active:
            self.active = True
            self._outer = sys.gettrace(), sys.getprofile()
            sys.settrace(self._call)
            sys.setprofile(self._profile)

    def stop(self) -> None:
        if self.active:
            sys.setprofile(self._outer[1])
            sys.settrace(self._outer[0])
            self.lines -= 1  # the call of setprofile just made
            self.active = False

    def take(self) -> tuple[int, int]:
        """``(lines and light C calls, op bindings called)`` since the last take (none below zero: see
        :meth:`OpCounter.__torch_dispatch__`)."""
        out = max(0, self.lines), max(0, self.c_calls)
        self.lines = self.c_calls = 0
        return out


_FAKE_TENSOR_FILE = sys.modules[FakeTensorMode.__module__].__file__
# dispatched only because the tensors are fake (a real tensor's device is a C field): no host work on a GPU's host
_FAKE_ONLY = {'prim::device', 'prim::layout', 'aten::lift_fresh'}


class OpCounter(TorchDispatchMode):
    """Counts every op dispatched under it (see the module docstring), the Python between them (:class:`PythonEvents`,
    while :meth:`resume`-d) and the live bytes of the storages it saw."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Call] = []
        self.live = 0
        self.peak = 0
        self._storages: dict[int, tuple] = {}  # storage key -> (weak reference, bytes)
        self.events = PythonEvents()
        self.baseline = (0, 0)  # the lines and C calls of the way into this mode, left out of each (dispatch_baseline)
        self.counting = False  # whether the Python that runs is counted (resume, pause)
        self._free = 0  # ops that launch nothing (views, allocations) since the last counted call

    def resume(self) -> None:
        """Count the Python from now: what runs between ops (a model's and this package's Python, and the C
        functions it calls, less the way into this mode at each op), booked on the next counted call."""
        self.counting = True
        self.events.start()

    def pause(self) -> None:
        """Stop counting the Python (the backward walk's own bookkeeping, which the autograd engine does in C++)."""
        if self.counting:
            self.events.stop()
            self.counting = False

    def track(self, t: torch.Tensor) -> None:
        """Count ``t``'s storage as alive until it is freed (a weak reference to the storage itself: a tensor's Python
        object can die while autograd still holds the tensor)."""
        storage = t.untyped_storage()
        key = storage._cdata
        if key not in self._storages:
            self.collect()  # what was freed before this one was allocated
            self._storages[key] = (StorageWeakRef(storage), storage.nbytes())
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)

    def collect(self) -> None:
        """Forget the storages freed since the last call."""
        dead = [key for key, (ref, _) in self._storages.items() if ref.expired()]
        for key in dead:
            self.live -= self._storages.pop(key)[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        counting = self.counting
        if counting:  # neither the op nor the way into this mode is the Python between ops
            self.events.stop()
            self.events.lines -= self.baseline[0]
            self.events.c_calls -= self.baseline[1]
        try:
            return self._dispatch(func, args, kwargs or {})
        finally:
            if counting:
                self.events.start()

    def _dispatch(self, func, args, kwargs):
        name = func._schema.name
        namespace = name.split('::')[0]
        if namespace not in ('aten', 'prim') and not _is_triton_op(name):
            impl = _cuda_impl(name)
            if impl is not None:  # count what its CUDA implementation runs, its Python included
                # (entered uncounted by a C++ autograd node of the backward walk: its Python still runs on the host)
                was_counting, self.counting = self.counting, True
                try:
                    with self:  # entering the mode is not the operator's Python
                        self.events.start()
                        try:
                            return impl(*args, **kwargs)
                        finally:
                            self.events.stop()
                finally:
                    self.counting = was_counting
        if namespace == 'aten' and func.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd):
            # what the op is made of (reached here below autograd, e.g. inside an operator): C++ on a GPU's host,
            # so its own dispatches are not counted as Python or as ops that launch nothing
            was_counting, self.counting = self.counting, False
            try:
                with self:
                    out = func.decompose(*args, **kwargs)
            finally:
                self.counting = was_counting
            if out is not NotImplemented:
                return out
        out = func(*args, **kwargs)
        if name in ('aten::convolution', 'aten::convolution_backward'):
            out = _cudnn_layout(name, args, out)
        outs = _tensors(out)
        for t in outs:
            self.track(t)
        if not (func.is_view or name in _FREE):
            self._record(func, name, args, kwargs, out, outs)
        elif self.counting and name not in _FAKE_ONLY:
            self._free += 1
        return out

    def _record(self, func, name: str, args, kwargs, out, outs: list[torch.Tensor]) -> None:
        """Append the call of an op that runs a kernel."""
        groups = args[9 if name == 'aten::convolution_backward' else 8] if name in _CONV else 1
        if name == 'aten::convolution_backward' and groups > 1 and not args[7]:
            # torch's formula counts a grouped conv's weight gradient as if it were dense (C times too much for a
            # depthwise conv); each gradient asked for costs the forward's 2 * outputs * (inputs per group * taps)
            grad_out, weight, mask = args[0], args[2], args[10]
            flops = 2 * grad_out.numel() * (weight.numel() // weight.shape[0]) * (int(mask[0]) + int(mask[1]))
        else:
            formula = flop_registry.get(func.overloadpacket)
            flops = int(formula(*args, **kwargs, out_val=out)) if formula is not None else 0
        half = any(t.dtype in (torch.float16, torch.bfloat16) for t in _tensors(args))
        devices = {t.device.type for t in [*_tensors((args, kwargs)), *outs]}
        unit = 'simt'
        if devices == {'cpu'}:
            unit = 'cpu'  # runs on the host: no launch, no device time
        elif name in _CONV and groups > 1:
            unit = 'grouped'
        elif half and (name in _TENSOR_UNIT or name in _CONV):
            unit = 'tensor'
        elif any(t.dtype == torch.float64 for t in outs):
            unit = 'fp64'
        # a destination that is only written (copy_, fill_, out=) or a template whose data is unused (zeros_like)
        # is not read
        sources = (args[1:], {k: v for k, v in kwargs.items() if k != 'out'}) if name in _WRITE_ONLY else (args, kwargs)
        read = sum(span_bytes(t) for t in _tensors(sources) if 'out' not in kwargs or t is not kwargs['out'])
        cls = 'sync' if devices == {'cpu', 'cuda'} else _copy_class(name, args, outs)
        if cls == 'sync':
            pass  # a copy between host and device: torch waits for the device to finish (a pageable buffer)
        elif name in OP_CLASSES['gather'] and outs and outs[0].element_size() <= 2:
            cls = 'gather16'  # one access per element, as a transpose (_copy_class)
        elif name in ('aten::convolution', 'aten::convolution_backward'):
            cls = _conv_class(name, args)
        elif (accumulate := _index_put_accumulate(name, args, kwargs)) is not None:
            read, cls = accumulate
        elif name in _TENSOR_UNIT and _unaligned([*_tensors(args), *outs]):
            cls = f'{op_class(name)}_unaligned'
        elif name in TALK_TRITON_OPS:
            cls = f'{name}:{talk_variant(name, args)}'
        if cls.startswith('conv_dw_native'):  # the contiguous copies it makes of its strided inputs first
            for t in args[:1] if name == 'aten::convolution' else args[:2]:  # x; or grad_output and x
                if not t.is_contiguous():
                    kind = 'transpose16' if t.element_size() <= 2 else 'transpose'
                    self.calls.append(Call('aten::contiguous', span_bytes(t), span_bytes(t), 0, 'simt', kind))
        elif name in _CONTIGUOUS_INPUTS and unit != 'cpu':  # likewise, inside the CUDA kernel (expect_contiguous)
            for t in args[: _CONTIGUOUS_INPUTS[name]]:
                if isinstance(t, torch.Tensor) and not t.is_contiguous():
                    kind = _copy_class('aten::clone', (t,), [t.contiguous()]) or ''
                    self.calls.append(Call('aten::contiguous', span_bytes(t), span_bytes(t), 0, 'simt', kind))
        if name == 'aten::_fft_c2r' and unit != 'cpu':
            src = args[0]
            kind = _copy_class('aten::clone', (src,), [src.contiguous()])
            self.calls.append(Call('aten::clone', span_bytes(src), src.numel() * src.element_size(), 0, unit, kind))
        lines, c_calls = self.events.take()
        free, self._free = self._free, 0
        written = sum(span_bytes(t) for t in outs)
        if name == 'mrconvnext::talk2d_triton' and outs[1].dim() == 1 and outs[1].numel() == 0:
            written += _left_out_table_bytes(args[0], outs[1])
        if name in OP_CLASSES['fft'] and unit != 'cpu' and args[_FFT_NORMALIZATION_ARG] != 0:
            self.calls.append(Call(name, read, written, flops, unit, cls, lines, c_calls, free))
            scaled = outs[0].numel() * (2 if outs[0].is_complex() else 1)  # one FLOP per real value
            name, read, flops, cls, lines, c_calls, free = 'aten::mul_', written, scaled, '', 0, 0, 0
        if name == 'aten::constant_pad_nd' and unit != 'cpu':
            # ATen's padding is two kernels: it fills the whole padded tensor, then copies the input into it (a
            # profile books their time under fill_ and copy_)
            self.calls.append(Call('aten::fill_', 0, written, 0, unit, '', lines, c_calls, free))
            written = args[0].numel() * outs[0].element_size()
            name, lines, c_calls, free = 'aten::copy_', 0, 0, 0
        self.calls.append(Call(name, read, written, flops, unit, cls, lines, c_calls, free))


def dispatch_baseline(counter: OpCounter, n: int = 400) -> tuple[int, int]:
    """The lines and C calls from one Python op call to the next under ``counter`` (in a ``FakeTensorMode``) in a
    loop with nothing else in it: the way into the mode (the same for every op), which the counted Python leaves
    out. The loop's own lines are not traced (its frame began before the tracing); its one C call per op, the op
    itself, is the caller's and stays counted."""
    t = torch.empty(16, device='cuda')
    counter.baseline, start = (0, 0), len(counter.calls)
    with counter:
        counter.resume()
        try:
            for _ in range(n):
                t.add_(1)
        finally:
            counter.pause()
    calls = counter.calls[start + 1 :]
    del counter.calls[start:]
    counter.events.take()
    lines = {c.lines for c in calls}
    c_calls = {c.c_calls - 1 for c in calls}
    if len(lines) != 1 or len(c_calls) != 1:
        raise RuntimeError(f'dispatch_baseline: the way into the mode varies: lines {lines}, C calls {c_calls}')
    return lines.pop(), c_calls.pop()


def _graph_held_weakly() -> bool:
    """Whether the Python objects of autograd nodes neither keep their nodes alive nor are kept by them (torch 2.11):
    a node then lives only while something in the graph holds it (an output's ``grad_fn``, a consumer's edge), and a
    node met again through another edge may come back as a new object with a new ``id``. torch 2.14 keeps both alive
    together. Probed on a Python ``autograd.Function``'s node, whose ``next_functions`` raises once it is gone."""

    class _Twice(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    node = _Twice.apply(torch.zeros(1, requires_grad=True)).grad_fn  # its output is gone at once
    try:
        _ = node.next_functions
    except RuntimeError:
        return True
    return False


GRAPH_HELD_WEAKLY = _graph_held_weakly()  # probed at import, outside any counting or fake mode


@torch.no_grad()  # as the engine runs a backward without create_graph: the gradients record no graph
def walk_backward(root, grad: torch.Tensor, counter: OpCounter | None = None) -> None:
    """Backward from ``root`` (a loss's ``grad_fn``) by calling each autograd node in dependency order (among the
    ready ones, the latest created first); leaf
    gradients go to ``.grad``. The caller drops its own references to the graph first, so that each node (and what
    it saved) is freed once it has run, as the engine frees it. ``counter``: measure Python time only inside the
    nodes whose backward is Python (the walk's own bookkeeping and the calls of C++ nodes stand for the engine's
    C++). Where torch holds the graph weakly (:data:`GRAPH_HELD_WEAKLY`: torch 2.11) the walk holds every node until
    it ends, so that the nodes keep their identities: nothing is freed as it runs there, and the peak memory of a
    training step counts every saved tensor to the end (the calibrated numbers come from torch 2.14); a root that
    is a Python ``autograd.Function``'s node needs its output alive in the caller."""
    deps: dict[int, int] = defaultdict(int)
    held = []  # GRAPH_HELD_WEAKLY: every node, to the end of the walk
    stack, seen = [root], {id(root)}
    while stack:
        node = stack.pop()
        if GRAPH_HELD_WEAKLY:
            held.append(node)
        for nxt, _ in node.next_functions:
            if nxt is not None:
                deps[id(nxt)] += 1
                if id(nxt) not in seen:
                    seen.add(id(nxt))
                    stack.append(nxt)
    pending: dict[int, tuple] = {id(root): (root, [grad])}
    ready = [(0, id(root))]  # a heap: the latest-created node first, as the engine orders a CPU graph task
    del stack, seen, root, grad  # the graph now lives only in `pending`: what has run is freed
    while ready:
        node, grads = pending.pop(heapq.heappop(ready)[1])
        if type(node).__name__ == 'AccumulateGrad':
            var = node.variable
            var.grad = grads[0] if var.grad is None else var.grad + grads[0]
            continue
        edges = node.next_functions
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            # a Python autograd.Function: one gradient per forward input, where the engine keeps one edge per tensor
            # input; the inputs that need a gradient are those with a live edge, in the same order
            metas = node._input_metadata
            grads = [g if g is not None else torch.zeros(m.shape, dtype=m.dtype, device=m.device)
                     for g, m in zip(grads, metas)]  # fmt: skip
            if counter is not None:  # its backward is Python, which the host runs
                counter.resume()
            try:
                outs = node.apply(*grads)
            finally:
                if counter is not None:
                    counter.pause()
            outs = outs if isinstance(outs, tuple) else (outs,)
            edges = [e for e in edges if e[0] is not None]
            outs = [g for g, need in zip(outs, node.needs_input_grad) if need]
        else:  # a C++ node: no Python (the engine calls it from C++)
            outs = node(*grads)
            outs = outs if isinstance(outs, tuple) else (outs,)
        for (nxt, slot), g in zip(edges, outs):
            if nxt is None:
                continue
            key = id(nxt)
            if key not in pending:
                pending[key] = (nxt, [None] * len(nxt._input_metadata))
            buf = pending[key][1]
            if (
                g is not None
            ):  # as the engine's validate_outputs: reduce a broadcast gradient, cast to the input's dtype
                meta = nxt._input_metadata[slot]
                if g.shape != meta.shape:
                    g = g.sum_to_size(meta.shape)
                if g.dtype != meta.dtype:
                    g = g.to(meta.dtype)
                buf[slot] = g if buf[slot] is None else buf[slot] + g
            deps[key] -= 1
            if deps[key] == 0:
                heapq.heappush(ready, (-nxt._sequence_nr(), key))
        del node, grads, outs, edges


@dataclass
class StepCost:
    """One counted run: every op call and the peak of live bytes."""

    model: str
    mode: str
    batch: int
    calls: list[Call] = field(default_factory=list)
    peak_bytes: int = 0
    method: str = 'auto'
    kwargs: dict = field(default_factory=dict)
    _arrays: dict | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> str:
        calls = [[c.name, c.read, c.written, c.flops, c.unit, c.cls, c.lines, c.c_calls, c.free] for c in self.calls]
        return json.dumps(dict(model=self.model, mode=self.mode, batch=self.batch, peak_bytes=self.peak_bytes,
                               calls=calls, method=self.method, kwargs=self.kwargs))  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> StepCost:
        d = json.loads(text)
        calls = [Call(*c) for c in d['calls']]
        return cls(
            d['model'], d['mode'], d['batch'], calls, d['peak_bytes'], d.get('method', 'auto'), d.get('kwargs', {})
        )

    def arrays(self) -> dict[str, np.ndarray]:
        """The calls' bytes, FLOPs and unit indices (into ``UNITS``) as arrays, for the time model."""
        if self._arrays is None or len(self._arrays['bytes']) != len(self.calls):
            self._arrays = dict(
                bytes=np.array([c.read + c.written for c in self.calls], dtype=np.float64),
                flops=np.array([c.flops for c in self.calls], dtype=np.float64),
                unit=np.array([UNITS.index(c.unit) for c in self.calls], dtype=np.int64),
                lines=np.array([c.lines for c in self.calls], dtype=np.float64),
                c_calls=np.array([c.c_calls for c in self.calls], dtype=np.float64),
                free=np.array([c.free for c in self.calls], dtype=np.float64),
                sync=np.array([c.cls == 'sync' for c in self.calls], dtype=bool),
                device=np.array([c.unit != 'cpu' for c in self.calls], dtype=bool),
            )
            names, index = np.unique(np.array([call_class(c) for c in self.calls] or [''], dtype=object),
                                     return_inverse=True)  # fmt: skip
            self._arrays.update(classes=list(names), class_index=index[: len(self.calls)])
        return self._arrays

    @property
    def bytes(self) -> int:
        return sum(c.read + c.written for c in self.calls if c.unit != 'cpu')

    @property
    def launches(self) -> int:
        return sum(c.unit != 'cpu' for c in self.calls)

    @property
    def flops(self) -> int:
        return sum(c.flops for c in self.calls if c.unit != 'cpu')


def fake_cuda(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` (built on the meta device) with fake CUDA parameters and buffers, 4-D ones channels-last (as
    ``model.to('cuda', memory_format=torch.channels_last)`` leaves them); call under ``FakeTensorMode``."""

    def fake(t: torch.Tensor) -> torch.Tensor:
        if t.dim() != 4:
            return torch.empty(t.shape, dtype=t.dtype, device='cuda')
        # channels-last strides even where a size-1 dim makes NCHW ones count as channels-last too ((C, 1, K, K)
        # depthwise weights): .to(memory_format=...) restrides those, .contiguous(memory_format=...) would not
        return torch.empty(t.shape, dtype=t.dtype, device='cuda', memory_format=torch.channels_last)

    for module in model.modules():
        for name, p in module._parameters.items():
            if p is not None:
                module._parameters[name] = torch.nn.Parameter(fake(p), requires_grad=p.requires_grad)
        for name, b in module._buffers.items():
            if b is not None:
                module._buffers[name] = fake(b)
    return model


@contextlib.contextmanager
def steady_caches():
    """The package's caches of tensors that depend on sizes alone (Fourier bases, tap indices: its
    ``cache_or_body``) as a GPU run has them after its first call: filled by the uncounted forward, hit by the
    counted ones. Under a fake tensor mode the package bypasses them (fake tensors must not enter its caches), which
    would count their CPU construction and host-to-device copies on every call; here a cache private to this count
    holds them. Checkouts without such caches (``--code``) are left as they are."""
    import importlib

    private: dict = {}

    def cached(fn):
        body = fn.__wrapped__
        if body not in private:
            private[body] = functools.lru_cache(maxsize=None)(body)
        return private[body]

    patched = []
    for name in ('mrconvnext.layers.kernel_params', 'mrconvnext.layers.kernel_bank'):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, 'cache_or_body'):
            patched.append((module, module.cache_or_body))
            module.cache_or_body = cached
    try:
        yield
    finally:
        for module, original in patched:
            module.cache_or_body = original


def count_step(
    spec: str, train: bool, batch: int = 128, img_size: int = 224, method: str = 'auto', kwargs: dict | None = None,
) -> StepCost:  # fmt: skip
    """Count ``spec`` (a timm name, ``NAME:reparam`` for the deployed model) on fake CUDA tensors: one eval forward,
    or (``train``) forward, cross-entropy, backward and an SGD step. ``method``: every MRConv mixer's, as
    ``scripts/gpu_profile.py`` sets it (``'matmul'``: the matmul methods by length, what 'auto' ran on CUDA before
    torch.fft took the long maps); ``kwargs``: the model's (``combine='scale'``). After one uncounted forward (the
    first calls' imports and caches) and, for training, one uncounted step (as a timed GPU step follows warm-up
    steps), one counted run; the count is the same on every run of the same code."""
    import timm
    from gpu_profile import set_method

    import mrconvnext  # noqa: F401 - registers the models

    name, _, variant = spec.partition(':')
    extra = {'deploy': True} if variant == 'reparam' else {}
    # shapes only: a fake-tensor build cannot run timm's data-dependent init
    with steady_caches(), torch.device('meta'):
        model = timm.create_model(name, pretrained=False, **extra, **(kwargs or {}))
    set_method(model, method)
    with steady_caches(), FakeTensorMode():
        model = fake_cuda(model).train(train)
        x = torch.randn(batch, 3, img_size, img_size, device='cuda').contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (batch,), device='cuda')
        with OpCounter(), fake_cuda_autocast(), torch.no_grad():
            model(x)
        baseline = dispatch_baseline(OpCounter())
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-6) if train else None  # built once, as a loop does
        runs = [_count_once(model, x, y, optimizer, baseline) for _ in range(2 if train else 1)]
    return StepCost(spec, 'train' if train else 'eval', batch, runs[-1].calls, runs[-1].peak, method, kwargs or {})


def _count_once(
    model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, optimizer, baseline: tuple[int, int]
) -> OpCounter:
    """One counted eval forward, or (with an ``optimizer``) training step, of a fake CUDA model
    (:func:`count_step`); ``baseline``: :func:`dispatch_baseline`'s."""
    train = optimizer is not None
    for p in model.parameters():
        p.grad = None
    counter = OpCounter()
    counter.baseline = baseline
    for t in [*model.parameters(), *model.buffers(), x]:
        counter.track(t)
    with counter:
        counter.resume()
        try:
            with fake_cuda_autocast(), torch.set_grad_enabled(train):
                out = model(x)
                loss = torch.nn.functional.cross_entropy(out, y) if train else None
            del out
            if train:
                root, ones = loss.grad_fn, torch.ones_like(loss)
                del loss
                counter.pause()
                walk_backward(root, ones, counter)
                counter.resume()
                del root
                optimizer.step()
        finally:  # the tracing ends with the run, whatever happens in it
            counter.pause()
    return counter


Efficiency = float | dict[str, tuple[float, float]] | None


def class_cost(cls: str, efficiency: Efficiency = None, latency: float | None = None) -> tuple[float, float]:
    """``(efficiency, latency)`` of an op class: one efficiency for every class (with ``latency``, default
    ``LATENCY_S``), or a class's entry of a table (``None``: ``CLASS_COST``; for a class it lacks, its profile
    class's (``PROFILE_CLASS``), else ``'other'``'s), its latency replaced by ``latency`` if given."""
    if isinstance(efficiency, int | float):
        return float(efficiency), LATENCY_S if latency is None else latency
    table = CLASS_COST if efficiency is None else efficiency
    eff, lat = table.get(cls) or table.get(PROFILE_CLASS.get(cls, cls)) or table['other']
    return eff, lat if latency is None else latency


def roofline(call: Call, gpu: str = 'h100') -> float:
    """Seconds of one op call at the roofline: the slower of its bytes at the bandwidth and its FLOPs at its unit's
    rate."""
    spec = GPUS[gpu]
    return max((call.read + call.written) / spec['bandwidth'], call.flops / spec[call.unit])


def device_time(call: Call, gpu: str = 'h100', efficiency: Efficiency = None, latency: float | None = None) -> float:
    """Modeled device seconds of one op call: its roofline time over its class's efficiency, plus its latency (none
    for an op on CPU tensors)."""
    if call.unit == 'cpu':
        return 0.0
    eff, lat = class_cost(call_class(call), efficiency, latency)
    return roofline(call, gpu) / eff + lat


Issue = float | tuple[float, float, float, float] | None


def issue_times(issue: Issue = None) -> tuple[float, float, float, float]:
    """The host's costs ``(seconds per counted op, per op that launches nothing, per line of Python, per call of a C
    function)``: ``(ISSUE_S, FREE_S, LINE_S, C_CALL_S)``, the seconds per counted op alone (nothing else on the
    host), or the four."""
    if issue is None:
        return ISSUE_S, FREE_S, LINE_S, C_CALL_S
    if isinstance(issue, int | float):
        return float(issue), 0.0, 0.0, 0.0
    return tuple(float(v) for v in issue)


def host_times(step: StepCost, issue: Issue = None) -> np.ndarray:
    """Seconds the host spends on each call: its issue time, the ops that launch nothing before it and the events
    of the Python before it (:class:`Call`), at :func:`issue_times`' costs."""
    per_op, free, line, c_call = issue_times(issue)
    arrays = step.arrays()
    return per_op + free * arrays['free'] + line * arrays['lines'] + c_call * arrays['c_calls']


def timeline(
    step: StepCost,
    gpu: str = 'h100',
    efficiency: Efficiency = None,
    issue: Issue = None,
    latency: float | None = None,
) -> list[float]:
    """Seconds each call adds to the run: the host issues each op after what comes before it (:func:`host_times`),
    and the device runs them in order, each as soon as it is issued and the one before it is done; a call adds its
    device time plus any wait for the host (so small ops behind a large one cost nothing extra, and a run of small
    ops costs their host time)."""
    host = device = 0.0
    added = []
    for call, seconds in zip(step.calls, host_times(step, issue)):
        host += float(seconds)
        start = max(device, host)
        end = start + device_time(call, gpu, efficiency, latency)
        added.append(end - device)
        device = end
        if call.cls == 'sync':  # the host waits for the device
            host = max(host, device)
    return added


def model_time(
    step: StepCost,
    gpu: str = 'h100',
    efficiency: Efficiency = None,
    issue: Issue = None,
    latency: float | None = None,
) -> float:
    """Modeled seconds of a counted run: the end of :func:`timeline`, in closed form between synchronizations. A
    stretch that starts with the host at ``H`` and the device at ``D``, with device times ``d_i``, their prefix sums
    ``S_k`` and the host's times ``h_i``, ends at ``S_n + max(D, max_j (H + h_1 + ... + h_j - S_(j-1)))``; after a
    synchronization the host starts where the device ended, if that is later."""
    spec = GPUS[gpu]
    arrays = step.arrays()
    memory = arrays['bytes'] / spec['bandwidth']
    compute = arrays['flops'] / np.array([spec[u] for u in UNITS])[arrays['unit']]
    costs = np.array([class_cost(c, efficiency, latency) for c in arrays['classes']], dtype=np.float64)
    eff, lat = costs[arrays['class_index'], 0], costs[arrays['class_index'], 1]
    durations = np.where(arrays['device'], np.maximum(memory, compute) / eff + lat, 0.0)
    hosts = host_times(step, issue)
    host = device = 0.0
    bounds = [0, *(np.flatnonzero(arrays['sync']) + 1).tolist(), len(durations)]
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        if hi <= lo:
            continue
        prefix = np.concatenate([[0.0], np.cumsum(durations[lo:hi])])
        issued = host + np.cumsum(hosts[lo:hi])
        device = float(prefix[-1] + max(device, (issued - prefix[:-1]).max()))
        host = float(issued[-1])
        if arrays['sync'][hi - 1]:
            host = max(host, device)
    return device


def by_op(step: StepCost, gpu: str = 'h100') -> dict[tuple[str, str], dict]:
    """Per (op, unit): launches (none for an op on CPU tensors), GB, GFLOP and modeled ms, summed over the calls."""
    ops: dict[tuple[str, str], dict] = defaultdict(lambda: dict(launches=0, gb=0.0, gflop=0.0, ms=0.0))
    for c, seconds in zip(step.calls, timeline(step, gpu)):
        row = ops[c.name, c.unit]
        row['launches'] += c.unit != 'cpu'
        row['gb'] += (c.read + c.written) / 1e9
        row['gflop'] += c.flops / 1e9
        row['ms'] += seconds * 1e3
    return ops


def report(step: StepCost, gpu: str, top: int) -> list[str]:
    seconds = model_time(step, gpu)
    lines = [
        f'{step.model} {step.mode}, batch {step.batch}, fake CUDA, bf16 autocast, channels-last; modeled on {gpu}',
        f'  {seconds * 1e3:.2f} ms; {step.bytes / 1e9:.2f} GB moved; {step.flops / 1e9:.1f} GFLOP; '
        f'{step.launches} launches; peak {step.peak_bytes / 2**20:.0f} MiB',
        f'  {"op":<44} {"ms":>8} {"launches":>9} {"GB":>8} {"GFLOP":>9} unit',
    ]
    for (name, unit), r in sorted(by_op(step, gpu).items(), key=lambda kv: -kv[1]['ms'])[:top]:
        lines.append(f'  {name:<44} {r["ms"]:8.3f} {r["launches"]:9d} {r["gb"]:8.3f} {r["gflop"]:9.2f} {unit}')
    return lines


def count_all(
    specs: list[str], batch: int, img_size: int, modes: tuple[str, ...] = ('eval', 'train')
) -> dict[tuple[str, str], StepCost]:
    """Count every model in ``modes`` (a deployed model has no training step), each in its own process."""
    out: dict[tuple[str, str], StepCost] = {}
    for spec in specs:
        for mode in modes:
            if mode != 'train' or not spec.endswith(':reparam'):
                out[spec, mode] = count_in_process(spec, mode, batch, img_size)
    return out


def count_in_process(
    spec: str, mode: str, batch: int, img_size: int = 224, method: str = 'auto', kwargs: dict | None = None,
    code: Path | None = None,
) -> StepCost:  # fmt: skip
    """:func:`count_step` in a fresh process (fake-tensor state and the engines' choices start clean)."""
    cmd = [sys.executable, __file__, '--model', spec, '--batch', str(batch), '--img-size', str(img_size), '--json']
    cmd += ['--method', method, '--kwargs', json.dumps(kwargs or {})]
    cmd += (['--train'] if mode == 'train' else []) + (['--code', str(code)] if code else [])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f'counting {spec} {mode} b{batch} {method} failed:\n{proc.stderr[-3000:]}')
    print(f'counted {spec} {mode} b{batch} {method} {kwargs or ""}', file=sys.stderr, flush=True)
    return StepCost.from_json(proc.stdout)


PROFILES = ROOT / 'docs' / 'gpu' / 'h200_2026-11-26b'  # scripts/gpu_profile.py on an H200, three calls
# each call's rows: calls 1-3 of the session of 2026-11-26, calls 4-8 the next day's (call 4: every family's T model
# at d0ef7d0)
CALL_DIRS = {c: PROFILES / c for c in ('call1', 'call2', 'call3')}
# calls 4-8: the five calls of 2026-11-27 (docs/gpu/h200_2026-11-27/README.md), each on a fresh machine
CALL_DIRS |= {f'call{i + 3}': ROOT / 'docs' / 'gpu' / 'h200_2026-11-27' / f'call{i}' / 'profile' for i in range(1, 6)}
CONSTANTS = ROOT / 'docs' / 'gpu' / 'cost-model-constants.json'  # written by --calibrate, read at import
H200_TABLE = ROOT / 'docs' / 'gpu' / 'h200_2026-11-26' / 'call1' / 'eager' / 'gpu_nvidia_h200.csv'  # 3f6fcf6
# the one H100 run (scripts/bench_gpu.py, eager, batch 128; docs/gpu/README.md), on the code of its commit
H100_TABLE, H100_CODE = ROOT / 'docs' / 'gpu' / 'h100_models_eager.csv', 'f100e2a'


def _load_constants() -> None:
    global ISSUE_S, FREE_S, LINE_S, C_CALL_S
    if CONSTANTS.exists():
        data = json.loads(CONSTANTS.read_text())
        CLASS_COST.update({cls: tuple(v) for cls, v in data['class_cost'].items()})
        ISSUE_S, FREE_S, LINE_S, C_CALL_S = data['issue_s'], data['free_s'], data['line_s'], data['c_call_s']


_load_constants()


def profile_rows(call: str) -> list[dict]:
    """The eager rows of one call of ``scripts/gpu_profile.py`` (``CALL_DIRS``)."""
    lines = (CALL_DIRS[call] / 'rows.jsonl').read_text().splitlines()
    return [r for r in map(json.loads, lines) if r['mode'] in ('eval', 'train')]


CALL_CODE = {'call1': 'e065b57', 'call2': 'e065b57', 'call3': 'dfa35d0', 'call4': 'd0ef7d0'}  # (their READMEs)
# the later calls: the commit each ran and what it measured (docs/gpu/h200_2026-11-27/README.md)
LATER_CALLS = {
    'call5': ('da0db2a', "LightConv's Triton operators at batch 1, 8 and 128 against its grouped conv"),
    'call6': ('80c6db9', "the matmul methods' own backward in MRConv's training step"),
    'call7': ('814e136', "the folded BatchNorm's statistics' gradient from one kernel gradient"),
    'call8': ('c85c2f8', "the torch.fft engine's N kernels in one product and one transform"),
}
CALL_CODE |= {call: commit for call, (commit, _) in LATER_CALLS.items()}


def counted_method(call: str, row: dict) -> str:
    """The method to count a profiled row with, on the commit its call ran (``CALL_CODE``), so that the counting
    runs the methods the call ran: call 1 (and the day-before table) ran 'auto' = the matmul methods for every MRConv
    mixer; call 2 ran torch.fft but the Toeplitz product for maps up to ``TOEPLITZ_MAX_LENGTH`` in batches of at
    least 32 (with or without a backward); the later calls ran their code's own 'auto'."""
    if call not in CALL_CODE:
        raise ValueError(f'counted_method: the calls whose code is known are {sorted(CALL_CODE)}, got {call!r}')
    method = row['method']
    if call not in ('call1', 'call2') or 'mrconvnext' not in row['model'] or method not in ('auto', 'nofold'):
        return method
    old = 'matmul' if call == 'call1' else ('fft' if row['batch'] < 32 else 'mixed')
    return old if method == 'auto' else f'nofold+{old}'


def measured_by_class(row: dict) -> dict[str, float]:
    """Seconds of device time per op class in a profiled row (each op's self time). A TaLK Triton operator's is split
    by kernel family (``TALK_TRITON_OPS``): its plane kernel's time among the row's top kernels is ``':plane'``'s, the
    rest of the operator's (its scans and gathers) ``':tables'``'s (a plane kernel outside the row's top kernels, the
    profile's 25-40 largest, would be booked under the tables: in the profiled TaLK rows it is the largest)."""
    out: dict[str, float] = defaultdict(float)
    kernels: dict[str, float] = defaultdict(float)
    for kernel, _count, us in row.get('top_kernels', []):
        kernels[kernel] += us
    for name, (_, self_us, *_rest) in row['ops'].items():
        if name in TALK_TRITON_OPS:
            plane_us = min(self_us, kernels.get(TALK_TRITON_OPS[name], 0.0))
            out[f'{name}:plane'] += plane_us * 1e-6
            out[f'{name}:tables'] += (self_us - plane_us) * 1e-6
            continue
        out[op_class(name)] += self_us * 1e-6
    return out


def nnls(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares for a few columns: the best of the unconstrained fits on every subset of them; of
    fits within 0.1 % of the best residual, the one on the fewest columns (then the first subset). Without that
    rule near-ties flipped between calibrations of the same counts: the conv backward's (0.26, no latency) and (1.0,
    134 us) fitted call 1 alike and changed places from one run to the next. A column left out is a class at its
    roofline (:func:`class_costs`: efficiency 1) or no latency."""
    k = A.shape[1]
    fits = []
    for mask in range(1, 2**k):
        cols = [j for j in range(k) if mask >> j & 1]
        x = np.linalg.lstsq(A[:, cols], y, rcond=None)[0]
        if (x < 0).any():
            continue
        full = np.zeros(k)
        full[cols] = x
        fits.append((float(np.linalg.norm(A @ full - y)), len(cols), full))
    if not fits:
        return np.zeros(k)
    best = min(f[0] for f in fits)
    return min((f for f in fits if f[0] <= best * 1.001 + 1e-15), key=lambda f: f[1])[2]


def class_costs(pairs: list[tuple[dict, StepCost]], gpu: str) -> dict[str, dict]:
    """Each class's (efficiency, latency), measured on (profiled row, counted run) pairs: per profile class, over
    the rows, its measured seconds against the roofline seconds of each counted class booked under it and its
    launches, by non-negative least squares of the relative error (a class seen in fewer than 4 rows: the pooled
    ratio of roofline to measured seconds, no latency). Returns per counted class its efficiency and latency, and
    per profile class the rows' largest relative error of the fit, launches, roofline and measured seconds."""
    obs: dict[str, list] = defaultdict(list)
    subs: dict[str, set] = defaultdict(set)
    for row, step in pairs:
        measured = measured_by_class(row)
        R: dict[str, float] = defaultdict(float)
        n: dict[str, int] = defaultdict(int)
        for c in step.calls:
            if c.unit == 'cpu':  # no kernel
                continue
            cls = call_class(c)
            R[cls] += roofline(c, gpu)
            n[PROFILE_CLASS.get(cls, cls)] += 1
            subs[PROFILE_CLASS.get(cls, cls)].add(cls)
        for group in set(measured) | set(n):
            obs[group].append(({s: R[s] for s in subs[group]}, n[group], measured.get(group, 0.0)))
    out = {}
    for group, rows in obs.items():
        names = sorted(subs[group])
        A = np.array([[r[0].get(s, 0.0) for s in names] + [r[1]] for r in rows], dtype=np.float64)
        y = np.array([r[2] for r in rows])
        keep = y > 0
        if not names or not keep.any() or A[keep, :-1].sum() == 0:
            continue
        A, y = A[keep], y[keep]
        if len(y) >= 4:
            x = nnls(A / y[:, None], np.ones_like(y))
        else:
            x = np.append(np.full(len(names), y.sum() / A[:, :-1].sum()), 0.0)
        for i, s in enumerate(names):
            out[s] = dict(efficiency=min(1.0, 1 / x[i]) if x[i] > 0 else 1.0, latency=float(x[-1]))
        error = float(np.abs(A @ x / y - 1).max())
        out[group] = {**out.get(group, {}), 'group': True, 'rows': len(y), 'error': error,
                      'launches': int(A[:, -1].sum()), 'roofline': float(A[:, :-1].sum()), 'measured': float(y.sum())}  # fmt: skip
    return out


def row_key(row: dict) -> tuple:
    return row['model'], json.dumps(row['kwargs'], sort_keys=True), row['mode'], row['batch']


def fastest_step(row: dict) -> float | None:
    """Seconds of a profiled row's fastest timed step (None for a row without its steps' times)."""
    times = row.get('times')
    return min(times) * 1e-3 if times else None


def compare_rows(pairs: list[tuple[dict, StepCost]], gpu: str, efficiency: Efficiency, issue: Issue) -> list[dict]:
    """Predicted against measured ms, ratios to convnext_tiny at the same mode and batch (of the same call), peak."""
    base = {}
    for row, step in pairs:
        if row['model'] == 'convnext_tiny':
            base[row['mode'], row['batch']] = (model_time(step, gpu, efficiency, issue), row['ms'] * 1e-3,
                                               fastest_step(row))  # fmt: skip
    out = []
    for row, step in pairs:
        pred, meas = model_time(step, gpu, efficiency, issue), row['ms'] * 1e-3
        r = dict(
            model=row['model'], mode=f'{row["mode"]} b{row["batch"]}', method=row['method'], predicted_ms=pred * 1e3
        )
        r['kwargs'] = ','.join(f'{k}={v}' for k, v in row['kwargs'].items())
        r.update(measured_ms=meas * 1e3, ms_error=pred / meas - 1, predicted_mib=step.peak_bytes / 2**20)
        if row.get('peak_mib'):
            r.update(measured_mib=row['peak_mib'], mem_error=step.peak_bytes / 2**20 / row['peak_mib'] - 1)
        if (row['mode'], row['batch']) in base:
            bp, bm, bf = base[row['mode'], row['batch']]
            r.update(predicted_ratio=pred / bp, measured_ratio=meas / bm)
            r['ratio_error'] = r['predicted_ratio'] / r['measured_ratio'] - 1
            fastest = fastest_step(row)
            if fastest is not None and bf is not None:
                r.update(
                    spread=max(row['times']) / min(row['times']), fastest_ratio_error=pred / bp / (fastest / bf) - 1
                )
        out.append(r)
    return out


LAUNCH_OPS = ('aten::add', 'aten::mul', 'aten::gelu')  # one kernel each, no Python inside


def launch_time(calls: tuple[str, ...] = ('call2', 'call3')) -> float:
    """The GPU host's seconds of dispatch and launch per op, measured: the median over the profiled rows of these
    calls of the self CPU time per call of ops that launch one kernel and run no Python (``LAUNCH_OPS``; the
    profiler's own cost per op included)."""
    per_call = []
    for call in calls:
        for row in profile_rows(call):
            for name in LAUNCH_OPS:
                entry = row['ops'].get(name)
                if entry and len(entry) > 3 and entry[0]:
                    per_call.append(entry[3] / entry[0] * 1e-6)
    if not per_call:
        raise ValueError(f'launch_time: no self CPU times of {LAUNCH_OPS} in the profiles of {calls}')
    return statistics.median(per_call)


def launches_nothing(name: str) -> bool:
    """Whether an op of a profile launches no kernel on a GPU: a view (any overload of it, e.g. ``aten::reshape``)
    or an allocation or alias (``_FREE``), not one dispatched only because the tensors are fake (``_FAKE_ONLY``)."""
    if name in _FREE:
        return name not in _FAKE_ONLY
    namespace, _, op = name.partition('::')
    packet = getattr(torch.ops.aten, op, None) if namespace == 'aten' else None
    return packet is not None and any(getattr(packet, o).is_view for o in packet.overloads())


def free_time(calls: tuple[str, ...] = ('call2', 'call3')) -> float:
    """The GPU host's seconds per op that launches nothing (:func:`launches_nothing`), measured: the median over
    the profiled rows of these calls of their pooled self CPU time per call (the profiler's own cost included)."""
    per_row = []
    for call in calls:
        for row in profile_rows(call):
            entries = [e for name, e in row['ops'].items() if len(e) > 3 and launches_nothing(name)]
            if sum(e[0] for e in entries):
                per_row.append(sum(e[3] for e in entries) / sum(e[0] for e in entries) * 1e-6)
    if not per_row:
        raise ValueError(f'free_time: no self CPU times of ops that launch nothing in the profiles of {calls}')
    return statistics.median(per_row)


# the fitted host constants' grid: 0 to 1 µs per line of Python, 0 to 40 µs per call of an op binding
LINE_GRID = [i * 50e-9 for i in range(21)]
C_CALL_GRID = [i * 100e-9 for i in range(401)]


def fit(pairs: list[tuple[dict, StepCost]], gpu: str) -> tuple[dict, tuple[float, float, float, float], float]:
    """The class costs (:func:`class_costs`, measured), the host's time per counted op (:func:`launch_time`,
    measured) and per op that launches nothing (:func:`free_time`, measured), and the two fitted constants, the
    seconds per line of Python and per call of a C function, on a grid (``LINE_GRID`` x ``C_CALL_GRID``) that
    minimizes the mean squared log error of the rows' times plus that of their ratios to convnext_tiny (what the
    model is used for): ``(class costs, (launch time, free time, line time, C call time), loss)``."""
    table = {cls: (e['efficiency'], e['latency']) for cls, e in class_costs(pairs, gpu).items() if 'efficiency' in e}
    table.setdefault('other', CLASS_COST['other'])
    launch, free = launch_time(), free_time()

    def loss(issue: tuple[float, float, float, float]) -> float:
        rows = compare_rows(pairs, gpu, table, issue)
        ratios = [r['ratio_error'] for r in rows if r.get('ratio_error') is not None and r['model'] != 'convnext_tiny']
        return statistics.fmean(math.log1p(r['ms_error']) ** 2 for r in rows) + statistics.fmean(
            math.log1p(e) ** 2 for e in ratios
        )

    best = min(((launch, free, line, c_call) for line in LINE_GRID for c_call in C_CALL_GRID), key=loss)
    return table, best, loss(best)


def _fmt(v, spec: str = '.2f') -> str:
    return '-' if v is None else format(v, spec)


def _err(v: float | None) -> str:
    """A ratio error; bold past the +-20 % within which the model is trusted."""
    return '-' if v is None else (f'**{v:+.0%}**' if abs(v) > TRUST else f'{v:+.0%}')


def comparison_table(rows: list[dict]) -> list[str]:
    out = ['| model | kwargs | mode | method | predicted ms | measured ms | error | predicted ratio | measured ratio | '
           'ratio error | step spread | ratio error, fastest steps | predicted peak MiB | measured peak MiB | error |']  # fmt: skip
    out += ['| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |']
    for r in rows:
        out.append(
            f'| {r["model"]} | {r.get("kwargs") or "-"} | {r["mode"]} | {r.get("method", "auto")} | '
            f'{r["predicted_ms"]:.1f} | {_fmt(r.get("measured_ms"), ".1f")} | {_fmt(r.get("ms_error"), "+.0%")} | '
            f'{_fmt(r.get("predicted_ratio"))} | {_fmt(r.get("measured_ratio"))} | {_err(r.get("ratio_error"))} | '
            f'{_fmt(r.get("spread"))} | {_err(r.get("fastest_ratio_error"))} | '
            f'{r["predicted_mib"]:.0f} | {_fmt(r.get("measured_mib"), ".0f")} | {_fmt(r.get("mem_error"), "+.0%")} |'
        )
    return out


def _worst(rows: list[dict]) -> str:
    """The largest ratio error and how many ratios lie within ``TRUST``, by the medians and by the fastest steps."""
    rows = [r for r in rows if r.get('ratio_error') is not None and r['model'] != 'convnext_tiny']
    errors = [abs(r['ratio_error']) for r in rows]
    out = f'largest ratio error {max(errors):.0%}; {sum(e <= TRUST for e in errors)} of {len(errors)} ratios within ±{TRUST:.0%}'
    fastest = [abs(r['fastest_ratio_error']) for r in rows if r.get('fastest_ratio_error') is not None]
    if fastest:
        out += (
            f'; from the fastest steps {sum(e <= TRUST for e in fastest)} of {len(fastest)}, largest {max(fastest):.0%}'
        )
    return out


def count_rows(call: str, code: Path | None = None) -> list[tuple[dict, StepCost]]:
    """Every eager row of a call, counted (each in its own process) with the methods the call ran, on ``code``."""
    out = []
    for row in profile_rows(call):
        spec = row['model']
        step = count_in_process(spec, row['mode'], row['batch'], row['img_size'], counted_method(call, row),
                                row['kwargs'], code=code)  # fmt: skip
        out.append((row, step))
    return out


LIMITS = """## What the model sees and what it does not

It counts what eager PyTorch dispatches on fake CUDA tensors (bf16 autocast, channels-last), the CUDA paths of this
package's engines included, and models each op as its roofline time (the slower of its bytes at the bandwidth and
its FLOPs at its unit's rate) over its class's measured efficiency plus its class's measured latency, on a device fed
by a host that issues each op after what runs before it (the Python, counted in lines and calls of op bindings, and
the ops that launch nothing) and a fixed dispatch and launch time (`scripts/gpu_cost.py`'s docstring). It does not
see:
- **fusion**: `torch.compile` fuses pointwise ops into their neighbours; the model counts eager (every op through
  memory), so it says nothing of the compiled tables;
- **L2 reuse**: a tensor read again while it is still in the 50-60 MB L2 is counted twice;
- **a Triton operator's inside**: it counts one launch that reads the operator's inputs and writes its outputs, and
  the FLOPs of its registered formula; each Triton operator's efficiency is measured from one profiled row (its
  family's), so a change inside the kernel is seen only by a new profile. TaLK's operators are two classes each, by
  the kernels the code picks (`'<operator>:plane'`, the one-launch plane kernels; `'<operator>:tables'`, the scans
  and gathers), measured apart from the profiled kernels' names; a family measured at some map sizes (the tables
  at ConvNeXt-T's stages 1-2) is assumed to run as efficiently at the others;
- **shapes within a class**: a class has one efficiency and one latency. Transposes differ by which dimensions they
  swap; GEMMs by their tile fit; gathers and scatters by their index pattern (`index_add_` into a small kernel from
  many positions serializes on atomics; an accumulating `index_put` walks each destination's duplicates in turn);
- **the host beyond a count**: the Python between ops is counted in lines executed (a call of a builtin, of a query
  of torch's state or of a tensor's metadata method counted as one) and calls of torch's op bindings (tensor
  methods, `torch.*` ops; operator syntax such as `y * 3` makes none), at one fitted time each, as if every line
  and every call cost the same; the Python bindings' argument parsing and the C++ of
  composite ops that decompose before they reach the counter (`linear` into `t` and `addmm`, `to` into `_to_copy`)
  are in the time per call. Ops that
  launch nothing cost one measured time each (`free_time`); synchronizations, the allocator and the driver are in
  one measured time per launch (`launch_time`, the profiled self CPU time of one-kernel ops, the autograd recording
  of a training forward included). The GPU hosts themselves differ: convnext_tiny's batch-1 forward, host-bound,
  took 6.2 ms on three H200 machines and 9.6 ms on a fourth (call 2);
- **extra kernels**: one launch per op, where a convolution's backward runs two or three kernels (the padding's
  fill and copy, LayerNorm's copy of a strided input and an FFT's clone of a C2R input and pass of its norm are
  counted);
- **first calls**: the counted runs find the package's size-only caches (Fourier bases, tap indices) filled, as a
  GPU's later calls do; what a first call costs (building them on the host, copying them over) is not counted.

Every count of the same code gives the same numbers (the host too: it is counted, not timed). Until 2026-11-27 the
host was the Python time measured here, which varied 2x between counts of the same code on this shared machine
(mrconvnext_t's deployed batch-1 forward: 37 to 69 ms modeled). The tables give the device time beside the modeled
time: a change to the kernels is read by the device time, a change to the Python by the modeled time.

Trust it only where a row's predicted ratio fell within 20 % of the measured one in `cost-model-calibration.md`
(the misses are in bold there), and read a predicted change as a direction and an order of magnitude, confirmed on
a GPU before it is believed.
"""


def _head(path: Path) -> str:
    """The short commit of the checkout at ``path`` ('' where it is none)."""
    head = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True, cwd=path)
    return head.stdout.strip() if head.returncode == 0 else ''


def _header(command: str) -> list[str]:
    dirty = subprocess.run(['git', 'status', '--porcelain'], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    return [
        f'Generated {datetime.date.today()} on {platform.node() or "this machine"} (no GPU: fake CUDA tensors), '
        f'commit {_head(ROOT) or "?"}{" with uncommitted changes" if dirty else ""}, torch '
        f'{torch.__version__}, by `{command}`.',
        '',
    ]


def _checkout_name(path: Path) -> str:
    """``'<a worktree of COMMIT>'`` for a git checkout (what a reader can make again), else the path."""
    commit = _head(path)
    return f'<a worktree of {commit}>' if commit else str(path)


def table_rows(path: Path) -> list[dict]:
    """A ``scripts/bench_gpu.py`` CSV (batch 128, eager rows) as profiled rows without ops."""
    rows = []
    with open(path, newline='') as f:
        for r in csv.DictReader(f):
            if r.get('mode', 'eager') != 'eager':
                continue
            for mode, key, peak in (
                ('eval', 'infer_img_s', 'infer_peak_mb'),
                ('train', 'train_img_s', 'train_peak_mb'),
            ):
                if r.get(key):
                    rows.append(dict(model=r['model'], kwargs={}, mode=mode, batch=128, method='auto', img_size=224,
                                     ms=1000 * 128 / float(r[key]), peak_mib=float(r[peak]) if r.get(peak) else None))  # fmt: skip
    return rows


@contextlib.contextmanager
def checkout(commit: str):
    """The package of ``commit`` of this repository (``git archive``) in a temporary directory, for the counting."""
    with tempfile.TemporaryDirectory(prefix=f'gpu_cost_{commit}_') as tmp:
        archive = subprocess.run(['git', 'archive', commit, 'mrconvnext'], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(['tar', '-x', '-C', tmp], input=archive.stdout, check=True)
        yield Path(tmp)


def calibrate(out: Path) -> None:
    """Measure each op class's cost and the host's launch time and fit its Python scale on the H200 profiles of
    call 1 (the launch time: calls 2 and 3; this package's operators call 1 lacked: call 4); check them on
    call 2 (other batch sizes and methods, another process), call 3 (later code), call 4 (every family on the code of
    the next day, another machine), the H200 table of the day before (another machine) and the later calls of call
    4's day (``LATER_CALLS``, each on the code it ran) and the one H100 run (``H100_TABLE``, on ``H100_CODE``, with
    the H100's bandwidth and rates); write the constants
    (``CONSTANTS``) and the report ``out``. Each row is counted on the package of the commit its call ran
    (``CALL_CODE``; the day-before table's 3f6fcf6 ran what call 1 ran). Call 4's rows that ran the operators it
    supplies (LightConv's Triton kernels) are in sample for those."""
    gpu = 'h200'
    command = f'python scripts/gpu_cost.py --calibrate {out.as_posix()}'
    header = _header(command)  # before the files it writes
    with checkout(CALL_CODE['call1']) as code:
        fit_pairs = count_rows('call1', code)
        table, issue, loss = fit(fit_pairs, gpu)
        classes = class_costs(fit_pairs, gpu)
        rows1 = compare_rows(fit_pairs, gpu, table, issue)
        rows2 = compare_rows(count_rows('call2', code), gpu, table, issue)
        day_before = []
        for row in table_rows(H200_TABLE):
            method = counted_method('call1', row)  # 3f6fcf6 ran the matmul methods, as call 1 did
            day_before.append((row, count_in_process(row['model'], row['mode'], 128, 224, method, code=code)))
        rows4 = compare_rows(day_before, gpu, table, issue)
    with checkout(CALL_CODE['call3']) as code:
        rows3 = compare_rows(count_rows('call3', code), gpu, table, issue)
    with checkout(CALL_CODE['call4']) as code:
        pairs4 = count_rows('call4', code)
    # this package's operators that call 1 never ran (LightConv's Triton kernels), measured on call 4's rows
    lacked = {c: e for c, e in class_costs(pairs4, gpu).items() if 'efficiency' in e and c.startswith('mrconvnext::')}
    lacked = {c: e for c, e in lacked.items() if c not in table}
    table.update({c: (e['efficiency'], e['latency']) for c, e in lacked.items()})
    rows5 = compare_rows(pairs4, gpu, table, issue)
    with checkout(H100_CODE) as code:  # the H100's own constants: its bandwidth and rates, the same efficiencies
        h100 = [
            (row, count_in_process(row['model'], row['mode'], 128, 224, code=code)) for row in table_rows(H100_TABLE)
        ]
    rows_h100 = compare_rows(h100, 'h100', table, issue)
    later = {}
    for call in LATER_CALLS:
        with checkout(CALL_CODE[call]) as code:
            later[call] = compare_rows(count_rows(call, code), gpu, table, issue)
    kernel = sum(r['kernel_us'] for r, _ in fit_pairs) * 1e-6
    covered = sum(sum(measured_by_class(r).values()) for r, _ in fit_pairs)
    costs = {cls: [round(e, 4), round(lat * 1e9) / 1e9] for cls, (e, lat) in sorted(table.items())}
    source = f'{(PROFILES / "call1").relative_to(ROOT)} ({", ".join(sorted(lacked))}: {CALL_DIRS["call4"].relative_to(ROOT)})'
    CONSTANTS.write_text(
        json.dumps(
            dict(
                class_cost=costs,
                issue_s=issue[0],
                free_s=issue[1],
                line_s=issue[2],
                c_call_s=issue[3],
                gpu=gpu,
                source=source,
            ),
            indent=1,
        )  # fmt: skip
        + '\n'
    )
    lines = ["# The GPU cost model's calibration", '', *header]
    lines += [
        'Data: `scripts/gpu_profile.py` on an H200 (`docs/gpu/h200_2026-11-26b/`, whose README has the versions and '
        'commands): per row (model, eval or training step, batch, MRConv method) the median of 7 timed steps and one '
        "profiled step's device time per op. Each row is counted here with the methods that call ran "
        '(`counted_method`), on the package of the commit it ran (`CALL_CODE`: e065b57 for calls 1 and 2, dfa35d0 for '
        "call 3, each extracted with `git archive`). Call 4 is the next day's profile of every family on another "
        'H200 machine (`docs/gpu/h200_2026-11-27/`, d0ef7d0). The constants go to '
        '`docs/gpu/cost-model-constants.json`, which the model reads.',
        '',
        '## Op classes, measured on call 1',
        '',
        "A call takes its roofline time (bytes at 4.8 TB/s, FLOPs at its unit's rate) over its class's efficiency, "
        "plus its class's latency (launch, ramp-up, tail). Per class of the profile, over call 1's rows: its measured "
        'device time against the roofline time of the counted calls booked under it (what only the counting tells '
        "apart is a class of its own booked under the profile's: copies between memory layouts, `transpose` and, for "
        "2-byte elements, `transpose16`, under `copy`; 2-byte gathers under `gather`; cuDNN's depthwise convs under "
        "`conv` and their backwards, and torch's own, under `conv_backward`; accumulating `index_put` under "
        '`index_put`; matmuls with rows aligned to fewer than 8 bytes under theirs) and their number, by non-negative '
        'least squares of the '
        'relative error; a class in fewer than 4 rows takes the pooled ratio and no latency. These are measurements '
        f'of the card, not constants tuned to the totals. The classes cover {covered / kernel:.1%} of the profiled '
        'kernel time.',
        '',
        '| class | rows | launches | roofline ms | measured ms | efficiency | latency µs | largest row error |',
        '| --- | --- | --- | --- | --- | --- | --- | --- |',
    ]
    groups = sorted((c for c, e in classes.items() if e.get('group')), key=lambda c: -classes[c]['measured'])
    for group in groups:
        e = classes[group]
        members = [c for c in sorted(table) if PROFILE_CLASS.get(c, c) == group]
        for cls in members:
            eff, lat = table[cls]
            first = cls == members[0]
            lines.append(
                f'| {cls} | {e["rows"] if first else ""} | {e["launches"] if first else ""} | '
                f'{e["roofline"] * 1e3:.1f} | {e["measured"] * 1e3:.1f} | {eff:.3f} | {lat * 1e6:.2f} | '
                f'{e["error"]:.0%} |'
                if first
                else f'| {cls} (under {group}) | | | | | {eff:.3f} | {lat * 1e6:.2f} | |'
            )
    lines += [
        '',
        "The host's cost of a call: **"
        f'{issue[0] * 1e6:.1f} µs** of dispatch and launch per counted op, measured (`launch_time`: the median self '
        f'CPU time per call of {", ".join(f"`{n}`" for n in LAUNCH_OPS)} in the profiles of calls 2 and 3, the '
        f"profiler's own cost included); **{issue[1] * 1e6:.2f} µs** per op before it that launches nothing (views, "
        'allocations), measured the same way (`free_time`: the median over those rows of the pooled self CPU time per '
        f'call of such ops); and **{issue[2] * 1e9:.0f} ns** per line of the Python before it and '
        f"**{issue[3] * 1e6:.2f} µs** per call of one of torch's op bindings from it (counted here, `PythonEvents`, "
        'the same on every count of the same code), the two fitted constants (grid search on call 1: the least mean squared log '
        f'error of the predicted ms plus that of the predicted ratios, {loss:.4f}). An op binding is a C function '
        'called from Python, as `sys.setprofile` reports it, that parses its arguments and enters the dispatcher: '
        'tensor methods and `torch.*` ops (`torch.cat`, `.view()`, `.sum()`); operator syntax (`y * 3`) dispatches '
        "without one. Calls of builtins (`isinstance`, `len`), queries of torch's state (`torch.is_grad_enabled`) and "
        'tensor metadata (`.dim()`) count as lines: counted as bindings, they moved the modeled deployed '
        "mrconvnext_t forward at batch 1 13 % for a change that saved 2-3 % of its mixers' host time, timed on a CPU. The "
        "bindings' fitted time stands for what the profiles' self CPU times leave out, spread over all such calls: "
        'their argument parsing and the C++ of the composite ops they enter (`linear`, `to`). One time per line or '
        'per call is a simplification: '
        'the host-bound rows of the matmul methods at e065b57 (calls 1 and 2, batch 1 and 8) took 10-12 ms more on the '
        'GPU host than those of the FFT, which the counts do not show. A Triton operator of this package costs the '
        "host more than an ATen op (its Python, Triton's launcher): its profiled self CPU time per call, 125-313 µs "
        "on call 4, tried in place of its launch time, moved call 5's LightConv batch-1 ratio error from +46 % to +77 % "
        "and no batch-128 row, so it is not used (how much of it is the profiler's own cost is not measured).",
        '',
        "Each table gives beside a row's ratio error the spread of its 7 timed steps (slowest over fastest) and the "
        "ratio error from the fastest steps (the row's and convnext_tiny's): a row whose steps spread past the "
        '±20 % is not measured to within it, and its median can miss where its fastest steps agree.',
        '',
        '## Call 1 (in sample)',
        '',
        *comparison_table(rows1),
        '',
        f'{_worst(rows1)}.',
        '',
        '## Call 2 (out of sample: batch 8 and 32, torch.fft rows, the same constants)',
        '',
        *comparison_table(rows2),
        '',
        f'{_worst(rows2)}.',
        '',
        '## Call 3 (out of sample but for the launch time: later code, dfa35d0, the fold without float64 passes and '
        'the method rule that landed)',
        '',
        *comparison_table(rows3),
        '',
        f'{_worst(rows3)}.',
        '',
        "## Call 4 (out of sample but for LightConv's Triton operators, whose costs come from its rows: d0ef7d0, the "
        'next day, another machine; every family)',
        '',
        "This package's operators that call 1 lacked take their costs from these rows, as call 1's classes do (a "
        'class in fewer than 4 rows: the pooled ratio, no latency), so the `engine=triton` rows are in sample for '
        'them:',
        '',
        '| class | rows | roofline ms | measured ms | efficiency |',
        '| --- | --- | --- | --- | --- |',
        *[
            f'| {c} | {e["rows"]} | {e["roofline"] * 1e3:.2f} | {e["measured"] * 1e3:.2f} | {e["efficiency"]:.3f} |'
            for c, e in sorted(lacked.items())
        ],
        '',
        *comparison_table(rows5),
        '',
        f'{_worst(rows5)}.',
        '',
        f'## The H200 table of the day before (out of sample: `{H200_TABLE.relative_to(ROOT).as_posix()}`, commit '
        '3f6fcf6, another machine)',
        '',
        *comparison_table(rows4),
        '',
        f'{_worst(rows4)}.',
        '',
        f'## The H100 table (out of sample: `{H100_TABLE.relative_to(ROOT).as_posix()}`, commit {H100_CODE}, another '
        'GPU)',
        '',
        'The one run on an H100 (80 GB HBM3, `docs/gpu/h100_models_eager.md`; median of 10 interleaved rounds), modeled '
        "with the H100's bandwidth (3.35 TB/s) and rates and the efficiencies and host times measured on the H200s, each "
        f'row counted on the package of {H100_CODE}. What that code ran: the torch.fft engine for MRConv (the '
        'branched training without the folded BatchNorm), DynamicConv as one float32 multiply-add per tap, LightConv '
        "as its grouped convolution, and TaLK's first Triton kernels (a scan per table, then one program per batch "
        "item, head and block of positions looping over the head's channels; no plane kernels, no channels-last "
        'kernels). No profile timed those TaLK kernels: the model books them at the efficiency measured for the later '
        "kernels (`'<operator>:tables'`), the blind spot of a Triton operator's inside, so the TaLK rows' errors "
        'measure how much slower the first kernels were, not the counting.',
        '',
        *comparison_table(rows_h100),
        '',
        f'{_worst(rows_h100)}; without the four TaLK rows '
        f'{_worst([r for r in rows_h100 if not r["model"].startswith("talk")])}.',
        '',
    ]
    for call, (commit, what) in LATER_CALLS.items():
        lines += [
            f'## Call {call[4:]} (out of sample: {commit}, {what}; '
            f'`{CALL_DIRS[call].relative_to(ROOT).as_posix()}`, another machine)',
            '',
            *comparison_table(later[call]),
            '',
            f'{_worst(later[call])}.',
            '',
        ]
    lines += [
        *LIMITS.splitlines(),
    ]
    out.write_text('\n'.join(lines) + '\n')
    print('\n'.join(lines))


MRCONV_ROWS = [  # (label, spec, mode, batch, model kwargs): issue 40's targets
    ('deployed eval, batch 128', 'mrconvnext_t:reparam', 'eval', 128, {}),
    ('deployed eval, batch 1', 'mrconvnext_t:reparam', 'eval', 1, {}),
    ("training step, combine='bn'", 'mrconvnext_t', 'train', 128, {}),
    ("training step, combine='scale'", 'mrconvnext_t', 'train', 128, {'combine': 'scale'}),
]
# issue 40's (target, floor) per row as time ratios to convnext_tiny (a throughput ratio r is a time ratio 1 / r), and
# of the training steps' peak memory
MRCONV_TARGETS = {
    'deployed eval, batch 128': (1.00, 1 / 0.85),
    'deployed eval, batch 1': (1.00, 1 / 0.80),
    "training step, combine='bn'": (1.25, 1.5),
    "training step, combine='scale'": (1.10, 1.2),
    'peak memory': (1.10, 1.25),
}
# issue 44's (target, floor) for the other families' T models, as time (and memory) ratios to convnext_tiny (an eval
# throughput ratio r is a time ratio 1 / r)
OTHER_FAMILIES_T = ['talkconvnext_t', 'talkconvnext2d_t', 'lightconvnext_t', 'dynconvnext_t']
FAMILY_TARGETS = {
    'eval, batch 128': (1 / 0.95, 1 / 0.85),
    'training step': (1.11, 1.25),
    'training peak memory': (1.10, 1.25),
}
# a row whose modeled time exceeds its device time by more than this share is bound by the host
HOST_BOUND_SHARE = 0.25


def device_total(step: StepCost, gpu: str = 'h100') -> float:
    """Seconds the device is busy in a counted run: the sum of its calls' device times, no host: what a change to
    the kernels is read by, where the modeled time also moves with the Python."""
    return sum(device_time(c, gpu) for c in step.calls)


def verdict(ratio: float, target: float, floor: float) -> str:
    """``'target met'``, ``'floor met'`` or ``'missed'`` for a time or memory ``ratio`` (lower is better)."""
    return 'target met' if ratio <= target else 'floor met' if ratio <= floor else 'missed'


def ratio_text(ratio: float, target: float, floor: float) -> str:
    """``ratio`` to two decimals, or three where two would read as the target or floor it misses."""
    text = f'{ratio:.2f}'
    missed = [bound for bound in (target, floor) if ratio > bound and text == f'{bound:.2f}']
    return f'{ratio:.3f}' if missed else text


def device_by_op(step: StepCost, gpu: str = 'h100') -> dict[str, float]:
    """Device seconds per op name (no host), summed over the calls."""
    out: dict[str, float] = defaultdict(float)
    for c in step.calls:
        out[c.name] += device_time(c, gpu)
    return out


def in_the_way(step: StepCost, base: StepCost, gpu: str = 'h100', top: int = 3) -> str:
    """What the model says costs ``step`` most over ``base`` (convnext_tiny's same run): for a run bound by the host
    (modeled time over device time by more than :data:`HOST_BOUND_SHARE`), its op calls and launches against
    ``base``'s; else the ``top`` ops by device time over ``base``'s."""
    t, dev = model_time(step, gpu), device_total(step, gpu)
    if t - dev > HOST_BOUND_SHARE * t:
        calls = sum(c.c_calls for c in step.calls)
        return (f'host-bound ({dev * 1e3:.1f} of {t * 1e3:.1f} ms on the device): {calls} op calls and '
                f'{step.launches} launches, convnext_tiny {sum(c.c_calls for c in base.calls)} and {base.launches}')  # fmt: skip
    ours, theirs = device_by_op(step, gpu), device_by_op(base, gpu)
    excess = sorted(((ours[n] - theirs.get(n, 0.0), n) for n in ours), reverse=True)[:top]
    return ', '.join(f'`{name}` +{seconds * 1e3:.1f} ms' for seconds, name in excess if seconds > 0)


def mrconv_table(gpu: str, base: dict, before: Path | None) -> list[str]:
    """MRConvNeXt-T's rows of issue 40 (time ratios to convnext_tiny, peak training memory), counted on this
    checkout and, with ``before``, on that checkout of an earlier commit."""
    codes = [('this checkout', None)]
    if before:
        codes.append((f'{_head(before) or before} (`--before`)', before))
    lines = [
        '| row | code | ms | time ratio | device ms | device ratio | peak MiB | memory ratio | launches | GB |',
        '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
    ]
    verdicts = [
        '| target row | target (floor) | modeled ratio | verdict | what costs most over convnext_tiny (modeled) |',
        '| --- | --- | --- | --- | --- |',
    ]
    for label, spec, mode, batch, kwargs in MRCONV_ROWS:
        for name, code in codes:
            step = count_in_process(spec, mode, batch, 224, 'auto', kwargs, code=code)
            t, dev = model_time(step, gpu), device_total(step, gpu)
            key = 'eval1' if batch == 1 else 'eval128' if mode == 'eval' else 'train'
            ref, ref_dev = base[key], base[f'{key}_device']
            peak = (
                f'{step.peak_bytes / 2**20:.0f} | {step.peak_bytes / base["peak"]:.2f}' if mode == 'train' else '- | -'
            )
            lines.append(f'| {label} | {name} | {t * 1e3:.1f} | {t / ref:.2f} | {dev * 1e3:.1f} | {dev / ref_dev:.2f} | '
                         f'{peak} | {step.launches} | {step.bytes / 1e9:.1f} |')  # fmt: skip
            if code is not None:
                continue  # the verdicts are this checkout's
            target, floor = MRCONV_TARGETS[label]
            way = in_the_way(step, base['steps'][key], gpu)
            verdicts.append(f'| {label} | {target:.2f} ({floor:.2f}) | {ratio_text(t / ref, target, floor)} | '
                            f'{verdict(t / ref, target, floor)} | {way} |')  # fmt: skip
            if mode == 'train':
                memory = step.peak_bytes / base['peak']
                target, floor = MRCONV_TARGETS['peak memory']
                verdicts.append(f'| {label}, peak memory | {target:.2f} ({floor:.2f}) | '
                                f'{ratio_text(memory, target, floor)} | {verdict(memory, target, floor)} | |')  # fmt: skip
    intro = ["Issue 40's targets as time (and memory) ratios to convnext_tiny, lower is better, this checkout:", '']
    return lines + [''] + intro + verdicts


def families_table(gpu: str, base: dict, counted: dict) -> list[str]:
    """Issue 44's rows for TaLK, TaLK 2-D, LightConv and DynamicConv (``OTHER_FAMILIES_T``) from their counted eval
    and training runs at batch 128 (``counted[spec, mode]``), against convnext_tiny's (``base``, as
    :func:`predicted_table` builds it): ratio, verdict and what costs most."""
    lines = [
        '| family | target row | target (floor) | modeled ratio | verdict | what costs most over convnext_tiny (modeled) |',
        '| --- | --- | --- | --- | --- | --- |',
    ]
    for spec in OTHER_FAMILIES_T:
        ev, tr = counted[spec, 'eval'], counted[spec, 'train']
        rows = [
            ('eval, batch 128', model_time(ev, gpu) / base['eval128'], in_the_way(ev, base['steps']['eval128'], gpu)),
            ('training step', model_time(tr, gpu) / base['train'], in_the_way(tr, base['steps']['train'], gpu)),
            ('training peak memory', tr.peak_bytes / base['peak'], ''),
        ]
        for label, ratio, way in rows:
            target, floor = FAMILY_TARGETS[label]
            lines.append(f'| {spec} | {label} | {target:.2f} ({floor:.2f}) | {ratio_text(ratio, target, floor)} | '
                         f'{verdict(ratio, target, floor)} | {way} |')  # fmt: skip
    return lines


def predicted_table(out: Path, gpu: str, before: Path | None = None) -> None:
    """Every family's T model against convnext_tiny, counted on this checkout: eval at batch 128 and 1, the training
    step at 128 and its peak memory; then MRConvNeXt-T's rows of issue 40, also on ``before`` if given, and the other
    families' verdicts on issue 44's targets."""
    command = f'python scripts/gpu_cost.py --table {out.as_posix()} --gpu {gpu}'
    header = _header(command + (f' --before {_checkout_name(before)}' if before else ''))  # the code counted
    big = count_all(FAMILIES_T, 128, 224)
    one = count_all(FAMILIES_T, 1, 224, modes=('eval',))
    steps = {'eval128': big['convnext_tiny', 'eval'], 'eval1': one['convnext_tiny', 'eval'],
             'train': big['convnext_tiny', 'train']}  # fmt: skip
    base = {key: model_time(step, gpu) for key, step in steps.items()}
    base |= {f'{key}_device': device_total(step, gpu) for key, step in steps.items()}
    base['peak'] = big['convnext_tiny', 'train'].peak_bytes
    base['steps'] = steps
    lines = ["# Predicted GPU cost of every family's T model (the cost model, no GPU)", '']
    lines += header
    lines += [
        f'Modeled on the {gpu.upper()} (eager, bf16 autocast, channels-last, 224 px; the constants measured and fitted '
        'in `cost-model-calibration.md`, on an H200). Ratios: throughput ratio for eval (higher is better), time ratio '
        'for the training step and memory ratio (lower is better), all against convnext_tiny.',
        '',
        '| model | eval b128 ms | eval ratio | eval b1 ms | b1 ratio | train step ms | step ratio | '
        'train device ms | device ratio | train peak MiB | memory ratio | launches (train) | GB moved (train) |',
        '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
    ]
    for spec in FAMILIES_T:
        e128, e1 = model_time(big[spec, 'eval'], gpu), model_time(one[spec, 'eval'], gpu)
        train = big.get((spec, 'train'))
        t = model_time(train, gpu) if train else None
        cells = [
            spec, f'{e128 * 1e3:.1f}', f'{base["eval128"] / e128:.2f}', f'{e1 * 1e3:.2f}', f'{base["eval1"] / e1:.2f}',
            _fmt(t * 1e3 if t else None, '.1f'), _fmt(t / base['train'] if t else None),
            _fmt(device_total(train, gpu) * 1e3 if train else None, '.1f'),
            _fmt(device_total(train, gpu) / base['train_device'] if train else None),
            _fmt(train.peak_bytes / 2**20 if train else None, '.0f'),
            _fmt(train.peak_bytes / base['peak'] if train else None), _fmt(train.launches if train else None, 'd'),
            _fmt(train.bytes / 1e9 if train else None, '.0f'),
        ]  # fmt: skip
        lines.append('| ' + ' | '.join(cells) + ' |')
    lines += ['', 'Where the time goes: `python scripts/gpu_cost.py --model NAME [--train]` lists the ops.', '']
    lines += ['## MRConvNeXt-T against its targets (time ratios: lower is better)', '']
    lines += mrconv_table(gpu, base, before) + ['']
    lines += ['## The other families against their targets (time and memory ratios: lower is better)', '']
    lines += [
        "Issue 44's targets as time (and memory) ratios to convnext_tiny, this checkout (the eval throughput target "
        '0.95, floor 0.85, as time ratios 1.05 and 1.18):',
        '',
    ]
    lines += families_table(gpu, base, big) + ['']
    lines += LIMITS.splitlines()
    out.write_text('\n'.join(lines) + '\n')
    print('\n'.join(lines))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--model', default='mrconvnext_t', help='a timm name; NAME:reparam for the deployed model')
    p.add_argument('--train', action='store_true', help='a whole training step (default: one eval forward)')
    p.add_argument('--batch', type=int, default=128)
    p.add_argument('--img-size', type=int, default=224)
    p.add_argument('--gpu', choices=sorted(GPUS), default='h100')
    p.add_argument('--top', type=int, default=25, help='ops listed, by modeled time')
    p.add_argument('--code', default=None, help='count the mrconvnext package of this checkout (default: this one)')
    p.add_argument('--table', default=None, metavar='MD', help="write the predicted table for this checkout's models")
    p.add_argument('--before', default=None, metavar='DIR', help="with --table: MRConv's rows also on this checkout")
    p.add_argument(
        '--calibrate', default=None, metavar='MD', help='measure and fit the constants on the H200 profiles; write MD'
    )
    p.add_argument('--json', action='store_true', help='print the counted calls as JSON')
    p.add_argument('--method', default='auto', help="every MRConv mixer's method (scripts/gpu_profile.py's set_method)")
    p.add_argument('--kwargs', default='{}', help='model kwargs as JSON, e.g. \'{"combine": "scale"}\'')
    args = p.parse_args(argv)
    if args.code:
        sys.path.insert(0, str(Path(args.code).resolve()))
    if args.calibrate:
        calibrate(Path(args.calibrate))
        return
    if args.table:
        predicted_table(Path(args.table), args.gpu, Path(args.before) if args.before else None)
        return
    step = count_step(args.model, args.train, args.batch, args.img_size, args.method, json.loads(args.kwargs))
    if args.json:
        print(step.to_json())
        return
    print('\n'.join(report(step, args.gpu, args.top)))


if __name__ == '__main__':
    main()
