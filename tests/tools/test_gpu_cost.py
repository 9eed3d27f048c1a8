"""scripts/gpu_cost.py: exact bytes, FLOPs, launches and live memory for cases computed by hand, a backward walk that
gives autograd's gradients, and a whole model counted on fake CUDA tensors."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from tests.limits import run_compiled_triton

from .conftest import REPO

_spec = importlib.util.spec_from_file_location('gpu_cost', REPO / 'scripts' / 'gpu_cost.py')
gpu_cost = importlib.util.module_from_spec(_spec)
sys.modules['gpu_cost'] = gpu_cost  # its dataclasses look their module up
_spec.loader.exec_module(gpu_cost)


def _count(fn) -> list:
    counter = gpu_cost.OpCounter()
    with FakeTensorMode():
        with counter:
            fn()
    return [(c.name, c.read, c.written, c.flops, c.unit) for c in counter.calls]


def test_a_matmul_counts_its_operands_once_and_2mnk_flops():
    def run(dtype):
        a = torch.randn(64, 128, device='cuda', dtype=dtype)
        b = torch.randn(128, 32, device='cuda', dtype=dtype)
        return a @ b

    calls = _count(lambda: run(torch.bfloat16))
    mm = [c for c in calls if c[0] == 'aten::mm']
    # read A (64*128) and B (128*32) in 2 bytes, write 64*32 in 2 bytes; 2*64*128*32 FLOPs on tensor cores
    assert mm == [('aten::mm', 64 * 128 * 2 + 128 * 32 * 2, 64 * 32 * 2, 2 * 64 * 128 * 32, 'tensor')]
    assert [c for c in _count(lambda: run(torch.float32)) if c[0] == 'aten::mm'][0][-1] == 'simt'


def test_a_depthwise_conv_under_autocast_forward_and_backward():
    """A (2, 8, 10, 10) float32 channels-last map through a 7x7 depthwise conv under bf16 autocast: autocast's two
    casts, the conv at the grouped-conv rate, and a backward whose FLOPs are twice the forward's (torch's own formula
    counts the weight gradient as a dense conv's: 9 times the forward's in all, for 8 channels)."""
    B, C, S, K = 2, 8, 10, 7
    n = B * C * S * S
    counter = gpu_cost.OpCounter()
    with FakeTensorMode():
        x = torch.randn(B, C, S, S, device='cuda').contiguous(memory_format=torch.channels_last).requires_grad_()
        w = torch.randn(C, 1, K, K, device='cuda', requires_grad=True)
        with counter:
            with gpu_cost.fake_cuda_autocast():
                y = F.conv2d(x, w, padding=K // 2, groups=C)
            root, g = y.grad_fn, torch.ones_like(y)
            del y
            gpu_cost.walk_backward(root, g)
    calls = [(c.name, c.read, c.written, c.flops, c.unit) for c in counter.calls]
    fwd_flops = 2 * n * K * K
    casts = [c for c in calls if c[0] == 'aten::_to_copy']
    assert sorted(casts[:2]) == [  # autocast casts the weight, then the input
        ('aten::_to_copy', C * K * K * 4, C * K * K * 2, 0, 'simt'),
        ('aten::_to_copy', n * 4, n * 2, 0, 'simt'),
    ]
    conv = [c for c in calls if c[0] == 'aten::convolution']
    assert conv == [('aten::convolution', n * 2 + C * K * K * 2, n * 2, fwd_flops, 'grouped')]
    (bwd,) = [c for c in calls if c[0] == 'aten::convolution_backward']
    # reads grad_out, x, w; writes grad_x and grad_w (bf16); both gradients asked for
    assert bwd == ('aten::convolution_backward', n * 2 * 2 + C * K * K * 2, n * 2 + C * K * K * 2, 2 * fwd_flops,
                   'grouped')  # fmt: skip
    assert x.grad.shape == x.shape and w.grad.shape == w.shape


def _counted_in_process(setup: str, calls: str, report: str):
    """What a script that counts in a process of its own prints (gpu_cost loaded from the checkout, ``setup`` then
    ``calls`` under ``FakeTensorMode``, ``calls`` under an ``OpCounter`` named ``counter``): ``report``'s JSON."""
    script = REPO / 'scripts' / 'gpu_cost.py'
    code = (
        'import importlib.util, json, sys, torch\n'
        'from torch._subclasses.fake_tensor import FakeTensorMode\n'
        f'spec = importlib.util.spec_from_file_location("gpu_cost", {str(script)!r})\n'
        'gpu_cost = importlib.util.module_from_spec(spec)\n'
        'sys.modules["gpu_cost"] = gpu_cost\n'
        'spec.loader.exec_module(gpu_cost)\n'
        'counter = gpu_cost.OpCounter()\n'
        'with FakeTensorMode():\n'
        + textwrap.indent(setup, '    ')
        + '    with counter:\n'
        + textwrap.indent(calls, '        ')
        + f'print(json.dumps({report}))\n'
    )
    proc = run_compiled_triton('-c', code, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_a_triton_operator_is_one_launch_of_its_inputs_and_outputs():
    """Counted in a process of its own: this suite's Triton interpreter would run the kernel on the fake tensors."""
    pytest.importorskip('triton')
    counted = _counted_in_process(
        'from mrconvnext.ops.light_conv import engine_triton\n'
        'x, logits = torch.randn(2, 20, 8, device="cuda"), torch.randn(2, 20, 2, 5, device="cuda")\n',
        'engine_triton.dynamic_conv_triton(x, logits, None, 2, True)\n',
        '[[c.name, c.read, c.written, c.flops, c.unit] for c in counter.calls]',
    )
    # x (2, 20, 8) and logits (2, 20, 2, 5) float32 in; y (2, 20, 8) and the log-sum-exp (2, 20, 2) float32 out; its
    # registered formula: 2 FLOPs per tap that reads inside the sequence, lags -2..2 over 20 positions reading
    # 18 + 19 + 20 + 19 + 18 = 94 of them per channel, for 2 images of 8 channels
    expected = [['mrconvnext::dynamic_conv_triton', (320 + 400) * 4, (320 + 80) * 4, 2 * 94 * 2 * 8, 'simt']]
    assert counted == expected


def test_a_talk_operator_is_a_class_per_kernel_family():
    """TaLK's Triton operators are counted as the kernels the code runs (a 196-position row: the plane kernels
    channels-first, the channels-last tables channels-last), and a profile's time of the operator is split the same
    way: its plane kernel's time among the row's top kernels, the rest (scans, gathers) the tables'."""
    pytest.importorskip('triton')
    counted = _counted_in_process(
        'from mrconvnext.ops.talk import engine_triton\n'
        'off = torch.rand(2, 4, 196, 2, device="cuda")\n'
        'first = torch.randn(2, 32, 196, device="cuda", dtype=torch.bfloat16)\n'
        'last = torch.randn(2, 196, 32, device="cuda", dtype=torch.bfloat16).transpose(1, 2)\n',
        'for x in (first, last):\n'
        '    engine_triton.talk1d_triton(x, off, 8, 8)\n'
        '    engine_triton.talk1d_triton_backward(x, x, off, 8, 8, True, True)\n',
        '[gpu_cost.call_class(c) for c in counter.calls]',
    )
    op = 'mrconvnext::talk1d_triton'
    assert counted == [f'{op}:plane', f'{op}_backward:plane', f'{op}:tables', f'{op}_backward:tables']
    row = dict(
        ops={op: [18, 1000.0, 1000.0], f'{op}_backward': [18, 0.0, 2000.0], 'aten::add': [3, 50.0, 50.0]},
        top_kernels=[['talk1d_plane_fwd_jit', 12, 700.0], ['scan_jit', 6, 100.0], ['talk1d_plane_bwd_jit', 12, 9.0]],
    )
    measured = gpu_cost.measured_by_class(row)
    assert measured[f'{op}:plane'] == pytest.approx(700e-6) and measured[f'{op}:tables'] == pytest.approx(300e-6)
    # an operator whose kernels a profile books elsewhere (self time 0) measures nothing in either family
    assert measured[f'{op}_backward:plane'] == 0 and measured[f'{op}_backward:tables'] == 0
    assert measured['other'] == pytest.approx(50e-6)


def test_the_talk2d_forward_counts_the_table_it_leaves_out():
    """TaLK 2-D's Triton forward on a channels-last map keeps no table for the backward (the backward rebuilds it,
    one operator of its own), but writes one: counted as written, as when the forward returned it."""
    pytest.importorskip('triton')
    B, C, H, W, heads = 2, 32, 14, 14, 4
    counted = _counted_in_process(
        'from mrconvnext.ops.talk import engine_triton\n'
        f'x = torch.randn({B}, {C}, {H}, {W}, device="cuda").contiguous(memory_format=torch.channels_last)\n'
        f'off = torch.rand({B}, {heads}, {H}, {W}, 4, device="cuda")\n',
        'y, left_out = engine_triton.talk2d_triton(x, off, 3, 3, 3, 3)\nP = engine_triton.talk2d_triton_table(x)\n',
        '[(c.name, c.read, c.written) for c in counter.calls]',
    )
    table = B * (H + 1) * (W + 1) * C * 4
    x_bytes = B * C * H * W * 4
    assert counted == [
        ['mrconvnext::talk2d_triton', x_bytes + B * heads * H * W * 4 * 4, x_bytes + table],  # y and the table
        ['mrconvnext::talk2d_triton_table', x_bytes, table],
    ]


def test_code_before_the_talk_engine_modules_runs_the_tables(monkeypatch):
    """A commit whose TaLK Triton operators predate ``engine_triton`` (the H100 run's f100e2a: one kernel family, scans
    and gathers) is counted as the tables, whatever the shapes."""
    import mrconvnext.ops.talk as talk

    monkeypatch.delattr(talk, 'engine_triton', raising=False)
    monkeypatch.setitem(sys.modules, 'mrconvnext.ops.talk.engine_triton', None)  # its import now fails
    x, off = torch.empty(2, 32, 196), torch.empty(2, 4, 196, 2)
    assert gpu_cost.talk_variant('mrconvnext::talk1d_triton', (x, off, 8, 8)) == 'tables'


def test_peak_memory_follows_the_storages_that_are_alive():
    counter = gpu_cost.OpCounter()
    mib = 2**20
    with FakeTensorMode():
        a = torch.empty(mib // 4, device='cuda')  # 1 MiB, allocated before counting: tracked by hand
        counter.track(a)
        with counter:
            b = a + 1  # 2 MiB alive
            del a
            c = b + 1  # a is gone: 2 MiB again
            d = c.view(-1)  # a view allocates nothing
            e = torch.cat([b, d])  # 2 MiB more: 4 MiB
    assert counter.peak == 4 * mib and e.numel() == mib // 2


def test_the_backward_walk_gives_autograd_s_gradients():
    """On real CPU tensors: a block with a LayerNorm, a GELU MLP, a broadcast bias and a custom autograd Function
    with a non-tensor argument and a tensor argument that needs no gradient, walked by hand against
    torch.autograd.grad in float64."""

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, k: int, c, w):
            ctx.save_for_backward(x, c, w)
            ctx.k = k
            return x * w * c * k

        @staticmethod
        def backward(ctx, g):
            x, c, w = ctx.saved_tensors
            return g * w * c * ctx.k, None, None, (g * x * c * ctx.k).sum(0)

    torch.manual_seed(0)
    x = torch.randn(5, 6, dtype=torch.float64, requires_grad=True)
    w1 = torch.randn(6, 12, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(12, dtype=torch.float64, requires_grad=True)
    w2 = torch.randn(12, dtype=torch.float64, requires_grad=True)
    c = torch.randn(12, dtype=torch.float64)  # a tensor input that needs no gradient: an edge with no function

    def loss():
        h = F.gelu(F.layer_norm(x, (6,)) @ w1 + bias)
        return (Scale.apply(h, 3, c, w2) ** 2).sum()

    expected = torch.autograd.grad(loss(), (x, w1, bias, w2))
    out = loss()
    root = out.grad_fn
    del out
    gpu_cost.walk_backward(root, torch.ones((), dtype=torch.float64))
    for leaf, ref in zip((x, w1, bias, w2), expected):
        torch.testing.assert_close(leaf.grad, ref, rtol=1e-12, atol=1e-12)


def test_a_training_step_of_a_model_on_fake_cuda():
    """convnext_atto: a training step does about three times the forward's FLOPs (each matmul and conv has two
    gradients; the stem's input needs none), peak memory above the eval's, and the device time grows with both (the
    modeled time of so small a model is the host's). The count is the same on every run of the same code, the
    Python between the ops included."""
    pytest.importorskip('timm')
    eval_step = gpu_cost.count_step('convnext_atto', train=False, batch=4, img_size=64)
    train_step = gpu_cost.count_step('convnext_atto', train=True, batch=4, img_size=64)
    ratio = train_step.flops / eval_step.flops
    assert 2.9 < ratio <= 3.0, ratio
    assert train_step.peak_bytes > eval_step.peak_bytes > 0
    assert train_step.launches > 2 * eval_step.launches
    assert gpu_cost.device_total(train_step) > gpu_cost.device_total(eval_step) > 0
    assert gpu_cost.model_time(train_step) > 0 and gpu_cost.model_time(eval_step) > 0
    assert math.isclose(gpu_cost.StepCost.from_json(train_step.to_json()).bytes, train_step.bytes)
    again = gpu_cost.count_step('convnext_atto', train=True, batch=4, img_size=64)
    assert again.calls == train_step.calls
    assert sum(c.lines for c in train_step.calls) > 1000 and sum(c.free for c in train_step.calls) > 10


def test_the_time_model_is_the_slower_of_memory_and_arithmetic_on_a_device_fed_by_the_host():
    spec = gpu_cost.GPUS['h100']
    memory_bound = gpu_cost.Call('aten::add', 10**9, 10**9, 0, 'simt')
    compute_bound = gpu_cost.Call('aten::mm', 10**6, 10**6, 10**15, 'tensor')
    tiny = gpu_cost.Call('aten::add', 4, 4, 0, 'simt')
    eff, issue, gap = 0.5, 8e-6, gpu_cost.LATENCY_S
    big = 2e9 / (spec['bandwidth'] * eff) + gap
    assert gpu_cost.device_time(memory_bound, 'h100', eff) == pytest.approx(big)
    assert gpu_cost.device_time(compute_bound, 'h100', eff) == pytest.approx(1e15 / spec['tensor'] / eff + gap)
    small = gpu_cost.device_time(tiny, 'h100', eff)
    # ten tiny ops alone: the host's issue time; behind a large op they are issued while it runs and cost only
    # their device time; the closed form agrees with the step-by-step timeline
    alone = gpu_cost.StepCost('m', 'eval', 1, [tiny] * 10)
    behind = gpu_cost.StepCost('m', 'eval', 1, [memory_bound] + [tiny] * 10)
    assert gpu_cost.model_time(alone, 'h100', eff, issue) == pytest.approx(10 * issue + small)
    assert gpu_cost.model_time(behind, 'h100', eff, issue) == pytest.approx(issue + big + 10 * small)
    for step in (alone, behind):
        assert sum(gpu_cost.timeline(step, 'h100', eff, issue)) == pytest.approx(
            gpu_cost.model_time(step, 'h100', eff, issue)
        )


def test_a_python_function_s_backward_counts_only_what_it_runs():
    """A custom autograd.Function (the form of every operator of this package with a registered backward) whose
    backward is one multiply: the walk adds that multiply and nothing else (no zero gradients it did not need)."""

    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    counter = gpu_cost.OpCounter()
    with FakeTensorMode():
        x = torch.randn(64, 32, device='cuda', requires_grad=True)
        with counter:
            y = Double.apply(x)
            # y stays alive: a Python node at the root lives no longer than its output where torch holds such nodes
            # weakly (gpu_cost.GRAPH_HELD_WEAKLY: torch 2.11)
            gpu_cost.walk_backward(y.grad_fn, torch.ones_like(y))
    names = [c.name for c in counter.calls]
    # forward multiply, the seed gradient, the backward multiply
    assert names == ['aten::mul', 'aten::ones_like', 'aten::mul'], names
    seed = counter.calls[1]
    assert (seed.read, seed.written) == (0, 64 * 32 * 4)  # ones_like writes, its template is not read


def test_classes_take_their_own_efficiency_and_latency_and_a_transposing_copy_is_its_own_class():
    spec = gpu_cost.GPUS['h200']
    table = {'copy': (0.5, 2e-6), 'transpose': (0.25, 3e-6), 'other': (1.0, 1e-6)}
    plain = gpu_cost.Call('aten::copy_', 10**9, 10**9, 0, 'simt')
    moved = gpu_cost.Call('aten::copy_', 10**9, 10**9, 0, 'simt', 'transpose')
    add = gpu_cost.Call('aten::add', 10**9, 10**9, 0, 'simt')
    seconds = 2e9 / spec['bandwidth']
    assert gpu_cost.device_time(plain, 'h200', table) == pytest.approx(seconds / 0.5 + 2e-6)
    assert gpu_cost.device_time(moved, 'h200', table) == pytest.approx(seconds / 0.25 + 3e-6)
    assert gpu_cost.device_time(add, 'h200', table) == pytest.approx(seconds + 1e-6)  # 'other'
    step = gpu_cost.StepCost('m', 'eval', 1, [plain, moved, add])
    assert gpu_cost.model_time(step, 'h200', table, issue=0.0) == pytest.approx(
        sum(gpu_cost.device_time(c, 'h200', table) for c in step.calls)
    )
    # what the counting books as a transpose: copies between memory layouts, not copies within one
    counter = gpu_cost.OpCounter()
    with FakeTensorMode():
        x = torch.empty(2, 3, 4, 5)
        with counter:
            x.contiguous(memory_format=torch.channels_last), x.clone(), x.transpose(1, 2).contiguous()
            F.pad(x.transpose(1, 2), (0, 3)), x.half().transpose(1, 2).contiguous()
    calls = counter.calls
    assert [c.cls for c in calls] == ['transpose', '', 'transpose', 'transpose', '', 'transpose16']
    assert [gpu_cost.call_class(c) for c in calls] == ['transpose', 'copy', 'transpose', 'transpose', 'copy',
                                                       'transpose16']  # fmt: skip
    assert gpu_cost.PROFILE_CLASS['transpose16'] == 'copy'
    # a copy that reorders the outer dimensions but keeps whole runs of the innermost one (unit stride on both sides,
    # at least COALESCED_RUN_BYTES) is a copy: 64 float32 or bfloat16 values, not 16 float32 ones or 32 bfloat16
    counter = gpu_cost.OpCounter()
    with FakeTensorMode():
        with counter:
            for dtype, run in ((torch.float32, 64), (torch.bfloat16, 64), (torch.float32, 16), (torch.bfloat16, 32)):
                torch.empty(4, 6, run, dtype=dtype).transpose(0, 1).contiguous()
            big = torch.empty(3, 40, 64)
            torch.empty(40, 3, 64).transpose(0, 1).copy_(big)  # a strided destination
            torch.empty(3, 64, 40).transpose(1, 2).copy_(big)  # the innermost dimension changes
    assert [c.cls for c in counter.calls] == ['', '', 'transpose', 'transpose16', '', 'transpose']
    # a broadcast source (stride 0) is read along its other dimensions: copied into the same order of those it is a
    # copy, into another (a channels-last map's channels innermost, the copy's batch) a transpose
    counter = gpu_cost.OpCounter()
    with FakeTensorMode():
        with counter:
            torch.empty(8, 196, 96).expand(4, 8, 196, 96).contiguous()
            torch.empty(8, 196, 96).permute(2, 1, 0).expand(4, 96, 196, 8).contiguous()
    assert [c.cls for c in counter.calls] == ['', 'transpose']
    assert [c.read for c in counter.calls] == [8 * 196 * 96 * 4] * 2  # the source once
    # LayerNorm's CUDA kernel makes its input contiguous first: a transposed input costs a transpose before it, a
    # contiguous one nothing
    counter = gpu_cost.OpCounter()
    with FakeTensorMode():
        x = torch.empty(8, 196, 96, device='cuda')
        with counter:
            F.layer_norm(x, (96,)), F.layer_norm(x.transpose(0, 1), (96,))
            F.layer_norm(torch.empty(96, 8, 196, device='cuda').permute(1, 2, 0), (96,))
    assert [(c.name, c.cls) for c in counter.calls] == [
        ('aten::native_layer_norm', ''),
        ('aten::contiguous', ''),  # outer dimensions reordered, runs of 96 float32 values moved
        ('aten::native_layer_norm', ''),
        ('aten::contiguous', 'transpose'),
        ('aten::native_layer_norm', ''),
    ]


def test_class_costs_recover_an_efficiency_and_a_latency_from_rows():
    """Rows made from known costs (copies at efficiency 0.4 and 3 us each; adds at 0.8 and 1 us): the least
    squares of the calibration recovers both numbers of both classes, and the launches and seconds it pooled."""
    spec = gpu_cost.GPUS['h200']
    pairs = []
    for n, size in ((10, 10**8), (100, 10**6), (3, 10**9), (50, 10**7), (7, 3 * 10**7)):
        calls = [gpu_cost.Call('aten::copy_', size, size, 0, 'simt')] * n
        calls += [gpu_cost.Call('aten::add', 2 * size, size, 0, 'simt')] * (2 * n)
        copy_s = n * (2 * size / spec['bandwidth'] / 0.4 + 3e-6)
        add_s = 2 * n * (3 * size / spec['bandwidth'] / 0.8 + 1e-6)
        row = dict(ops={'aten::copy_': [n, copy_s * 1e6, copy_s * 1e6, 0.0], 'aten::add': [2 * n, add_s * 1e6, 0, 0]})
        pairs.append((row, gpu_cost.StepCost('m', 'eval', 1, calls)))
    costs = gpu_cost.class_costs(pairs, 'h200')
    assert costs['copy']['efficiency'] == pytest.approx(0.4) and costs['copy']['latency'] == pytest.approx(3e-6)
    assert costs['other']['efficiency'] == pytest.approx(0.8) and costs['other']['latency'] == pytest.approx(1e-6)
    assert costs['copy']['launches'] == 170 and costs['copy']['error'] < 1e-9
    assert costs['other']['measured'] == pytest.approx(sum(r['ops']['aten::add'][1] for r, _ in pairs) * 1e-6)


def test_the_least_squares_prefer_the_fewest_columns_among_equal_fits():
    """Two identical columns fit the data alike alone or together: the fit on one column is taken (the first), the
    same on every run; a fit clearly better on more columns still wins."""
    A = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    np.testing.assert_allclose(gpu_cost.nnls(A, np.array([1.0, 2.0, 3.0])), [1.0, 0.0], atol=1e-12)
    B = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    np.testing.assert_allclose(gpu_cost.nnls(B, np.array([2.0, 3.0, 5.0])), [2.0, 3.0], atol=1e-12)


def test_a_profiled_row_is_counted_with_the_code_its_call_ran():
    row = dict(model='mrconvnext_t:reparam', method='auto', batch=128)
    assert gpu_cost.counted_method('call1', row) == 'matmul'
    assert gpu_cost.counted_method('call2', row) == 'mixed'
    assert gpu_cost.counted_method('call2', {**row, 'batch': 8}) == 'fft'
    assert gpu_cost.counted_method('call1', {**row, 'method': 'nofold'}) == 'nofold+matmul'
    assert gpu_cost.counted_method('call1', {**row, 'method': 'fft'}) == 'fft'
    assert gpu_cost.counted_method('call1', {**row, 'model': 'convnext_tiny'}) == 'auto'
    assert gpu_cost.counted_method('call3', row) == 'auto'  # its code's own rule
    assert gpu_cost.counted_method('call4', row) == 'auto'
    assert gpu_cost.counted_method('call8', {**row, 'method': 'fft'}) == 'fft'
    with pytest.raises(ValueError, match="'call7', 'call8'], got 'call9'"):
        gpu_cost.counted_method('call9', row)


def test_the_host_issues_each_op_after_the_python_before_it():
    """A call costs the host ``issue[0]``, plus ``issue[1]`` per op before it that launches nothing, ``issue[2]``
    per line of Python and ``issue[3]`` per call of a C function before it: ten tiny calls, each after 150 lines,
    50 C calls and 2 views, take 10 * (5 + 2 * 1 + 150 * 0.02 + 50 * 0.14) us on a host-bound device; the closed
    form agrees with the step-by-step timeline on a mixed sequence."""
    tiny = gpu_cost.Call('aten::add', 4, 4, 0, 'simt', lines=150, c_calls=50, free=2)
    bare = gpu_cost.Call('aten::add', 4, 4, 0, 'simt')
    big = gpu_cost.Call('aten::add', 10**9, 10**9, 0, 'simt', lines=10**4, c_calls=10, free=100)
    issue = (5e-6, 1e-6, 2e-8, 1.4e-7)
    small = gpu_cost.device_time(tiny, 'h100', 0.5)
    alone = gpu_cost.StepCost('m', 'eval', 1, [tiny] * 10)
    assert gpu_cost.model_time(alone, 'h100', 0.5, issue) == pytest.approx(10 * (5e-6 + 2e-6 + 10e-6) + small)
    mixed = gpu_cost.StepCost('m', 'train', 1, [tiny, bare, big, tiny, bare, bare, tiny, big, bare])
    assert sum(gpu_cost.timeline(mixed, 'h100', 0.5, issue)) == pytest.approx(
        gpu_cost.model_time(mixed, 'h100', 0.5, issue)
    )


def _python_lines(n: int) -> int:
    """``2 n + 2`` lines of Python (with the ``return``) and ``n + 1`` calls of builtins (``range``, ``n`` times
    ``abs``), which the counter books as lines: ``3 n + 3``."""
    total = 0
    for i in range(n):
        total += abs(i)
    return total


def _count_program(forward_lines: int, backward_lines: int) -> list:
    """The calls of a forward and backward with ``_python_lines`` between ops, counted on their second run (the
    first run's ops take the way into the mode for the first time, which runs more Python once)."""

    class SlowBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            _python_lines(backward_lines)
            return g * 2

    def forward(x):
        y = x + 1
        _python_lines(forward_lines)
        y = y.view(64).view(8, 8)
        z = SlowBackward.apply(y).sum()
        return z * 3

    with FakeTensorMode():
        x = torch.randn(8, 8, device='cuda', requires_grad=True)
        baseline = gpu_cost.dispatch_baseline(gpu_cost.OpCounter())
        for _ in range(2):
            counter = gpu_cost.OpCounter()
            counter.baseline = baseline
            with counter:
                counter.resume()
                z = forward(x)
                counter.pause()
                root, g = z.grad_fn, torch.ones_like(z)
                del z
                gpu_cost.walk_backward(root, g, counter)
                del root, g
    return counter.calls


def test_torch_s_op_bindings_are_told_from_calls_that_cost_about_a_line():
    """Tensor methods and ``torch.*`` / ``torch.nn.functional`` / ``torch.fft`` ops parse their arguments and enter
    the dispatcher; builtins, dict methods, queries of torch's state and a tensor's metadata methods do not."""
    x = torch.empty(2, 3)
    for fn in (x.view, x.add, torch.cat, torch.empty_like, torch._C._nn.pad, torch.fft.rfft):  # F.pad calls _nn.pad
        assert gpu_cost.torch_binding(fn), fn
    for fn in (isinstance, len, {}.get, torch.is_grad_enabled, torch.is_autocast_enabled, x.dim, x.stride):
        assert not gpu_cost.torch_binding(fn), fn


def test_the_python_between_two_ops_is_booked_on_the_second():
    """The same program with 10 more loop turns (20 lines, 10 calls of a builtin: 30 lines) between its first two
    ops, and separately 5 more in a Python autograd.Function's backward: the difference is booked exactly on the op
    after them (the forward's second op; the backward's op the Function runs), and nothing else changes. Two views
    before the second op count as two ops that launch nothing, and their calls as two of torch's op bindings. The
    way into the counter is left out of every op
    (``dispatch_baseline``): it does not depend on the Python between ops, and the backward's C++ nodes, run by
    the walk, count nothing."""
    base = _count_program(25, 10)
    longer = _count_program(35, 10)
    longer_backward = _count_program(25, 15)
    names = [c.name for c in base]
    assert names == [c.name for c in longer] == [c.name for c in longer_backward]
    assert names[:5] == ['aten::add', 'aten::mul', 'aten::sum', 'aten::mul', 'aten::ones_like'], names
    forward_mul = base[1]
    assert (forward_mul.free, forward_mul.lines >= 78, forward_mul.c_calls) == (2, True, 2)
    assert sum(c.free for c in base) == 2
    (i,) = [k for k, c in enumerate(base[5:], 5) if c.name == 'aten::mul' and c.lines >= 22]  # the Function's op
    for other, k, extra in ((longer, 1, 10), (longer_backward, i, 5)):
        for j, (a, b) in enumerate(zip(base, other)):
            expected = (3 * extra, 0) if j == k else (0, 0)
            assert (b.lines - a.lines, b.c_calls - a.c_calls, b.free - a.free) == (*expected, 0), (j, a, b)
    # C++ nodes (MulBackward0, SumBackward0) count no Python of their own
    assert [(c.lines, c.c_calls) for c in base[5:i]] == [(0, 0)] * (i - 5)


def test_the_counting_gives_back_the_trace_functions_it_found_even_when_the_model_fails():
    """A coverage tool's trace and profile functions are back in place after a counted run, also one that raises."""

    def outer_trace(frame, event, arg):
        return None

    def outer_profile(frame, event, arg):
        return None

    class Fails(torch.nn.Module):
        def forward(self, x):
            x = x * 2  # an op, then the failure
            raise RuntimeError('broken model')

    saved = sys.gettrace(), sys.getprofile()
    try:
        with FakeTensorMode():
            x = torch.randn(4, 4, device='cuda')
            sys.settrace(outer_trace)
            sys.setprofile(outer_profile)
            with pytest.raises(RuntimeError, match='broken model'):
                gpu_cost._count_once(Fails(), x, None, None, (0, 0))
            assert (sys.gettrace(), sys.getprofile()) == (outer_trace, outer_profile)
    finally:
        sys.settrace(saved[0])
        sys.setprofile(saved[1])


def test_the_depthwise_conv_kernel_and_its_copies_are_those_a_gpu_runs():
    """A channels-last 2-D depthwise conv runs cuDNN's kernels (``conv_dw``); a 1-D one of a (N, L, C) map seen as
    (N, C, L) runs torch's own after a transposing copy of its input (forward) and of its input and gradient
    (backward); a dense bfloat16 conv of a channels-last map returns a channels-last result, as cuDNN does."""
    B, C, L, K = 2, 8, 50, 7
    counter = gpu_cost.OpCounter()
    with FakeTensorMode():
        x2 = torch.randn(B, C, 10, 10, device='cuda').contiguous(memory_format=torch.channels_last)
        w2 = torch.randn(C, 1, K, K, device='cuda').contiguous(memory_format=torch.channels_last)
        x1 = torch.randn(B, L, C, device='cuda').transpose(1, 2).requires_grad_()
        w1 = torch.randn(C, 1, K, device='cuda', requires_grad=True)
        dense = torch.randn(16, C, 2, 2, device='cuda', dtype=torch.bfloat16).contiguous(
            memory_format=torch.channels_last
        )
        g = torch.ones(B, L, C, device='cuda').transpose(1, 2)  # the gradient, (N, L, C) in memory
        with counter:
            F.conv2d(x2, w2, padding=K // 2, groups=C)
            y = F.conv1d(x1, w1, padding=K // 2, groups=C)
            gpu_cost.walk_backward(y.grad_fn, g)
            out = F.conv2d(x2.to(torch.bfloat16), dense, stride=2)
    assert out.is_contiguous(memory_format=torch.channels_last) and not out.is_contiguous()
    convs = [(c.name, c.cls) for c in counter.calls if 'conv' in c.name or c.cls == 'transpose']
    n = B * C * L * 4
    assert convs == [
        ('aten::convolution', 'conv_dw'),
        ('aten::contiguous', 'transpose'),
        ('aten::convolution', 'conv_dw_native'),
        ('aten::contiguous', 'transpose'),  # the gradient
        ('aten::contiguous', 'transpose'),  # the input
        ('aten::convolution_backward', 'conv_dw_native_backward'),
        ('aten::convolution', ''),
    ], convs
    copies = [c for c in counter.calls if c.name == 'aten::contiguous']
    assert all((c.read, c.written) == (n, n) for c in copies)
    assert gpu_cost.PROFILE_CLASS['conv_dw_native_backward'] == 'conv_backward'
    assert gpu_cost.op_class('aten::_conv_depthwise2d') == 'conv_dw_native'


def test_a_padding_is_a_fill_of_the_padded_tensor_then_a_copy_of_the_input():
    """``constant_pad_nd`` runs two kernels on a GPU: the fill of the whole padded tensor (written: 4 * 3 * 16 * 4
    bytes) and the copy of the input into it (read and written: 4 * 3 * 10 * 4 bytes), a transposing copy where
    the input's positions are not innermost (``transpose16`` for 2-byte elements)."""
    counter = gpu_cost.OpCounter()
    with FakeTensorMode():
        x = torch.randn(4, 3, 10, device='cuda')
        x_cl = torch.randn(4, 10, 3, device='cuda', dtype=torch.bfloat16).mT  # positions not innermost
        with counter:
            torch.nn.functional.pad(x, (0, 6))
            torch.nn.functional.pad(x_cl, (0, 6))
    fill, copy, fill_t, copy_t = counter.calls
    assert (fill.name, fill.read, fill.written, fill.cls) == ('aten::fill_', 0, 4 * 3 * 16 * 4, '')
    assert (copy.name, copy.read, copy.written, copy.cls) == ('aten::copy_', 4 * 3 * 10 * 4, 4 * 3 * 10 * 4, '')
    assert (fill_t.written, copy_t.read, copy_t.written) == (4 * 3 * 16 * 2, 4 * 3 * 10 * 2, 4 * 3 * 10 * 2)
    assert copy_t.cls == 'transpose16'


def test_an_inverse_fft_transforms_a_clone_and_a_normalized_one_scales_its_output():
    """ATen's CUDA C2R transform clones its complex input first (cuFFT may overwrite it): read and written, 4 * 3 * 9
    complex64 values of 8 bytes; a normalized transform (the inverse under ``norm='backward'``, the forward under
    ``'forward'``) then multiplies its output in place, 4 * 3 * 16 float32 values read and written (one FLOP each;
    two per complex value); an unnormalized one does not."""
    counter = gpu_cost.OpCounter()
    with FakeTensorMode():
        x_f = torch.randn(4, 3, 9, device='cuda', dtype=torch.complex64)
        x = torch.randn(4, 3, 16, device='cuda')
        with counter:
            torch.fft.irfft(x_f, n=16)
            torch.fft.irfft(x_f, n=16, norm='forward')
            torch.fft.rfft(x)
            torch.fft.rfft(x, norm='forward')
    names = [(c.name, c.read, c.written) for c in counter.calls]
    spectrum, real = 4 * 3 * 9 * 8, 4 * 3 * 16 * 4
    assert names == [
        ('aten::clone', spectrum, spectrum),
        ('aten::_fft_c2r', spectrum, real),
        ('aten::mul_', real, real),
        ('aten::clone', spectrum, spectrum),
        ('aten::_fft_c2r', spectrum, real),
        ('aten::_fft_r2c', real, spectrum),
        ('aten::_fft_r2c', real, spectrum),
        ('aten::mul_', spectrum, spectrum),
    ]
    assert (counter.calls[2].flops, counter.calls[7].flops) == (4 * 3 * 16, 2 * 4 * 3 * 9)
    assert {c.unit for c in counter.calls} == {'simt'}


def test_an_accumulating_index_put_reads_its_materialized_indices():
    """The backward of ``k[:, idx]`` for a (4, 64) kernel and a (32, 32) index (a Toeplitz gather): an accumulating
    ``index_put`` whose sort-based kernel reads one int64 linear index and 4 float32 values per index position
    (1,024 of them) and the destination, and writes the destination."""
    counter, flat = gpu_cost.OpCounter(), gpu_cost.OpCounter()
    with FakeTensorMode():
        k = torch.randn(4, 64, device='cuda', requires_grad=True)
        i = torch.arange(32, device='cuda')
        idx = i[:, None] - i[None, :] + 32
        with counter:
            y = k[:, idx]
            root, g = y.grad_fn, torch.ones_like(y)
            del y
            gpu_cost.walk_backward(root, g)
        k1 = torch.randn(64, device='cuda', requires_grad=True)
        with flat:
            y = k1[idx.flatten()]
            gpu_cost.walk_backward(y.grad_fn, torch.ones_like(y))
    (put,) = [c for c in counter.calls if c.cls == 'index_put_slices']  # a slice of 4 values per position
    assert (put.read, put.written) == (4 * 64 * 4 + 1024 * (8 + 4 * 4), 4 * 64 * 4)
    assert gpu_cost.PROFILE_CLASS[put.cls] == 'index_put'
    (put,) = [c for c in flat.calls if 'index_put' in c.name]
    assert put.cls == 'index_put_accumulate' and (put.read, put.written) == (64 * 4 + 1024 * (8 + 4), 64 * 4)


def test_a_matmul_with_rows_of_an_odd_number_of_bytes_is_unaligned():
    """A bfloat16 (8, 196, 55) operand (110-byte rows, 2-byte aligned) makes its batched matmul a class of its own;
    (8, 196, 64) (8-byte aligned rows of the (8, 196, 196) one, 16-byte ones of its own) does not."""
    counter = gpu_cost.OpCounter()
    with FakeTensorMode():
        a = torch.randn(8, 196, 196, device='cuda', dtype=torch.bfloat16)
        with counter:
            a @ torch.randn(8, 196, 55, device='cuda', dtype=torch.bfloat16)
            a @ torch.randn(8, 196, 64, device='cuda', dtype=torch.bfloat16)
    assert [(c.name, c.cls) for c in counter.calls if c.name == 'aten::bmm'] == [
        ('aten::bmm', 'bmm_unaligned'),
        ('aten::bmm', ''),
    ]
    assert gpu_cost.PROFILE_CLASS['bmm_unaligned'] == 'bmm'


def test_the_launch_time_is_the_median_self_cpu_time_of_one_kernel_ops(monkeypatch):
    """Profiled rows whose add, mul and gelu took 10, 15 and 12 us of self CPU time per call (and an op outside
    ``LAUNCH_OPS`` 100): the median, 12 us; rows without CPU times (call 1's) give a clear error."""
    rows = [
        {'ops': {'aten::add': [4, 1.0, 1.0, 40.0], 'aten::mul': [2, 1.0, 1.0, 30.0], 'aten::mm': [1, 1.0, 1.0, 100.0]}},
        {'ops': {'aten::gelu': [3, 1.0, 1.0, 36.0]}},
    ]
    monkeypatch.setattr(
        gpu_cost, 'profile_rows', lambda call: rows if call == 'a' else [{'ops': {'aten::add': [1, 1.0, 1.0]}}]
    )
    assert gpu_cost.launch_time(('a',)) == pytest.approx(12e-6)
    with pytest.raises(ValueError, match='no self CPU times'):
        gpu_cost.launch_time(('b',))


def test_the_free_time_is_the_median_of_the_rows_pooled_self_cpu_time_of_ops_that_launch_nothing(monkeypatch):
    """Ops that launch nothing: views by their schema (``view``, ``permute``, and ``reshape``, a view in one of its
    overloads), allocations; not ``add`` or ``prim::device`` (dispatched only for fake tensors). Rows pooling 4 views
    in 12 us and 1 empty in 8 (4 us per call), 2 in 2 us (1 us), 3 in 9 us (3 us): the median, 3 us."""
    for name in ('aten::view', 'aten::permute', 'aten::reshape', 'aten::empty_strided', 'aten::_unsafe_view'):
        assert gpu_cost.launches_nothing(name), name
    for name in ('aten::add', 'aten::copy_', 'aten::mm', 'prim::device', 'mrconvnext::fft_conv', 'aten::nonexistent'):
        assert not gpu_cost.launches_nothing(name), name
    rows = [
        {
            'ops': {
                'aten::view': [4, 0.0, 0.0, 12.0],
                'aten::empty': [1, 0.0, 0.0, 8.0],
                'aten::add': [9, 1.0, 1.0, 90.0],
            }
        },
        {'ops': {'aten::permute': [2, 0.0, 0.0, 2.0], 'prim::device': [50, 0.0, 0.0, 500.0]}},
        {'ops': {'aten::reshape': [3, 0.0, 0.0, 9.0]}},
    ]
    monkeypatch.setattr(gpu_cost, 'profile_rows', lambda call: rows if call == 'a' else [{'ops': {'aten::add': [1]}}])
    assert gpu_cost.free_time(('a',)) == pytest.approx(3e-6)
    with pytest.raises(ValueError, match='no self CPU times'):
        gpu_cost.free_time(('b',))


def test_a_row_s_ratio_error_is_also_read_from_the_fastest_steps(monkeypatch):
    """convnext_tiny measured 10 ms (steps 9, 10, 12), a model 30 ms (steps 24, 30, 36), modeled 10 and 20 ms:
    ratio 2.0 against 3.0 (-33 %); its steps spread 36 / 24 = 1.5; from the fastest steps 2.0 against 24 / 9
    (-25 %). A row without its steps' times has neither."""
    modeled = {'convnext_tiny': 0.010, 'm': 0.020, 'old': 0.020}
    monkeypatch.setattr(gpu_cost, 'model_time', lambda step, *args, **kwargs: modeled[step.model])
    rows = [
        dict(model='convnext_tiny', kwargs={}, mode='eval', batch=1, method='auto', ms=10.0, times=[12.0, 9.0, 10.0]),
        dict(model='m', kwargs={}, mode='eval', batch=1, method='auto', ms=30.0, times=[30.0, 36.0, 24.0]),
        dict(model='old', kwargs={}, mode='eval', batch=1, method='auto', ms=30.0),
    ]
    pairs = [(row, gpu_cost.StepCost(row['model'], 'eval', 1)) for row in rows]
    base, model, old = gpu_cost.compare_rows(pairs, 'h200', None, None)
    assert model['ratio_error'] == pytest.approx(2.0 / 3.0 - 1)
    assert model['spread'] == pytest.approx(1.5)
    assert model['fastest_ratio_error'] == pytest.approx(2.0 / (24 / 9) - 1)
    assert old['ratio_error'] == pytest.approx(2.0 / 3.0 - 1) and 'fastest_ratio_error' not in old
    assert '**-33%** | 1.50 | **-25%**' in '\n'.join(gpu_cost.comparison_table([base, model, old]))


def test_an_inner_autocast_region_keeps_the_cast_weights():
    """Under the fake CUDA autocast, a weight used before and after an inner ``autocast(enabled=False)`` region (as
    the package's float32 sections are) is cast once, as under ``torch.autocast`` on a GPU; a new region casts it
    again."""
    counter = gpu_cost.OpCounter()
    with FakeTensorMode(), warnings.catch_warnings():
        warnings.simplefilter('ignore')  # torch.autocast('cuda') without a GPU says so
        x = torch.randn(8, 16, device='cuda')
        w = torch.randn(32, 16, device='cuda', requires_grad=True)
        with counter:
            with gpu_cost.fake_cuda_autocast():
                F.linear(x, w)
                with torch.autocast('cuda', enabled=False):
                    pass
                F.linear(x, w)
            with gpu_cost.fake_cuda_autocast():
                F.linear(x, w)
    weight_casts = [c for c in counter.calls if c.name == 'aten::_to_copy' and c.read == 32 * 16 * 4]
    assert len(weight_casts) == 2


def test_ops_on_the_host_launch_nothing_and_a_copy_to_the_device_waits_for_it():
    """A table built on CPU tensors and copied to the device: the CPU ops cost the host its issue time and the device
    nothing (no launches, no bytes); the copy waits for the device (``'sync'``), so the host issues the next op only
    after a long kernel before it has finished, where without the wait it would have issued it meanwhile."""
    counter = gpu_cost.OpCounter()
    with FakeTensorMode():
        big = torch.randn(2**26, device='cuda')
        with counter:
            table = torch.arange(64.0).cos()  # on the host
            big.mul(2)
            on_device = table.to('cuda')
            on_device.add(1)
    names = [(c.name, c.unit, c.cls) for c in counter.calls]
    assert names == [('aten::arange', 'cpu', ''), ('aten::cos', 'cpu', ''), ('aten::mul', 'simt', ''),
                     ('aten::_to_copy', 'simt', 'sync'), ('aten::add', 'simt', '')], names  # fmt: skip
    step = gpu_cost.StepCost('m', 'eval', 1, counter.calls)
    assert step.launches == 3 and step.bytes == 2**26 * 8 + 64 * 8 + 64 * 8
    issue = (10e-6, 0.0, 0.0, 0.0)
    kernel = gpu_cost.device_time(counter.calls[2], 'h200', 0.5)
    small = [gpu_cost.device_time(c, 'h200', 0.5) for c in counter.calls[3:]]
    # host: 3 issues, then the kernel runs; the copy ends it; the host waits, then issues the add
    expected = 3 * issue[0] + kernel + small[0] + issue[0] + small[1]
    assert gpu_cost.model_time(step, 'h200', 0.5, issue) == pytest.approx(expected)
    assert sum(gpu_cost.timeline(step, 'h200', 0.5, issue)) == pytest.approx(expected)
    no_wait = gpu_cost.StepCost('m', 'eval', 1, [*counter.calls[:3], gpu_cost.Call('aten::_to_copy', 256, 256, 0, 'simt'),
                                                 counter.calls[4]])  # fmt: skip
    assert gpu_cost.model_time(no_wait, 'h200', 0.5, issue) == pytest.approx(3 * issue[0] + kernel + sum(small))


def test_size_only_caches_are_counted_as_a_gpu_s_later_calls_find_them():
    """A Fourier branch's basis depends on sizes alone and is cached by the package, but not under a fake tensor
    mode: counted as it is, every call would build it on the host and copy it to the device (a wait). Under
    ``steady_caches`` the first call builds it and the next finds it (the matmul alone), as on a GPU; afterwards the
    package's own cache holds no fake tensor."""
    from mrconvnext.layers import kernel_bank, kernel_params
    from mrconvnext.layers.kernel_params import FourierKernel

    originals = kernel_params.cache_or_body, kernel_bank.cache_or_body

    def count_twice():
        counter = gpu_cost.OpCounter()
        with FakeTensorMode():
            with torch.device('meta'):
                branch = FourierKernel(8, 40, 4)
            branch.modes = torch.nn.Parameter(torch.randn(8, 4, 2, device='cuda'))
            runs = []
            for _ in range(2):
                with counter:
                    branch()
                runs.append([(c.name, c.unit, c.cls) for c in counter.calls])
                counter.calls.clear()
        return runs

    kernel_params.fourier_basis.cache_clear()
    uncached = count_twice()
    assert uncached[0] == uncached[1] and ('aten::_to_copy', 'simt', 'sync') in uncached[1], uncached[1]
    assert sum(unit == 'cpu' for _, unit, _ in uncached[1]) >= 5
    with gpu_cost.steady_caches():
        first, second = count_twice()
    assert first == uncached[0]
    assert [name for name, _, _ in second] == ['aten::mm'], second
    assert (kernel_params.cache_or_body, kernel_bank.cache_or_body) == originals  # restored
    assert kernel_params.fourier_basis.cache_info().currsize == 0


def test_the_predicted_table_gives_the_device_time_beside_the_modeled_time(monkeypatch, tmp_path):
    """--table's rows, on stand-in counts (one large kernel behind a lot of host Python for every model but
    convnext_tiny): every row has as many cells as its header, the device time is the sum of the calls' device times
    and its ratio is taken against convnext_tiny's device time, while the modeled time also holds the host's."""
    gpu_cost._load_constants()

    def fake_count(spec, mode, batch, img_size=224, method='auto', kwargs=None, code=None):
        c_calls = 0 if spec == 'convnext_tiny' else 10**6
        calls = [gpu_cost.Call('aten::mm', 2**30, 2**30, 10**12, 'tensor', '', 0, c_calls)]
        return gpu_cost.StepCost(spec, mode, batch, calls, 2**30 if spec == 'convnext_tiny' else 2**31)

    monkeypatch.setattr(gpu_cost, 'count_in_process', fake_count)
    out = tmp_path / 'table.md'
    gpu_cost.predicted_table(out, 'h100')
    step = fake_count('x', 'train', 128)
    device = gpu_cost.device_total(step, 'h100')
    assert device == pytest.approx(gpu_cost.device_time(step.calls[0], 'h100'))
    assert gpu_cost.model_time(step, 'h100') > device
    rows = [line for line in out.read_text().splitlines() if line.startswith('|')]
    tables = {}
    for line in rows:
        cells = [c.strip() for c in line.strip('|').split('|')]
        if cells[0] in ('model', 'row', 'target row', 'family'):
            header = cells
            tables[cells[0]] = []
        elif not cells[0].startswith('---'):
            assert len(cells) == len(header), line
            tables[header[0]].append(dict(zip(header, cells, strict=True)))
    mr = {r['model']: r for r in tables['model']}['mrconvnext_t']
    assert float(mr['train device ms']) == pytest.approx(device * 1e3, abs=0.05)
    assert mr['device ratio'] == '1.00' and float(mr['step ratio']) > 1.0 and mr['memory ratio'] == '2.00'
    scale = [r for r in tables['row'] if r['row'] == "training step, combine='scale'"]
    assert len(scale) == 1 and scale[0]['device ratio'] == '1.00' and float(scale[0]['time ratio']) > 1.0
    # issue 40's verdicts: every row and each training step's memory, missed here, and the host named as the cause
    verdicts = {r['target row']: r for r in tables['target row']}
    assert set(verdicts) == {label for label, *_ in gpu_cost.MRCONV_ROWS} | {
        f'{label}, peak memory' for label, _, mode, *_ in gpu_cost.MRCONV_ROWS if mode == 'train'
    }
    assert verdicts["training step, combine='bn'"]['target (floor)'] == '1.25 (1.50)'
    assert all(r['verdict'] == 'missed' for r in verdicts.values())
    assert verdicts['deployed eval, batch 1']['what costs most over convnext_tiny (modeled)'].startswith('host-bound')
    # issue 44's: each other family's eval, step and memory, missed here too (twice convnext_tiny's memory)
    families = tables['family']
    assert [(r['family'], r['target row']) for r in families] == [
        (spec, row) for spec in gpu_cost.OTHER_FAMILIES_T for row in gpu_cost.FAMILY_TARGETS
    ]
    assert all(r['verdict'] == 'missed' for r in families) and families[2]['modeled ratio'] == '2.00'


def test_the_other_families_are_read_against_issue_44_s_targets():
    """Each family's eval, training step and peak memory as ratios to convnext_tiny's, with its verdict: an eval at
    1 / 0.9 of the time misses the throughput target 0.95 and meets the floor 0.85."""
    call = gpu_cost.Call('aten::mul', 10**9, 10**9, 0, 'simt')
    base_eval, base_train = (
        gpu_cost.StepCost('convnext_tiny', 'eval', 128, [call]),
        gpu_cost.StepCost('convnext_tiny', 'train', 128, [call] * 10, peak_bytes=1000),
    )
    base = dict(eval128=gpu_cost.model_time(base_eval, 'h100'), train=gpu_cost.model_time(base_train, 'h100'))
    base |= dict(peak=1000, steps=dict(eval128=base_eval, train=base_train))
    counted = {}
    for spec in gpu_cost.OTHER_FAMILIES_T:
        slow = gpu_cost.Call('aten::mul', int(10**9 / 0.9), int(10**9 / 0.9), 0, 'simt')
        counted[spec, 'eval'] = gpu_cost.StepCost(spec, 'eval', 128, [slow])
        counted[spec, 'train'] = gpu_cost.StepCost(spec, 'train', 128, [call] * 13, peak_bytes=1050)
    lines = gpu_cost.families_table('h100', base, counted)
    rows = [[cell.strip() for cell in line.strip('|').split('|')] for line in lines[2:]]
    assert len(rows) == 3 * len(gpu_cost.OTHER_FAMILIES_T)
    eval_row, step_row, memory_row = rows[:3]
    assert eval_row[:2] == ['talkconvnext_t', 'eval, batch 128'] and eval_row[2] == '1.05 (1.18)'
    assert float(eval_row[3]) == pytest.approx(1 / 0.9, abs=0.01) and eval_row[4] == 'floor met'
    assert step_row[3] == '1.30' and step_row[4] == 'missed'
    assert memory_row[3] == '1.05' and memory_row[4] == 'target met'


def test_a_verdict_reads_a_ratio_against_its_target_and_floor_and_names_the_ops_that_cost_most():
    assert [gpu_cost.verdict(r, 1.1, 1.2) for r in (0.9, 1.1, 1.15, 1.2, 1.21)] == [
        'target met',
        'target met',
        'floor met',
        'floor met',
        'missed',
    ]
    # a ratio that two decimals would show as the bound it misses gets a third
    assert [gpu_cost.ratio_text(r, 1.1, 1.25) for r in (1.1006, 1.1, 1.104, 1.2504, 0.9)] == [
        '1.101',
        '1.10',
        '1.104',
        '1.250',
        '0.90',
    ]
    big, small = (
        gpu_cost.Call('aten::_fft_r2c', 10**9, 10**9, 0, 'simt'),
        gpu_cost.Call('aten::mul', 10**8, 0, 0, 'simt'),
    )
    base = gpu_cost.StepCost('convnext_tiny', 'eval', 128, [small, small])
    step = gpu_cost.StepCost('m', 'eval', 128, [big, small, gpu_cost.Call('aten::add', 10**8, 10**8, 0, 'simt')])
    excess_fft = gpu_cost.device_time(big, 'h100')
    excess_add = gpu_cost.device_time(step.calls[2], 'h100')
    # the device-bound step: its ops by device time over the base's, those that cost no more than the base's left out
    assert gpu_cost.in_the_way(step, base, 'h100') == (
        f'`aten::_fft_r2c` +{excess_fft * 1e3:.1f} ms, `aten::add` +{excess_add * 1e3:.1f} ms'
    )
    host = gpu_cost.StepCost('m', 'eval', 1, [gpu_cost.Call('aten::add', 4, 4, 0, 'simt', '', 0, 1000)])
    assert gpu_cost.in_the_way(host, base, 'h100').startswith('host-bound') and '1000 op calls and 1 launches' in (
        gpu_cost.in_the_way(host, base, 'h100')
    )
