"""Checkpoints that move between resolutions, and the lag remap in whole models."""

import pytest
import timm
import torch
from safetensors.torch import save_file

from mrconvnext.layers import MRConv2d
from tests.models.test_mrconvnext import _briefly_trained


def _grids(model) -> list[tuple[int, int]]:
    return [m.input_size for m in model.modules() if isinstance(m, MRConv2d)]


@pytest.mark.parametrize('deployed', [False, True])
@pytest.mark.parametrize('fmt', ['safetensors', 'training'])
def test_checkpoint_moves_to_another_img_size_through_timm(tmp_path, deployed, fmt):
    """A 32-px checkpoint through ``create_model(img_size=48, pretrained=True, pretrained_cfg_overlay=dict(file=))``
    gives the 32-px model's outputs on 48-px inputs (its kernels, remapped at run time), bitwise."""
    src = _briefly_trained(img=32, img_size=32, ls_init_value=1.0)
    if deployed:
        src.reparameterize()
    sd = src.state_dict()
    if fmt == 'safetensors':
        save_file({k: v.contiguous() for k, v in sd.items()}, path := tmp_path / 'm32.safetensors')
    else:  # a timm training checkpoint
        torch.save({'epoch': 3, 'arch': 'mrconvnext_atto', 'state_dict': sd}, path := tmp_path / 'm32.pth.tar')
    model = timm.create_model(
        'mrconvnext_atto',
        img_size=48,
        num_classes=7,
        pretrained=True,
        pretrained_cfg_overlay=dict(file=str(path), num_classes=7),
    ).eval()
    assert _grids(model) == _grids(src) and _grids(src)[0] == (8, 8)
    assert model.is_deployed() == deployed
    x = torch.randn(2, 3, 48, 48)
    with torch.no_grad():
        y, ref = model(x), src(x)
    assert torch.equal(y, ref)
    # and load_state_dict into a model built at 48 does the same
    other = timm.create_model('mrconvnext_atto', img_size=48, num_classes=7).eval()
    assert _grids(other)[0] == (12, 12)
    other.load_state_dict(sd)
    with torch.no_grad():
        assert torch.equal(other(x), ref)


def test_fine_tuning_at_the_new_size_trains_the_checkpoint_kernels():
    src = _briefly_trained(img=32, img_size=32)
    model = timm.create_model('mrconvnext_atto', img_size=48, num_classes=7)
    model.load_state_dict(src.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.05)  # built after loading: the rebuilt mixers are in it
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    loss = model(torch.randn(4, 3, 48, 48)).logsumexp(-1).mean()
    loss.backward()
    opt.step()
    changed = [k for k, v in model.state_dict().items() if 'conv_dw.branches' in k and not torch.equal(v, before[k])]
    assert any(k.endswith('.weight') for k in changed) and any(k.endswith('.modes') for k in changed)


def test_checkpoints_without_the_grid_record_still_load():
    """State dicts written before the grid was recorded (no ``nominal_size``) load into a model of their size."""
    src = _briefly_trained(img=64, img_size=64)
    old = {k: v for k, v in src.state_dict().items() if not k.endswith('nominal_size')}
    assert len(old) < len(src.state_dict())
    model = timm.create_model('mrconvnext_atto', img_size=64, num_classes=7).eval()
    model.load_state_dict(old)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(model(x), src(x))


def test_nominal_size_is_the_old_computation():
    """At the nominal size the remap never runs: outputs equal a lag_remap=False model's bitwise, train and eval."""
    model = _briefly_trained(img=64, img_size=64)
    off = timm.create_model('mrconvnext_atto', img_size=64, num_classes=7, lag_remap=False)
    off.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 64, 64)
    for training in (False, True):
        model.train(training)
        off.train(training)
        with torch.no_grad():
            assert torch.equal(model(x), off(x))


def _perturbed(name: str, img_size: int) -> torch.nn.Module:
    """A TaLK model with non-trivial offsets (every parameter moved off its initialization)."""
    model = timm.create_model(name, img_size=img_size, num_classes=7, ls_init_value=1.0).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


@pytest.mark.parametrize('name', ['talkconvnext_atto', 'talkconvnext2d_atto'])
def test_talk_checkpoint_keeps_its_windows_at_another_img_size(tmp_path, name):
    """Issue 23 item 1: the maxima came from the build size and were not in the state dict, so a 64-px checkpoint in
    a model built at 96 px changed every window (stage 1 max_left 128 -> 288) and its logits by 2-16%. Now the model
    as it was trained is the reference, bitwise, through timm's pretrained flow, load_state_dict and features_only."""
    src = _perturbed(name, 64)
    sd = src.state_dict()
    save_file({k: v.contiguous() for k, v in sd.items()}, path := tmp_path / 'm64.safetensors')
    x = torch.randn(2, 3, 96, 96)
    with torch.no_grad():
        ref, ref_feats = src(x), src.forward_intermediates(x, intermediates_only=True)
    overlay = dict(file=str(path), num_classes=7)
    model = timm.create_model(name, img_size=96, num_classes=7, pretrained=True, pretrained_cfg_overlay=overlay)
    other = timm.create_model(name, img_size=96, num_classes=7)
    other.load_state_dict(sd)
    feats = timm.create_model(name, img_size=96, features_only=True, pretrained=True, pretrained_cfg_overlay=overlay)
    with torch.no_grad():
        assert torch.equal(model.eval()(x), ref)
        assert torch.equal(other.eval()(x), ref)
        for f, r in zip(feats.eval()(x), ref_feats):
            assert torch.equal(f, r)
    assert [m.max_offsets.tolist() for m in model.mixers()] == [m.max_offsets.tolist() for m in src.mixers()]


@pytest.mark.parametrize('name', ['talkconvnext_atto', 'talkconvnext2d_atto'])
def test_talk_checkpoints_without_maxima_still_load(name):
    """Written before the maxima were recorded: the layer's own maxima, as before."""
    src = _perturbed(name, 64)
    old = {k: v for k, v in src.state_dict().items() if not k.endswith('max_offsets')}
    model = timm.create_model(name, img_size=64, num_classes=7, ls_init_value=1.0).eval()
    model.load_state_dict(old)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(model(x), src(x))


@pytest.mark.parametrize('deployed', [False, True])
def test_grid_records_are_checked_before_anything_is_built(monkeypatch, deployed):
    """Issue 23 item 9: a one-element nominal_size gave an IndexError, and a crafted [3000, 3000] made loading build
    (1.4 GB) a mixer for it before failing. Both are ValueErrors now; the crafted grid is checked against the
    checkpoint's tensors by a mixer made on the meta device only."""
    from mrconvnext.models.mrconvnext import MRConvNeXt

    src = timm.create_model('mrconvnext_atto', img_size=32, num_classes=5)
    if deployed:
        src.reparameterize()
    sd = src.state_dict()
    key = 'stages.0.blocks.0.conv_dw.nominal_size'
    model = timm.create_model('mrconvnext_atto', img_size=48, num_classes=5)
    with pytest.raises(ValueError, match=r'nominal_size must be a grid of two positive ints \(H, W\), got \[8\]'):
        model.load_state_dict({**sd, key: torch.tensor([8])})
    built = []
    make = MRConvNeXt.make_mixer
    monkeypatch.setattr(
        MRConvNeXt, 'make_mixer', lambda self, *a: built.append((a[-1], torch.empty(0).device.type)) or make(self, *a)
    )
    with pytest.raises(ValueError, match=r'records a 3000x3000 grid .* its tensors do not fit one'):
        model.load_state_dict({**sd, key: torch.tensor([3000, 3000])})
    assert built == [((3000, 3000), 'meta')]
