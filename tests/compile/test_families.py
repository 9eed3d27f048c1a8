"""Every model family under the compilers and tracers timm users reach for, against eager on fresh inputs:
torch.compile (fullgraph, eval and a training step), torch.export (save / load round trip), ONNX through
onnxruntime, timm's FX feature extraction, TorchScript and the meta device.

Small configurations (one block per stage, short LightConv/DynamicConv kernels) keep compile and export times low;
``ls_init_value=1.0`` makes every mixer's output count in the logits. Tolerances are float32 rounding accumulated
over the network, relative to the largest magnitude of the compared tensor (compilers reorder float32 sums).
"""

import copy

import pytest
import timm
import torch

import mrconvnext  # noqa: F401  (registers the models)
from mrconvnext.ops.decompositions import decompositions
from mrconvnext.ops.long_conv.engine_onnx import ONNX_ROW_WIDTH

FAMILIES = ['mrconvnext_atto', 'talkconvnext_atto', 'talkconvnext2d_atto', 'lightconvnext_atto', 'dynconvnext_atto']
SIZE = 64
TOL = 1e-4


def _kwargs(name: str) -> dict:
    kw = dict(depths=(1, 1, 1, 1), img_size=SIZE, num_classes=5, ls_init_value=1.0)
    if name.startswith(('lightconvnext', 'dynconvnext')):
        kw['kernel_sizes'] = (3, 5, 7, 7)
    return kw


def _model(name: str, deploy: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    model = timm.create_model(name, **_kwargs(name)).eval()
    if deploy and hasattr(model, 'reparameterize'):
        model.reparameterize()
    return model


def _close(a, b, tol=TOL):
    torch.testing.assert_close(a, b, rtol=tol, atol=tol * max(b.abs().max().item(), 1e-6))


@pytest.fixture(autouse=True)
def _reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _step(model, x):
    y = model(x)
    y.square().mean().backward()
    params = getattr(model, '_orig_mod', model).named_parameters()
    return y.detach(), {n: p.grad.clone() for n, p in params if p.grad is not None}


# mrconvnext_atto's compile tests (branched and deployed, inductor for training too) are in test_compile.py. Here the
# training step compiles with aot_eager: the whole dynamo capture, AOTAutograd's joint graph and the operators' fake
# implementations and registered autograd, without inductor's C++ code generation (about a minute per model on CI's
# two cores with a cold cache); inductor compiles each family's eval graph.
@pytest.mark.parametrize('name', FAMILIES[1:])
def test_compile_fullgraph_eval_and_training_step(name):
    model = _model(name)
    x = torch.randn(2, 3, SIZE, SIZE)
    with torch.no_grad():  # fullgraph=True: any graph break raises
        _close(torch.compile(model, fullgraph=True)(x), model(x))
    torch._dynamo.reset()
    model.train()
    compiled_model = copy.deepcopy(model)
    compiled = torch.compile(compiled_model, fullgraph=True, backend='aot_eager')
    x = torch.randn(3, 3, SIZE, SIZE)
    y, grads = _step(model, x)
    yc, grads_c = _step(compiled, x)
    _close(yc, y)
    assert grads.keys() == grads_c.keys() and len(grads) == len(list(model.parameters()))
    for n in grads:
        _close(grads_c[n], grads[n])


def _export(model, x):
    return torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim('batch', min=1, max=64)},))


@pytest.mark.parametrize('name', FAMILIES)
def test_export_round_trip_and_decomposition_for_onnx(name, tmp_path):
    """One ``torch.export`` program of the deployed model (the reparameterized form where the family has one, batch axis
    dynamic), then both things users do with it: save and load it back, and run :func:`decompositions` on it so that the
    ONNX exporter takes it (the package's operators become ATen ops)."""
    model = _model(name, deploy=True)
    ep = _export(model, torch.randn(2, 3, SIZE, SIZE))
    if not name.startswith('lightconvnext'):  # LightConv is a plain grouped conv1d
        assert any('mrconvnext' in str(n.target) for n in ep.graph.nodes), 'the mixers should export as operators'
    # engine='auto' exports the per-device operators (no engine in the graph): the program runs on CPU and CUDA
    ops = {str(n.target).split('.')[1] for n in ep.graph.nodes if str(n.target).startswith('mrconvnext.')}
    assert ops <= {'talk1d', 'talk2d', 'fft_conv', 'dynamic_conv'}, ops
    torch.export.save(ep, tmp_path / 'model.pt2')
    loaded = torch.export.load(tmp_path / 'model.pt2').module()
    x = torch.randn(3, 3, SIZE, SIZE)  # another batch size: the batch axis is dynamic
    with torch.no_grad():
        _close(loaded(x), model(x), 1e-5)

    decomposed = ep.run_decompositions(decompositions())
    assert not any('mrconvnext' in str(n.target) for n in decomposed.graph.nodes), 'decompositions left an operator'
    path = tmp_path / 'model.onnx'
    torch.onnx.export(decomposed, (torch.randn(2, 3, SIZE, SIZE),), str(path), dynamo=True, external_data=False)
    _onnx_check(model, path, torch.randn(3, 3, SIZE, SIZE))


def _onnx_check(model, path, *xs: torch.Tensor):
    """Standard-domain nodes only, and onnxruntime within 1e-4 of PyTorch on each input; returns the graph."""
    import onnx
    import onnxruntime as ort  # in the [test] extra, with onnxscript (the dynamo exporter): a hard requirement here

    graph = onnx.load(str(path)).graph
    assert {n.domain for n in graph.node} <= {'', 'ai.onnx'}, 'only standard ONNX operators'
    session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    for x in xs:
        y = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])
        with torch.no_grad():
            ref = model(x)
        assert (y - ref).abs().max().item() <= 1e-4, (y - ref).abs().max().item()
    return graph


# The deployed models go through the same exporter call in tests/tools/test_timm_scripts.py (timm's onnx_export with
# dynamo=True, at 96 px, batch axis dynamic, run at batches 1 and 3); here the branched MRConv model, whose BatchNorm
# branches and kernel synthesis trace into the graph.
def test_plain_onnx_export_through_onnxruntime(tmp_path):
    """``torch.onnx.export(model, x, dynamo=True)`` as any user or library calls it, with no package step, of the
    branched MRConv model: the mixers trace their ONNX forms at a size other than the nominal one (the mixers' size
    rules), batch axis dynamic. Checked at batch 1 and 3: maps past ONNX_ROW_WIDTH ** 2 positions (stage 1 at 80 px)
    hold both forms of the row products in an ``If`` on the batch (engine_onnx.ONNX_DFT_MAX_BATCH), and each runs;
    stage 2 (100 positions, ONNX_DIRECT_MAX_LENGTH, its kernels past DIRECT_MAX_TAPS) is one depthwise Conv of its
    10 x 10 fold (engine_onnx.folded_conv2d), with a 19 x 19 kernel."""
    size = 80
    assert (size // 4) ** 2 > ONNX_ROW_WIDTH**2
    model = _model('mrconvnext_atto')
    path = tmp_path / 'model.onnx'
    x = torch.randn(2, 3, size, size)
    torch.onnx.export(model, (x,), str(path), dynamo=True, dynamic_shapes=({0: 'batch'},), external_data=False)
    graph = _onnx_check(model, path, torch.randn(3, 3, size, size), torch.randn(1, 3, size, size))
    branches = [a.g for n in graph.node if n.op_type == 'If' for a in n.attribute if a.name.endswith('_branch')]
    assert any(n.op_type == 'MatMul' for g in branches for n in g.node), 'the row products switch on the batch'
    kernels = [list(a.ints) for n in graph.node if n.op_type == 'Conv' for a in n.attribute if a.name == 'kernel_shape']
    assert [19, 19] in kernels, 'stage 2 runs as the folded Conv'


@pytest.mark.parametrize('name', FAMILIES)
def test_fx_feature_extraction(name):
    from timm.models import FeatureGraphNet

    model = _model(name)
    fx = FeatureGraphNet(model, out_indices=(0, 1, 2, 3))
    x = torch.randn(2, 3, SIZE, SIZE)
    with torch.no_grad():
        feats = fx(x)
        want = model.forward_intermediates(x, intermediates_only=True)
    assert len(feats) == len(want) == 4
    for a, b in zip(feats, want):
        _close(a, b, 1e-6)
    with pytest.raises(TypeError, match='floating-point'):  # the input check is a node of the traced graph
        fx(torch.zeros(2, 3, SIZE, SIZE, dtype=torch.uint8))
    # and timm's factory route
    feats = timm.create_model(name, features_only=True, feature_cls='fx', **_kwargs(name))(x)
    assert [f.shape[1] for f in feats] == [40, 80, 160, 320]


# torch 2.14 deprecates TorchScript and warns on every torch.jit.script call (docs/deployment.md says so); this one warning is
# upstream's, any other warning still shows
@pytest.mark.filterwarnings('ignore:`torch.jit.script` is deprecated:FutureWarning')
@pytest.mark.parametrize('name', FAMILIES)
def test_torchscript_forward(name):
    model = _model(name)
    scripted = torch.jit.script(model)
    x = torch.randn(2, 3, SIZE, SIZE)
    with torch.no_grad():
        _close(scripted(x), model(x), 1e-5)
        with pytest.raises(Exception, match='floating-point'):  # the check runs in Python under TorchScript too
            scripted(torch.zeros(2, 3, SIZE, SIZE, dtype=torch.int64))


@pytest.mark.parametrize('name', FAMILIES)
def test_meta_device(name):
    model = timm.create_model(name, device='meta', **_kwargs(name))
    tensors = [*model.parameters(), *model.buffers()]
    assert all(t.device.type == 'meta' for t in tensors)
    x = torch.randn(2, 3, SIZE, SIZE, device='meta')
    for mode in (model.eval, model.train):
        mode()
        assert model.forward_features(x).shape == (2, 320, SIZE // 32, SIZE // 32)
        assert [f.shape[1] for f in model.forward_intermediates(x, intermediates_only=True)] == [40, 80, 160, 320]
    if hasattr(model, 'reparameterize'):
        model.eval().reparameterize()
        assert model(x).shape == (2, 5)
