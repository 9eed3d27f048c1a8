"""A GPU cost model that needs no GPU: a model's eval forward or whole training step on fake CUDA tensors (bf16
autocast, channels-last), every dispatched op counted, and a modeled time per op.

    python scripts/gpu_cost.py --model mrconvnext_t [--train] [--batch 128] [--img-size 224] [--gpu h100] [--top 25]
    python scripts/gpu_cost.py --table docs/gpu/cost-model.md      # every family's T model against convnext_tiny
    python scripts/gpu_cost.py --calibrate                         # fit the constants on docs/gpu's H100 table

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

Time: each op's device time is ``max(bytes / (bandwidth * efficiency), FLOPs / rate of its unit) + gap``, the slower
of memory and arithmetic plus the gap between back-to-back kernels. Units: tensor cores for half-precision matmuls
and dense convolutions; for grouped convolutions the rate measured for cuDNN's depthwise kernels; CUDA cores
otherwise. The host issues one op every ``issue`` seconds and the device runs them in order, each once it is issued
and the one before it is done (:func:`timeline`): small ops behind a large one cost nothing extra, a run of small
ops costs their issue time. ``efficiency`` and ``issue`` are the two constants ``--calibrate`` fits.

What it cannot see (docs/gpu/cost-model.md): fusion under ``torch.compile``, L2 reuse, a Triton kernel's internal
traffic and arithmetic, kernels that run far under the bandwidth or the peak (gathers and scatters, small GEMM tiles,
LayerNorm over few channels), and the extra kernels some ops launch.
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

# Bandwidths: the datasheets' (SXM parts); what the kernels achieve of them is the fitted efficiency. Tensor cores:
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
GAP_S = 1.5e-6  # between back-to-back kernels on the device
TRUST = 0.20  # a predicted ratio within 20 % of the measured one is trusted (issue 39)
# fitted by --calibrate on docs/gpu/h100_models_eager.csv (f100e2a); see docs/gpu/cost-model-calibration.md
EFFICIENCY = 0.35
ISSUE_S = 7e-6
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
    """One counted op call: its name, bytes read and written, FLOPs, and the unit that runs it."""

    name: str
    read: int
    written: int
    flops: int
    unit: str


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
                    out = impl(*args, **kwargs)
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
        self.calls.append(Call(name, read, sum(span_bytes(t) for t in outs), flops, unit))
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
    _arrays: dict | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> str:
        calls = [[c.name, c.read, c.written, c.flops, c.unit] for c in self.calls]
        return json.dumps(dict(model=self.model, mode=self.mode, batch=self.batch, peak_bytes=self.peak_bytes,
                               calls=calls))  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> StepCost:
        d = json.loads(text)
        return cls(d['model'], d['mode'], d['batch'], [Call(*c) for c in d['calls']], d['peak_bytes'])

    def arrays(self) -> dict[str, np.ndarray]:
        """The calls' bytes, FLOPs and unit indices (into ``UNITS``) as arrays, for the time model."""
        if self._arrays is None or len(self._arrays['bytes']) != len(self.calls):
            self._arrays = dict(
                bytes=np.array([c.read + c.written for c in self.calls], dtype=np.float64),
                flops=np.array([c.flops for c in self.calls], dtype=np.float64),
                unit=np.array([UNITS.index(c.unit) for c in self.calls], dtype=np.int64),
            )
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


def count_step(spec: str, train: bool, batch: int = 128, img_size: int = 224) -> StepCost:
    """Count ``spec`` (a timm name, ``NAME:reparam`` for the deployed model) on fake CUDA tensors: one eval forward,
    or (``train``) forward, cross-entropy, backward and an SGD step."""
    import timm

    import mrconvnext  # noqa: F401 - registers the models

    name, _, variant = spec.partition(':')
    extra = {'deploy': True} if variant == 'reparam' else {}
    counter = OpCounter()
    with torch.device('meta'):  # shapes only: a fake-tensor build cannot run timm's data-dependent init
        model = timm.create_model(name, pretrained=False, **extra)
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
                walk_backward(root, ones)
                del root
                torch.optim.SGD(model.parameters(), lr=1e-6).step()
    return StepCost(spec, 'train' if train else 'eval', batch, counter.calls, counter.peak)


def device_time(call: Call, gpu: str = 'h100', efficiency: float = EFFICIENCY) -> float:
    """Modeled device seconds of one op call: the slower of its memory traffic and its arithmetic, plus the gap."""
    spec = GPUS[gpu]
    memory = (call.read + call.written) / (spec['bandwidth'] * efficiency)
    return max(memory, call.flops / spec[call.unit]) + GAP_S


def timeline(step: StepCost, gpu: str = 'h100', efficiency: float = EFFICIENCY, issue: float = ISSUE_S) -> list[float]:
    """Seconds each call adds to the run: the host issues one op every ``issue`` seconds and the device runs them in
    order, each as soon as it is issued and the one before it is done; a call adds its device time plus any wait for
    the host (so small ops behind a large one cost nothing extra, and a run of small ops costs their issue time)."""
    host = device = 0.0
    added = []
    for call in step.calls:
        host += issue
        start = max(device, host)
        end = start + device_time(call, gpu, efficiency)
        added.append(end - device)
        device = end
    return added


def model_time(step: StepCost, gpu: str = 'h100', efficiency: float = EFFICIENCY, issue: float = ISSUE_S) -> float:
    """Modeled seconds of a counted run: the end of :func:`timeline`, in closed form. With device times ``d_i`` and
    their prefix sums ``S_k``, the last call ends at ``S_n + max(0, max_j (j * issue - S_(j-1)))``."""
    spec = GPUS[gpu]
    arrays = step.arrays()
    memory = arrays['bytes'] / (spec['bandwidth'] * efficiency)
    compute = arrays['flops'] / np.array([spec[u] for u in UNITS])[arrays['unit']]
    prefix = np.concatenate([[0.0], np.cumsum(np.maximum(memory, compute) + GAP_S)])
    wait = np.arange(1, len(prefix)) * issue - prefix[:-1]
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


# ------------------------------------------------------------------------------------------------ calibration


def measured_rows(path: Path) -> dict[str, dict]:
    """``model -> row`` of a ``scripts/bench_gpu.py`` CSV (eager rows)."""
    with open(path, newline='') as f:
        return {r['model']: r for r in csv.DictReader(f) if r.get('mode', 'eager') == 'eager'}


def _ms(row: dict, key: str, batch: int) -> float | None:
    try:
        return 1000 * batch / float(row[key])
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def count_all(specs: list[str], batch: int, img_size: int, code: Path | None = None) -> dict[tuple[str, str], StepCost]:
    """Count every model's eval and training step, each in its own process (``code``: the checkout whose package is
    counted, for the calibration at an older commit)."""
    out = {}
    for spec in specs:
        for mode in ('eval', 'train'):
            if mode == 'train' and spec.endswith(':reparam'):
                continue
            cmd = [sys.executable, __file__, '--model', spec, '--batch', str(batch), '--img-size', str(img_size)]
            cmd += ['--json'] + (['--train'] if mode == 'train' else []) + (['--code', str(code)] if code else [])
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f'counting {spec} {mode} failed:\n{proc.stderr[-3000:]}')
            out[spec, mode] = StepCost.from_json(proc.stdout)
            print(f'counted {spec} {mode}', file=sys.stderr, flush=True)
    return out


def compare(counted: dict, measured: dict[str, dict], gpu: str, batch: int, efficiency: float, issue: float):
    """Rows of predicted against measured ms and ratios to convnext_tiny, and the ratio errors."""
    base = {mode: model_time(counted['convnext_tiny', mode], gpu, efficiency, issue) for mode in ('eval', 'train')}
    mbase = {'eval': _ms(measured['convnext_tiny'], 'infer_img_s', batch)}
    mbase['train'] = _ms(measured['convnext_tiny'], 'train_img_s', batch)
    rows, errors = [], []
    for (spec, mode), step in counted.items():
        key = 'infer_img_s' if mode == 'eval' else 'train_img_s'
        pred = model_time(step, gpu, efficiency, issue)
        meas = _ms(measured.get(spec, {}), key, batch)
        row = dict(model=spec, mode=mode, predicted_ms=pred * 1e3, measured_ms=meas, predicted_ratio=pred / base[mode])
        row['predicted_mib'] = step.peak_bytes / 2**20
        try:
            row['measured_mib'] = float(measured[spec]['infer_peak_mb' if mode == 'eval' else 'train_peak_mb'])
            row['mem_error'] = row['predicted_mib'] / row['measured_mib'] - 1
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            pass
        if meas is not None:
            row['measured_ratio'] = meas / mbase[mode]
            row['ratio_error'] = row['predicted_ratio'] / row['measured_ratio'] - 1
            row['ms_error'] = row['predicted_ms'] / meas - 1
            errors.append(row)
        rows.append(row)
    return rows, errors


def fit(counted: dict, measured: dict, gpu: str, batch: int) -> tuple[float, float, float]:
    """The (efficiency, issue) pair, on a grid, that minimizes the mean squared log error of the absolute times."""
    best = None
    for efficiency in [0.20 + 0.025 * i for i in range(33)]:
        for issue_us in [2 + 0.5 * i for i in range(40)]:
            _, errors = compare(counted, measured, gpu, batch, efficiency, issue_us * 1e-6)
            loss = statistics.fmean(math.log1p(e['ms_error']) ** 2 for e in errors)
            if best is None or loss < best[0]:
                best = (loss, efficiency, issue_us * 1e-6)
    return best[1], best[2], best[0]


def _fmt(v, spec: str = '.2f') -> str:
    return '-' if v is None else format(v, spec)


def _err(v: float | None) -> str:
    """A ratio error; bold past the +-20 % within which the model is trusted."""
    return '-' if v is None else (f'**{v:+.0%}**' if abs(v) > TRUST else f'{v:+.0%}')


def comparison_table(rows: list[dict]) -> list[str]:
    out = ['| model | mode | predicted ms | measured ms | error | predicted ratio | measured ratio | ratio error | '
           'predicted peak MiB | measured peak MiB | error |']  # fmt: skip
    out += ['| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |']
    for r in rows:
        out.append(
            f'| {r["model"]} | {r["mode"]} | {r["predicted_ms"]:.1f} | {_fmt(r.get("measured_ms"), ".1f")} | '
            f'{_fmt(r.get("ms_error"), "+.0%")} | {r["predicted_ratio"]:.2f} | {_fmt(r.get("measured_ratio"))} | '
            f'{_err(r.get("ratio_error"))} | '
            f'{r["predicted_mib"]:.0f} | {_fmt(r.get("measured_mib"), ".0f")} | {_fmt(r.get("mem_error"), "+.0%")} |'
        )
    return out


H100_TABLE = ROOT / 'docs' / 'gpu' / 'h100_models_eager.csv'  # f100e2a, 2026-11-22
H200_TABLE = ROOT / 'docs' / 'gpu' / 'h200_2026-11-26' / 'call1' / 'eager' / 'gpu_nvidia_h200.csv'  # 3f6fcf6


LIMITS = """## What the model sees and what it does not

It counts what eager PyTorch dispatches on fake CUDA tensors (bf16 autocast, channels-last), the CUDA paths of this
package's engines included, and models each op as the slower of its bytes at a fitted fraction of the bandwidth and
its FLOPs at its unit's rate, on a device fed by a host that issues one op every few microseconds
(`scripts/gpu_cost.py`'s docstring). It does not see:
- **fusion**: `torch.compile` fuses pointwise ops into their neighbours; the model counts eager (every op through
  memory), so it says nothing of the compiled tables;
- **L2 reuse**: a tensor read again while it is still in the 50-60 MB L2 is counted twice;
- **a Triton operator's inside**: it counts one launch that reads the operator's inputs and writes its outputs, and
  the FLOPs of its registered formula; prefix tables, atomics, scratch buffers and arithmetic on CUDA cores that
  the formula leaves out are not seen. TaLK's plane kernels (stages 3-4) and its 2-D backward are where this
  matters: the model predicts `talkconvnext2d_t` at about half its measured time;
- **kernels far off the roofline**: one memory efficiency serves every op. On the H200 profile of the branched
  `mrconvnext_t` step, gathers (`index`, 233 ms) and scatters (`index_add_`, 114 ms) ran at a third of it or less
  and the fold's batched matmuls in 32x32 tiles far under the tensor-core rate; convnext_tiny's LayerNorms took
  4.5 ms of its 15.9 ms eval, a seventh of the bandwidth. Grouped and depthwise convolutions take the rate measured
  for cuDNN's 7x7 depthwise kernels (8.2 TFLOP/s), a measured constant, not a fitted one;
- **extra kernels**: one launch per op, where a convolution's backward runs two or three kernels.

Trust it only where a row's predicted ratio fell within 20 % of the measured one on both cards in
`cost-model-calibration.md` (the misses are in bold there): so far convnext_tiny and DynamicConv-T. The MRConv rows
met it on the H100 (the FFT engine of f100e2a) and missed it by half on the H200 (today's row-DFT / Toeplitz engines
and the BatchNorm fold, whose gathers, scatters and small matmuls run far under the one efficiency); TaLK and
LightConv missed on both. Misses go both ways: the model over-predicted the H100 training steps of convnext_tiny
and of the old DynamicConv by a third to a half, and under-predicted every engine whose kernels run off the
roofline.
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


def calibrate(out: Path, code: str | None) -> None:
    """Fit (efficiency, issue) on the H100 table (counting ``code``, a checkout of the commit it was measured at),
    then check the fitted model, untouched, against the H200 run of this checkout's code; write both tables."""
    h100 = count_all(FAMILIES_T, 128, 224, Path(code) if code else None)
    efficiency, issue, loss = fit(h100, measured_rows(H100_TABLE), 'h100', 128)
    rows, errors = compare(h100, measured_rows(H100_TABLE), 'h100', 128, efficiency, issue)
    h200 = count_all(FAMILIES_T, 128, 224)
    vrows, verrors = compare(h200, measured_rows(H200_TABLE), 'h200', 128, efficiency, issue)
    worst = max(abs(e['ratio_error']) for e in errors)
    vworst = max(abs(e['ratio_error']) for e in verrors)
    lines = ["# The GPU cost model's calibration", '']
    lines += _header(f'python scripts/gpu_cost.py --calibrate {out.as_posix()} --code <checkout of f100e2a>')
    lines += [
        f'Fitted on the H100 eager table (`{H100_TABLE.relative_to(ROOT).as_posix()}`, measured at f100e2a; the '
        f"models counted on that commit's code): **efficiency {efficiency:.3f}, issue {issue * 1e6:.1f} µs** (grid "
        f'search, least squares of the log of predicted over measured ms; mean squared log error {loss:.4f}).',
        '',
        *comparison_table(rows),
        '',
        f'Largest ratio error: {worst:.0%}.',
        '',
        '## Checked, with the same constants, on the H200 run of this code (out of sample: another card, newer code)',
        '',
        f"`{H200_TABLE.relative_to(ROOT).as_posix()}` (measured at 3f6fcf6, whose engines are this checkout's), "
        "modeled with the H200's bandwidth:",
        '',
        *comparison_table(vrows),
        '',
        f'Largest ratio error: {vworst:.0%}.',
        '',
        *LIMITS.splitlines(),
    ]
    out.write_text('\n'.join(lines) + '\n')
    print('\n'.join(lines))


def predicted_table(out: Path, gpu: str) -> None:
    """Every family's T model against convnext_tiny, counted on this checkout: eval at batch 128 and 1, the training
    step at 128 and its peak memory."""
    big = count_all(FAMILIES_T, 128, 224)
    one = {k: v for k, v in count_all(FAMILIES_T, 1, 224).items() if k[1] == 'eval'}
    base = {
        'eval128': model_time(big['convnext_tiny', 'eval'], gpu),
        'eval1': model_time(one['convnext_tiny', 'eval'], gpu),
        'train': model_time(big['convnext_tiny', 'train'], gpu),
        'peak': big['convnext_tiny', 'train'].peak_bytes,
    }
    lines = ["# Predicted GPU cost of every family's T model (the cost model, no GPU)", '']
    lines += _header(f'python scripts/gpu_cost.py --table {out.as_posix()} --gpu {gpu}')
    lines += [
        f'Modeled on the {gpu.upper()} (eager, bf16 autocast, channels-last, 224 px; the constants fitted in '
        '`cost-model-calibration.md`). Ratios: throughput ratio for eval (higher is better), time ratio for the '
        'training step and memory ratio (lower is better), all against convnext_tiny.',
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
    p.add_argument('--calibrate', default=None, metavar='MD', help='fit the constants on the H100 run; write MD')
    p.add_argument('--json', action='store_true', help='print the counted calls as JSON')
    args = p.parse_args(argv)
    if args.code:
        sys.path.insert(0, str(Path(args.code).resolve()))
    if args.calibrate:
        calibrate(Path(args.calibrate), args.code)
        return
    if args.table:
        predicted_table(Path(args.table), args.gpu)
        return
    step = count_step(args.model, args.train, args.batch, args.img_size)
    if args.json:
        print(step.to_json())
        return
    print('\n'.join(report(step, args.gpu, args.top)))


if __name__ == '__main__':
    main()
