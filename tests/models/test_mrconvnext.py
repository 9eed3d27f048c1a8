import importlib.util
import json
from pathlib import Path

import pytest
import timm
import timm.optim
import torch
from safetensors.torch import save_file
from timm.models import save_for_hf

import mrconvnext
from mrconvnext.layers import MRConv2d

SMALL = ['mrconvnext_atto', 'mrconvnext_femto', 'mrconvnext_pico', 'mrconvnext_nano']
REPO = Path(__file__).resolve().parents[2]


def _briefly_trained(name='mrconvnext_atto', img=64, **kw):
    """A model whose BatchNorm statistics and kernels moved away from their initialization."""
    model = timm.create_model(name, num_classes=7, **kw)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model.train()
    for _ in range(2):
        loss = model(torch.randn(4, 3, img, img)).logsumexp(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@pytest.mark.parametrize('name', SMALL)
def test_small_models_forward_backward(name):
    model = timm.create_model(name, num_classes=10)
    x = torch.randn(2, 3, 96, 96)
    y = model(x)
    assert y.shape == (2, 10) and torch.isfinite(y).all()
    y.sum().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize(
    'name, fourier_m, fourier_sparse_m',
    [('mrconvnext_t', 30, 32), ('mrconvnext_s', 53, 57), ('mrconvnext_b', 93, 98)],
)
def test_large_models_match_paper_parameter_counts(name, fourier_m, fourier_sparse_m):
    """Paper Table 12, within +-3%."""
    for kernel_type, target in (('fourier', fourier_m), ('fourier_sparse', fourier_sparse_m)):
        with torch.device('meta'):
            model = timm.create_model(name, kernel_type=kernel_type)
        n = sum(p.numel() for p in model.parameters()) / 1e6
        assert abs(n - target) <= 0.03 * target, (name, kernel_type, n)


def test_paper_kernel_settings():
    model = timm.create_model('mrconvnext_t')
    firsts = [stage.blocks[0].conv_dw for stage in model.stages]
    assert [m.kernel_size for m in firsts] == [196, 49, 28, 28]
    assert [m.seq_len for m in firsts] == [3136, 784, 196, 49]
    assert all(m.num_branches <= 5 for m in firsts) and [m.reach for m in firsts] == [3136, 784, 196, 49]
    assert all(isinstance(m, MRConv2d) and m.kernel_type == 'fourier_sparse' for m in model.mixers())


def test_non_mixer_weights_keep_timm_names_and_shapes():
    ours = timm.create_model('mrconvnext_atto').state_dict()
    theirs = timm.create_model('convnext_atto').state_dict()
    non_mixer = {k: v.shape for k, v in theirs.items() if '.conv_dw.' not in k}
    assert {k: v.shape for k, v in ours.items() if '.conv_dw.' not in k} == non_mixer


def test_timm_contract():
    model = timm.create_model('mrconvnext_atto', num_classes=11, drop_path_rate=0.1).eval()
    cfg = model.pretrained_cfg
    sd = model.state_dict()
    assert cfg['first_conv'] + '.weight' in sd and cfg['classifier'] + '.weight' in sd
    assert model.num_classes == 11 and model.get_classifier().out_features == 11
    assert model.num_features == 320 and model.head_hidden_size == 320
    assert [f['num_chs'] for f in model.feature_info] == [40, 80, 160, 320]
    assert model._model_args['num_classes'] == 11

    x = torch.randn(2, 3, 224, 224)
    feats = model.forward_features(x)
    assert tuple(feats.shape[-2:]) == cfg['pool_size'] and feats.shape[1] == model.num_features
    assert model.forward_head(feats, pre_logits=True).shape == (2, 320)
    final, inter = model.forward_intermediates(x)
    assert [t.shape[-1] for t in inter] == [56, 28, 14, 7] and torch.allclose(final, feats)
    model.reset_classifier(0)
    assert model.get_classifier().__class__.__name__ == 'Identity'
    assert model(torch.randn(1, 3, 64, 64)).shape == (1, 320)
    assert model.prune_intermediate_layers([1], prune_head=True) == [1]
    assert len(model.stages) == 2
    _, inter = model.forward_intermediates(x, indices=[1], intermediates_only=False)
    assert inter[0].shape == (2, 80, 28, 28)

    m2 = timm.create_model('mrconvnext_atto')
    assert m2.group_matcher()['stem'] and m2.group_matcher(coarse=True)['blocks']
    m2.set_grad_checkpointing(True)
    m2.train()
    m2(torch.randn(2, 3, 64, 64)).sum().backward()
    nwd = m2.no_weight_decay()
    assert any(k.endswith('fourier.modes') for k in nwd) and any(k.endswith('.alpha') for k in nwd)
    assert all(k in dict(m2.named_parameters()) for k in nwd)
    assert m2.mixer_kernel_parameter_names() <= nwd


def test_timm_optimizer_excludes_kernels_from_weight_decay():
    model = timm.create_model('mrconvnext_atto')
    opt = timm.optim.create_optimizer_v2(model, 'adamw', lr=1e-3, weight_decay=0.05)
    ids = {id(p): n for n, p in model.named_parameters()}
    decayed = {ids[id(p)] for g in opt.param_groups if g['weight_decay'] > 0 for p in g['params']}
    assert not any('conv_dw' in n for n in decayed)


def test_features_only():
    model = timm.create_model('mrconvnext_atto', features_only=True, out_indices=(1, 3))
    outs = model(torch.randn(2, 3, 128, 128))
    assert [tuple(o.shape) for o in outs] == [(2, 80, 16, 16), (2, 320, 4, 4)]
    assert model.feature_info.channels() == [80, 320]


@pytest.mark.parametrize('size', [(256, 256), (288, 288), (160, 224)])
def test_other_input_sizes(size):
    model = timm.create_model('mrconvnext_atto').eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, *size)).shape == (1, 1000)


def test_bad_inputs():
    model = timm.create_model('mrconvnext_atto')
    with pytest.raises(ValueError, match='in_chans=3'):
        model(torch.randn(1, 1, 64, 64))
    with pytest.raises(ValueError, match='stride 32'):
        model(torch.randn(1, 3, 16, 64))
    with pytest.raises(ValueError, match='kernel_type'):
        timm.create_model('mrconvnext_atto', kernel_type='wavelet')
    with pytest.raises(ValueError, match='no pretrained ImageNet weights exist'):
        timm.create_model('mrconvnext_t', pretrained=True)


def test_in_chans_kwarg():
    model = timm.create_model('mrconvnext_atto', in_chans=1, num_classes=3)
    assert model(torch.randn(1, 1, 64, 64)).shape == (1, 3)


@pytest.mark.parametrize('kernel_type', ['fourier_sparse', 'dilated'])
@pytest.mark.parametrize('combine', ['bn', 'scale'])
def test_reparameterized_model_equals_branched(kernel_type, combine):
    """Tolerance: 1e-5 relative to the largest logit, float32."""
    model = _briefly_trained(kernel_type=kernel_type, combine=combine)
    x = torch.randn(3, 3, 64, 64)
    with torch.no_grad():
        y = model(x)
        via_timm = timm.utils.reparameterize_model(model)
        assert via_timm.is_deployed() and not model.is_deployed()
        y_timm = via_timm(x)
        model.reparameterize()
        y_own = model(x)
    for y_rep in (y_timm, y_own):
        assert (y - y_rep).abs().max() <= 1e-5 * y.abs().max()
    assert model._model_args['deploy'] is True

    # a deployed checkpoint loads into a model built with deploy=True
    deployed = timm.create_model(
        'mrconvnext_atto', num_classes=7, deploy=True, kernel_type=kernel_type, combine=combine
    )
    deployed.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert torch.equal(deployed.eval()(x), y_own)


@pytest.mark.parametrize('reparam', [False, True])
def test_save_for_hf_local_dir_round_trip(tmp_path, reparam):
    model = _briefly_trained()
    if reparam:
        model.reparameterize()
    save_for_hf(model, tmp_path, safe_serialization=True)
    assert (tmp_path / 'model.safetensors').exists()
    config = json.loads((tmp_path / 'config.json').read_text())
    assert config['architecture'] == 'mrconvnext_atto'
    assert config['model_args'].get('deploy', False) is reparam
    # timm loads the directory's weights with pretrained=True (without it: config only)
    loaded = timm.create_model(f'local-dir:{tmp_path}', pretrained=True).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


def test_warm_start_from_timm_convnext(tmp_path):
    convnext = timm.create_model('convnext_atto', num_classes=1000)
    sd = convnext.state_dict()
    for path, saver in (
        (tmp_path / 'c.safetensors', lambda p: save_file(sd, p)),
        (tmp_path / 'c.pth', lambda p: torch.save(sd, p)),
        (None, None),
    ):
        model = timm.create_model('mrconvnext_atto')
        if path is not None:
            saver(path)
        left = mrconvnext.load_convnext_weights(model, path if path is not None else sd)
        own = model.state_dict()
        assert left == sorted(k for k in own if '.conv_dw.' in k) and left
        for k, v in sd.items():
            if '.conv_dw.' not in k:
                assert torch.equal(own[k], v), k


def test_warm_start_rejects_bad_files(tmp_path):
    model = timm.create_model('mrconvnext_atto')
    truncated = tmp_path / 'truncated.pth'
    torch.save(timm.create_model('convnext_atto').state_dict(), truncated)
    truncated.write_bytes(truncated.read_bytes()[:1000])
    with pytest.raises(ValueError, match='truncated.pth'):
        mrconvnext.load_convnext_weights(model, truncated)
    foreign = tmp_path / 'foreign.safetensors'
    foreign.write_bytes(b'not a safetensors file at all')
    with pytest.raises(ValueError, match='foreign.safetensors'):
        mrconvnext.load_convnext_weights(model, foreign)

    class Evil:
        def __reduce__(self):
            return (print, ('unpickled!',))

    evil = tmp_path / 'evil.pth'
    torch.save({'x': Evil()}, evil)
    with pytest.raises(ValueError, match='evil.pth'):
        mrconvnext.load_convnext_weights(model, evil)
    with pytest.raises(ValueError, match='does not match this ConvNeXt size'):
        mrconvnext.load_convnext_weights(model, timm.create_model('convnext_femto').state_dict())


def test_torch_hub_local():
    model = torch.hub.load(str(REPO), 'mrconvnext_atto', source='local', num_classes=4)
    assert isinstance(model, mrconvnext.models.MRConvNeXt) and model.num_classes == 4
    spec = importlib.util.spec_from_file_location('hubconf_under_test', REPO / 'hubconf.py')
    hub = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hub)
    assert set(timm.list_models('mrconvnext_*')) <= set(dir(hub)) and 'torch' in hub.dependencies
