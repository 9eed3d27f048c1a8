"""Property-based fuzzing of whole models at random input sizes, in training and eval, against the same model
running its mixers on an independent method or engine (float64).

Layer scale is raised to 1.0: at timm's default 1e-6 the logits barely see the mixers and a model-level check could
not catch a mixer error. MRConv: the FFT engines (fused CPU kernels, the fused conv + BatchNorm op) against
``method='direct'`` (``F.conv1d``, ``F.batch_norm``); branched against reparameterized. TaLK: the native/fused
kernels against TaLK's reference (cumsum + gather + autograd).
"""

import copy

import timm
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mrconvnext  # noqa: F401  (registers the models)
from mrconvnext.layers import MRConv1d, TaLKConv1d, TaLKConv2d

FUZZ = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True)
SIZES = st.tuples(st.integers(32, 80), st.integers(32, 80))


def _set(model, cls, **attrs):
    for m in model.modules():
        if isinstance(m, cls):
            for k, v in attrs.items():
                setattr(m, k, v)
    return model


def _run(model, x, train):
    model.train(train)
    x = x.clone().requires_grad_()
    y = model(x)
    (gx,) = torch.autograd.grad(y.square().sum(), x)
    return y, gx


def _close(a, b, tol):
    scale = b.abs().max().item() or 1.0
    torch.testing.assert_close(a, b, rtol=tol, atol=tol * scale)


@FUZZ
@given(size=SIZES, train=st.booleans(), kernel_type=st.sampled_from(['fourier_sparse', 'dense', 'dilated']))
def test_mrconvnext_fft_engines_against_direct(size, train, kernel_type):
    model = timm.create_model('mrconvnext_atto', num_classes=5, ls_init_value=1.0, img_size=48, kernel_type=kernel_type)
    model = model.double()
    with torch.no_grad():  # move the BatchNorms away from their identity initialization
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm1d):
                m.running_mean.normal_()
                m.running_var.uniform_(0.5, 2.0)
    direct = _set(copy.deepcopy(model), MRConv1d, method='direct', engine='auto')
    x = torch.randn(2, 3, *size, dtype=torch.float64)
    y, gx = _run(model, x, train)
    ry, rgx = _run(direct, x, train)
    _close(y, ry, 1e-8)
    _close(gx, rgx, 1e-8)
    if not train:
        deployed = copy.deepcopy(model)
        deployed.reparameterize()
        with torch.no_grad():
            _close(deployed(x), ry, 1e-8)


@FUZZ
@given(size=SIZES, train=st.booleans(), name=st.sampled_from(['talkconvnext_atto', 'talkconvnext2d_atto']))
def test_talkconvnext_against_reference(size, train, name):
    model = timm.create_model(name, num_classes=5, ls_init_value=1.0, img_size=48).double()
    ref = _set(copy.deepcopy(model), (TaLKConv1d, TaLKConv2d), engine='reference')
    x = torch.randn(2, 3, *size, dtype=torch.float64)
    y, gx = _run(model, x, train)
    ry, rgx = _run(ref, x, train)
    _close(y, ry, 1e-8)
    _close(gx, rgx, 1e-8)
