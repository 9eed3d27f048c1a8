"""A GPU cost model that needs no GPU: a model's eval forward or whole training step on fake CUDA tensors (bf16
autocast, channels-last), every dispatched op counted, and a modeled time per op.

    python scripts/gpu_cost.py --model mrconvnext_t [--train] [--batch 128] [--img-size 224] [--gpu h100] [--top 25]
    python scripts/gpu_cost.py --table docs/gpu/cost-model.md      # every family's T model against convnext_tiny
    python scripts/gpu_cost.py --calibrate docs/gpu/cost-model-calibration.md --code CHECKOUT_OF_e065b57  # constants

Counting (``OpCounter``; nothing is computed, the tensors are ``FakeTensorMode``'s):
- bytes: each op reads the span of every tensor argument and writes the span of every tensor result (a span counts
  each addressed element once: an expanded, stride-0 dimension counts once). Views, metadata and allocations move
  nothing. This is unfused eager: each op goes through memory, nothing stays in L2.
- FLOPs: ``torch.utils.flop_counter``'s formulas (matmuls, convolutions, this package's registered operators);
  other ops count none (they are memory-bound).
- launches: one per op that moves bytes.
- this package's operators: a Triton operator (``torch.library.triton_op``) counts as one launch that reads its
  inputs and writes its outputs (its internal traffic stays unseen); any other operator is entered, and the ATen ops
  its CUDA implementation runs are counted instead.
- the training step's backward runs by walking the autograd graph in Python (each node called with its gradients,
  in dependency order; processed nodes are dropped, freeing what they saved). The autograd engine itself cannot
  run on fake CUDA tensors without a GPU (it asks the CUDA driver for a primary context).
- peak memory: the bytes of the storages alive at once (parameters, input, activations, gradients), counted as the
  fake tensors are created and freed.

Time: each op's device time is its roofline time, ``max(bytes / bandwidth, FLOPs / rate of its unit)``, over its
class's efficiency, plus its class's latency (:func:`device_time`). Classes (``OP_CLASSES``): matmuls, convolutions,
copies within a layout and copies between layouts (``transpose``), gathers, scatters, norms, FFTs, each Triton
operator of this package, the rest. Units: tensor cores for half-precision matmuls and dense convolutions; for
grouped convolutions the rate measured for cuDNN's depthwise kernels; CUDA cores otherwise. The host issues one op
every ``issue`` seconds and the device runs them in order, each once it is issued and the one before it is done
(:func:`timeline`): small ops behind a large one cost nothing extra, a run of small ops costs their issue time. Each
class's efficiency and latency are measured from per-op GPU profiles, ``issue`` is fitted (``--calibrate``); they
live in ``docs/gpu/cost-model-constants.json``.

What it cannot see (docs/gpu/cost-model.md): fusion under ``torch.compile``, L2 reuse, a Triton kernel's internal
traffic and arithmetic, differences within a class (a small-tile GEMM and a large one share the matmul class's
numbers), host time that differs by op within the two issue times, and the extra kernels some ops launch.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import heapq
import json
import math
import platform
import statistics
import subprocess
import sys
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
    'h100': dict(bandwidth=3.35e12, tensor=790e12, simt=60e12, fp64=60e12, grouped=GROUPED_CONV_FLOPS),
    'h200': dict(bandwidth=4.8e12, tensor=790e12, simt=60e12, fp64=60e12, grouped=GROUPED_CONV_FLOPS),
}
UNITS = ('simt', 'tensor', 'fp64', 'grouped')
TRUST = 0.20  # a predicted ratio within 20 % of the measured one is trusted (issue 39)

# Op classes: what each class's kernels achieve of the roofline differs by up to 20x (gathers, scatters, small-tile
# GEMMs, LayerNorm over few channels), so each class has its own efficiency and latency, measured from the H200
# profiles of every family's T model (docs/gpu/h200_2026-11-26b/call1; `--calibrate`, :func:`class_costs`: least
# squares per class over the profiled rows). A Triton operator of this package is a class of its own.
OP_CLASSES = {
    'matmul': {'aten::mm', 'aten::addmm', 'aten::bmm', 'aten::baddbmm', 'aten::addbmm', 'aten::_scaled_mm'},
    'conv': {'aten::convolution', 'aten::_convolution', 'aten::convolution_backward', 'aten::cudnn_convolution'},
    'copy': {'aten::copy_', 'aten::clone', 'aten::_to_copy', 'aten::contiguous', 'aten::cat', 'aten::constant_pad_nd'},
    'gather': {'aten::index', 'aten::gather', 'aten::index_select'},
    'scatter': {'aten::index_add_', 'aten::index_put_', 'aten::_index_put_impl_', 'aten::scatter_add_'},
    'norm': {'aten::native_layer_norm', 'aten::native_layer_norm_backward', 'aten::native_batch_norm'},
    'fft': {'aten::_fft_r2c', 'aten::_fft_c2r', 'aten::_fft_c2c'},
}
OP_CLASSES['conv'] |= {'aten::_conv_depthwise2d', 'aten::cudnn_convolution_backward'}
OP_CLASSES['norm'] |= {'aten::native_batch_norm_backward', 'aten::cudnn_batch_norm', 'aten::cudnn_batch_norm_backward'}
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


PROFILE_CLASS = {'transpose': 'copy'}  # a counted class -> the class its profiled time is booked under


# Per class: (efficiency, latency): a call takes its roofline time over the efficiency plus the latency (launch,
# ramp-up, tail). Measured by --calibrate (docs/gpu/cost-model-constants.json, read below); 'other' also serves the
# classes the profiles lacked.
CLASS_COST: dict[str, tuple[float, float]] = {'other': (0.5, 1.5e-6)}
ISSUE_S = 7e-6  # host seconds per op a model's Python forward launches: fitted by --calibrate
FAST_ISSUE_S = 7e-6  # the same for the backward and inside this package's operators (``Call.fast``): fitted too
LATENCY_S = 1.5e-6  # the latency that goes with one efficiency for every class (``efficiency=<float>``)
FAMILIES_T = ['convnext_tiny', 'mrconvnext_t:reparam', 'mrconvnext_t', 'talkconvnext_t', 'talkconvnext2d_t']
FAMILIES_T += ['lightconvnext_t', 'dynconvnext_t']
_FREE = {'aten::detach', 'aten::_unsafe_view', 'prim::device', 'aten::lift_fresh', 'aten::alias', 'aten::empty'}
_FREE |= {'aten::empty_strided', 'aten::empty_like', 'aten::new_empty', 'aten::new_empty_strided', 'aten::set_'}
_TENSOR_UNIT = {'aten::mm', 'aten::addmm', 'aten::bmm', 'aten::baddbmm', 'aten::_scaled_mm', 'aten::addbmm'}
_CONV = {'aten::convolution', 'aten::convolution_backward', 'aten::_convolution'}
_WRITE_ONLY = {'aten::copy_', 'aten::fill_', 'aten::zero_', 'aten::zeros_like', 'aten::ones_like', 'aten::full_like'}
_WRITE_ONLY |= {'aten::empty_like', 'aten::rand_like', 'aten::randn_like', 'aten::normal_', 'aten::uniform_'}


@dataclass
class Call:
    """One counted op call: its name, bytes read and written, FLOPs, the unit that runs it, its class where the
    name does not say it (``'transpose'``: a copy between memory layouts), and whether the host issues it from
    compiled code or a tight loop (``fast``: the autograd engine's backward, or inside one of this package's
    operators) rather than from a model's Python forward."""

    name: str
    read: int
    written: int
    flops: int
    unit: str
    cls: str = ''
    fast: bool = False


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
    """``'transpose'`` for a copy whose source and destination are laid out in different orders, else ``''``."""
    if name == 'aten::copy_':
        dst, src = args[0], args[1]
    elif name in ('aten::clone', 'aten::_to_copy', 'aten::contiguous') and outs:
        dst, src = outs[0], args[0]
    else:
        return ''
    if not isinstance(src, torch.Tensor) or src.dim() != dst.dim() or 0 in src.stride():
        return ''
    return 'transpose' if _dim_order(src) != _dim_order(dst) else ''


def _is_triton_op(qualname: str) -> bool:
    from torch._library import triton

    return qualname in triton.triton_ops_to_kernels


def _cuda_impl(qualname: str):
    """The Python CUDA implementation of a ``torch.library.custom_op`` (None for others)."""
    from torch._library.custom_ops import OPDEFS

    opdef = OPDEFS.get(qualname)
    if opdef is None:
        return None
    return opdef._backend_fns.get('cuda') or opdef._init_fn


class OpCounter(TorchDispatchMode):
    """Counts every op dispatched under it (see the module docstring) and the live bytes of the storages it saw."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Call] = []
        self.live = 0
        self.peak = 0
        self.fast = 0  # > 0 while the backward walk or an operator's implementation runs
        self._storages: dict[int, tuple] = {}  # storage key -> (weak reference, bytes)

    def track(self, t: torch.Tensor) -> None:
        """Count ``t``'s storage as alive until it is freed (a weak reference to the storage itself: a tensor's Python
        object can die while autograd still holds the tensor)."""
        storage = t.untyped_storage()
        key = storage._cdata
        if key not in self._storages:
            self._storages[key] = (StorageWeakRef(storage), storage.nbytes())
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)

    def collect(self) -> None:
        """Forget the storages freed since the last call."""
        dead = [key for key, (ref, _) in self._storages.items() if ref.expired()]
        for key in dead:
            self.live -= self._storages.pop(key)[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        namespace = name.split('::')[0]
        if namespace not in ('aten', 'prim') and not _is_triton_op(name):
            impl = _cuda_impl(name)
            if impl is not None:  # count what its CUDA implementation runs
                with self:
                    self.fast += 1
                    try:
                        out = impl(*args, **kwargs)
                    finally:
                        self.fast -= 1
                return out
        if namespace == 'aten' and func.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd):
            with self:  # what the op is made of (reached here below autograd, e.g. inside an operator)
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        self.collect()
        out = func(*args, **kwargs)
        outs = _tensors(out)
        for t in outs:
            self.track(t)
        if func.is_view or name in _FREE:
            return out
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
        unit = 'simt'
        if name in _CONV and groups > 1:
            unit = 'grouped'
        elif half and (name in _TENSOR_UNIT or name in _CONV):
            unit = 'tensor'
        elif any(t.dtype == torch.float64 for t in outs):
            unit = 'fp64'
        # a destination that is only written (copy_, fill_, out=) or a template whose data is unused (zeros_like)
        # is not read
        sources = (args[1:], {k: v for k, v in kwargs.items() if k != 'out'}) if name in _WRITE_ONLY else (args, kwargs)
        read = sum(span_bytes(t) for t in _tensors(sources) if 'out' not in kwargs or t is not kwargs['out'])
        cls = _copy_class(name, args, outs)
        self.calls.append(Call(name, read, sum(span_bytes(t) for t in outs), flops, unit, cls, self.fast > 0))
        return out


@torch.no_grad()  # as the engine runs a backward without create_graph: the gradients record no graph
def walk_backward(root, grad: torch.Tensor) -> None:
    """Backward from ``root`` (a loss's ``grad_fn``) by calling each autograd node in dependency order (among the
    ready ones, the latest created first); leaf
    gradients go to ``.grad``. The caller drops its own references to the graph first, so that each node (and what
    it saved) is freed once it has run, as the engine frees it."""
    deps: dict[int, int] = defaultdict(int)
    stack, seen = [root], {id(root)}
    while stack:
        node = stack.pop()
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
            outs = node.apply(*[g if g is not None else torch.zeros(m.shape, dtype=m.dtype, device=m.device)
                                for g, m in zip(grads, metas)])  # fmt: skip
            outs = outs if isinstance(outs, tuple) else (outs,)
            edges = [e for e in edges if e[0] is not None]
            outs = [g for g, need in zip(outs, node.needs_input_grad) if need]
        else:
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
        calls = [[c.name, c.read, c.written, c.flops, c.unit, c.cls, c.fast] for c in self.calls]
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
                fast=np.array([c.fast for c in self.calls], dtype=bool),
            )
            names, index = np.unique(np.array([call_class(c) for c in self.calls] or [''], dtype=object),
                                     return_inverse=True)  # fmt: skip
            self._arrays.update(classes=list(names), class_index=index[: len(self.calls)])
        return self._arrays

    @property
    def bytes(self) -> int:
        return sum(c.read + c.written for c in self.calls)

    @property
    def launches(self) -> int:
        return len(self.calls)

    @property
    def flops(self) -> int:
        return sum(c.flops for c in self.calls)


def fake_cuda(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` (built on the meta device) with fake CUDA parameters and buffers, 4-D ones channels-last (as
    ``model.to('cuda', memory_format=torch.channels_last)`` leaves them); call under ``FakeTensorMode``."""

    def fake(t: torch.Tensor) -> torch.Tensor:
        out = torch.empty(t.shape, dtype=t.dtype, device='cuda')
        return out.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else out

    for module in model.modules():
        for name, p in module._parameters.items():
            if p is not None:
                module._parameters[name] = torch.nn.Parameter(fake(p), requires_grad=p.requires_grad)
        for name, b in module._buffers.items():
            if b is not None:
                module._buffers[name] = fake(b)
    return model


def count_step(
    spec: str, train: bool, batch: int = 128, img_size: int = 224, method: str = 'auto', kwargs: dict | None = None
) -> StepCost:
    """Count ``spec`` (a timm name, ``NAME:reparam`` for the deployed model) on fake CUDA tensors: one eval forward,
    or (``train``) forward, cross-entropy, backward and an SGD step. ``method``: every MRConv mixer's, as
    ``scripts/gpu_profile.py`` sets it (``'matmul'``: the matmul methods by length, what 'auto' ran on CUDA before
    torch.fft took the long maps); ``kwargs``: the model's (``combine='scale'``)."""
    import timm
    from gpu_profile import set_method

    import mrconvnext  # noqa: F401 - registers the models

    name, _, variant = spec.partition(':')
    extra = {'deploy': True} if variant == 'reparam' else {}
    counter = OpCounter()
    with torch.device('meta'):  # shapes only: a fake-tensor build cannot run timm's data-dependent init
        model = timm.create_model(name, pretrained=False, **extra, **(kwargs or {}))
    set_method(model, method)
    with FakeTensorMode():
        model = fake_cuda(model).train(train)
        for t in [*model.parameters(), *model.buffers()]:
            counter.track(t)
        x = torch.randn(batch, 3, img_size, img_size, device='cuda').contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (batch,), device='cuda')
        counter.track(x)
        with counter:
            with fake_cuda_autocast(), torch.set_grad_enabled(train):
                out = model(x)
                loss = torch.nn.functional.cross_entropy(out, y) if train else None
            del out
            if train:
                root, ones = loss.grad_fn, torch.ones_like(loss)
                del loss
                counter.fast += 1
                walk_backward(root, ones)
                counter.fast -= 1
                del root
                torch.optim.SGD(model.parameters(), lr=1e-6).step()
    return StepCost(spec, 'train' if train else 'eval', batch, counter.calls, counter.peak, method, kwargs or {})


Efficiency = float | dict[str, tuple[float, float]] | None


def class_cost(cls: str, efficiency: Efficiency = None, latency: float | None = None) -> tuple[float, float]:
    """``(efficiency, latency)`` of an op class: one efficiency for every class (with ``latency``, default
    ``LATENCY_S``), or a class's entry of a table (``None``: ``CLASS_COST``; ``'other'``'s for a class it lacks),
    its latency replaced by ``latency`` if given."""
    if isinstance(efficiency, int | float):
        return float(efficiency), LATENCY_S if latency is None else latency
    table = CLASS_COST if efficiency is None else efficiency
    eff, lat = table.get(cls, table['other'])
    return eff, lat if latency is None else latency


def roofline(call: Call, gpu: str = 'h100') -> float:
    """Seconds of one op call at the roofline: the slower of its bytes at the bandwidth and its FLOPs at its unit's
    rate."""
    spec = GPUS[gpu]
    return max((call.read + call.written) / spec['bandwidth'], call.flops / spec[call.unit])


def device_time(call: Call, gpu: str = 'h100', efficiency: Efficiency = None, latency: float | None = None) -> float:
    """Modeled device seconds of one op call: its roofline time over its class's efficiency, plus its latency."""
    eff, lat = class_cost(call_class(call), efficiency, latency)
    return roofline(call, gpu) / eff + lat


Issue = float | tuple[float, float] | None


def issue_times(issue: Issue = None) -> tuple[float, float]:
    """The host's seconds per op ``(from a model's forward, fast)``: ``ISSUE_S`` and ``FAST_ISSUE_S``, one number
    for both, or the pair."""
    if issue is None:
        return ISSUE_S, FAST_ISSUE_S
    return (float(issue), float(issue)) if isinstance(issue, int | float) else (float(issue[0]), float(issue[1]))


def timeline(
    step: StepCost,
    gpu: str = 'h100',
    efficiency: Efficiency = None,
    issue: Issue = None,
    latency: float | None = None,
) -> list[float]:
    """Seconds each call adds to the run: the host issues one op every ``issue`` seconds and the device runs them in
    order, each as soon as it is issued and the one before it is done; a call adds its device time plus any wait for
    the host (so small ops behind a large one cost nothing extra, and a run of small ops costs their issue time)."""
    model_issue, fast_issue = issue_times(issue)
    host = device = 0.0
    added = []
    for call in step.calls:
        host += fast_issue if call.fast else model_issue
        start = max(device, host)
        end = start + device_time(call, gpu, efficiency, latency)
        added.append(end - device)
        device = end
    return added


def model_time(
    step: StepCost,
    gpu: str = 'h100',
    efficiency: Efficiency = None,
    issue: Issue = None,
    latency: float | None = None,
) -> float:
    """Modeled seconds of a counted run: the end of :func:`timeline`, in closed form. With device times ``d_i`` and
    their prefix sums ``S_k``, the last call ends at ``S_n + max(0, max_j (j * issue - S_(j-1)))``."""
    model_issue, fast_issue = issue_times(issue)
    spec = GPUS[gpu]
    arrays = step.arrays()
    memory = arrays['bytes'] / spec['bandwidth']
    compute = arrays['flops'] / np.array([spec[u] for u in UNITS])[arrays['unit']]
    costs = np.array([class_cost(c, efficiency, latency) for c in arrays['classes']], dtype=np.float64)
    eff, lat = costs[arrays['class_index'], 0], costs[arrays['class_index'], 1]
    prefix = np.concatenate([[0.0], np.cumsum(np.maximum(memory, compute) / eff + lat)])
    wait = np.cumsum(np.where(arrays['fast'], fast_issue, model_issue)) - prefix[:-1]
    return float(prefix[-1] + max(0.0, wait.max(initial=0.0)))


def by_op(step: StepCost, gpu: str = 'h100') -> dict[tuple[str, str], dict]:
    """Per (op, unit): launches, GB, GFLOP and modeled ms, summed over the calls."""
    ops: dict[tuple[str, str], dict] = defaultdict(lambda: dict(launches=0, gb=0.0, gflop=0.0, ms=0.0))
    for c, seconds in zip(step.calls, timeline(step, gpu)):
        row = ops[c.name, c.unit]
        row['launches'] += 1
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


def count_all(specs: list[str], batch: int, img_size: int, code: Path | None = None) -> dict[tuple[str, str], StepCost]:
    """Count every model's eval and training step, each in its own process (``code``: the checkout whose package is
    counted, for the calibration at an older commit)."""
    out = {}
    for spec in specs:
        for mode in ('eval', 'train'):
            if mode == 'train' and spec.endswith(':reparam'):
                continue
            out[spec, mode] = count_in_process(spec, mode, batch, img_size, code=code)
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


PROFILES = ROOT / 'docs' / 'gpu' / 'h200_2026-11-26b'  # scripts/gpu_profile.py on an H200, two calls
CONSTANTS = ROOT / 'docs' / 'gpu' / 'cost-model-constants.json'  # written by --calibrate, read at import
H200_TABLE = ROOT / 'docs' / 'gpu' / 'h200_2026-11-26' / 'call1' / 'eager' / 'gpu_nvidia_h200.csv'  # 3f6fcf6


def _load_constants() -> None:
    global ISSUE_S, FAST_ISSUE_S
    if CONSTANTS.exists():
        data = json.loads(CONSTANTS.read_text())
        CLASS_COST.update({cls: tuple(v) for cls, v in data['class_cost'].items()})
        ISSUE_S, FAST_ISSUE_S = data['issue_s']


_load_constants()


def profile_rows(call: str) -> list[dict]:
    """The eager rows of one call of ``scripts/gpu_profile.py`` under ``PROFILES``."""
    lines = (PROFILES / call / 'rows.jsonl').read_text().splitlines()
    return [r for r in map(json.loads, lines) if r['mode'] in ('eval', 'train')]


def counted_method(call: str, row: dict) -> str:
    """The method to count a profiled row of call 1 or 2 with, so that the counting runs the methods the call ran:
    call 1 (and the day-before table) ran 'auto' = the matmul methods for every MRConv mixer; call 2 ran torch.fft
    but the Toeplitz product for maps up to ``TOEPLITZ_MAX_LENGTH`` in batches of at least 32 (with or without a
    backward). Both ran e065b57's fold: count with ``--code`` a checkout of it (:func:`calibrate`)."""
    if call not in ('call1', 'call2'):
        raise ValueError(f"counted_method: the calls whose code is known are 'call1' and 'call2', got {call!r}")
    method = row['method']
    if 'mrconvnext' not in row['model'] or method not in ('auto', 'nofold'):
        return method
    old = 'matmul' if call == 'call1' else ('fft' if row['batch'] < 32 else 'mixed')
    return old if method == 'auto' else f'nofold+{old}'


def measured_by_class(row: dict) -> dict[str, float]:
    """Seconds of device time per op class in a profiled row (each op's self time)."""
    out: dict[str, float] = defaultdict(float)
    for name, (_, self_us, *_rest) in row['ops'].items():
        out[op_class(name)] += self_us * 1e-6
    return out


def _nnls(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares for a few columns: the best of the unconstrained fits on every subset of them."""
    k = A.shape[1]
    best = None
    for mask in range(1, 2**k):
        cols = [j for j in range(k) if mask >> j & 1]
        x = np.linalg.lstsq(A[:, cols], y, rcond=None)[0]
        if (x < 0).any():
            continue
        full = np.zeros(k)
        full[cols] = x
        residual = float(np.linalg.norm(A @ full - y))
        if best is None or residual < best[0]:
            best = (residual, full)
    return np.zeros(k) if best is None else best[1]


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
            x = _nnls(A / y[:, None], np.ones_like(y))
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


def compare_rows(pairs: list[tuple[dict, StepCost]], gpu: str, efficiency: Efficiency, issue: Issue) -> list[dict]:
    """Predicted against measured ms, ratios to convnext_tiny at the same mode and batch (of the same call), peak."""
    base = {}
    for row, step in pairs:
        if row['model'] == 'convnext_tiny':
            base[row['mode'], row['batch']] = (model_time(step, gpu, efficiency, issue), row['ms'] * 1e-3)
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
            bp, bm = base[row['mode'], row['batch']]
            r.update(predicted_ratio=pred / bp, measured_ratio=meas / bm)
            r['ratio_error'] = r['predicted_ratio'] / r['measured_ratio'] - 1
        out.append(r)
    return out


def fit(pairs: list[tuple[dict, StepCost]], gpu: str) -> tuple[dict, tuple[float, float], float]:
    """The class costs (:func:`class_costs`, measured) and the two fitted constants, the host's seconds per op from a
    model's forward and from the backward or an operator's inside, on a grid that minimizes the mean squared log
    error of the rows' times: ``(class costs, (issue, fast issue), loss)``."""
    table = {cls: (e['efficiency'], e['latency']) for cls, e in class_costs(pairs, gpu).items() if 'efficiency' in e}
    table.setdefault('other', CLASS_COST['other'])
    best = None
    for model_us in range(2, 62, 2):
        for fast_us in range(1, 31):
            issue = (model_us * 1e-6, fast_us * 1e-6)
            rows = compare_rows(pairs, gpu, table, issue)
            loss = statistics.fmean(math.log1p(r['ms_error']) ** 2 for r in rows)
            if best is None or loss < best[2]:
                best = (table, issue, loss)
    return best


def _fmt(v, spec: str = '.2f') -> str:
    return '-' if v is None else format(v, spec)


def _err(v: float | None) -> str:
    """A ratio error; bold past the +-20 % within which the model is trusted."""
    return '-' if v is None else (f'**{v:+.0%}**' if abs(v) > TRUST else f'{v:+.0%}')


def comparison_table(rows: list[dict]) -> list[str]:
    out = ['| model | kwargs | mode | method | predicted ms | measured ms | error | predicted ratio | measured ratio | '
           'ratio error | predicted peak MiB | measured peak MiB | error |']  # fmt: skip
    out += ['| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |']
    for r in rows:
        out.append(
            f'| {r["model"]} | {r.get("kwargs") or "-"} | {r["mode"]} | {r.get("method", "auto")} | '
            f'{r["predicted_ms"]:.1f} | {_fmt(r.get("measured_ms"), ".1f")} | {_fmt(r.get("ms_error"), "+.0%")} | '
            f'{_fmt(r.get("predicted_ratio"))} | {_fmt(r.get("measured_ratio"))} | {_err(r.get("ratio_error"))} | '
            f'{r["predicted_mib"]:.0f} | {_fmt(r.get("measured_mib"), ".0f")} | {_fmt(r.get("mem_error"), "+.0%")} |'
        )
    return out


def _worst(rows: list[dict]) -> str:
    errors = [abs(r['ratio_error']) for r in rows if r.get('ratio_error') is not None and r['model'] != 'convnext_tiny']
    within = sum(e <= TRUST for e in errors)
    return f'largest ratio error {max(errors):.0%}; {within} of {len(errors)} ratios within ±{TRUST:.0%}'


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
by a host that issues one op every few tens of microseconds from a model's forward and faster from the backward or
inside an operator (`scripts/gpu_cost.py`'s docstring). It does not see:
- **fusion**: `torch.compile` fuses pointwise ops into their neighbours; the model counts eager (every op through
  memory), so it says nothing of the compiled tables;
- **L2 reuse**: a tensor read again while it is still in the 50-60 MB L2 is counted twice;
- **a Triton operator's inside**: it counts one launch that reads the operator's inputs and writes its outputs, and
  the FLOPs of its registered formula; each Triton operator's efficiency is measured from one profiled row (its
  family's), so a change inside the kernel is seen only by a new profile;
- **shapes within a class**: a class has one efficiency and one latency. The matmul class mixes the MLPs' large
  GEMMs (near 0.7 of the tensor-core rate) with the fold's 32x32-tile batched GEMMs (a quarter of that); the
  grouped-convolution class mixes cuDNN's 7x7 depthwise kernels with LightConv's; gathers and scatters differ by
  their index pattern (`index_add_` into a small kernel from many positions serializes on atomics);
- **the host per op**: two issue times, fitted, stand for all of Python, the dispatcher and the launch; a batch of
  1 to 32 is bound by them, and there the model misses the cost of this package's operators' Python (the FFT
  operator alone took 127 µs of host time per call on the H200 host);
- **extra kernels**: one launch per op, where a convolution's backward runs two or three kernels.

Trust it only where a row's predicted ratio fell within 20 % of the measured one in `cost-model-calibration.md`
(the misses are in bold there), and read a predicted change as a direction and an order of magnitude, confirmed on
a GPU before it is believed.
"""


def _header(command: str) -> list[str]:
    commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True, cwd=ROOT)
    dirty = subprocess.run(['git', 'status', '--porcelain'], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    return [
        f'Generated {datetime.date.today()} on {platform.node() or "this machine"} (no GPU: fake CUDA tensors), '
        f'commit {commit.stdout.strip() or "?"}{" with uncommitted changes" if dirty else ""}, torch '
        f'{torch.__version__}, by `{command}`.',
        '',
    ]


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


def calibrate(out: Path, code: Path | None) -> None:
    """Measure each op class's cost and fit the host's two issue times on the H200 profiles of call 1; check them,
    untouched, on call 2 (other batch sizes and methods, another process) and on the H200 table of the day before
    (another machine); write the constants (``CONSTANTS``) and the report ``out``. ``code``: the checkout whose
    package is counted (the calls ran e065b57's; ``None``: this one)."""
    gpu = 'h200'
    command = f'python scripts/gpu_cost.py --calibrate {out.as_posix()}' + (f' --code {code}' if code else '')
    header = _header(command)  # before the files it writes
    fit_pairs = count_rows('call1', code)
    table, issue, loss = fit(fit_pairs, gpu)
    classes = class_costs(fit_pairs, gpu)
    rows1 = compare_rows(fit_pairs, gpu, table, issue)
    rows2 = compare_rows(count_rows('call2', code), gpu, table, issue)
    day_before = []
    for row in table_rows(H200_TABLE):
        method = counted_method('call1', row)  # 3f6fcf6 ran the matmul methods, as call 1 did
        day_before.append((row, count_in_process(row['model'], row['mode'], 128, 224, method, code=code)))
    rows3 = compare_rows(day_before, gpu, table, issue)
    kernel = sum(r['kernel_us'] for r, _ in fit_pairs) * 1e-6
    covered = sum(sum(measured_by_class(r).values()) for r, _ in fit_pairs)
    costs = {cls: [round(e, 4), round(lat * 1e9) / 1e9] for cls, (e, lat) in sorted(table.items())}
    source = str((PROFILES / 'call1').relative_to(ROOT))
    CONSTANTS.write_text(
        json.dumps(dict(class_cost=costs, issue_s=list(issue), gpu=gpu, source=source), indent=1) + '\n'
    )
    lines = ["# The GPU cost model's calibration", '', *header]
    lines += [
        'Data: `scripts/gpu_profile.py` on an H200 (`docs/gpu/h200_2026-11-26b/`, whose README has the versions and '
        'commands): per row (model, eval or training step, batch, MRConv method) the median of 7 timed steps and one '
        "profiled step's device time per op. Each row is counted here with the methods that call ran "
        '(`counted_method`), on the package of `--code` (a checkout of e065b57, whose fold both calls ran). The '
        'constants go to `docs/gpu/cost-model-constants.json`, which the model reads.',
        '',
        '## Op classes, measured on call 1',
        '',
        "A call takes its roofline time (bytes at 4.8 TB/s, FLOPs at its unit's rate) over its class's efficiency, "
        "plus its class's latency (launch, ramp-up, tail). Per class of the profile, over call 1's rows: its measured "
        'device time against the roofline time of the counted calls booked under it (a copy between memory layouts is '
        'a class of its own, `transpose`, booked under `copy`) and their number, by non-negative least squares of the '
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
        "Two constants are fitted, the host's time per op: from a model's Python forward **"
        f"{issue[0] * 1e6:.1f} µs**, from the autograd engine's backward or inside one of this package's operators "
        f'**{issue[1] * 1e6:.1f} µs** (grid search, least squares of the log of predicted over measured ms on call 1; '
        f'mean squared log error {loss:.4f}).',
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
        f'## The H200 table of the day before (out of sample: `{H200_TABLE.relative_to(ROOT).as_posix()}`, commit '
        '3f6fcf6, another machine)',
        '',
        *comparison_table(rows3),
        '',
        f'{_worst(rows3)}.',
        '',
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


def mrconv_table(gpu: str, base: dict, before: Path | None) -> list[str]:
    """MRConvNeXt-T's rows of issue 40 (time ratios to convnext_tiny, peak training memory), counted on this
    checkout and, with ``before``, on that checkout of an earlier commit."""
    codes = [('this checkout', None)]
    if before:
        rev = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True, cwd=before)
        codes.append((f'{rev.stdout.strip() or before} (`--before`)', before))
    lines = [
        '| row | code | ms | time ratio | peak MiB | memory ratio | launches | GB |',
        '| --- | --- | --- | --- | --- | --- | --- | --- |',
    ]
    for label, spec, mode, batch, kwargs in MRCONV_ROWS:
        for name, code in codes:
            step = count_in_process(spec, mode, batch, 224, 'auto', kwargs, code=code)
            t = model_time(step, gpu)
            ref = base['eval1' if batch == 1 else 'eval128' if mode == 'eval' else 'train']
            peak = (
                f'{step.peak_bytes / 2**20:.0f} | {step.peak_bytes / base["peak"]:.2f}' if mode == 'train' else '- | -'
            )
            lines.append(f'| {label} | {name} | {t * 1e3:.1f} | {t / ref:.2f} | {peak} | {step.launches} | '
                         f'{step.bytes / 1e9:.1f} |')  # fmt: skip
    return lines


def predicted_table(out: Path, gpu: str, before: Path | None = None) -> None:
    """Every family's T model against convnext_tiny, counted on this checkout: eval at batch 128 and 1, the training
    step at 128 and its peak memory; then MRConvNeXt-T's rows of issue 40, also on ``before`` if given."""
    command = f'python scripts/gpu_cost.py --table {out.as_posix()} --gpu {gpu}'
    header = _header(command + (f' --before {before}' if before else ''))  # the code counted
    big = count_all(FAMILIES_T, 128, 224)
    one = {k: v for k, v in count_all(FAMILIES_T, 1, 224).items() if k[1] == 'eval'}
    base = {
        'eval128': model_time(big['convnext_tiny', 'eval'], gpu),
        'eval1': model_time(one['convnext_tiny', 'eval'], gpu),
        'train': model_time(big['convnext_tiny', 'train'], gpu),
        'peak': big['convnext_tiny', 'train'].peak_bytes,
    }
    lines = ["# Predicted GPU cost of every family's T model (the cost model, no GPU)", '']
    lines += header
    lines += [
        f'Modeled on the {gpu.upper()} (eager, bf16 autocast, channels-last, 224 px; the constants measured and fitted '
        'in `cost-model-calibration.md`, on an H200). Ratios: throughput ratio for eval (higher is better), time ratio '
        'for the training step and memory ratio (lower is better), all against convnext_tiny.',
        '',
        '| model | eval b128 ms | eval ratio | eval b1 ms | b1 ratio | train step ms | step ratio | '
        'train peak MiB | memory ratio | launches (train) | GB moved (train) |',
        '| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |',
    ]
    for spec in FAMILIES_T:
        e128, e1 = model_time(big[spec, 'eval'], gpu), model_time(one[spec, 'eval'], gpu)
        train = big.get((spec, 'train'))
        t = model_time(train, gpu) if train else None
        cells = [
            spec, f'{e128 * 1e3:.1f}', f'{base["eval128"] / e128:.2f}', f'{e1 * 1e3:.2f}', f'{base["eval1"] / e1:.2f}',
            _fmt(t * 1e3 if t else None, '.1f'), _fmt(t / base['train'] if t else None),
            _fmt(train.peak_bytes / 2**20 if train else None, '.0f'),
            _fmt(train.peak_bytes / base['peak'] if train else None), _fmt(train.launches if train else None, 'd'),
            _fmt(train.bytes / 1e9 if train else None, '.0f'),
        ]  # fmt: skip
        lines.append('| ' + ' | '.join(cells) + ' |')
    lines += ['', 'Where the time goes: `python scripts/gpu_cost.py --model NAME [--train]` lists the ops.', '']
    lines += ['## MRConvNeXt-T against its targets (time ratios: lower is better)', '']
    lines += mrconv_table(gpu, base, before) + ['']
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
        calibrate(Path(args.calibrate), Path(args.code).resolve() if args.code else None)
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
