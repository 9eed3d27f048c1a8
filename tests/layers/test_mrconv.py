import pytest
import torch

from mrconvnext.layers import KERNEL_TYPES, MRConv1d, MRConv2d
from mrconvnext.layers.kernel_params import (
    FourierKernel,
    fourier_basis,
)
from mrconvnext.ops.long_conv import dispatch as long_conv_dispatch
from tests.dispatch import RecordOps
from tests.reference import branch_kernel_reference, shifted_sum_conv

# --- independent reference: kernels from the parameters by naive formulas, convolution by a tap loop


def _reference_forward(layer: MRConv1d, x: torch.Tensor, training: bool, conv=None) -> torch.Tensor:
    """The layer by naive formulas, on ``(B, C, L)``: each branch's dense kernel ``k`` (lag 0 at ``zero_lag``)
    applied by ``conv(x, k, zero_lag) -> (B, C, L')`` (default: the tap loop on ``x``; the size tests pass the 2-D
    rules' references), then the BatchNorms over those outputs and the weighted sum."""
    x = x.double()
    conv = conv or shifted_sum_conv
    R, causal = layer.reach, layer.causal
    outs = []
    for b in layer.branches:
        outs.append(conv(x, branch_kernel_reference(b, R, causal), 0 if causal else R - 1))
    if layer.combine == 'scale':
        beta = layer.beta.detach().double()
        return sum(beta[i, :, None] * o for i, o in enumerate(outs)) + layer.bias.detach().double()[:, None]
    C = layer.dim
    bn = layer.bn
    y = 0
    for i, o in enumerate(outs):
        sl = slice(i * C, (i + 1) * C)
        if training:
            mean, var = o.mean(dim=(0, 2)), o.var(dim=(0, 2), unbiased=False)
        else:
            mean, var = bn.running_mean[sl].double(), bn.running_var[sl].double()
        o = (o - mean[:, None]) / torch.sqrt(var[:, None] + bn.eps)
        o = o * bn.weight[sl].detach().double()[:, None] + bn.bias[sl].detach().double()[:, None]
        y = y + layer.alpha[i].detach().double()[:, None] * o
    return y


def _make(kernel_type, combine, causal=False, dim=4, seq_len=40, two_d=False, **kw):
    kw = {**dict(kernel_size=6, kernel_type=kernel_type, combine=combine, causal=causal, num_modes=5, num_taps=4), **kw}
    if two_d:
        return MRConv2d(dim, (5, seq_len // 5), **kw)
    return MRConv1d(dim, seq_len, **kw)


def _train_a_little(layer, shape, steps=3):
    layer.train()
    opt = torch.optim.SGD(layer.parameters(), lr=0.05)
    for _ in range(steps):
        x = torch.randn(shape, dtype=next(layer.parameters()).dtype) * 2 + 0.5
        loss = layer(x).pow(2).mean() + layer(x).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.parametrize('kernel_type', KERNEL_TYPES)
@pytest.mark.parametrize('combine', ['bn', 'scale'])
@pytest.mark.parametrize('causal', [False, True])
def test_branched_layer_matches_naive_reference(kernel_type, combine, causal):
    layer = _make(kernel_type, combine, causal).double()
    _train_a_little(layer, (3, 4, 40))
    for L in (40, 23, 57):  # nominal, shorter and longer sequences
        x = torch.randn(3, 4, L, dtype=torch.float64)
        for training in (True, False):
            layer.train(training)
            with torch.no_grad():
                y = layer(x)
            torch.testing.assert_close(y, _reference_forward(layer, x, training), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize('kernel_type', KERNEL_TYPES)
@pytest.mark.parametrize('combine', ['bn', 'scale'])
@pytest.mark.parametrize('two_d', [False, True])
def test_reparameterized_equals_branched_float32(kernel_type, combine, two_d):
    """Tolerance: 1e-5 relative to the output's largest magnitude, in float32."""
    layer = _make(kernel_type, combine, two_d=two_d, seq_len=60)
    shape = (4, 4, 5, 12) if two_d else (4, 4, 60)
    _train_a_little(layer, shape)
    if combine == 'bn':  # the fold is not trivial: statistics moved away from (0, 1)
        assert (layer.bn.running_mean.abs() > 1e-3).any() and (layer.bn.running_var - 1).abs().max() > 1e-2
    layer.eval()
    x = torch.randn(shape)
    with torch.no_grad():
        y = layer(x)
        layer.reparameterize()
        assert layer.deployed and not hasattr(layer, 'branches')
        y_rep = layer(x)
        layer.reparameterize()  # idempotent
        y_rep2 = layer(x)
    scale = y.abs().max()
    assert (y - y_rep).abs().max() <= 1e-5 * scale
    assert torch.equal(y_rep, y_rep2)


@pytest.mark.parametrize('kernel_type', KERNEL_TYPES)
def test_gradcheck(kernel_type):
    layer = _make(kernel_type, 'bn', dim=2, seq_len=12, kernel_size=3).double().train()
    names, params = zip(*[(n, p) for n, p in layer.named_parameters()])
    x = torch.randn(2, 2, 12, dtype=torch.float64, requires_grad=True)

    def f(x, *ps):
        return torch.func.functional_call(layer, dict(zip(names, ps)), (x,))

    assert torch.autograd.gradcheck(f, (x, *[p.detach().clone().requires_grad_() for p in params]))


def test_gradcheck_scale_combine():
    layer = _make('fourier_sparse', 'scale', dim=2, seq_len=12, kernel_size=3).double()
    names, params = zip(*layer.named_parameters())
    x = torch.randn(2, 2, 12, dtype=torch.float64, requires_grad=True)
    f = lambda x, *ps: torch.func.functional_call(layer, dict(zip(names, ps)), (x,))
    assert torch.autograd.gradcheck(f, (x, *[p.detach().clone().requires_grad_() for p in params]))


@pytest.mark.parametrize(
    ('reach', 'modes', 'causal'),
    [(5, 3, False), (6, 4, True), (7, 4, True), (40, 37, False), (3136, 37, False)],
    ids=['odd', 'even+nyquist', 'odd-causal', 'short', 'stage1'],
)
def test_fourier_kernel_equals_irfft(reach, modes, causal):
    """The matmul synthesis equals torch.fft.irfft (+ roll to the centred layout): float64 to 1e-12 of the
    kernel's largest tap; float32 (the training dtype) to 1e-5 of it, against the float64 irfft."""
    k = FourierKernel(3, reach, modes, causal).double()
    with torch.no_grad():
        k.modes.normal_()
    ref = torch.fft.irfft(torch.view_as_complex(k.modes.detach()), n=k.size, norm='ortho')
    ref = ref if causal else torch.roll(ref, k.zero_lag, -1)
    scale = ref.abs().max()
    assert (k() - ref).abs().max() <= 1e-12 * scale
    assert (k.float()().double() - ref).abs().max() <= 1e-5 * scale


def test_fourier_basis_first_built_in_inference_mode_trains():
    """A basis first built under inference_mode is a normal tensor: a later training step can save it."""
    fourier_basis.cache_clear()
    k = FourierKernel(2, 11, 3, causal=False).double()
    with torch.inference_mode():
        k()
    g = torch.randn(2, k.size, dtype=torch.float64)
    (k() * g).sum().backward()
    # d/dmodes of sum(g * F_modes): the adjoint, via autograd through irfft on a fresh copy
    modes = k.modes.detach().clone().requires_grad_()
    ref = torch.roll(torch.fft.irfft(torch.view_as_complex(modes), n=k.size, norm='ortho'), k.zero_lag, -1)
    (ref * g).sum().backward()
    torch.testing.assert_close(k.modes.grad, modes.grad, rtol=1e-12, atol=1e-12)


def test_resolutions_and_clipping():
    # ConvNeXt-T stage lengths with the paper's smallest kernels
    for L, l0, n, reach in [(3136, 196, 5, 3136), (784, 49, 5, 784), (196, 28, 4, 196), (49, 28, 2, 49)]:
        layer = MRConv1d(2, L, kernel_size=l0, kernel_type='fourier', num_modes=8)
        assert layer.num_branches == n and layer.reach == reach
        assert [b.reach for b in layer.branches] == [min(l0 * 2**i, L) for i in range(n)]
    assert MRConv1d(2, 10, kernel_size=64, kernel_type='sparse').reach == 10  # longer than the sequence: clipped
    assert MRConv1d(2, 10_000, kernel_size=4, max_branches=3).num_branches == 3


@pytest.mark.parametrize('kernel_type', ['dilated', 'fourier', 'sparse', 'fourier_sparse'])
def test_same_parameter_count_per_branch(kernel_type):
    layer = MRConv1d(3, 1024, kernel_size=16, kernel_type=kernel_type, num_modes=6, num_taps=8)
    counts = {sum(p.numel() for p in b.parameters()) for b in layer.branches}
    assert len(counts) == 1


def test_sparse_positions_survive_save_load(tmp_path):
    from safetensors.torch import load_file, save_file

    a = MRConv1d(4, 64, kernel_size=8, kernel_type='sparse', seed=1)
    b = MRConv1d(4, 64, kernel_size=8, kernel_type='sparse', seed=2)
    assert not all(torch.equal(pa.positions, pb.positions) for pa, pb in zip(a.branches, b.branches))
    save_file(a.state_dict(), tmp_path / 'a.safetensors')
    b.load_state_dict(load_file(tmp_path / 'a.safetensors'))
    a.eval(), b.eval()
    x = torch.randn(2, 4, 64)
    assert torch.equal(a(x), b(x))


def test_seed_none_follows_global_rng():
    torch.manual_seed(0)
    a = MRConv1d(4, 64, kernel_size=8, kernel_type='sparse')
    torch.manual_seed(0)
    b = MRConv1d(4, 64, kernel_size=8, kernel_type='sparse')
    assert all(torch.equal(pa.positions, pb.positions) for pa, pb in zip(a.branches, b.branches))


@pytest.mark.parametrize('combine', ['bn', 'scale'])
def test_deployed_state_dict_round_trip(combine):
    layer = _make('fourier_sparse', combine, seq_len=40)
    _train_a_little(layer, (3, 4, 40))
    layer.eval()
    x = torch.randn(2, 4, 40)
    with torch.no_grad():
        y = layer(x)
        layer.reparameterize()
        sd = layer.state_dict()
        assert set(sd) == {'kernel', 'bias'}
        built_deployed = _make('fourier_sparse', combine, seq_len=40, deploy=True)
        built_deployed.load_state_dict(sd)
        branched = _make('fourier_sparse', combine, seq_len=40).eval()
        branched.load_state_dict(sd)  # converts itself to the deployed form
        assert branched.deployed
        for m in (built_deployed, branched):
            assert (m(x) - y).abs().max() <= 1e-5 * y.abs().max()


@pytest.mark.parametrize('combine', ['bn', 'scale'])
@pytest.mark.parametrize('kernel_type', ['sparse', 'fourier_sparse', 'dilated'])
def test_branched_state_dict_loads_into_a_deployed_layer(combine, kernel_type):
    """Issue 23 item 9: a branched checkpoint in a deploy=True layer gave a raw missing/unexpected-keys error. It is
    now built, loaded (sparse positions included) and folded: equal to the branched layer in eval mode, float64."""
    torch.manual_seed(0)
    layer = _make(kernel_type, combine, seq_len=40).double()
    _train_a_little(layer, (3, 4, 40))
    layer.eval()
    deployed = _make(kernel_type, combine, seq_len=40, deploy=True, seed=123).double()
    deployed.load_state_dict(layer.state_dict())
    assert deployed.deployed and not hasattr(deployed, 'branches')
    x = torch.randn(2, 4, 40, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(deployed(x), layer(x), rtol=1e-10, atol=1e-10)


def test_parameter_groups():
    layer = _make('fourier_sparse', 'bn', seq_len=40)
    names = layer.kernel_parameter_names()
    assert names and all(n.endswith(('modes', 'weight')) and n.startswith('branches.') for n in names)
    assert 'alpha' in layer.no_weight_decay_names() and 'bn.weight' not in names
    layer.reparameterize()
    assert layer.kernel_parameter_names() == ['kernel']


def test_autocast_bfloat16():
    layer = _make('fourier_sparse', 'bn', seq_len=40).eval()
    x = torch.randn(2, 4, 40)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        y = layer(x.bfloat16())
    assert y.shape == x.shape and torch.isfinite(y).all()
    assert (y.float() - layer(x)).abs().max() <= 0.05 * layer(x).abs().max()


def test_2d_flattens_row_major():
    layer2 = _make('fourier', 'scale', two_d=True, seq_len=40).double()
    layer1 = MRConv1d(4, 40, kernel_size=6, kernel_type='fourier', combine='scale', num_modes=5).double()
    layer1.load_state_dict(layer2.state_dict())
    x = torch.randn(2, 4, 5, 8, dtype=torch.float64)
    torch.testing.assert_close(layer2(x), layer1(x.reshape(2, 4, 40)).reshape(2, 4, 5, 8))


@pytest.mark.parametrize(
    'x, err, match',
    [
        (torch.randn(2, 4), ValueError, r'\(B, C, L\)'),
        (torch.randn(2, 5, 40), ValueError, '4 channels'),
        (torch.ones(2, 4, 40, dtype=torch.int32), TypeError, 'floating-point'),
        (torch.randn(2, 4, 0), ValueError, 'empty'),
    ],
)
def test_bad_inputs(x, err, match):
    with pytest.raises(err, match=match):
        _make('fourier', 'bn')(x)


def test_bad_inputs_2d_and_options():
    with pytest.raises(ValueError, match=r'\(B, C, H, W\)'):
        _make('fourier', 'bn', two_d=True)(torch.randn(2, 4, 40))
    with pytest.raises(ValueError, match='kernel_type'):
        MRConv1d(4, 40, kernel_type='wavelet')
    with pytest.raises(ValueError, match='combine'):
        MRConv1d(4, 40, combine='sum')


def test_deployed_form_keeps_device_and_dtype():
    layer = _make('fourier', 'bn', seq_len=40).double().eval()
    sd = {k: v.clone() for k, v in _make('fourier', 'bn', seq_len=40, deploy=True).double().state_dict().items()}
    layer.reparameterize()
    assert layer.kernel.dtype == layer.bias.dtype == torch.float64
    branched = _make('fourier', 'bn', seq_len=40).double()
    branched.load_state_dict(sd)
    assert branched.kernel.dtype == torch.float64


@pytest.mark.parametrize('momentum', [0.1, None])
@pytest.mark.parametrize('path', ['fused-kernel', 'folded', 'alpha-in-affine'])
def test_alpha_folded_into_batch_norm_matches_the_module_path(monkeypatch, momentum, path):
    """The operator paths equal calling the BatchNorm module and weighting by alpha (as a converted, e.g.
    synchronized, norm module is used): outputs, gradients and running statistics. 'fused-kernel' is the
    native conv + BatchNorm + sum op of CPU training; 'folded' the merged-convolution operator that CUDA training
    takes (made to apply on the CPU here); 'alpha-in-affine' F.batch_norm with alpha in its affine transform (the
    CPU's torch engine, and eval mode everywhere)."""
    from mrconvnext.layers import branch_norm
    from mrconvnext.ops import branch_conv_bn_sum_supported

    if path == 'fused-kernel' and not branch_conv_bn_sum_supported(torch.zeros(1, 1, 1)):
        pytest.skip('fused CPU extension unavailable (no MKL or no compiler)')
    calls = {'fused-kernel': [], 'folded': []}
    real_fused, real_folded = branch_norm.branch_conv_bn_sum, branch_norm.folded_bn_conv
    monkeypatch.setattr(
        branch_norm, 'branch_conv_bn_sum', lambda *a, **k: calls['fused-kernel'].append(1) or real_fused(*a, **k)
    )
    monkeypatch.setattr(
        branch_norm, 'folded_bn_conv', lambda *a, **k: calls['folded'].append(1) or real_folded(*a, **k)
    )
    if path == 'folded':
        monkeypatch.setattr(long_conv_dispatch, 'NO_FOLD_DEVICES', ())  # the fold on the CPU too

    class OtherNorm(torch.nn.BatchNorm1d):  # any subclass takes the generic path
        pass

    fused = _make('fourier_sparse', 'bn', seq_len=40).double()
    fused.engine = 'auto' if path == 'fused-kernel' else 'torch'  # the CPU's torch engine: F.batch_norm
    generic = _make('fourier_sparse', 'bn', seq_len=40).double()
    fused.bn.momentum = momentum
    generic.load_state_dict(fused.state_dict())
    other = OtherNorm(generic.bn.num_features, momentum=momentum).double()
    other.load_state_dict(generic.bn.state_dict())
    generic.bn = other
    with torch.no_grad():
        for m in (fused, generic):
            m.alpha.uniform_(0.5, 1.5)
            m.bn.weight.uniform_(0.5, 1.5)
            m.bn.bias.normal_()
    generic.alpha.data.copy_(fused.alpha.data)
    generic.bn.weight.data.copy_(fused.bn.weight.data)
    generic.bn.bias.data.copy_(fused.bn.bias.data)
    for training in (True, True, False):
        fused.train(training), generic.train(training)
        x = torch.randn(3, 4, 40, dtype=torch.float64)
        y1, y2 = fused(x), generic(x)
        torch.testing.assert_close(y1, y2, rtol=1e-12, atol=1e-12)
        g = torch.randn_like(y1)
        g1 = torch.autograd.grad(y1, [fused.alpha, fused.bn.weight, fused.bn.bias], g)
        g2 = torch.autograd.grad(y2, [generic.alpha, generic.bn.weight, generic.bn.bias], g)
        for a, b in zip(g1, g2):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    for name in ('running_mean', 'running_var', 'num_batches_tracked'):
        torch.testing.assert_close(getattr(fused.bn, name), getattr(generic.bn, name))
    assert len(calls.get(path, [])) == (0 if path == 'alpha-in-affine' else 2)  # the two training steps
    assert sum(map(len, calls.values())) == (0 if path == 'alpha-in-affine' else 2)


def test_deployed_layer_on_changing_lengths_issue_reproducer():
    # Regression (issue 13): L=19 then L=20 share an FFT size; the cached spectrum of the 19-lag crop was reused.
    m = MRConv1d(4, 20, causal=True, max_branches=1, method='fft').eval()
    m.reparameterize()
    with torch.no_grad():
        m.kernel.normal_()
        for L in (19, 20, 19, 20, 33):
            x = torch.randn(2, 4, L)
            ref = shifted_sum_conv(x.double(), m.kernel.double(), 0) + m.bias.double()[:, None]
            torch.testing.assert_close(m(x).double(), ref, rtol=1e-5, atol=1e-5)


def test_dilated_taps_that_would_be_cut_raise():
    # Regression (issue 13): num_taps beyond the common reach silently dropped taps (parameters without gradient).
    with pytest.raises(ValueError, match='num_taps <= 4'):
        MRConv1d(2, 100, kernel_size=2, max_branches=2, kernel_type='dilated', num_taps=10)
    # taps whose lags lie beyond the nominal length are left out, so every parameter gets a gradient
    m = MRConv1d(2, 100, kernel_size=28, kernel_type='dilated')
    m(torch.randn(2, 2, 100)).square().sum().backward()
    for name, p in m.named_parameters():
        if name.endswith('weight') and 'branches' in name:
            assert (p.grad != 0).all(), name


def _heads_groups_reference(layer: MRConv1d, x: torch.Tensor) -> torch.Tensor:
    """A grouped / multi-head layer in training mode by one depthwise F.conv1d per (head, channel), float64: output
    channel ``h C + g M + m`` is input channel ``g M + m`` convolved with head ``h``'s filter ``m``."""
    import torch.nn.functional as F

    heads, C = layer.heads, layer.dim
    M = C // layer.groups
    R = layer.reach
    filters = [branch_kernel_reference(b, R, False) for b in layer.branches]  # (H M, 2R - 1) each
    outs = []
    for f in filters:  # one depthwise convolution per (head, channel), with its head's filter for the group
        rows = [
            F.conv1d(x[:, c : c + 1], f[h * M + c % M].flip(-1).view(1, 1, -1), padding=R - 1)
            for h in range(heads)
            for c in range(C)
        ]
        outs.append(torch.cat(rows, dim=1))
    D = heads * C
    if layer.combine == 'scale':
        beta = layer.beta.detach()
        ref = sum(beta[i, :, None] * o for i, o in enumerate(outs)) + layer.bias.detach()[:, None]
    else:
        bn, alpha = layer.bn, layer.alpha.detach()
        ref = 0
        for i, o in enumerate(outs):
            sl = slice(i * D, (i + 1) * D)
            z = (o - o.mean(dim=(0, 2), keepdim=True)) / (
                o.var(dim=(0, 2), unbiased=False, keepdim=True) + bn.eps
            ).sqrt()
            ref = ref + alpha[i, :, None] * (z * bn.weight[sl].detach()[:, None] + bn.bias[sl].detach()[:, None])
    return ref


@pytest.mark.parametrize('kernel_type', KERNEL_TYPES)
@pytest.mark.parametrize('combine', ['bn', 'scale'])
@pytest.mark.parametrize(('groups', 'heads'), [(2, 1), (3, 1), (1, 2), (3, 2)])
def test_heads_and_groups_equal_independent_depthwise_convs(kernel_type, combine, groups, heads):
    """groups=G (paper App. B.2) and heads=H (App. B.1): H * C / G filters per branch; output channel h C + g M + m is
    input channel g M + m convolved with head h's filter m. The layer equals a loop of independent depthwise
    F.conv1d calls in float64 (training statistics), and reparameterize() stays exact."""
    C, L = 6, 40
    layer = _make(kernel_type, combine, dim=C, seq_len=L, groups=groups, heads=heads).double()
    M = C // groups
    assert all(b.dim == heads * M for b in layer.branches) and layer.out_dim == heads * C
    _train_a_little(layer, (3, C, L))
    x = torch.randn(4, C, L, dtype=torch.float64)
    ref = _heads_groups_reference(layer, x)
    layer.train()
    torch.testing.assert_close(layer(x), ref, rtol=1e-10, atol=1e-10)
    layer.eval()
    with torch.no_grad():
        y = layer(x)
        layer.reparameterize()
        torch.testing.assert_close(layer(x), y, rtol=1e-10, atol=1e-10)
    assert layer.kernel.shape[0] == heads * C  # the deployed kernel is expanded to the output channels


@pytest.mark.parametrize('path', ['fused', 'torch', 'fold'])
@pytest.mark.parametrize(('groups', 'heads'), [(3, 1), (3, 2), (1, 2)])
def test_heads_and_groups_on_every_training_path(monkeypatch, path, groups, heads):
    """The three training paths of a grouped / multi-head layer: the CPU's fused operator (expanded kernels), the
    'torch' engine's branch convolutions and the fold (shared filters with one head), which the layers take on
    CUDA (made to apply on the CPU here). Outputs equal the per-channel F.conv1d reference; parameter gradients and
    running statistics equal the branch-convolution path's, in float64."""

    C, L = 6, 40
    torch.manual_seed(0)
    base = _make('fourier_sparse', 'bn', dim=C, seq_len=L, groups=groups, heads=heads, engine='torch').double()
    _train_a_little(base, (3, C, L))
    layer = _make('fourier_sparse', 'bn', dim=C, seq_len=L, groups=groups, heads=heads).double()
    layer.load_state_dict(base.state_dict())
    if path == 'torch':
        layer.engine = 'torch'
    if path == 'fold':  # the fold on the CPU too, in place of the fused operator (its convolutions stay native)
        form = long_conv_dispatch.branch_sum_form
        monkeypatch.setattr(long_conv_dispatch, 'NO_FOLD_DEVICES', ())
        monkeypatch.setattr(
            long_conv_dispatch, 'branch_sum_form', lambda *a, **k: form(*a, **k).replace('fused', 'fold')
        )
    x = torch.randn(4, C, L, dtype=torch.float64)
    ref = _heads_groups_reference(layer, x)
    with RecordOps() as rec:
        y = layer(x)
    y_base = base(x)
    ops = {'fused': 'mrconvnext.branch_conv_bn_sum', 'fold': 'mrconvnext.folded_bn_conv'}
    assert [n for n in rec.names if n.startswith(tuple(ops.values()))] == (
        [ops[path] + '.default'] if path in ops else []
    )
    torch.testing.assert_close(y, ref, rtol=1e-10, atol=1e-10)
    g = torch.randn_like(y)
    got = torch.autograd.grad(y, list(layer.parameters()), g)
    want = torch.autograd.grad(y_base, list(base.parameters()), g)
    for (name, _), a, b in zip(layer.named_parameters(), got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, msg=name)
    for name in ('running_mean', 'running_var'):
        torch.testing.assert_close(getattr(layer.bn, name), getattr(base.bn, name), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize('lag_remap', ['split', 'conv2d'])
def test_heads_2d_at_other_sizes(lag_remap):
    """A multi-head 2-D layer is its heads side by side: head h's output equals a one-head layer holding head h's
    filters, BatchNorms and weights, at the nominal size and at sizes where the lag rules apply; a deployed
    checkpoint loads into a branched layer of the same heads."""
    C, heads = 4, 3
    layer = _make('fourier_sparse', 'bn', dim=C, seq_len=40, two_d=True, heads=heads, lag_remap=lag_remap).double()
    _train_a_little(layer, (2, C, 5, 8))
    layer.eval()
    sd = layer.state_dict()
    for h in range(heads):
        one = _make('fourier_sparse', 'bn', dim=C, seq_len=40, two_d=True, lag_remap=lag_remap).double().eval()
        part = {}
        for k, v in sd.items():
            if k.startswith('branches.') and v.dim() >= 1 and v.shape[0] == heads * C:
                v = v[h * C : (h + 1) * C]
            elif k.startswith('bn.') and v.dim() == 1:
                v = v.view(-1, heads * C)[:, h * C : (h + 1) * C].reshape(-1)
            elif k == 'alpha':
                v = v[:, h * C : (h + 1) * C]
            part[k] = v
        one.load_state_dict(part)
        for size in [(5, 8), (4, 11), (7, 6)]:
            x = torch.randn(2, C, *size, dtype=torch.float64)
            with torch.no_grad():
                torch.testing.assert_close(layer(x)[:, h * C : (h + 1) * C], one(x), rtol=1e-12, atol=1e-12)
    deployed = _make('fourier_sparse', 'bn', dim=C, seq_len=40, two_d=True, heads=heads, deploy=True).double()
    with torch.no_grad():
        layer.reparameterize()
    deployed.load_state_dict(layer.state_dict())
    x = torch.randn(2, C, 5, 8, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(deployed.eval()(x), layer(x), rtol=0, atol=0)


def test_reduced_dimension_parameters_and_bad_groups():
    full, grouped = (_make('fourier_sparse', 'bn', dim=12, groups=g) for g in (1, 4))
    count = lambda m: sum(p.numel() for n, p in m.named_parameters() if n.startswith('branches.'))  # noqa: E731
    assert count(grouped) * 4 == count(full)
    with pytest.raises(ValueError, match=r'groups \(5\) must divide dim \(12\)'):
        _make('fourier', 'bn', dim=12, groups=5)
    two = _make('fourier_sparse', 'bn', dim=12, groups=4, heads=2)
    assert count(two) == 2 * count(grouped)
    assert two(torch.randn(2, 12, 40)).shape == (2, 24, 40)
    for bad in (0, -1):
        with pytest.raises(ValueError, match='heads'):
            _make('fourier', 'bn', dim=12, heads=bad)
    with pytest.raises(TypeError, match='heads'):
        _make('fourier', 'bn', dim=12, heads=1.5)
