"""Export: reparameterized hub directory (local-dir: reload gives the same logits), ONNX vs onnxruntime."""

import importlib.util
import json

import pytest
import timm
import torch
from safetensors.torch import save_file

import mrconvnext  # noqa: F401
from mrconvnext.tools import export, validate
from mrconvnext.tools.common import model_from_source


@pytest.fixture(scope='session')  # once per run (module scope re-exported when xdist interleaved the modules)
def exported(trained_run, tmp_path_factory):
    out = tmp_path_factory.mktemp('export') / 'hub'
    argv = ['--checkpoint', trained_run['checkpoint'], '--output', str(out)]
    if _has_onnx():
        argv.append('--onnx')
    return export.run(argv), out


def _has_onnx() -> bool:
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def test_hub_directory_reloads_with_the_same_logits(trained_run, exported):
    result, out = exported
    assert (out / 'model.safetensors').is_file() and (out / 'config.json').is_file()
    config = json.loads((out / 'config.json').read_text())
    assert config['architecture'] == 'mrconvnext_atto' and config['num_classes'] == 10
    assert config['model_args']['deploy'] is True and list(config['model_args']['img_size']) == [32, 32]
    assert list(config['pretrained_cfg']['input_size']) == [3, 32, 32] and config['pretrained_cfg']['crop_pct'] == 1.0
    # independent check: the training checkpoint, reparameterized here, against the reloaded directory
    model, _ = model_from_source(None, trained_run['checkpoint'])
    deployed = timm.utils.reparameterize_model(model)
    reloaded = timm.create_model(f'local-dir:{out}', pretrained=True).eval()
    assert reloaded.is_deployed()
    x = torch.randn(6, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(reloaded(x), deployed(x))
        assert (deployed(x) - model(x)).abs().max() <= 1e-4  # the fold itself (float32)
    assert result['hub_max_abs_diff'] == 0.0 and result['reparam_max_abs_diff'] <= 1e-4


def test_validate_reads_the_hub_directory(exported, validated, digits_dir):
    _, out = exported
    res = validate.run(['--data-dir', str(digits_dir), '--model', f'local-dir:{out}', '-j', '0', '--no-progress'])
    assert res['img_size'] == 32 and res['crop_pct'] == 1.0  # preprocessing recorded by the export
    assert res['deployed'] and abs(res['top1'] - validated['reparam']['top1']) <= 0.2


def test_onnx_matches_pytorch(exported):
    pytest.importorskip('onnxruntime')
    result, out = exported
    assert (out / 'model.onnx').is_file()
    assert result['onnx_max_abs_diff'] <= 1e-4  # stated tolerance: float32 logits within 1e-4 (seen ~1e-6)
    import numpy as np
    import onnxruntime as ort

    sess = ort.InferenceSession(str(out / 'model.onnx'), providers=['CPUExecutionProvider'])
    reloaded = timm.create_model(f'local-dir:{out}', pretrained=True).eval()
    x = torch.randn(3, 3, 32, 32)  # a batch size not used at export: the batch axis is dynamic
    y = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    with torch.no_grad():
        ref = reloaded(x).numpy()
    assert np.abs(y - ref).max() <= 1e-4


@pytest.mark.parametrize('name', ['talkconvnext_atto', 'lightconvnext_atto', 'mrconvnext_atto', 'dynconvnext_atto'])
@pytest.mark.parametrize('size', [64, 96])
def test_torchscript_onnx_exporter(tmp_path, name, size):
    """Issue 23 item 8: LightConv failed with SymbolicValueError at the nominal size and MRConv with a TypeError at
    another; the TorchScript exporter (PyTorch's deprecated one, timm's onnx_export.py default) now traces the same
    ONNX forms as the dynamo exporter: standard operators, PyTorch's logits at another batch size. MRConv at a size
    other than the nominal one (the lag remap) raises, naming the dynamo exporter."""
    pytest.importorskip('onnxruntime')
    import onnx
    import onnxruntime as ort

    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=10, img_size=64, depths=(1, 1, 1, 1), ls_init_value=1.0).eval()
    path = tmp_path / 'ts.onnx'
    if name == 'mrconvnext_atto' and size != 64:  # the lag remap to another size: a clear error naming the route
        with pytest.raises(ValueError, match=r'cannot trace the lag remap.*dynamo=True'):
            export.export_onnx(model, path, torch.randn(2, 3, size, size), exporter='torchscript')
        return
    assert export.export_onnx(model, path, torch.randn(2, 3, size, size), exporter='torchscript') == 'torchscript'
    assert {n.domain for n in onnx.load(str(path)).graph.node} <= {'', 'ai.onnx'}
    sess = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    x = torch.randn(3, 3, size, size)
    with torch.no_grad():
        ref = model(x)
    y = torch.from_numpy(sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0])
    assert (y - ref).abs().max().item() <= 1e-4 * max(ref.abs().max().item(), 1.0)


@pytest.mark.parametrize('name', ['mrconvnext_atto', 'talkconvnext_atto'])
def test_export_with_check_batch_1(tmp_path, name):
    """Issue 23 item 7: --check-batch 1 --onnx failed with "Constraints violated (batch)!" for every family; the
    ONNX model now matches PyTorch on other batch sizes (the tool checks batch 2, here also 5)."""
    pytest.importorskip('onnxruntime')
    import onnxruntime as ort

    model = timm.create_model(name, num_classes=5, img_size=32, depths=(1, 1, 1, 1))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, ckpt := tmp_path / 'm.safetensors')
    argv = ['--model', name, '--checkpoint', str(ckpt), '--num-classes', '5', '--output', str(tmp_path / 'out')]
    argv += ['--model-kwargs', 'img_size=32', 'depths=(1,1,1,1)', '--check-batch', '1', '--onnx']
    result = export.run(argv)
    assert result['onnx_max_abs_diff'] <= 1e-4
    sess = ort.InferenceSession(result['onnx'], providers=['CPUExecutionProvider'])
    reloaded = timm.create_model(f'local-dir:{tmp_path / "out"}', pretrained=True).eval()
    x = torch.randn(5, 3, 32, 32)
    with torch.no_grad():
        ref = reloaded(x).numpy()
    assert abs(sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0] - ref).max() <= 1e-4


def test_torchscript_onnx_exporter_row_dft(tmp_path):
    """A nominal stage-1 map of more than 256 positions (80 px: 400) takes the row-DFT form under the TorchScript
    trace, as timm's 224 px export does; the batch axis stays dynamic."""
    pytest.importorskip('onnxruntime')
    import onnxruntime as ort

    torch.manual_seed(0)
    model = timm.create_model('mrconvnext_atto', num_classes=10, img_size=80, depths=(1, 1, 1, 1), ls_init_value=1.0)
    model = timm.utils.reparameterize_model(model.eval())
    path = tmp_path / 'ts.onnx'
    export.export_onnx(model, path, torch.randn(2, 3, 80, 80), exporter='torchscript')
    sess = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    x = torch.randn(3, 3, 80, 80)
    with torch.no_grad():
        ref = model(x)
    y = torch.from_numpy(sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0])
    assert (y - ref).abs().max().item() <= 1e-4 * max(ref.abs().max().item(), 1.0)


def test_deform_conv_export_runs_in_onnxruntime(tmp_path):
    """``mrconvnext-export --onnx --onnx-deform-conv``: TaLK 2-D's maps past 196 positions (64 px: stage 1 at 16 x 16)
    export as one ONNX DeformConv each, the rest as without it; ONNX Runtime matches PyTorch at another batch size.
    Without the option the file holds no DeformConv; the option asks for opset 19 or later and the dynamo exporter."""
    pytest.importorskip('onnxruntime')
    onnxscript = pytest.importorskip('onnxscript')
    if not export.deform_conv_translated():
        pytest.skip(f'onnxscript {onnxscript.__version__} does not translate torchvision::deform_conv2d')
    import onnx
    import onnxruntime as ort

    torch.manual_seed(0)
    model = timm.create_model('talkconvnext2d_atto', num_classes=10, img_size=64, depths=(1, 1, 1, 1)).eval()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, ckpt := tmp_path / 'm.safetensors')
    argv = ['--model', 'talkconvnext2d_atto', '--checkpoint', str(ckpt), '--num-classes', '10']
    argv += ['--model-kwargs', 'img_size=64', 'depths=(1,1,1,1)', '--onnx']
    result = export.run(argv + ['--output', str(tmp_path / 'deform'), '--onnx-deform-conv'])
    assert result['onnx_max_abs_diff'] <= 1e-4
    graph = onnx.load(result['onnx'])
    assert [n.op_type for n in graph.graph.node].count('DeformConv') == 1  # stage 1 only (stage 2: 64 positions)
    assert {(o.domain, o.version) for o in graph.opset_import if o.domain in ('', 'ai.onnx')} == {('', 20)}
    sess = ort.InferenceSession(result['onnx'], providers=['CPUExecutionProvider'])
    x = torch.randn(3, 3, 64, 64)
    with torch.no_grad():
        ref = model(x)
    y = torch.from_numpy(sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0])
    assert (y - ref).abs().max().item() <= 1e-4 * max(ref.abs().max().item(), 1.0)
    plain = export.run(argv + ['--output', str(tmp_path / 'plain')])
    assert 'DeformConv' not in {n.op_type for n in onnx.load(plain['onnx']).graph.node}


def test_deform_conv_export_checks_its_arguments(tmp_path, monkeypatch, capsys):
    """deform_conv=True: opset 19 or later, the dynamo exporter and an onnxscript that translates torchvision's
    deform_conv2d, each refused with a ValueError that names it (before anything is traced); the CLI flag needs --onnx."""
    model = timm.create_model('talkconvnext2d_atto', num_classes=10, img_size=64, depths=(1, 1, 1, 1)).eval()
    with pytest.raises(TypeError, match='deform_conv must be a bool'):
        export.export_onnx(model, tmp_path / 'x.onnx', torch.randn(2, 3, 64, 64), deform_conv=1)
    with pytest.raises(ValueError, match='deform_conv needs opset 19 or later'):
        export.export_onnx(model, tmp_path / 'x.onnx', torch.randn(2, 3, 64, 64), opset=18, deform_conv=True)
    with pytest.raises(ValueError, match='deform_conv needs the dynamo exporter'):
        export.export_onnx(
            model, tmp_path / 'x.onnx', torch.randn(2, 3, 64, 64), exporter='torchscript', deform_conv=True
        )
    if importlib.util.find_spec('onnxscript') is not None:
        monkeypatch.setattr(export, 'deform_conv_translated', lambda: False)  # an onnxscript without the translation
        with pytest.raises(ValueError, match='translates torchvision::deform_conv2d'):
            export.export_onnx(model, tmp_path / 'x.onnx', torch.randn(2, 3, 64, 64), deform_conv=True)
    with pytest.raises(SystemExit):
        export.run(['--model', 'talkconvnext2d_atto', '--output', str(tmp_path / 'o'), '--onnx-deform-conv'])
    assert '--onnx-deform-conv shapes the ONNX file: it needs --onnx' in capsys.readouterr().err
