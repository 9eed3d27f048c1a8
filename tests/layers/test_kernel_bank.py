"""Batched kernel synthesis (``stack_branch_kernels``) against the naive per-lag reference and per-branch autograd."""

import contextlib

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from mrconvnext.layers import KERNEL_TYPES, MRConv1d, MRConv2d
from mrconvnext.layers.kernel_bank import stack_branch_kernels
from mrconvnext.layers.kernel_params import DilatedKernel, FourierKernel, fourier_basis
from tests.dispatch import RecordOps
from tests.reference import branch_kernel_reference

# (seq_len, kernel_size): short branches that cap the Fourier modes and the sparse taps, kernels longer than the map
SHAPES = [(40, 6), (7, 3), (100, 6), (3, 5)]


def _layer(kernel_type: str, causal: bool, seq_len: int, kernel_size: int, dtype=torch.float64) -> MRConv1d:
    torch.manual_seed(seq_len * 7 + kernel_size)
    taps = min(4, kernel_size) if kernel_type == 'dilated' else 4
    kw = dict(kernel_size=kernel_size, kernel_type=kernel_type, causal=causal, num_modes=5, num_taps=taps)
    return MRConv1d(3, seq_len, **kw).to(dtype)


def _per_branch(layer: MRConv1d) -> torch.Tensor:
    """Each branch module's own forward, zero-padded to the layer's layout by hand."""
    P = layer.reach if layer.causal else 2 * layer.reach - 1
    out = []
    for b in layer.branches:
        k = b()
        left = layer.zero_lag - b.zero_lag
        out.append(F.pad(k, (left, P - left - k.shape[-1])))
    return torch.stack(out)


def _grads(layer: MRConv1d, fn, g: torch.Tensor) -> list[torch.Tensor]:
    return torch.autograd.grad((fn() * g).sum(), list(layer.branches.parameters()))


@pytest.mark.parametrize('kernel_type', KERNEL_TYPES)
@pytest.mark.parametrize('causal', [False, True])
@pytest.mark.parametrize('shape', SHAPES)
@pytest.mark.parametrize('batched', [False, True])
def test_float64_equals_the_naive_reference_and_per_branch_gradients(kernel_type, causal, shape, batched):
    try:
        layer = _layer(kernel_type, causal, *shape)
    except ValueError:
        pytest.skip('dilated taps that would be cut: refused by the layer (tested in test_mrconv)')
    stacked = stack_branch_kernels(list(layer.branches), layer.reach, causal, batched=batched)
    ref = torch.stack([branch_kernel_reference(b, layer.reach, causal) for b in layer.branches])
    assert stacked.dtype == torch.float64 and stacked.shape == ref.shape
    torch.testing.assert_close(stacked, ref, rtol=0, atol=1e-13)
    g = torch.randn_like(ref)
    mine = _grads(layer, lambda: stack_branch_kernels(list(layer.branches), layer.reach, causal, batched=batched), g)
    naive = _grads(layer, lambda: _per_branch(layer), g)
    for a, b in zip(mine, naive):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize('kernel_type', ['fourier', 'fourier_sparse', 'sparse'])
@pytest.mark.parametrize('dtype', [torch.float32, torch.float16])
def test_float32_and_half_parameters_batched_equal_per_branch(kernel_type, dtype):
    """Fourier parts are built in float32 at least (as FourierKernel does); equal to float32 rounding of the sum."""
    layer = _layer(kernel_type, False, 100, 6, dtype)
    a = stack_branch_kernels(list(layer.branches), layer.reach, False, batched=True)
    b = _per_branch(layer)
    assert a.dtype == b.dtype == (dtype if kernel_type == 'sparse' else torch.float32)
    torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


def test_the_default_is_per_branch_on_the_cpu_and_batched_elsewhere():
    layer = _layer('fourier_sparse', False, 40, 6, torch.float32)
    ops = RecordOps()
    with ops:
        layer.branch_kernels()
    assert 'aten.bmm.default' not in ops.names and 'aten.constant_pad_nd.default' in ops.names
    ops = RecordOps()
    k = _on_fake_cuda(layer, MRConv1d.branch_kernels, ops)
    assert isinstance(k, FakeTensor) and k.device.type == 'cuda' and k.shape == (layer.num_branches, 3, 79)
    assert 'aten.bmm.default' in ops.names and 'aten.constant_pad_nd.default' not in ops.names


def _on_fake_cuda(module: torch.nn.Module, method, ops: RecordOps | None = None):
    """``method(module)`` with the module's parameters and buffers as fake CUDA tensors (under ``ops`` if given)."""
    mode = FakeTensorMode()
    state = {**dict(module.named_parameters()), **dict(module.named_buffers())}
    with mode:
        fake = {k: mode.from_tensor(v).to('cuda') for k, v in state.items()}
        with torch.nn.utils.stateless._reparametrize_module(module, fake), ops or contextlib.nullcontext():
            return method(module)


@pytest.mark.parametrize('kernel_type', KERNEL_TYPES)
def test_batched_op_count_does_not_grow_with_the_number_of_branches(kernel_type):
    """Forward and backward of all kernels: the same ATen ops for 2 and 5 branches (meta tensors; the geometry
    caches are warmed first), and fewer than 16 (the per-branch form: 6-12 per branch)."""
    counts = {}
    for max_branches in (2, 5):
        with torch.device('meta'):
            kt = dict(kernel_type=kernel_type, num_modes=5, num_taps=2)
            layer = MRConv1d(8, 200, kernel_size=13, max_branches=max_branches, **kt)
        assert layer.num_branches == max_branches
        for _ in range(2):
            ops = RecordOps()
            with ops:
                k = layer.branch_kernels()
                torch.autograd.grad(k.sum(), list(layer.branches.parameters()))
        counts[max_branches] = ops.work
    assert sorted(counts[2]) == sorted(counts[5]), counts
    assert len(counts[5]) < 16, counts[5]


def test_sparse_positions_are_read_at_every_call():
    """Edited or loaded tap positions are never served from a cache."""
    layer = _layer('fourier_sparse', False, 40, 6)
    before = stack_branch_kernels(list(layer.branches), layer.reach, False, batched=True)
    other = _layer('fourier_sparse', False, 40, 6)
    torch.manual_seed(123)
    other_positions = torch.rand(3, layer.branches[2].sparse.size).argsort(1)[:, :4].sort(1).values
    with torch.no_grad():
        layer.branches[2].sparse.positions.copy_(other_positions)
    after = stack_branch_kernels(list(layer.branches), layer.reach, False, batched=True)
    ref = torch.stack([branch_kernel_reference(b, layer.reach, False) for b in layer.branches])
    torch.testing.assert_close(after, ref, rtol=0, atol=1e-13)
    assert not torch.equal(before, after)
    layer.load_state_dict(other.state_dict())
    torch.testing.assert_close(
        stack_branch_kernels(list(layer.branches), layer.reach, False, batched=True),
        torch.stack([branch_kernel_reference(b, layer.reach, False) for b in other.branches]),
        rtol=0,
        atol=1e-13,
    )


@pytest.mark.parametrize('shape', [(40, 6), (7, 3)])  # equal mode counts / capped ones
def test_compiled_batched_synthesis_equals_eager(shape):
    layer = _layer('fourier_sparse', False, *shape, torch.float32)
    branches = list(layer.branches)

    def run():
        return stack_branch_kernels(branches, layer.reach, False, batched=True)

    g = torch.randn_like(run())
    eager = [run(), *_grads(layer, run, g)]
    compiled_fn = torch.compile(run, fullgraph=True, backend='inductor')
    compiled = [compiled_fn(), *_grads(layer, compiled_fn, g)]
    for a, b in zip(eager, compiled):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_fake_tensors_never_enter_the_basis_caches():
    """A fake (or traced) call builds the bases without caching them: a later real call gets a real tensor."""
    fourier_basis.cache_clear()
    assert isinstance(_on_fake_cuda(FourierKernel(2, 9, 3), FourierKernel.forward), FakeTensor)
    layer = MRConv1d(2, 30, kernel_size=4, num_modes=3, num_taps=2)
    assert isinstance(_on_fake_cuda(layer, MRConv1d.branch_kernels), FakeTensor)
    assert fourier_basis.cache_info().currsize == 0
    real = fourier_basis(17, 3, 16, torch.float32, torch.device('cpu'))
    assert not isinstance(real, FakeTensor)


def test_mixed_or_too_long_branches_raise():
    a = FourierKernel(3, 5, 2)
    b = DilatedKernel(3, 2, 2)
    with pytest.raises(ValueError, match='one kernel type'):
        stack_branch_kernels([a, b], 5, False, batched=True)
    with pytest.raises(ValueError, match='reach <= 4'):
        stack_branch_kernels([a], 4, False)
    with pytest.raises(ValueError, match='causal=True'):
        stack_branch_kernels([a], 5, True)


@pytest.mark.parametrize('combine', ['bn', 'scale'])
def test_reparameterize_gives_the_per_branch_kernel(combine):
    """The deployed kernel is the fold of today's per-branch kernels, on either synthesis (float64, exact)."""
    layer = MRConv2d(4, (6, 7), kernel_size=5, num_modes=4, num_taps=3, combine=combine).double()
    layer.eval()
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    per_branch = layer.merged_kernel()  # the CPU default
    layer.branch_kernels = lambda: stack_branch_kernels(list(layer.branches), layer.reach, False, batched=True)
    for a, b in zip(per_branch, layer.merged_kernel()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-13)
