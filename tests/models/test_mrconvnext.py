import copy
import json
from pathlib import Path

import pytest
import timm
import timm.optim
import torch
from timm.models import save_for_hf

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


@pytest.mark.parametrize(
    'name, fourier_m, fourier_sparse_m',
    [('mrconvnext_t', 30, 32), ('mrconvnext_s', 53, 57), ('mrconvnext_b', 93, 98)],
)
def test_large_models_match_paper_parameter_counts(name, fourier_m, fourier_sparse_m):
    """Paper Table 12, within +-3%: the Fourier+Sparse models and their registered Fourier variants
    (``mrconvnext_fourier_*``, equal to ``kernel_type='fourier'``)."""
    fourier_name = name.replace('mrconvnext_', 'mrconvnext_fourier_')
    assert fourier_name in timm.list_models('mrconvnext*')
    for model_name, kwargs, target in (
        (name, {}, fourier_sparse_m),
        (fourier_name, {}, fourier_m),
        (name, dict(kernel_type='fourier'), fourier_m),
    ):
        with torch.device('meta'):
            model = timm.create_model(model_name, **kwargs)
        assert model.mixers()[0].kernel_type == ('fourier' if target == fourier_m else 'fourier_sparse')
        n = sum(p.numel() for p in model.parameters()) / 1e6
        assert abs(n - target) <= 0.03 * target, (model_name, kwargs, n)


def test_paper_kernel_settings():
    model = timm.create_model('mrconvnext_t')
    firsts = [stage.blocks[0].conv_dw for stage in model.stages]
    assert [m.kernel_size for m in firsts] == [196, 49, 28, 28]
    assert [m.seq_len for m in firsts] == [3136, 784, 196, 49]
    assert all(m.num_branches <= 5 for m in firsts) and [m.reach for m in firsts] == [3136, 784, 196, 49]
    assert all(isinstance(m, MRConv2d) and m.kernel_type == 'fourier_sparse' for m in model.mixers())


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


def test_save_for_hf_local_dir_round_trip_of_a_deployed_model(tmp_path):
    """The branched round trip is tests/models/test_zoo.py's; here the deployed form keeps ``deploy=True``."""
    reparam = True
    model = _briefly_trained()
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


def test_unknown_kernel_type():
    with pytest.raises(ValueError, match='kernel_type'):
        timm.create_model('mrconvnext_atto', kernel_type='wavelet')


def test_deployed_model_on_changing_sizes_equals_a_fresh_copy():
    # Regression (issue 13): a deployed model called at 40x92 and then 40x96 reused a stale kernel spectrum
    # (3.9e-4 relative off in its logits). Layer scale 1 so the mixers matter to the logits.
    model = _briefly_trained(ls_init_value=1.0, img=64)
    model.reparameterize()
    fresh = copy.deepcopy(model)
    x1, x2 = torch.randn(2, 3, 40, 92), torch.randn(2, 3, 40, 96)
    with torch.no_grad():
        model(x1)
        y = model(x2)
        ref = fresh(x2)
    torch.testing.assert_close(y, ref, rtol=1e-6, atol=1e-6 * ref.abs().max().item())


@pytest.mark.parametrize('deployed', [False, True])
def test_meta_device_forward(deployed):
    # as timm's tests do: shapes only, no data (the FFT operators have fake implementations)
    with torch.device('meta'):
        model = timm.create_model('mrconvnext_atto')
    if deployed:
        model.reparameterize()
    x = torch.empty(2, 3, 64, 64, device='meta')
    for train in (False, True):
        model.train(train)
        assert model.forward_features(x).shape == (2, 320, 2, 2)
        feats = model.forward_intermediates(x, intermediates_only=True)
        assert [f.shape[-1] for f in feats] == [16, 8, 4, 2] and all(f.device.type == 'meta' for f in feats)


def test_num_taps_has_one_default_and_is_honoured_for_dilated_kernels():
    """The layer decides ``num_taps`` when it is not given (80 sparse taps per branch, the kernel size per side for
    dilated branches), the model passes what it is given through: a model's mixers and a layer built alone
    agree, and an explicit ``num_taps`` reaches a dilated model's branches (it was dropped)."""
    from mrconvnext.layers import MRConv2d
    from mrconvnext.layers.mrconv import SPARSE_TAPS

    model = timm.create_model('mrconvnext_atto', img_size=64, kernel_type='sparse')
    mixer = model.stages[0].blocks[0].conv_dw
    alone = MRConv2d(mixer.dim, (16, 16), kernel_size=mixer.kernel_size, kernel_type='sparse')
    assert [b.weight.shape for b in mixer.branches] == [b.weight.shape for b in alone.branches]
    assert mixer.branches[-1].weight.shape[1] == min(SPARSE_TAPS, mixer.branches[-1].size)
    dilated = timm.create_model('mrconvnext_atto', img_size=64, kernel_type='dilated', num_taps=2)
    branches = dilated.stages[0].blocks[0].conv_dw.branches
    assert all(b.weight.shape[1] == 3 for b in branches)  # 2 taps per side sharing the centre
    default = timm.create_model('mrconvnext_atto', img_size=64, kernel_type='dilated').stages[0].blocks[0].conv_dw
    assert default.branches[0].weight.shape[1] == 2 * default.kernel_size - 1  # dilation 1: kernel_size per side


def test_multi_head_models():
    """heads= reaches every mixer and widens its block's norm and first pointwise layer to heads * dim (the MLP's
    hidden and output widths stay); the model trains, reparameterizes exactly (float64), its state dict loads into a
    model built the same way and into one built at another size, and features_only backbones work."""
    model = timm.create_model('mrconvnext_atto', heads=2, img_size=64).double()
    for stage in model.stages:
        for block in stage.blocks:
            dim = block.mlp.fc2.out_channels
            assert block.conv_dw.out_dim == 2 * dim and block.norm.normalized_shape == (2 * dim,)
            assert block.mlp.fc1.in_channels == 2 * dim and block.mlp.fc1.out_channels == 4 * dim
            assert 0 < block.mlp.fc1.weight.std() < 0.03  # timm's init (std 0.02), not the layer default
    x = torch.randn(2, 3, 64, 64, dtype=torch.float64)
    model(x).sum().backward()
    model.eval()
    with torch.no_grad():
        y = model(x)
        deployed = copy.deepcopy(model)
        deployed.reparameterize()
        torch.testing.assert_close(deployed(x), y, rtol=1e-10, atol=1e-10)
    again = timm.create_model('mrconvnext_atto', heads=2, img_size=64).double().eval()
    again.load_state_dict(model.state_dict())
    bigger = timm.create_model('mrconvnext_atto', heads=2, img_size=96).double().eval()
    bigger.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(again(x), y, rtol=0, atol=0)
        torch.testing.assert_close(bigger(x), y, rtol=0, atol=0)  # rebuilt at the checkpoint's grid
    features = timm.create_model('mrconvnext_atto', heads=2, img_size=64, features_only=True)
    assert [f.shape[1] for f in features(torch.randn(1, 3, 80, 72))] == [40, 80, 160, 320]
    meta = timm.create_model('mrconvnext_atto', heads=2, device='meta')
    assert meta.stages[0].blocks[0].mlp.fc1.weight.is_meta


def test_reduced_dimension_models():
    """groups= reaches every mixer; the grouped model has 1/groups of the kernel parameters, trains, and its state
    dict round-trips into a model built the same way."""
    full = timm.create_model('mrconvnext_atto')
    grouped = timm.create_model('mrconvnext_atto', groups=4)
    assert all(m.groups == 4 and m.branches[0].dim == m.dim // 4 for m in grouped.mixers())

    def kernels(model):
        return sum(p.numel() for n, p in model.named_parameters() if n in model.mixer_kernel_parameter_names())

    assert kernels(grouped) * 4 == kernels(full)
    grouped(torch.randn(2, 3, 64, 64)).sum().backward()
    again = timm.create_model('mrconvnext_atto', groups=4)
    again.load_state_dict(grouped.state_dict())
    grouped.eval(), again.eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(again(x), grouped(x), rtol=0, atol=0)
