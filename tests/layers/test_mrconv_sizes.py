"""MRConv2d at input sizes other than its nominal one: the size rules, stale kernels, deep copies and the grid record.

References: ``'conv2d'``: ``F.conv2d`` with the 2-D kernel of identity 1 built by a loop (``tests.reference``);
``'split'``: the tap loop of the fractional remap rule, then a tap-loop convolution; ``'none'``: the tap loop on the
nominal lags."""

import copy

import pytest
import torch

from mrconvnext.layers import KERNEL_TYPES, MRConv1d, MRConv2d
from tests.layers.test_mrconv import _reference_forward, _train_a_little
from tests.reference import conv2d_same, dense_kernel, kernel_2d, remap_lags_loop, shifted_sum_conv

NOMINAL = (5, 8)


def _layer(kernel_type='fourier_sparse', combine='bn', causal=False, **kw) -> MRConv2d:
    kw = {**dict(kernel_size=6, kernel_type=kernel_type, combine=combine, causal=causal, num_modes=5, num_taps=4), **kw}
    return MRConv2d(4, NOMINAL, **kw)


def _trained(layer: MRConv2d) -> MRConv2d:
    """Non-trivial BatchNorm statistics, alpha and kernels."""
    layer = layer.double()
    _train_a_little(layer, (3, 4, *NOMINAL))
    return layer.eval()


def _rule_conv(rule: str, size: tuple[int, int]):
    """The reference of one kernel under ``rule`` on an ``size`` map: ``conv(x (B, C, H, W), k, zero_lag)``."""

    def conv(x, k, zero_lag):
        x = x.reshape(x.shape[0], x.shape[1], *size)
        if rule == 'conv2d':
            return conv2d_same(x, kernel_2d(k, zero_lag, NOMINAL)).flatten(2)
        if rule == 'split':
            k, zero_lag = dense_kernel(remap_lags_loop(k, zero_lag, NOMINAL[1], size[1], size[0] * size[1]))
        return shifted_sum_conv(x.flatten(2).double(), k, zero_lag)

    return conv


@pytest.mark.parametrize('kernel_type', KERNEL_TYPES)
@pytest.mark.parametrize('combine', ['bn', 'scale'])
@pytest.mark.parametrize('causal', [False, True])
@pytest.mark.parametrize('size', [(6, 11), (7, 5), (3, 3), (9, NOMINAL[1])])
@pytest.mark.parametrize('rule', ['conv2d', 'split', 'none'])
def test_branched_layer_at_another_size_matches_its_rule_reference(kernel_type, combine, causal, size, rule):
    """Eval and training mode (batch statistics over the map's own pixels), float64."""
    layer = _trained(_layer(kernel_type, combine, causal, lag_remap=rule))
    x = torch.randn(2, 4, *size, dtype=torch.float64)
    for training in (False, True):
        layer.train(training)
        y = layer(x).reshape(2, 4, -1)
        ref = _reference_forward(layer, x, training, _rule_conv(rule, size))
        torch.testing.assert_close(y, ref, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize('causal', [False, True])
@pytest.mark.parametrize('size', [(6, 11), (7, 5), (2, 1), (12, 20), (9, NOMINAL[1])])
def test_conv2d_rule_is_the_2d_convolution_of_the_nominal_layer(causal, size):
    """Deployed, float64: the layer on any map is F.conv2d with the 2-D kernel of its flattened kernel at the
    nominal size (identity 1), whose own nominal-size output it reproduces."""
    layer = _trained(_layer(causal=causal, lag_remap='conv2d'))
    layer.reparameterize()
    K2 = kernel_2d(layer.kernel.detach(), layer.zero_lag, NOMINAL)
    bias = layer.bias.detach()[None, :, None, None]
    with torch.no_grad():
        for s in (NOMINAL, size):
            x = torch.randn(2, 4, *s, dtype=torch.float64)
            torch.testing.assert_close(layer(x), conv2d_same(x, K2) + bias, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize('combine', ['bn', 'scale'])
@pytest.mark.parametrize('size', [(6, 11), (9, 4)])
@pytest.mark.parametrize('rule', ['conv2d', 'split'])
def test_reparameterized_equals_branched_at_another_size_float32(combine, size, rule):
    """The deployed kernel is adapted as a whole, the branched layer branch by branch: the rules are linear, so
    they agree to float32 rounding (tolerance 2e-5 relative to the output scale, as at the nominal size)."""
    layer = _trained(_layer('fourier_sparse', combine, lag_remap=rule)).float()
    x = torch.randn(3, 4, *size)
    y = layer(x)
    layer.reparameterize()
    torch.testing.assert_close(layer(x), y, rtol=2e-5, atol=2e-5 * y.abs().max().item())


@pytest.mark.parametrize(
    'rule, size',
    [(r, s) for r in ('conv2d', 'split') for s in (NOMINAL, (2, NOMINAL[1]))] + [('split', (9, NOMINAL[1]))],
)
@pytest.mark.parametrize('deploy', [False, True])
def test_identity_at_the_nominal_width(rule, size, deploy):
    """Where a rule leaves the kernel as it is (the nominal width; for 'conv2d' at most the nominal height, where
    the plain kernel is the 2-D convolution), the output is bitwise the one of the nominal lags."""
    layer = _trained(_layer(lag_remap=rule))
    if deploy:
        layer.reparameterize()
    off = _trained(_layer(lag_remap='none'))
    off.load_state_dict(layer.state_dict())
    x = torch.randn(2, 4, *size, dtype=torch.float64)
    for training in (False,) if deploy else (False, True):
        layer.train(training)
        off.train(training)
        assert torch.equal(layer(x), off(x))


@pytest.mark.parametrize('value, rule', [(True, 'split'), (False, 'none'), ('conv2d', 'conv2d')])
def test_lag_remap_values(value, rule):
    assert _layer(lag_remap=value).lag_remap == rule
    assert _layer().lag_remap == 'split'
    with pytest.raises(ValueError, match=r"lag_remap must be one of \('split', 'conv2d', 'none'\)"):
        _layer(lag_remap='bilinear')


@pytest.mark.parametrize('rule', ['conv2d', 'split'])
def test_whole_row_kernel_stays_vertical(rule):
    """A deployed kernel with taps only at whole rows at the nominal width is, at another width, a purely vertical
    filter: on an image constant along each row, the output is constant along each row too."""
    layer = _layer(deploy=True, lag_remap=rule).double().eval()
    W = NOMINAL[1]
    with torch.no_grad():
        layer.kernel.zero_()
        n = (layer.reach - 1) // W
        rows = torch.arange(-n, n + 1) * W + layer.zero_lag
        layer.kernel[:, rows] = torch.randn(4, rows.numel(), dtype=torch.float64)
    x = torch.randn(2, 4, 7, 1, dtype=torch.float64).expand(2, 4, 7, 13)
    y = layer(x)
    torch.testing.assert_close(y, y[..., :1].expand_as(y), rtol=0, atol=1e-12)
    off = _layer(deploy=True, lag_remap='none').double().eval()
    off.load_state_dict(layer.state_dict())
    y_off = off(x)
    assert (y_off - y_off[..., :1]).abs().max() > 1e-3  # without the remap the rows mix columns


def test_gradients_flow_at_another_width():
    layer = _layer().double().train()
    x = torch.randn(2, 4, 6, 11, dtype=torch.float64, requires_grad=True)
    layer(x).pow(2).sum().backward()
    grads = [p.grad for p in layer.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert x.grad is not None
    # the sparse taps' gradient matches a finite difference through the remapped kernels
    w = layer.branches[0].sparse.weight
    eps = 1e-6
    with torch.no_grad():
        w[0, 0] += eps
        plus = layer(x).pow(2).sum()
        w[0, 0] -= 2 * eps
        minus = layer(x).pow(2).sum()
        w[0, 0] += eps
    torch.testing.assert_close(w.grad[0, 0], (plus - minus) / (2 * eps), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('size', [NOMINAL, (6, 11)])
@pytest.mark.parametrize('rule', ['split', 'conv2d'])
@pytest.mark.parametrize('edit', ['data_mul', 'data_copy', 'detach_fill', 'data_assign', 'half_and_back'])
def test_deployed_cache_never_serves_a_stale_kernel(size, rule, edit):
    """Issue 23 item 2: edits through ``.data`` (and ``.detach()``) bypass the version counter; the next forward
    must still use the new kernel. Reference: the rule's reference on the edited kernel, and a fresh layer loaded
    with the edited weights."""
    layer = _trained(_layer(lag_remap=rule))
    layer.reparameterize()
    x = torch.randn(2, 4, *size, dtype=torch.float64)
    with torch.no_grad():
        layer(x)  # fills the cache
        k = layer.kernel
        if edit == 'data_mul':
            k.data.mul_(2)
        elif edit == 'data_copy':
            k.data.copy_(torch.randn_like(k))
        elif edit == 'detach_fill':
            k.detach()[:, ::3] = 0.5
        elif edit == 'data_assign':
            k.data = torch.randn_like(k)
        else:
            layer.half()
            layer.double()
            k.data[:, :5] += 1
        fresh = _layer(deploy=True, lag_remap=rule).double().eval()
        fresh.load_state_dict(layer.state_dict())
        ref = _rule_conv(rule, size)(x, layer.kernel, layer.zero_lag).view_as(x) + layer.bias[None, :, None, None]
        torch.testing.assert_close(layer(x), ref, rtol=1e-10, atol=1e-10)
        assert torch.equal(layer(x), fresh(x))


def test_deployed_layer_deep_copies_after_running_at_another_size():
    """Issue 23 item 5: the cached adapted kernel carried an autograd graph, and deepcopy refused it. Also through
    timm's reparameterize_model and ModelEmaV3 (both deep-copy), under inference_mode too."""
    from timm.utils import ModelEmaV3, reparameterize_model

    layer = _trained(_layer())
    layer.reparameterize()
    x = torch.randn(2, 4, 6, 11, dtype=torch.float64)
    with torch.no_grad():
        y = layer(x)
    with torch.inference_mode():
        layer(torch.randn(1, 4, 3, 13, dtype=torch.float64))
    for copied in (copy.deepcopy(layer), reparameterize_model(layer), ModelEmaV3(layer).module):
        with torch.no_grad():
            assert torch.equal(copied(x), y)


def test_grid_is_recorded_and_checked_on_load():
    layer = _layer()
    assert layer.state_dict()['nominal_size'].tolist() == list(NOMINAL)
    sd = layer.state_dict()
    other = MRConv2d(4, (8, 5), kernel_size=6, kernel_type='fourier_sparse', num_modes=5, num_taps=4)
    with pytest.raises(RuntimeError, match=r'built for a \(8, 5\) grid .* kernels for \(5, 8\)'):
        other.load_state_dict(sd)
    # written by an earlier version (no grid): taken to be the layer's own
    old = {k: v for k, v in sd.items() if k != 'nominal_size'}
    fresh = _layer()
    fresh.load_state_dict(old)
    x = torch.randn(1, 4, *NOMINAL)
    torch.testing.assert_close(fresh.eval()(x), layer.eval()(x), rtol=0, atol=0)
    # a 2-D layer's state dict still fits a 1-D layer of the same length, not one of another
    MRConv1d(4, 40, kernel_size=6, kernel_type='fourier_sparse', num_modes=5, num_taps=4).load_state_dict(sd)
    with pytest.raises(RuntimeError, match='5x8 grid'):
        MRConv1d(4, 45, kernel_size=6, kernel_type='fourier_sparse', num_modes=5, num_taps=4).load_state_dict(sd)


@pytest.mark.parametrize(
    'grid', [torch.tensor([5]), torch.tensor([5, 8, 1]), torch.tensor([0, 8]), torch.tensor([5.0, 8.0])]
)
def test_malformed_grid_record_is_a_clear_load_error(grid):
    """Issue 23 item 9: a one-element nominal_size gave an IndexError."""
    sd = {**_layer().state_dict(), 'nominal_size': grid}
    with pytest.raises(RuntimeError, match=r'nominal_size must be a grid of two positive ints \(H, W\)'):
        _layer().load_state_dict(sd)
    with pytest.raises(ValueError, match=r'nominal_size must be a grid of two positive ints \(H, W\)'):
        MRConv1d(4, 40, kernel_size=6, kernel_type='fourier_sparse', num_modes=5, num_taps=4).load_state_dict(sd)


def test_bad_input_size():
    with pytest.raises(ValueError, match='two positive ints'):
        MRConv2d(4, (5,))
    with pytest.raises(TypeError, match=r'input_size\[1\] must be an int >= 1, got float'):
        MRConv2d(4, (5, 8.0))


@pytest.mark.parametrize('deploy', [False, True])
def test_compiled_equals_eager_at_another_width(deploy):
    """torch.compile (inductor, fullgraph) of the layer at a non-nominal size: forward, and for the branched layer a
    training step's input and parameter gradients, against eager (float32 rounding)."""
    layer = _trained(_layer()).float()
    if deploy:
        layer.reparameterize()
    x = torch.randn(2, 4, 6, 11)
    compiled = torch.compile(layer, fullgraph=True)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), layer(x), rtol=1e-5, atol=1e-5)
    if deploy:
        return
    layer.train()
    grads = []
    for fn in (layer, compiled):
        layer.zero_grad()
        xi = x.clone().requires_grad_()
        fn(xi).pow(2).mean().backward()
        grads.append([xi.grad] + [p.grad.clone() for p in layer.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_adapted_kernel_built_in_inference_mode_serves_a_frozen_layer_in_training():
    """A deployed layer first run at another size under inference_mode, then frozen inside a model that trains
    (its input requires grad): the kept adapted kernel is a plain tensor, so the backward runs."""
    layer = _trained(_layer())
    layer.reparameterize()
    layer.requires_grad_(False)
    x = torch.randn(2, 4, 6, 11, dtype=torch.float64)
    with torch.inference_mode():
        ref = layer(x)
    xi = x.clone().requires_grad_()
    y = layer(xi)
    y.sum().backward()
    torch.testing.assert_close(y.detach(), ref, rtol=0, atol=0)
    assert xi.grad is not None and torch.isfinite(xi.grad).all()
