"""The timm contract, hub and weights round trips for every model family of the zoo."""

import importlib.util
import json
import re
from pathlib import Path

import pytest
import timm
import timm.optim
import torch
from safetensors.torch import save_file
from timm.models import save_for_hf

import mrconvnext
from mrconvnext.layers import MRConv2d
from mrconvnext.models import MixerConvNeXt

REPO = Path(__file__).resolve().parents[2]
FAMILIES = ['mrconvnext', 'talkconvnext', 'talkconvnext2d', 'lightconvnext', 'dynconvnext']
SMALL = [m for m in mrconvnext.models.list_models() if m.rsplit('_', 1)[1] in ('atto', 'femto', 'pico', 'nano')]
LARGE = [m for m in mrconvnext.models.list_models() if m.rsplit('_', 1)[1] in ('t', 's', 'b')]
ATTO = [f'{f}_atto' for f in FAMILIES]
MIXER_NAME = {
    'mrconvnext': 'MRConv2d',
    'talkconvnext': 'TaLKConvFlat2d',
    'talkconvnext2d': 'TaLKConv2d',
    'lightconvnext': 'LightConv2d',
    'dynconvnext': 'DynamicConv2d',
}


def test_every_family_is_registered_in_small_and_tiny_sizes():
    names = set(mrconvnext.models.list_models())
    for family in FAMILIES:
        assert {f'{family}_{s}' for s in ('atto', 'femto', 'pico', 'nano', 't')} <= names


@pytest.mark.parametrize('name', SMALL)
def test_small_models_forward_backward(name):
    model = timm.create_model(name, num_classes=10)
    x = torch.randn(2, 3, 64, 64)
    y = model(x)
    assert y.shape == (2, 10) and torch.isfinite(y).all()
    y.sum().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    family = name.rsplit('_', 1)[0]
    assert all(type(m).__name__ == MIXER_NAME[family] for m in model.mixers())


@pytest.mark.parametrize('name', LARGE)
def test_large_models_construct(name):
    with torch.device('meta'):
        model = timm.create_model(name)
    assert isinstance(model, MixerConvNeXt) and model.num_features in (768, 1024)


def test_non_mixer_weights_keep_timm_names_and_shapes():
    theirs = {k: v.shape for k, v in timm.create_model('convnext_atto').state_dict().items() if '.conv_dw.' not in k}
    for name in ATTO:
        ours = timm.create_model(name).state_dict()
        assert {k: v.shape for k, v in ours.items() if '.conv_dw.' not in k} == theirs, name


@pytest.mark.parametrize('name', ATTO)
def test_timm_contract(name):
    model = timm.create_model(name, num_classes=11, drop_path_rate=0.1).eval()
    cfg = model.pretrained_cfg
    sd = model.state_dict()
    assert cfg['first_conv'] + '.weight' in sd and cfg['classifier'] + '.weight' in sd
    assert model.num_classes == 11 and model.get_classifier().out_features == 11
    assert model.num_features == 320 and model.head_hidden_size == 320
    assert [f['num_chs'] for f in model.feature_info] == [40, 80, 160, 320]
    assert model._model_args['num_classes'] == 11 and model._model_args['drop_path_rate'] == 0.1

    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        feats = model.forward_features(x)
        assert tuple(feats.shape[-2:]) == cfg['pool_size'] and feats.shape[1] == model.num_features
        assert model.forward_head(feats, pre_logits=True).shape == (2, 320)
        final, inter = model.forward_intermediates(x)
        assert [tuple(t.shape[1:]) for t in inter] == [(40, 56, 56), (80, 28, 28), (160, 14, 14), (320, 7, 7)]
        torch.testing.assert_close(final, feats)
        model.reset_classifier(0)
        assert model(torch.randn(1, 3, 64, 64)).shape == (1, 320)
        assert model.prune_intermediate_layers([1], prune_head=True) == [1]
        assert len(model.stages) == 2

    m2 = timm.create_model(name)
    assert m2.group_matcher()['stem'] and m2.group_matcher(coarse=True)['blocks']
    m2.set_grad_checkpointing(True)
    m2.train()
    m2(torch.randn(2, 3, 64, 64)).sum().backward()


@pytest.mark.parametrize('name', ATTO)
def test_features_only(name):
    model = timm.create_model(name, features_only=True, out_indices=(1, 3))
    outs = model(torch.randn(2, 3, 128, 128))
    assert [tuple(o.shape) for o in outs] == [(2, 80, 16, 16), (2, 320, 4, 4)]
    assert model.feature_info.channels() == [80, 320]


@pytest.mark.parametrize('size', [(256, 256), (288, 288), (160, 224)])
@pytest.mark.parametrize('name', ATTO)
def test_other_input_sizes(name, size):
    model = timm.create_model(name).eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, *size)).shape == (1, 1000)


@pytest.mark.parametrize('name', ATTO)
def test_bad_inputs(name):
    model = timm.create_model(name)
    with pytest.raises(ValueError, match='in_chans=3'):
        model(torch.randn(1, 1, 64, 64))
    with pytest.raises(ValueError, match='stride 32'):
        model(torch.randn(1, 3, 16, 64))
    with pytest.raises(TypeError, match='floating-point image'):  # issue 13: was a raw conv dtype error
        model(torch.randint(0, 255, (1, 3, 64, 64)))
    with pytest.raises(ValueError, match='no pretrained ImageNet weights exist'):
        timm.create_model(name, pretrained=True)
    assert timm.create_model(name, in_chans=1, num_classes=3)(torch.randn(1, 1, 64, 64)).shape == (1, 3)
    # another floating dtype than the parameters': named (torch said only "Input type (double) and bias type ...")
    for dtype in (torch.float64, torch.float16):
        with pytest.raises(TypeError, match=rf'torch.float32 parameters, got a {dtype} input: .*torch.autocast'):
            model(torch.randn(1, 3, 64, 64, dtype=dtype))
    with torch.autocast('cpu', dtype=torch.bfloat16):  # under autocast any floating dtype goes in
        assert model(torch.randn(1, 3, 64, 64, dtype=torch.bfloat16)).shape == (1, 1000)


@pytest.mark.parametrize('size', ['224', 224.0, True, (224,), (224, '224')])  # (None: timm drops it)
def test_img_size_is_an_int_or_a_pair_of_ints(size):
    with pytest.raises(
        TypeError, match=r'img_size must be an int or a pair of ints \(H, W\), got ' + re.escape(repr(size))
    ):
        timm.create_model('mrconvnext_atto', img_size=size)


def test_img_size_takes_any_integers():
    for size, want in ((64, (64, 64)), ((64, 96), (64, 96)), ([96, 64], (96, 64)), (torch.Size([64, 96]), (64, 96))):
        assert timm.create_model('mrconvnext_atto', img_size=size).img_size == want
    assert timm.create_model('mrconvnext_atto', img_size=(torch.tensor(96), 64)).img_size == (96, 64)


def test_another_familys_kwargs_name_the_family_that_takes_them():
    """timm's own message named ConvNeXt.__init__; now the model class, the families that take the argument and
    what this one takes."""
    with pytest.raises(
        TypeError,
        match=r"TaLKConvNeXt got unexpected keyword argument\(s\) \['kernel_type'\]; "
        r"MRConvNeXt takes them\. TaLKConvNeXt takes \[.*'channels_per_head'",
    ):
        timm.create_model('talkconvnext_atto', kernel_type='fourier')
    with pytest.raises(
        TypeError, match=r"LightConvNeXt got unexpected keyword argument\(s\) \['combine'\]; MRConvNeXt"
    ):
        timm.create_model('lightconvnext_atto', combine='bn')
    with pytest.raises(TypeError, match=r"MRConvNeXt got unexpected keyword argument\(s\) \['nonsense'\]\. MRConvNeXt"):
        timm.create_model('mrconvnext_atto', nonsense=1)


def test_timm_optimizer_excludes_mrconv_kernels_from_weight_decay():
    model = timm.create_model('mrconvnext_atto')
    nwd = model.no_weight_decay()
    assert any(k.endswith('fourier.modes') for k in nwd) and any(k.endswith('.alpha') for k in nwd)
    assert nwd <= set(dict(model.named_parameters())) and model.mixer_kernel_parameter_names() <= nwd
    opt = timm.optim.create_optimizer_v2(model, 'adamw', lr=1e-3, weight_decay=0.05)
    ids = {id(p): n for n, p in model.named_parameters()}
    decayed = {ids[id(p)] for g in opt.param_groups if g['weight_decay'] > 0 for p in g['params']}
    assert not any('conv_dw' in n for n in decayed)


def _trained(name):
    model = timm.create_model(name, num_classes=7)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(2):
        loss = model(torch.randn(4, 3, 64, 64)).logsumexp(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@pytest.mark.parametrize('name', ATTO)
def test_save_for_hf_local_dir_round_trip(tmp_path, name):
    model = _trained(name)
    save_for_hf(model, tmp_path, safe_serialization=True)
    config = json.loads((tmp_path / 'config.json').read_text())
    assert config['architecture'] == name and config['num_classes'] == 7
    # timm loads the directory's weights with pretrained=True (without it: the config only)
    loaded = timm.create_model(f'local-dir:{tmp_path}', pretrained=True).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert torch.equal(loaded(x), model(x))


@pytest.mark.parametrize('name', ATTO)
def test_warm_start_from_timm_convnext(tmp_path, name):
    sd = timm.create_model('convnext_atto').state_dict()
    save_file(sd, tmp_path / 'c.safetensors')
    torch.save(sd, tmp_path / 'c.pth')
    for source in (tmp_path / 'c.safetensors', tmp_path / 'c.pth', sd):
        model = timm.create_model(name)
        left = mrconvnext.load_convnext_weights(model, source)
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
    for name in ATTO:
        model = torch.hub.load(str(REPO), name, source='local', num_classes=4)
        assert isinstance(model, MixerConvNeXt) and model.num_classes == 4
    spec = importlib.util.spec_from_file_location('hubconf_under_test', REPO / 'hubconf.py')
    hub = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hub)
    assert set(mrconvnext.models.list_models()) <= set(dir(hub)) and 'torch' in hub.dependencies


@pytest.mark.parametrize(
    'name, kwargs, cls, attr',
    [
        ('mrconvnext_atto', dict(method='direct', engine='torch'), 'MRConv2d', ('method', 'engine')),
        ('talkconvnext_atto', dict(engine='torch'), 'TaLKConvFlat2d', ('engine',)),
        ('talkconvnext2d_atto', dict(engine='reference'), 'TaLKConv2d', ('engine',)),
        ('dynconvnext_atto', dict(engine='torch'), 'DynamicConv2d', ('engine',)),
    ],
)
def test_models_pass_method_and_engine_to_every_mixer(name, kwargs, cls, attr):
    model = timm.create_model(name, img_size=32, **kwargs)
    mixers = [m for m in model.modules() if type(m).__name__ == cls]
    assert len(mixers) == 12  # atto: depths (2, 2, 6, 2)
    assert all(tuple(getattr(m, a) for a in attr) == tuple(kwargs[a] for a in attr) for m in mixers)
    with pytest.raises(ValueError, match='engine must be one of'):
        timm.create_model(name, img_size=32, engine='cuda')


def test_set_engine_changes_every_mixer_and_not_the_result():
    """``model.set_engine`` (and ``mrconvnext.set_engine`` on a features_only wrapper) sets every mixer as the
    constructor's keywords do; another method gives the same outputs in float64 (mixers at full weight)."""
    model = timm.create_model('mrconvnext_atto', img_size=32, ls_init_value=1.0).double().eval()
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    with torch.no_grad():
        ref = model(x)
        assert model.set_engine(method='matmul') == 12
        mixers = model.mixers()
        assert [m.method for m in mixers] == ['toeplitz'] * 12  # maps of 64 positions and less
        torch.testing.assert_close(model(x), ref, rtol=1e-9, atol=1e-9)
        assert model.set_engine(engine='torch') == 12  # the method stays
        assert {(m.method, m.engine) for m in mixers} == {('toeplitz', 'torch')}
    features = timm.create_model('mrconvnext_atto', img_size=32, features_only=True)
    assert mrconvnext.set_engine(features, method='direct', engine='torch') == 12
    assert all((m.method, m.engine) == ('direct', 'torch') for m in features.modules() if isinstance(m, MRConv2d))
    with pytest.raises(ValueError, match="MRConv2d: engine must be one of .* got 'cuda'"):
        model.set_engine(engine='cuda')


@pytest.mark.parametrize('name', ['talkconvnext_atto', 'talkconvnext2d_atto', 'lightconvnext_atto', 'dynconvnext_atto'])
def test_set_engine_of_a_family_with_one_method(name):
    model = timm.create_model(name, img_size=32)
    assert model.set_engine(engine='torch') == 12 and all(m.engine == 'torch' for m in model.mixers())
    with pytest.raises(ValueError, match="has one method .* got method='fft'"):
        model.set_engine(method='fft')


@pytest.mark.parametrize('name', ['mrconvnext_atto', 'talkconvnext_atto', 'talkconvnext2d_atto', 'dynconvnext_atto'])
def test_save_for_hf_config_follows_img_size(name, tmp_path):
    """A model built at ``img_size=64`` writes a config whose data settings feed it 64 px images (it wrote 224):
    ``input_size`` and ``pool_size`` follow the build size, ``crop_pct`` stays the configuration's."""
    model = timm.create_model(name, img_size=(64, 96), num_classes=4).eval()
    save_for_hf(model, tmp_path, safe_serialization=True)
    cfg = json.loads((tmp_path / 'config.json').read_text())['pretrained_cfg']
    assert cfg['input_size'] == [3, 64, 96] and cfg['pool_size'] == [2, 3] and cfg['crop_pct'] == 0.875
    reloaded = timm.create_model(f'local-dir:{tmp_path}', pretrained=True).eval()
    data = timm.data.resolve_data_config({}, model=reloaded)
    assert data['input_size'] == (3, 64, 96)
    x = torch.randn(1, *data['input_size'])
    with torch.no_grad():
        assert torch.equal(reloaded(x), model(x))
    features = timm.create_model(name, img_size=64, features_only=True)
    assert features.pretrained_cfg['input_size'] == (3, 64, 64)
