"""The folded training form of MRConv (mrconvnext.ops.long_conv.fold_bn): outputs, statistics and every gradient
against autograd through a naive per-branch reference (tap-loop convolution, F.batch_norm, alpha-weighted sum) in
float64; float32 statistics at a large input mean; opcheck; a compiled training step; and on fake CUDA tensors what
the operators save and run."""

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from mrconvnext.layers import MRConv2d
from mrconvnext.ops.long_conv import fold_bn
from mrconvnext.ops.long_conv.fold_bn import folded_bn_conv
from tests.reference import shifted_sum_conv

DT = torch.float64


def naive(x, kernels, zero_lag, weight, bias, alpha, eps=1e-5):
    """``(y, mean, var)`` by a convolution per branch, F.batch_norm (training) and the alpha-weighted sum."""
    z = torch.stack([shifted_sum_conv(x, kernels[i], zero_lag) for i in range(kernels.shape[0])])  # (N, B, C, L)
    y = sum(alpha[i].view(1, -1, 1) * F.batch_norm(z[i], None, None, weight[i], bias[i], True, 0.0, eps)
            for i in range(kernels.shape[0]))  # fmt: skip
    return y, z.mean((1, 3)), z.var((1, 3), unbiased=False)


# (B, C, L, N, K, zero_lag, input mean): bidirectional, causal, longer than the map, tiny B * L, a large mean
CASES = [
    (3, 2, 12, 3, 23, 11, 0.0),
    (2, 3, 9, 4, 17, 8, 1000.0),
    (1, 2, 5, 2, 5, 0, 0.0),
    (2, 2, 7, 2, 40, 25, 0.0),
    (1, 1, 2, 2, 3, 1, 0.0),
    (4, 2, 10, 5, 10, 0, 5.0),
]


@pytest.mark.parametrize('method, engine', [('auto', 'auto'), ('fft', 'torch'), ('direct', 'auto'),
                                            ('toeplitz', 'auto'), ('rowdft', 'auto')])  # fmt: skip
@pytest.mark.parametrize('B, C, L, N, K, zero_lag, shift', CASES)
def test_outputs_statistics_and_gradients_match_the_naive_form(B, C, L, N, K, zero_lag, shift, method, engine):
    _check_against_naive(B, C, L, N, K, zero_lag, shift, method, engine)


def _check_against_naive(B, C, L, N, K, zero_lag, shift, method, engine):
    x = (torch.randn(B, C, L, dtype=DT) + shift).requires_grad_()
    k = torch.randn(N, C, K, dtype=DT, requires_grad=True)
    w, b, a = (torch.randn(N, C, dtype=DT, requires_grad=True) for _ in range(3))
    g = torch.randn(B, C, L, dtype=DT)
    y, mean, var = folded_bn_conv(x, k, zero_lag, w, b, a, method=method, engine=engine)
    y_ref, mean_ref, var_ref = naive(x, k, zero_lag, w, b, a)
    tol = dict(rtol=1e-9, atol=1e-9 * (1 + shift))
    torch.testing.assert_close(y, y_ref, **tol)
    torch.testing.assert_close(mean, mean_ref.detach(), **tol)
    torch.testing.assert_close(var, var_ref.detach(), rtol=1e-9, atol=1e-9)
    for got, want in zip(torch.autograd.grad(y, (x, k, w, b, a), g), torch.autograd.grad(y_ref, (x, k, w, b, a), g),
                         strict=True):  # fmt: skip
        torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-9 * (1 + shift) * want.abs().max().item())


# items per chunk: 8 + 8 + 3 (7 balanced, rounded up) and 16 + 16 + 5 (13 balanced, rounded up)
@pytest.mark.parametrize('B, most', [(19, 9), (37, 16)])
@pytest.mark.parametrize('method, engine', [('fft', 'torch'), ('toeplitz', 'auto')])
def test_batch_chunks_match_the_naive_form(monkeypatch, B, most, method, engine):
    """The statistics and the backward over several batch chunks (merged moments, summed gradients) against the naive
    form over the whole batch, in float64."""
    C, L, N = 2, 6, 3
    monkeypatch.setattr(fold_bn, 'CHUNK_ELEMS', most * N * C * L)
    assert len(list(fold_bn._chunks(B, N * C * L))) == 3
    _check_against_naive(B, C, L, N, 9, 4, 3.0, method, engine)


def test_batch_chunks_cover_the_batch_in_equal_aligned_slices(monkeypatch):
    """Every batch in order, as few chunks as the bound allows, all but the last of one size, that size a multiple of
    8 where one within the bound gives as few chunks: 128 items at up to 111 per chunk as 64 + 64, not 111 + 17."""
    monkeypatch.setattr(fold_bn, 'CHUNK_ELEMS', 1000)
    assert [s.stop - s.start for s in fold_bn._chunks(128, 9)] == [64, 64]
    for B in range(1, 140):
        for per_item in (1, 7, 9, 33, 77, 120, 999, 1000, 1001, 5000):
            most = max(1, 1000 // per_item)
            fewest = -(-B // most)
            sizes = [s.stop - s.start for s in fold_bn._chunks(B, per_item)]
            starts = [s.start for s in fold_bn._chunks(B, per_item)]
            assert starts == [sum(sizes[:i]) for i in range(len(sizes))] and sum(sizes) == B
            assert max(sizes) <= most and len(sizes) == fewest, (B, per_item, sizes)
            if len(sizes) > 1:
                assert len(set(sizes[:-1])) == 1 and sizes[-1] <= sizes[0], (B, per_item, sizes)
                # a multiple of 8 within the bound that still gives the fewest chunks
                aligned_fits = any(-(-B // m) == fewest for m in range(8, most + 1, 8))
                assert sizes[0] % 8 == 0 or not aligned_fits, (B, per_item, sizes)


@pytest.mark.parametrize('method, engine', [('auto', 'auto'), ('fft', 'torch'), ('direct', 'auto'),
                                            ('toeplitz', 'auto'), ('rowdft', 'auto')])  # fmt: skip
@pytest.mark.parametrize('causal', [False, True])
def test_shared_filters_match_the_naive_form(method, engine, causal):
    """Kernels of M shared filters (N, M, K) for C = G M channels (channel g M + m: filter m): outputs, statistics and
    every gradient equal the naive form with the filters expanded to the channels (its autograd sums a filter's
    gradient over its channels), at an input mean of 100, in float64."""
    B, G, M, N, L = 3, 3, 2, 3, 11
    K, zero_lag = (15, 0) if causal else (21, 10)
    x = (torch.randn(B, G * M, L, dtype=DT) + 100).requires_grad_()
    k = torch.randn(N, M, K, dtype=DT, requires_grad=True)
    w, b, a = (torch.randn(N, G * M, dtype=DT, requires_grad=True) for _ in range(3))
    g = torch.randn(B, G * M, L, dtype=DT)
    y, mean, var = folded_bn_conv(x, k, zero_lag, w, b, a, method=method, engine=engine)
    y_ref, mean_ref, var_ref = naive(x, k.repeat(1, G, 1), zero_lag, w, b, a)
    torch.testing.assert_close(y, y_ref, rtol=1e-9, atol=1e-7)
    torch.testing.assert_close(mean, mean_ref.detach(), rtol=1e-9, atol=1e-7)
    torch.testing.assert_close(var, var_ref.detach(), rtol=1e-9, atol=1e-9)
    for got, want in zip(torch.autograd.grad(y, (x, k, w, b, a), g), torch.autograd.grad(y_ref, (x, k, w, b, a), g),
                         strict=True):  # fmt: skip
        torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-7 * want.abs().max().item())


def test_float32_statistics_at_a_large_input_mean():
    """At an input mean of 1000 the float32 operator keeps float64 BatchNorm's statistics and output to 1e-4
    (measured: 1.3e-7 relative on the variance, 8.7e-8 on y): the branch outputs are formed from a centred input."""
    torch.manual_seed(0)
    x = torch.randn(4, 8, 196, dtype=DT) + 1000
    k = torch.randn(3, 8, 391, dtype=DT) / 20
    w, b, a = (torch.randn(3, 8, dtype=DT) for _ in range(3))
    y, mean, var = folded_bn_conv(x.float(), k.float(), 195, w.float(), b.float(), a.float())
    y_ref, mean_ref, var_ref = naive(x, k, 195, w, b, a)
    assert ((var - var_ref).abs() / var_ref).max() < 1e-4
    assert ((mean - mean_ref).abs() / mean_ref.abs()).max() < 1e-4
    assert ((y.double() - y_ref).abs().max() / y_ref.abs().max()) < 1e-4


@pytest.mark.parametrize('method, engine', [('fft', 'auto'), ('fft', 'torch'), ('direct', 'auto'),
                                            ('toeplitz', 'auto'), ('rowdft', 'auto')])  # fmt: skip
def test_opcheck(method, engine):
    """Schema, fake implementation and autograd registration of both operators, on every method inside."""
    x = torch.randn(2, 3, 8, dtype=DT, requires_grad=True)
    k = torch.randn(2, 3, 15, dtype=DT, requires_grad=True)
    w, b, a = (torch.randn(2, 3, dtype=DT, requires_grad=True) for _ in range(3))
    args = (x, k, 7, w, b, a, 1e-5, method, engine, False)
    torch.library.opcheck(fold_bn.folded_bn_conv_op, args)
    mean, var = torch.rand(2, 3, dtype=DT), torch.rand(2, 3, dtype=DT) + 0.5
    bwd = (torch.randn(2, 3, 8, dtype=DT), x.detach(), k.detach(), 7, w.detach(), b.detach(), a.detach(), mean, var,
           1e-5, method, engine, False)  # fmt: skip
    torch.library.opcheck(fold_bn.folded_bn_conv_backward_op, bwd)
    shared = torch.randn(2, 1, 15, dtype=DT, requires_grad=True)  # one filter shared by the 3 channels
    torch.library.opcheck(fold_bn.folded_bn_conv_op, (x, shared, *args[2:]))
    torch.library.opcheck(fold_bn.folded_bn_conv_backward_op, (*bwd[:2], shared.detach(), *bwd[3:]))


def test_a_compiled_training_step_equals_eager(monkeypatch):
    """MRConv2d training (branched, BatchNorm) through the fold (which the layers take on CUDA; made to apply on the
    CPU here): one SGD step compiled with fullgraph=True equals eager (outputs, parameters after the step, running
    statistics); the eager step runs the operator and its backward."""
    from mrconvnext.ops.long_conv import dispatch as long_conv_dispatch

    monkeypatch.setattr(long_conv_dispatch, 'NO_FOLD_DEVICES', ())  # the fold on the CPU too
    torch.manual_seed(0)
    layers = [MRConv2d(8, (6, 5), engine='torch').double() for _ in range(2)]
    layers[1].load_state_dict(layers[0].state_dict())
    x = torch.randn(4, 8, 6, 5, dtype=DT)

    def step(layer, fn):
        opt = torch.optim.SGD(layer.parameters(), lr=0.1)
        y = fn(x)
        y.square().mean().backward()
        opt.step()
        return y.detach()

    torch._dynamo.reset()
    ops = _Ops()
    with ops:
        y_eager = step(layers[0], layers[0])
    assert {'mrconvnext.folded_bn_conv.default', 'mrconvnext.folded_bn_conv_backward.default'} <= ops.ops
    y_comp = step(layers[1], torch.compile(layers[1], fullgraph=True))
    torch.testing.assert_close(y_comp, y_eager, rtol=1e-10, atol=1e-10)
    for (name, p0), p1 in zip(layers[0].state_dict().items(), layers[1].state_dict().values(), strict=True):
        torch.testing.assert_close(p1, p0, rtol=1e-10, atol=1e-10, msg=name)


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.add(str(func))
        return func(*args, **(kwargs or {}))


def test_on_cuda_nothing_of_size_B_N_C_L_is_saved():
    """Fake CUDA tensors, a stage-1 mixer's shapes (B = 32, C = 96, 56 x 56, N = 5), bf16: autograd saves only x,
    the kernels, the affine parameters and the statistics, and the forward and backward implementations run what
    'auto' picks for a long map on CUDA, torch.fft (no matrix products)."""
    B, C, L, N = 32, 96, 3136, 5
    saved = []
    with FakeTensorMode():
        x = torch.randn(B, C, 56, 56, device='cuda').to(memory_format=torch.channels_last).flatten(2)
        x = x.to(torch.bfloat16).requires_grad_()
        k = torch.randn(N, C, 2 * L - 1, device='cuda', dtype=torch.bfloat16, requires_grad=True)
        w, b, a = (torch.randn(N, C, device='cuda', dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.shape) or t, lambda t: t):
            y, mean, var = folded_bn_conv(x, k, L - 1, w, b, a)
        assert max(s.numel() for s in saved) < B * N * C * L / 4, saved
        ops = _Ops()
        with ops:  # the operators' implementations (FakeTensorMode runs only their fake ones)
            x, k, w, b, a = (t.detach() for t in (x, k, w, b, a))
            y, mean, var = fold_bn.folded_bn_conv_forward(x, k, L - 1, w, b, a, 1e-5, 'auto', 'auto', False)
            grads = fold_bn.folded_bn_conv_backward(torch.randn_like(y), x, k, L - 1, w, b, a, mean, var, 1e-5,
                                                    'auto', 'auto', False)  # fmt: skip
    assert y.dtype == torch.bfloat16 and y.shape == (B, C, L)
    assert [g.shape for g in grads] == [x.shape, k.shape, w.shape, b.shape, a.shape]
    assert 'mrconvnext.fft_conv.default' in ops.ops, sorted(ops.ops)  # its CUDA kernel: torch.fft
    assert 'aten.bmm.default' not in ops.ops


class _Float64(TorchDispatchMode):
    """The most elements of any float64 tensor an op produces."""

    def __init__(self) -> None:
        super().__init__()
        self.most = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.dtype == torch.float64:
                self.most = max(self.most, t.numel())
        return out


def test_on_cuda_no_float64_tensor_larger_than_the_kernels_is_made():
    """Fake CUDA tensors, float32, a stage-3 mixer's shapes: the forward and backward implementations accumulate
    their statistics in float64 from per-sequence sums: no float64 tensor has more elements than the kernels (N C K,
    K = 2L - 1, and the prefix sums of the taps), none the batch's size (the input's batch sum is one
    reduction accumulating in float64). On a GPU, float64 passes over the N branch outputs cost more than the
    convolutions."""
    B, C, L, N = 32, 32, 196, 5
    with FakeTensorMode():
        x = torch.randn(B, C, L, device='cuda')
        k = torch.randn(N, C, 2 * L - 1, device='cuda')
        w, b, a = (torch.randn(N, C, device='cuda') for _ in range(3))
        rec = _Float64()
        with rec:
            y, mean, var = fold_bn.folded_bn_conv_forward(x, k, L - 1, w, b, a, 1e-5, 'auto', 'auto', False)
            fold_bn.folded_bn_conv_backward(torch.randn_like(y), x, k, L - 1, w, b, a, mean, var, 1e-5, 'auto',
                                            'auto', False)  # fmt: skip
    assert 0 < rec.most <= N * C * 2 * L < B * C * L, rec.most  # the taps' prefix sums: K + 1 = 2L per kernel


@pytest.mark.parametrize('method', ['toeplitz', 'rowdft'])
def test_the_backward_on_the_matmul_methods_runs_no_fft(method):
    """The backward implementation on the matmul methods (what CUDA runs where it asks for them), here on the CPU:
    no aten._fft_*."""
    x = torch.randn(2, 4, 49, dtype=DT)
    k = torch.randn(3, 4, 97, dtype=DT)
    w, b, a = (torch.randn(3, 4, dtype=DT) for _ in range(3))
    ops = _Ops()
    with ops:
        y, mean, var = fold_bn.folded_bn_conv_forward(x, k, 48, w, b, a, 1e-5, method, 'auto', False)
        grads = fold_bn.folded_bn_conv_backward(torch.randn_like(y), x, k, 48, w, b, a, mean, var, 1e-5, method,
                                                'auto', False)  # fmt: skip
    assert not [op for op in ops.ops if 'fft' in op], sorted(ops.ops)
    assert [g.shape for g in grads] == [x.shape, k.shape, w.shape, b.shape, a.shape]


class _TransposingCopies(TorchDispatchMode):
    """The element counts of the copies (``clone``, ``copy_``, ``_to_copy``) whose source and result have their
    unit strides along different dimensions: copies between memory layouts, which GPUs run at a fraction of a
    copy's speed (docs/gpu/cost-model-calibration.md)."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in (torch.ops.aten.clone.default, torch.ops.aten.copy_.default, torch.ops.aten._to_copy.default):
            src = args[1] if func is torch.ops.aten.copy_.default else args[0]

            def unit(t):
                return [d for d in range(t.dim()) if t.stride(d) == 1 and t.shape[d] > 1]

            if src.dim() == out.dim() and unit(src) != unit(out):
                self.sizes.append(out.numel())
        return out


def test_the_toeplitz_backward_reorders_no_branch_outputs():
    """A channels-last map and output gradient, as the models pass them, on the Toeplitz product (what 'auto' trains
    short maps on in large CUDA batches; the batch innermost in its products): the backward implementation reorders
    single maps (``g``, ``x``, ``grad_x``) but none of the ``N``-map branch tensors (the product's own layout is
    kept from the branch outputs to their gradients and into its backward). The row DFT transposes its spectra
    around the block products by design (``engine_torch.rowdft_conv``)."""
    B, C, H, N = 8, 4, 7, 3
    L = H * H
    x = torch.randn(B, C, H, H, dtype=DT).to(memory_format=torch.channels_last).flatten(2)
    g = torch.randn(B, C, H, H, dtype=DT).to(memory_format=torch.channels_last).flatten(2)
    k = torch.randn(N, C, 2 * L - 1, dtype=DT)
    w, b, a = (torch.randn(N, C, dtype=DT) for _ in range(3))
    y, mean, var = fold_bn.folded_bn_conv_forward(x, k, L - 1, w, b, a, 1e-5, 'toeplitz', 'auto', False)
    rec = _TransposingCopies()
    with rec:
        fold_bn.folded_bn_conv_backward(g, x, k, L - 1, w, b, a, mean, var, 1e-5, 'toeplitz', 'auto', False)
    assert max(rec.sizes, default=0) <= B * C * L, rec.sizes


SYNC_DRIVER = """
import json, sys
import torch
import torch.distributed as dist
import torch.nn.functional as F
from mrconvnext.ops.long_conv import folded_bn_conv
from tests.reference import shifted_sum_conv

dist.init_process_group('gloo')
rank, world = dist.get_rank(), dist.get_world_size()
g = torch.Generator().manual_seed(0)
DT = torch.float64
B, C, L, N, K, zl = 6, 3, 11, 3, 21, 10
X = torch.randn(B, C, L, dtype=DT, generator=g) + 3
k0 = torch.randn(N, C, K, dtype=DT, generator=g)
w0, b0, a0 = (torch.randn(N, C, dtype=DT, generator=g) for _ in range(3))
G = torch.randn(B, C, L, dtype=DT, generator=g)

def leaves():
    return [t.clone().requires_grad_() for t in (k0, w0, b0, a0)]

# one process over the whole batch, naive: convolutions, F.batch_norm, the alpha-weighted sum
Xf = X.clone().requires_grad_()
k, w, b, a = leaves()
z = [shifted_sum_conv(Xf, k[i], zl) for i in range(N)]
y_ref = sum(a[i].view(1, -1, 1) * F.batch_norm(z[i], None, None, w[i], b[i], True, 0.0, 1e-5) for i in range(N))
ref = torch.autograd.grad(y_ref, (Xf, k, w, b, a), G)
st = torch.stack(z)
# this process's half, synchronized
sl = slice(rank * B // world, (rank + 1) * B // world)
Xl = X[sl].clone().requires_grad_()
k, w, b, a = leaves()
y, mean, var = folded_bn_conv(Xl, k, zl, w, b, a, sync=True)
got = list(torch.autograd.grad(y, (Xl, k, w, b, a), G[sl]))
for t in got[1:]:
    dist.all_reduce(t)  # the parameters' gradients: this process's share, summed by DDP
err = {
    'y': (y - y_ref[sl]).abs().max().item(),
    'mean': (mean - st.mean((1, 3))).abs().max().item(),
    'var': (var - st.var((1, 3), unbiased=False)).abs().max().item(),
    'grad_x': (got[0] - ref[0][sl]).abs().max().item(),
}
err.update({n: (p - q).abs().max().item() for n, p, q in zip(('k', 'w', 'b', 'a'), got[1:], ref[1:])})

# a layer whose BatchNorm is converted to the layers' DistBatchNorm: the fold (made to apply on the CPU) equals the
# synchronized module path (outputs, running statistics, the parameters' local gradients)
from mrconvnext.layers import MRConv1d, branch_norm
from mrconvnext.ops.long_conv import dispatch as long_conv_dispatch
from mrconvnext.layers.sync_bn import convert_sync_batchnorm
torch.manual_seed(0)
layers = [MRConv1d(C, L).double() for _ in range(2)]
layers[1].load_state_dict(layers[0].state_dict())
for layer in layers:
    layer.bn = convert_sync_batchnorm(layer.bn)
y_module = layers[0](X[sl])
real, real_sum, calls = long_conv_dispatch.NO_FOLD_DEVICES, branch_norm.folded_conv_norm_sum, []
long_conv_dispatch.NO_FOLD_DEVICES = ()  # the fold on the CPU too (the synchronized BatchNorm is not fused)
branch_norm.folded_conv_norm_sum = lambda *a, **k: calls.append(1) or real_sum(*a, **k)
y_fold = layers[1](X[sl])
long_conv_dispatch.NO_FOLD_DEVICES, branch_norm.folded_conv_norm_sum = real, real_sum
g_module = torch.autograd.grad(y_module, [layers[0].alpha, layers[0].bn.weight], G[sl])
g_fold = torch.autograd.grad(y_fold, [layers[1].alpha, layers[1].bn.weight], G[sl])
err['layer_y'] = (y_fold - y_module).abs().max().item()
err['layer_grads'] = max((p - q).abs().max().item() for p, q in zip(g_fold, g_module))
err['layer_running'] = max((getattr(layers[1].bn, n) - getattr(layers[0].bn, n)).abs().max().item()
                           for n in ('running_mean', 'running_var'))
with open(f'rank{rank}.json', 'w') as f:
    json.dump({'err': err, 'fold_calls': len(calls)}, f)
dist.destroy_process_group()
"""


def test_synchronized_statistics_over_two_processes_equal_one_process_over_the_whole_batch(tmp_path):
    """torchrun, 2 gloo processes, each with half the batch: the synchronized fold gives each half of the output,
    the statistics, the input gradient and (summed over the processes) the parameters' gradients of one process
    over the whole batch through the naive form (float64); and a layer with a synchronized BatchNorm computes through
    the fold what the synchronized module computes (outputs, running statistics, gradients)."""
    import json
    import os
    import subprocess
    import sys

    from tests.limits import HANG_LIMIT_S

    repo = __import__('pathlib').Path(__file__).resolve().parents[3]
    driver = tmp_path / 'driver.py'
    driver.write_text(SYNC_DRIVER)
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=str(repo) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node', '2', str(driver)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=HANG_LIMIT_S)
    assert proc.returncode == 0, proc.stderr[-4000:]
    reports = [json.loads((tmp_path / f'rank{r}.json').read_text()) for r in (0, 1)]
    for rep in reports:
        assert rep['fold_calls'] == 1 and max(rep['err'].values()) < 1e-9, rep


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_half_precision_statistics_and_gradients_neither_overflow_nor_round_to_the_dtype(dtype):
    """Branch outputs of magnitude ~300 in fp16 / bf16 and a loss-scaled output gradient (squares and products past
    fp16's range): the variances and every gradient are finite and agree with the float64 fold run on the same
    half-precision values, to the rounding of the half-precision branch outputs themselves (2e-2). Squares taken in
    fp16 overflow here."""
    torch.manual_seed(0)
    B, C, L, N, K = 4, 3, 40, 2, 79
    x = (30 * torch.randn(B, C, L)).to(dtype)
    k = (torch.randn(N, C, K) / 2).to(dtype)
    w, b, a = (torch.rand(N, C, dtype=torch.float64) + 0.5 for _ in range(3))
    g = (torch.randn(B, C, L) * 1e3).to(dtype)  # a loss-scaled output gradient
    out = fold_bn.folded_bn_conv_forward(x, k, L - 1, w, b, a, 1e-5, 'fft', 'torch', False)
    ref = fold_bn.folded_bn_conv_forward(x.double(), k.double(), L - 1, w, b, a, 1e-5, 'fft', 'torch', False)
    assert out[2].isfinite().all() and ((out[2] - ref[2]).abs() / ref[2]).max() < 2e-2
    grads = fold_bn.folded_bn_conv_backward(g, x, k, L - 1, w, b, a, *out[1:], 1e-5, 'fft', 'torch', False)
    refs = fold_bn.folded_bn_conv_backward(g.double(), x.double(), k.double(), L - 1, w, b, a, *ref[1:], 1e-5, 'fft',
                                           'torch', False)  # fmt: skip
    for got, want in zip(grads, refs, strict=True):
        assert got.float().isfinite().all()
        assert (got.double() - want).norm() / want.norm() < 2e-2


def test_clamped_window_equals_a_clamped_gather():
    """Every window position relative to both ends (before, inside, past, around the whole of ``p``) against
    ``p[..., clamp(start + arange(count), 0, M - 1)]``, bit for bit."""
    from mrconvnext.ops.long_conv.conv_bn_sum import clamped_window

    p = torch.randn(2, 3, 7, dtype=DT)
    for start in range(-10, 12):
        for count in (1, 3, 7, 12, 25):
            want = p[..., (start + torch.arange(count)).clamp(0, 6)]
            got = clamped_window(p, start, count)
            assert got.shape == want.shape and torch.equal(got, want), (start, count)


@pytest.mark.parametrize('L, K, zero_lag', [(12, 23, 11), (12, 5, 0), (12, 5, 4), (5, 23, 3), (5, 23, 20), (1, 1, 0)])
def test_ones_response_is_the_convolution_of_ones(L, K, zero_lag):
    """Kernels longer and shorter than the sequence, causal and past its end, against the tap-loop convolution of a
    sequence of ones in float64 (``_reached_sums``, the same windows of prefix sums, is checked through the fold's
    kernel gradients above)."""
    from mrconvnext.ops.long_conv.conv_bn_sum import ones_response

    k = torch.randn(2, 3, K, dtype=DT)
    conv = torch.stack([shifted_sum_conv(torch.ones(1, 3, L, dtype=DT), k[i], zero_lag)[0] for i in range(2)])
    torch.testing.assert_close(ones_response(k, zero_lag, L), conv, rtol=1e-12, atol=1e-12)
