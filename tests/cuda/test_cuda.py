"""The CUDA suite (``pytest -m cuda``): every operator, layer and model family on a GPU against float64 references
computed on the CPU from the same inputs. Without a visible CUDA device every test here is reported as skipped.

Tolerances are relative errors ``||got - ref|| / ||ref||`` (norm-wise), stated per test: float32 arithmetic
lands near 1e-6 per op and below 1e-4 through a network; bfloat16 / float16 autocast near 1e-2.
"""

import copy

import pytest
import timm
import torch

import mrconvnext  # noqa: F401  (registers the models)
from mrconvnext.ops import (
    availability,
    dynamic_conv1d,
    dynamic_softmax_conv1d,
    light_conv1d,
    long_conv1d,
    talk1d,
    talk1d_reference,
    talk2d,
    talk2d_reference,
)
from mrconvnext.ops.light_conv import dispatch as light_conv_dispatch
from mrconvnext.ops.light_conv import dynamic_conv1d_unfold
from mrconvnext.ops.talk import dispatch as talk_dispatch
from tests.ops.talk.test_api import offsets_off_grid, random_offsets
from tests.reference import shifted_sum_conv

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason='no CUDA device visible (torch.cuda.is_available())'),
]

DEV = 'cuda'
FAMILIES = ['mrconvnext_atto', 'talkconvnext_atto', 'talkconvnext2d_atto', 'lightconvnext_atto', 'dynconvnext_atto']
SIZE = 64


@pytest.fixture(autouse=True, scope='module')
def _no_tf32():
    """float32 means float32 here: cuDNN's convolutions default to TF32 on Ampere and newer (relative error ~5e-4
    through the network), which would hide float32-level differences."""
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    got, ref = got.detach().double().cpu(), ref.detach().double().cpu()
    assert not torch.isnan(got).any(), 'NaN in the result'
    return ((got - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def grads(fn, inputs: list[torch.Tensor], seed: int = 123):
    """``(y, *d y.g / d inputs)`` for a fixed random cotangent g."""
    inputs = [t.detach().requires_grad_() for t in inputs]
    y = fn(*inputs)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(y)
    return (y, *torch.autograd.grad(y, inputs, g))


# ------------------------------------------------------------------------------------------------------ TaLK


def test_auto_picks_triton_on_cuda():
    assert talk_dispatch.talk_engine(DEV, 'auto') == 'triton'


@pytest.mark.parametrize('dtype', [torch.float32, torch.bfloat16])
def test_per_device_operators_run_triton_on_cuda(dtype):
    """engine='auto' calls the per-device operators (mrconvnext::talk1d / talk2d), whose CUDA kernels are the
    Triton engine: forwards bitwise equal to engine='triton'."""
    x, off = torch.randn(2, 8, 300, device=DEV, dtype=dtype), torch.rand(2, 2, 300, 2, device=DEV)
    assert torch.equal(talk1d(x, off, 40, 30), talk1d(x, off, 40, 30, engine='triton'))
    x2, off2 = torch.randn(2, 8, 12, 13, device=DEV, dtype=dtype), torch.rand(2, 2, 12, 13, 4, device=DEV)
    assert torch.equal(talk2d(x2, off2, 3, 4, 5, 2), talk2d(x2, off2, 3, 4, 5, 2, engine='triton'))


@pytest.mark.parametrize('dtype,tol', [(torch.float64, 1e-12), (torch.float32, 2e-6)])
@pytest.mark.parametrize('layout', ['contiguous', 'channels_last'])
@pytest.mark.parametrize('case', ['bidirectional', 'causal', 'max>L', 'long', 'short'])
def test_talk1d_against_float64_reference(dtype, tol, layout, case):
    """'short': a stage-3 row (196 positions): the one-launch plane kernels in float32 (contiguous), the channels-last
    tables (channels-last)."""
    B, C, H, L, ml, mr = 2, 16, 4, 777, 40, 33
    if case == 'short':
        B, C, H, L, ml, mr = 4, 64, 4, 196, 98, 98
    elif case == 'causal':
        mr = 0
    elif case == 'max>L':
        ml, mr = 900, 1000
    elif case == 'long':
        B, C, H, L, ml, mr = 1, 8, 2, 20000, 5000, 3000
    x = torch.randn(B, C, L, dtype=dtype) if layout == 'contiguous' else torch.randn(B, L, C, dtype=dtype).mT
    off = random_offsets((B, H, L, 2), [ml, mr], dtype)
    got = grads(lambda a, o: talk1d(a, o, ml, mr, engine='triton'), [x.to(DEV), off.to(DEV)])
    ref = grads(lambda a, o: talk1d_reference(a, o, ml, mr), [x.double(), off.double()])
    for a, b, name in zip(got, ref, ('y', 'dx', 'doffsets')):
        assert rel_err(a, b) < tol, name
    if layout == 'channels_last':
        assert got[0].mT.is_contiguous()  # the output keeps the flattened channels-last layout


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_talk1d_half_rounds_once(dtype):
    """fp16/bf16 inputs: positions and prefix table in float32, the output the float64 result rounded once."""
    B, C, H, L, ml, mr = 1, 8, 2, 12000, 60, 37
    x = (torch.randn(B, C, L) + 1.0).to(dtype)
    off = offsets_off_grid((B, H, L, 2), [ml, mr], torch.float32)
    y = talk1d(x.to(DEV), off.to(DEV), ml, mr, engine='triton').cpu()
    ref = talk1d_reference(x.double(), off.double(), ml, mr)
    table_max = x.double().cumsum(-1).abs().max().item()
    bound = torch.finfo(dtype).eps / 2 * ref.abs() + 4 * torch.finfo(torch.float32).eps * table_max / (ml + mr + 1)
    assert ((y.double() - ref).abs() <= bound).all()


@pytest.mark.parametrize('dtype,tol', [(torch.float64, 1e-12), (torch.float32, 2e-6), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize('size', [(56, 56), (7, 9), (1, 33), (5, 300)])
@pytest.mark.parametrize('layout', ['contiguous', 'channels_last'])
def test_talk2d_against_float64_reference(dtype, tol, size, layout):
    """channels_last: the channels-last kernels (one-pass integral image, two passes for rows over 256)."""
    B, C, H = 2, 32, 2
    maxes = (size[1] // 2, size[1] // 2, size[0] // 2, size[0] // 2)
    x = torch.randn(B, C, *size, dtype=dtype)
    if layout == 'channels_last':
        x = x.contiguous(memory_format=torch.channels_last)
    off = random_offsets((B, H, *size, 4), list(maxes), dtype)
    got = grads(lambda a, o: talk2d(a, o, *maxes, engine='triton'), [x.to(DEV), off.to(DEV)])
    ref = grads(lambda a, o: talk2d_reference(a, o, *maxes), [x.double(), off.double()])
    for a, b, name in zip(got, ref, ('y', 'dx', 'doffsets')):
        assert rel_err(a, b) < tol, name
    if layout == 'channels_last' and min(size) > 1:
        assert got[0].is_contiguous(memory_format=torch.channels_last)


def test_talk_integer_boundaries_and_nan():
    """Offsets on the grid (exactly 0 and 1 included) follow the reference's one-sided derivatives; a NaN offset
    gives NaN at its own position only."""
    B, C, H, L, ml, mr = 1, 4, 2, 13, 4, 3
    x = torch.randn(B, C, L, dtype=torch.float64)
    off = torch.stack([torch.randint(0, ml + 1, (B, H, L)) / ml, torch.randint(0, mr + 1, (B, H, L)) / mr], -1)
    got = grads(lambda a, o: talk1d(a, o, ml, mr, engine='triton'), [x.to(DEV), off.double().to(DEV)])
    ref = grads(lambda a, o: talk1d_reference(a, o, ml, mr), [x, off.double()])
    for a, b in zip(got, ref):
        assert rel_err(a, b) < 1e-12
    off = torch.rand(1, 1, 6, 2, device=DEV)
    off[0, 0, 3, 0] = float('nan')
    y = talk1d(torch.randn(1, 2, 6, device=DEV), off, 3, 3, engine='triton')
    assert torch.isnan(y[..., 3]).all() and not torch.isnan(y[..., :3]).any()


@pytest.mark.parametrize('case', ['1d', '2d'])
def test_talk_gradcheck(case):
    if case == '1d':
        x = torch.randn(2, 4, 11, dtype=torch.float64, device=DEV, requires_grad=True)
        off = offsets_off_grid((2, 2, 11, 2), [4, 3]).to(DEV).requires_grad_()
        fn = lambda a, o: talk1d(a, o, 4, 3, engine='triton')
    else:
        x = torch.randn(1, 4, 4, 5, dtype=torch.float64, device=DEV, requires_grad=True)
        off = offsets_off_grid((1, 2, 4, 5, 4), [2, 3, 2, 1]).to(DEV).requires_grad_()
        fn = lambda a, o: talk2d(a, o, 2, 3, 2, 1, engine='triton')
    assert torch.autograd.gradcheck(fn, (x, off), eps=1e-6, atol=1e-7, rtol=1e-5)


def test_talk_triton_opcheck():
    from mrconvnext.ops.talk import engine_triton as tt

    x = torch.randn(2, 4, 20, device=DEV, requires_grad=True)
    off = torch.rand(2, 2, 20, 2, device=DEV, requires_grad=True)
    torch.library.opcheck(tt.talk1d_triton, (x, off, 3, 2))
    g = torch.randn(2, 4, 20, device=DEV)
    torch.library.opcheck(tt.talk1d_triton_backward, (g, x.detach(), off.detach(), 3, 2, True, True))
    x2 = torch.randn(2, 4, 5, 6, device=DEV, requires_grad=True)
    off2 = torch.rand(2, 2, 5, 6, 4, device=DEV, requires_grad=True)
    torch.library.opcheck(tt.talk2d_triton, (x2, off2, 2, 1, 1, 2))
    _, P = tt.talk2d_triton(x2.detach(), off2.detach(), 2, 1, 1, 2)
    g = torch.randn(2, 4, 5, 6, device=DEV)
    torch.library.opcheck(tt.talk2d_triton_backward, (g, P, off2.detach(), 2, 1, 1, 2, True, True))
    x2_cl = x2.detach().to(memory_format=torch.channels_last).requires_grad_(True)
    torch.library.opcheck(tt.talk2d_triton, (x2_cl, off2, 2, 1, 1, 2))  # the table left out, rebuilt for the backward
    torch.library.opcheck(tt.talk2d_triton_table, (x2_cl.detach(),))


# ---------------------------------------------------------------------------------- long / light / dynamic convs


@pytest.mark.parametrize('method', ['fft', 'direct'])
@pytest.mark.parametrize('autocast', [None, torch.bfloat16, torch.float16])
def test_long_conv1d(method, autocast):
    """float32 inputs compute in float32 under autocast (the op opts out of it): the output and both gradients
    <= 1e-5 against float64, but for the FFT's kernel gradient under bf16 autocast, which reads the bf16 copy of
    ``x`` the backward keeps (``long_conv.operators``): <= 1e-5 against float64 at ``x`` rounded to bf16."""
    B, C, L, K, zero_lag = 2, 8, 3136, 6271, 3135
    x, kernel, bias = torch.randn(B, C, L), torch.randn(C, K) / K**0.5, torch.randn(C)

    def ref_fn(a, k):
        return shifted_sum_conv(a, k, zero_lag) + bias.double()[:, None]

    ref = grads(ref_fn, [x.double(), kernel.double()])
    if method == 'fft' and autocast == torch.bfloat16:
        ref = (*ref[:2], grads(ref_fn, [x.bfloat16().double(), kernel.double()])[2])

    def fn(a, k):
        with torch.autocast('cuda', dtype=autocast or torch.float32, enabled=autocast is not None):
            return long_conv1d(a, k, bias.to(DEV), zero_lag=zero_lag, method=method)

    got = grads(fn, [x.to(DEV), kernel.to(DEV)])
    for a, b, name in zip(got, ref, ('y', 'dx', 'dkernel')):
        assert rel_err(a, b) < 1e-5, name


@pytest.mark.parametrize('method, H', [('toeplitz', 14), ('toeplitz', 7), ('rowdft', 28), ('rowdft', 14)])
@pytest.mark.parametrize('autocast', [None, torch.bfloat16, torch.float16])
def test_long_conv1d_matmul_methods_train(method, H, autocast):
    """The matmul methods' own backward (``long_conv.api._MatmulConv``, what ``'auto'`` trains on for short maps in
    large half-precision batches) on cuBLAS, on a channels-last map as the models pass it: float32 <= 1e-5 (TF32
    off); bf16 / fp16 autocast (half products, float32 accumulation) <= 2e-2."""
    B, C, L = 4, 8, H * H
    x = torch.randn(B, C, H, H).to(memory_format=torch.channels_last).flatten(2)
    kernel, bias = torch.randn(C, 2 * L - 1) / (2 * L) ** 0.5, torch.randn(C)
    ref = grads(lambda a, k: shifted_sum_conv(a, k, L - 1) + bias.double()[:, None], [x.double(), kernel.double()])

    def fn(a, k):
        with torch.autocast('cuda', dtype=autocast or torch.float32, enabled=autocast is not None):
            return long_conv1d(a, k, bias.to(DEV), zero_lag=L - 1, method=method)

    got = grads(fn, [x.to(DEV), kernel.to(DEV)])
    assert got[0].dtype == (autocast or torch.float32)
    for a, b, name in zip(got, ref, ('y', 'dx', 'dkernel')):
        assert rel_err(a, b) < (1e-5 if autocast is None else 2e-2), name


@pytest.mark.parametrize('autocast', [None, torch.bfloat16])
@pytest.mark.parametrize('H', [7, 14])
def test_folded_bn_conv_in_a_large_batch(autocast, H):
    """MRConv's folded training form (``fold_bn``) at a batch where ``'auto'`` trains short maps on the Toeplitz
    product under half autocast (torch.fft in float32): outputs, batch statistics and every gradient against the
    naive per-branch form (convolutions, F.batch_norm, the alpha-weighted sum) in float64 on the CPU. float32 (TF32
    off) <= 1e-4; bf16 autocast (bf16 branch convolutions, float32 statistics) <= 3e-2."""
    from mrconvnext.ops.long_conv import folded_bn_conv
    from tests.ops.long_conv.test_fold_bn import naive

    B, C, N, L = 64, 8, 3, H * H
    x = torch.randn(B, C, H, H).to(memory_format=torch.channels_last).flatten(2) + 0.5
    k = torch.randn(N, C, 2 * L - 1) / L**0.5
    w, b, a = (torch.rand(N, C) + 0.5 for _ in range(3))
    g = torch.randn(B, C, L)
    leaves = [t.double().requires_grad_() for t in (x, k, w, b, a)]
    ref = naive(leaves[0], leaves[1], L - 1, *leaves[2:])
    inputs = [t.to(DEV).requires_grad_() for t in (x, k, w, b, a)]
    with torch.autocast('cuda', dtype=autocast or torch.float32, enabled=autocast is not None):
        got = folded_bn_conv(inputs[0], inputs[1], L - 1, *inputs[2:])
    tol = 1e-4 if autocast is None else 3e-2
    for name, u, v in zip(('y', 'mean', 'var'), got, ref, strict=True):
        assert rel_err(u, v) < tol, name
    want = torch.autograd.grad(ref[0], leaves, g.double())
    have = torch.autograd.grad(got[0], inputs, g.to(DEV).to(got[0].dtype))
    for name, u, v in zip(('x', 'kernels', 'weight', 'bias', 'alpha'), have, want, strict=True):
        assert rel_err(u, v) < tol, name


def test_light_and_dynamic_conv():
    B, C, H, L, K = 2, 12, 3, 300, 7
    x = torch.randn(B, C, L)
    w = torch.randn(H, K).softmax(-1)
    got = grads(lambda a, k: light_conv1d(a, k, num_heads=H), [x.to(DEV), w.to(DEV)])
    kernel = lambda k: k.repeat_interleave(C // H, dim=0)  # noqa: E731
    ref = grads(lambda a, k: shifted_sum_conv(a, kernel(k), K // 2), [x.double(), w.double()])
    for a, b in zip(got, ref):
        assert rel_err(a, b) < 1e-5
    wd = torch.randn(B, H, L, K).softmax(-1)
    got = grads(lambda a, k: dynamic_conv1d(a, k), [x.to(DEV), wd.to(DEV)])
    ref = grads(lambda a, k: dynamic_conv1d_unfold(a, k), [x.double(), wd.double()])
    for a, b in zip(got, ref):
        assert rel_err(a, b) < 1e-5


@pytest.mark.parametrize('dtype,tol', [(torch.float32, 2e-6), (torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
@pytest.mark.parametrize('drop', [False, True])
def test_dynamic_softmax_conv_triton(dtype, tol, drop):
    """The Triton DynamicConv (engine='auto' on CUDA) at a stage-1 shape, channels-last x, against the float64 PyTorch
    engine on the CPU (itself checked against naive loops): y, dx, dlogits. bf16 is checked here only (Triton's
    interpreter gets bf16 dot products wrong, and these kernels are where that would show)."""
    assert light_conv_dispatch.dynamic_conv_engine(DEV, 'auto') == 'triton'
    B, C, H, L, K = 2, 96, 6, 3136, 7
    x = torch.randn(B, L, C).transpose(1, 2)
    logits = torch.randn(B, L, H, K) * 2
    mult = (torch.rand(B, L, H, K) > 0.2).float() / 0.8 if drop else None
    ref = grads(lambda a, lg: dynamic_softmax_conv1d(a, lg, dropconnect=mult, engine='torch'),
                [x.double(), logits.double()])  # fmt: skip
    m = None if mult is None else mult.to(DEV)
    got = grads(lambda a, lg: dynamic_softmax_conv1d(a, lg, dropconnect=m), [x.to(DEV, dtype), logits.to(DEV, dtype)])
    assert got[0].dtype == dtype and got[0].transpose(1, 2).is_contiguous()
    for a, b, name in zip(got, ref, ('y', 'dx', 'dlogits')):
        assert rel_err(a, b) < tol, name


@pytest.mark.parametrize('dtype,tol', [(torch.float32, 2e-6), (torch.float16, 2e-3), (torch.bfloat16, 1e-2)])
def test_light_conv_triton(dtype, tol):
    """LightConv on the Triton engine (DynamicConv's kernels, shared weights) at a stage-1 shape, channels-last x,
    against the float64 grouped conv on the CPU: y, dx, dweight (summed over 98 blocks of positions per image)."""
    B, C, H, L, K = 2, 96, 6, 3136, 7
    x = torch.randn(B, L, C).transpose(1, 2)
    w = torch.randn(H, K).softmax(-1)
    ref = grads(lambda a, k: light_conv1d(a, k, num_heads=H), [x.double(), w.double()])
    got = grads(lambda a, k: light_conv1d(a, k, num_heads=H, engine='triton'), [x.to(DEV, dtype), w.to(DEV, dtype)])
    assert got[0].dtype == dtype and got[0].transpose(1, 2).is_contiguous()
    for a, b, name in zip(got, ref, ('y', 'dx', 'dweight')):
        assert rel_err(a, b) < tol, name


def test_light_conv_triton_opcheck():
    from mrconvnext.ops.light_conv import engine_triton as dt

    x = torch.randn(2, 40, 8, device=DEV, requires_grad=True)
    w = torch.randn(2, 5, device=DEV, requires_grad=True)
    torch.library.opcheck(dt.light_conv_triton, (x, w, 2))
    torch.library.opcheck(dt.light_conv_triton_backward, (torch.randn_like(x), x.detach(), w.detach(), 2, True, True))


def test_dynamic_conv_triton_opcheck():
    from mrconvnext.ops.light_conv import engine_triton as dt

    x = torch.randn(2, 20, 8, device=DEV, requires_grad=True)
    logits = torch.randn(2, 20, 2, 5, device=DEV, requires_grad=True)
    mult = torch.rand(2, 20, 2, 5, device=DEV)
    for drop in (None, mult):
        for softmax in (True, False):
            torch.library.opcheck(dt.dynamic_conv_triton, (x, logits, drop, 2, softmax))
    y, lse = dt.dynamic_conv_triton(x.detach(), logits.detach(), mult, 2, True)
    args = (torch.randn_like(y), x.detach(), logits.detach(), mult, lse, 2, True, True, True)
    torch.library.opcheck(dt.dynamic_conv_triton_backward, args)


def test_flashfftconv_adapter():
    if availability.flashfft_module() is None:
        pytest.skip('flashfftconv is not installed (optional engine)')
    B, C, L, K, zero_lag = 2, 8, 3136, 6271, 3135
    x, kernel = torch.randn(B, C, L), torch.randn(C, K) / K**0.5
    got = long_conv1d(x.to(DEV, torch.bfloat16), kernel.to(DEV), zero_lag=zero_lag, engine='flashfft')
    ref = shifted_sum_conv(x.to(torch.bfloat16).double(), kernel.double(), zero_lag)
    assert rel_err(got, ref) < 2e-2


# ------------------------------------------------------------------------------------------------------ models


def _model(name: str, **extra) -> torch.nn.Module:
    torch.manual_seed(0)
    kw = dict(depths=(1, 1, 1, 1), img_size=SIZE, num_classes=5, ls_init_value=1.0, **extra)
    if name.startswith(('lightconvnext', 'dynconvnext')):
        kw['kernel_sizes'] = (3, 5, 7, 7)
    return timm.create_model(name, **kw)


def _train_step(model, x, run=None):
    """Forward + backward of a fixed loss in training mode through ``run`` (default: the model itself):
    ``(logits, {name: grad})``."""
    model.train()
    model.zero_grad(set_to_none=True)
    y = (run if run is not None else model)(x)
    y.square().mean().backward()
    return y.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize('name', FAMILIES)
def test_family_against_cpu_float64(name):
    """Eval (contiguous and channels-last), bf16/fp16 autocast, and a training step's logits and every gradient."""
    model = _model(name)
    ref_model = copy.deepcopy(model).double()
    model = model.to(DEV)
    x = torch.randn(2, 3, SIZE, SIZE)
    with torch.no_grad():
        ref = ref_model.eval()(x.double())
        model.eval()
        assert rel_err(model(x.to(DEV)), ref) < 1e-4
        cl_model = copy.deepcopy(model).to(memory_format=torch.channels_last)
        assert rel_err(cl_model(x.to(DEV).contiguous(memory_format=torch.channels_last)), ref) < 1e-4
        for dtype in (torch.bfloat16, torch.float16):
            with torch.autocast('cuda', dtype=dtype):
                assert rel_err(model(x.to(DEV)), ref) < 3e-2, dtype
    y_ref, g_ref = _train_step(ref_model, x.double())
    y, g = _train_step(model, x.to(DEV))
    assert rel_err(y, y_ref) < 1e-4
    assert g.keys() == g_ref.keys() and len(g) == len(list(model.parameters()))
    for n in g:
        assert rel_err(g[n], g_ref[n]) < 1e-3, n


def test_reparameterized_equals_branched():
    model = _model('mrconvnext_atto').to(DEV).eval()
    x = torch.randn(4, 3, SIZE, SIZE, device=DEV)
    with torch.no_grad():
        y = model(x)
        model.reparameterize()
        assert rel_err(model(x), y) < 1e-5


@pytest.mark.parametrize('name', [*FAMILIES, 'lightconvnext_atto:triton'])
def test_compile_fullgraph(name):
    """torch.compile (inductor, fullgraph): eval and a training step equal eager; TaLK's, DynamicConv's and (engine
    'triton') LightConv's Triton kernels are triton_ops that inductor traces into."""
    torch._dynamo.reset()
    name, _, engine = name.partition(':')
    model = _model(name, **({'engine': engine} if engine else {})).to(DEV)
    x = torch.randn(2, 3, SIZE, SIZE, device=DEV)
    with torch.no_grad():
        assert rel_err(torch.compile(model.eval(), fullgraph=True)(x), model(x)) < 1e-4
    compiled_model = copy.deepcopy(model)
    y, g = _train_step(model, x)
    yc, gc = _train_step(compiled_model, x, torch.compile(compiled_model, fullgraph=True))
    assert rel_err(yc, y) < 1e-4
    for n in g:
        assert rel_err(gc[n], g[n]) < 1e-3, n
    torch._dynamo.reset()
