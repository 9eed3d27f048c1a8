"""Tests for the TaLK modules (mrconvnext.layers.talk): shapes, gradients, conventions, dropout, options."""

from __future__ import annotations

import pytest
import torch

from mrconvnext.layers.talk import TaLKConv1d, TaLKConv2d, TaLKConvFlat2d
from mrconvnext.ops.talk import talk1d_reference, talk2d_reference


def _backward_ok(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    x = x.detach().requires_grad_()
    y = module(x)
    assert y.shape == x.shape and y.dtype == x.dtype
    (y * torch.randn_like(y)).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    for name, p in module.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name
    return y


@pytest.mark.parametrize('causal', [False, True])
def test_talk1d_module(causal):
    m = TaLKConv1d(8, seq_len=20, num_heads=2, max_left=6, max_right=None, causal=causal)
    assert m.offset_proj.out_features == 4
    assert (m.max_left, m.max_right) == (6, 0 if causal else 10)
    x = torch.randn(3, 8, 20)
    y = _backward_ok(m, x)
    off = m.compute_offsets(x)
    assert off.shape == (3, 2, 20, 2) and off.min() >= 0 and off.max() <= 1
    torch.testing.assert_close(y, talk1d_reference(x, off, m.max_left, m.max_right), rtol=1e-5, atol=1e-6)
    # Any length works at run time; seq_len only sets defaults.
    assert m(torch.randn(1, 8, 7)).shape == (1, 8, 7)


def test_talk1d_module_is_causal():
    m = TaLKConv1d(4, num_heads=1, max_left=5, causal=True)
    x = torch.randn(1, 4, 16)
    x2 = x.clone()
    x2[..., 10:] += torch.randn(1, 4, 6)
    torch.testing.assert_close(m(x)[..., :10], m(x2)[..., :10])


def test_talk2d_modules_shapes_and_backward():
    x = torch.randn(2, 8, 7, 9)
    box = TaLKConv2d(8, (7, 9), num_heads=4)
    assert (box.max_left, box.max_right, box.max_top, box.max_bottom) == (4, 4, 3, 3)
    assert box.offset_proj.out_features == 16
    y = _backward_ok(box, x)
    off = box.compute_offsets(x)
    assert off.shape == (2, 4, 7, 9, 4)
    torch.testing.assert_close(y, talk2d_reference(x, off, 4, 4, 3, 3), rtol=1e-5, atol=1e-6)

    flat = TaLKConvFlat2d(8, (7, 9), num_heads=2, max_left=12, max_right=5)
    assert flat.offset_proj.out_features == 4
    y = _backward_ok(flat, x)
    off = flat.compute_offsets(x.flatten(2))
    expected = talk1d_reference(x.flatten(2), off, 12, 5).view_as(x)
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-6)
    # Flattened windows cross image rows, boxes do not: the two variants are genuinely different ops.
    assert not torch.allclose(flat(x), box(x))


@pytest.mark.parametrize('cls', [TaLKConv2d, TaLKConvFlat2d])
def test_2d_constructor_contract(cls):
    """Drop-in for ConvNeXt's depthwise conv: ``cls(dim, input_size, **options)``, (B,C,H,W) -> same."""
    m = cls(16, (14, 14))
    x = torch.randn(2, 16, 14, 14)
    assert m(x).shape == x.shape
    m2 = cls(16, input_size=(14, 14), num_heads=4, offsets_dropout=0.1, engine='torch')
    assert m2(x).shape == x.shape
    assert m2(torch.randn(1, 16, 10, 12)).shape == (1, 16, 10, 12)  # other sizes run too


@pytest.mark.parametrize('engine', ['torch', 'native', 'reference'])
def test_module_engines_agree(engine):
    torch.manual_seed(0)
    m = TaLKConv2d(8, (6, 5), num_heads=2, engine=engine)
    ref = TaLKConv2d(8, (6, 5), num_heads=2, engine='reference')
    ref.load_state_dict(m.state_dict())
    x = torch.randn(2, 8, 6, 5, dtype=torch.float64)
    m.double()
    ref.double()
    torch.testing.assert_close(m(x), ref(x))


@pytest.mark.parametrize('cls', ['flat', '2d'])
def test_channels_last_input_matches_reference(cls):
    """A channels-last map (as in the ConvNeXt blocks) takes the F.linear offsets path and, for 1-D on the CPU,
    the kernel that reads those strided offsets in place; output and gradients equal the reference module's on a
    contiguous copy (float64)."""
    torch.manual_seed(0)
    module = TaLKConvFlat2d if cls == 'flat' else TaLKConv2d
    m = module(8, (6, 5), num_heads=2, engine='auto').double()
    ref = module(8, (6, 5), num_heads=2, engine='reference').double()
    ref.load_state_dict(m.state_dict())
    x = torch.randn(2, 6, 5, 8, dtype=torch.float64).permute(0, 3, 1, 2).requires_grad_()
    assert not x.is_contiguous()
    x_ref = x.detach().contiguous().requires_grad_()
    y, y_ref = m(x), ref(x_ref)
    torch.testing.assert_close(y, y_ref, rtol=1e-10, atol=1e-12)
    g = torch.randn_like(y_ref)
    y.backward(g)
    y_ref.backward(g)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-10, atol=1e-12)
    for (name, p), p_ref in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, p_ref.grad, rtol=1e-10, atol=1e-12, msg=lambda s, n=name: f'{n}: {s}')


def test_offsets_dropout_in_module():
    m = TaLKConv1d(4, seq_len=64, num_heads=2, offsets_dropout=0.5)
    x = torch.randn(2, 4, 64)
    m.eval()
    y_eval = m(x)
    torch.testing.assert_close(m(x), y_eval)  # inactive in eval: deterministic
    with torch.no_grad():
        assert not (m.compute_offsets(x) == 0).any()
    m.train()
    off = m.compute_offsets(x)
    frac = (off == 0).float().mean().item()
    assert 0.35 < frac < 0.65 and off.min() >= 0 and off.max() <= 1
    assert not torch.allclose(m(x), y_eval)


def test_half_input_uses_float32_offsets():
    m = TaLKConv1d(4, seq_len=4096, num_heads=2, engine='torch')
    x = torch.randn(1, 4, 4096).to(torch.bfloat16)
    off = m.compute_offsets(x)
    assert off.dtype == torch.float32
    y = m(x)
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()
    with torch.autocast('cpu', dtype=torch.bfloat16):  # the offset projection opts out of autocast
        assert m.compute_offsets(x.float()).dtype == torch.float32


@pytest.mark.parametrize(
    'kwargs,exc,match',
    [
        (dict(dim=6, num_heads=4, max_left=2, max_right=2), ValueError, r'num_heads \(4\) must divide dim \(6\)'),
        (dict(dim=4, num_heads=1), ValueError, r'max_left=None needs the nominal size'),
        (dict(dim=4, seq_len=8, max_left=-1), ValueError, r'max_left must be an int in \[0, 2147483647\], got -1'),
        (dict(dim=4, seq_len=8, max_left=2**63), ValueError, r'max_left must be an int in \[0, 2147483647\]'),
        (dict(dim=4, seq_len=8, causal=True, max_right=3), ValueError, r'causal=True needs max_right=0'),
        (dict(dim=4, seq_len=8, offsets_dropout=1.5), ValueError, r'offsets_dropout must be in \[0, 1\]'),
        (dict(dim=4, seq_len=8, engine='cuda'), ValueError, r"TaLKConv1d: engine must be one of \('auto', 'native'"),
        (dict(dim=4, seq_len=8, backend='cuda'), ValueError, r'TaLKConv1d: backend must be one of'),
        (dict(dim=4, seq_len=8, backend='torch', engine='native'), ValueError, r'give one or the other'),
        (dict(dim=4.0, seq_len=8), TypeError, r'dim must be an int'),
    ],
)
def test_bad_options(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        TaLKConv1d(**kwargs)


def test_bad_input_shape():
    with pytest.raises(ValueError, match=r'expects input of shape \(B, C, H, W\), got shape \(2, 8, 5\)'):
        TaLKConv2d(8, (5, 5))(torch.randn(2, 8, 5))
    with pytest.raises(ValueError, match=r'expects 8 channels, got 6'):
        TaLKConv1d(8, seq_len=5)(torch.randn(2, 6, 5))


@pytest.mark.parametrize(
    'make',
    [
        lambda **kw: TaLKConv1d(4, kw.pop('n', 16), num_heads=2, **kw),
        lambda **kw: TaLKConvFlat2d(4, (4, kw.pop('n', 16) // 4), num_heads=2, **kw),
        lambda **kw: TaLKConv2d(4, (kw.pop('n', 16) // 2, 6), num_heads=2, **kw),
    ],
)
def test_maxima_are_state(make):
    """The maxima define the windows: in the state dict, taken from it on load (the layer built for another size
    then computes the checkpoint's windows), checked when malformed."""
    src = make(n=16)
    dst = make(n=64)
    assert src.max_offsets.tolist() != dst.max_offsets.tolist()
    dst.load_state_dict(src.state_dict())
    names = type(src)._MAXIMA
    assert [getattr(dst, n) for n in names] == [getattr(src, n) for n in names] == src.max_offsets.tolist()
    x = torch.randn(2, 4, 8, 8) if isinstance(src, (TaLKConvFlat2d, TaLKConv2d)) else torch.randn(2, 4, 64)
    assert torch.equal(dst(x), src(x))
    sd = src.state_dict()
    for bad, match in [
        (torch.tensor([1.0] * len(names)), 'max_offsets must be'),
        (torch.tensor([1] * (len(names) + 1)), 'max_offsets must be'),
        (torch.tensor([-1] + [1] * (len(names) - 1)), r'max_left must be an int in \[0, 2147483647\], got -1'),
    ]:
        with pytest.raises(RuntimeError, match=match):
            make(n=64).load_state_dict({**sd, 'max_offsets': bad})


def test_causal_layer_refuses_a_right_maximum():
    src = TaLKConv1d(4, 16, num_heads=2)
    with pytest.raises(RuntimeError, match='causal layer needs max_right = 0'):
        TaLKConv1d(4, 16, num_heads=2, causal=True).load_state_dict(src.state_dict())


def test_talk2d_causal_boxes_look_up_and_left_only():
    """causal=True: max_right = max_bottom = 0, so no output depends on a pixel after it in raster order (checked by
    perturbing each pixel); a max_right or max_bottom beside it is a ValueError."""
    layer = TaLKConv2d(4, (5, 6), num_heads=2, causal=True).double().eval()
    assert (layer.max_right, layer.max_bottom, layer.causal) == (0, 0, True) and layer.max_left == 3
    x = torch.randn(1, 4, 5, 6, dtype=torch.float64)
    with torch.no_grad():
        y = layer(x)
        for p in range(30):
            x2 = x.clone()
            x2.view(1, 4, 30)[..., p] += 1.0
            changed = (layer(x2) - y).abs().amax(dim=1).view(30) > 0
            assert not changed[:p].any(), p  # nothing before p in raster order moves
    with pytest.raises(ValueError, match='causal=True needs max_right=0 and max_bottom=0'):
        TaLKConv2d(4, (5, 6), causal=True, max_bottom=2)


@pytest.mark.parametrize('name', ['talkconvnext_atto', 'talkconvnext2d_atto'])
def test_talk_models_expose_causal_and_offsets_dropout(name):
    import timm

    model = timm.create_model(name, causal=True, offsets_dropout=0.1)
    for m in model.mixers():
        assert m.causal and m.max_right == 0 and m.offsets_dropout == 0.1
        assert getattr(m, 'max_bottom', 0) == 0
