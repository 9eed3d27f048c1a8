"""The launcher for timm's own scripts: it registers the zoo, then runs the script as __main__ with its args."""

import json
import os
import subprocess
import sys

import pytest

from tests.limits import HANG_LIMIT_S

from .conftest import REPO

# stands in for timm's validate.py / benchmark.py / inference.py (they are not in the timm wheel):
# a script that only knows timm, creating a model by name from its command line
SCRIPT = """
import argparse, json, sys
import timm

def main():
    p = argparse.ArgumentParser()
    p.add_argument('--model')
    p.add_argument('--out')
    args = p.parse_args()
    model = timm.create_model(args.model, num_classes=3)
    with open(args.out, 'w') as f:
        json.dump({'argv0': sys.argv[0], 'cls': type(model).__name__, 'modules': 'mrconvnext' in sys.modules}, f)

if __name__ == '__main__':
    main()
"""


def _run(args, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=HANG_LIMIT_S
    )


def test_launcher_registers_the_models_and_runs_the_script(tmp_path):
    script = tmp_path / 'fake_timm_script.py'
    script.write_text(SCRIPT)
    out = tmp_path / 'out.json'
    # without the launcher the fresh interpreter does not know the model
    plain = _run([str(script), '--model', 'mrconvnext_atto', '--out', str(out)], tmp_path)
    assert plain.returncode != 0 and 'mrconvnext_atto' in plain.stderr
    launched = _run(
        ['-m', 'mrconvnext.timm_scripts', str(script), '--model', 'mrconvnext_atto', '--out', str(out)], tmp_path
    )
    assert launched.returncode == 0, launched.stderr
    got = json.loads(out.read_text())
    assert got == {'argv0': str(script), 'cls': 'MRConvNeXt', 'modules': True}


def test_launcher_propagates_the_exit_status_and_checks_the_path(tmp_path):
    script = tmp_path / 'fails.py'
    script.write_text("import sys\nif __name__ == '__main__':\n    sys.exit(3)\n")
    assert _run(['-m', 'mrconvnext.timm_scripts', str(script)], tmp_path).returncode == 3
    # a missing script: the same SystemExit the interpreter turns into status 1 and the message on stderr (in this
    # process: a second interpreter costs seconds of imports)
    from mrconvnext import timm_scripts

    with pytest.raises(SystemExit) as exc:
        timm_scripts.main([str(tmp_path / 'nope.py')])
    assert isinstance(exc.value.code, str) and 'no script' in exc.value.code


def test_launcher_in_process(tmp_path, monkeypatch):
    from mrconvnext import timm_scripts

    script = tmp_path / 'argv.py'
    out = tmp_path / 'argv.json'
    script.write_text(f"import json, sys\njson.dump(sys.argv, open({str(out)!r}, 'w'))\n")
    before = list(sys.argv)
    timm_scripts.main([str(script), '--a', '1'])
    assert json.loads(out.read_text()) == [str(script), '--a', '1'] and sys.argv == before
    with pytest.raises(SystemExit):
        timm_scripts.main([])


# stands in for timm's train.py: it imports the modules named by --device-modules before create_model
TRAIN_LIKE = """
import argparse, importlib, json
import timm

p = argparse.ArgumentParser()
p.add_argument('--model')
p.add_argument('--device-modules', default=None, nargs='+')
p.add_argument('--out')
args = p.parse_args()
for module in args.device_modules or []:
    importlib.import_module(module)
model = timm.create_model(args.model, num_classes=3)
json.dump({'cls': type(model).__name__, 'params': sum(p.numel() for p in model.parameters())}, open(args.out, 'w'))
"""


def test_device_modules_flag_registers_the_models(tmp_path):
    script = tmp_path / 'train_like.py'
    script.write_text(TRAIN_LIKE)
    out = tmp_path / 'out.json'
    proc = _run(
        [str(script), '--device-modules', 'mrconvnext', '--model', 'mrconvnext_atto', '--out', str(out)], tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())['cls'] == 'MRConvNeXt'


FAMILIES = ['mrconvnext_atto', 'talkconvnext_atto', 'talkconvnext2d_atto', 'lightconvnext_atto', 'dynconvnext_atto']


@pytest.mark.parametrize('dynamo', [False, True], ids=['torchscript', 'dynamo'])
@pytest.mark.parametrize('name', FAMILIES)
def test_timm_onnx_export_and_validate_calls(tmp_path, name, dynamo):
    """What timm's ``onnx_export.py --reparam [--dynamo] [--img-size 96]`` and ``onnx_validate.py`` call (the scripts
    are not in the wheel): ``timm.utils.onnx.onnx_export`` with its own forward check, then an onnxruntime session
    over new images against PyTorch. Every family, with the TorchScript exporter (the script's default) at the
    nominal size and the dynamo one at another size. timm's dynamo export is the plain ``torch.onnx.export(model,
    (x,), dynamo=True, dynamic_shapes=({0: 'batch'},))`` any user calls, so it is also the deployed models' plain
    ONNX check (tests/compile/test_families.py exports the branched MRConv model): the mixers trace their ONNX forms
    at a size other than the nominal one (their size rules), and run at batches 1 and 3. At 96 px MRConv's stage 1
    (576 positions, past ONNX_ROW_WIDTH ** 2) holds both forms of the row products in an ``If`` on the batch
    (engine_onnx.ONNX_DFT_MAX_BATCH), each of which runs; stage 2 (144) takes the DFT form at every batch, stages 3
    and 4 (36, 9 positions; their remapped kernels of 47 and 11 taps, at most DIRECT_MAX_TAPS) a grouped Conv."""
    pytest.importorskip('onnxruntime')
    import onnx
    import onnxruntime as ort
    import timm
    import torch
    from timm.utils import reparameterize_model
    from timm.utils.onnx import onnx_export

    import mrconvnext  # noqa: F401
    from mrconvnext.ops.long_conv.engine_onnx import ONNX_ROW_WIDTH

    torch.manual_seed(0)
    model = timm.create_model(name, num_classes=5, img_size=64, depths=(1, 1, 1, 1), ls_init_value=1.0)
    model = reparameterize_model(model.eval())
    path = str(tmp_path / 'model.onnx')
    size = 96 if dynamo else 64
    onnx_export(model, path, input_size=(3, size, size), batch_size=2, use_dynamo=dynamo, check_forward=True)
    graph = onnx.load(path).graph
    assert {n.domain for n in graph.node} <= {'', 'ai.onnx'}
    options = ort.SessionOptions()
    check_layout = dynamo and name.startswith(('talkconvnext_', 'dynconvnext_'))
    if check_layout:
        options.optimized_model_filepath = str(tmp_path / 'optimized.onnx')  # the graph ONNX Runtime runs
    session = ort.InferenceSession(path, options, providers=['CPUExecutionProvider'])
    for batch in (1, 3) if dynamo else (2,):
        x = torch.randn(batch, 3, size, size)
        y = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: x.numpy()})[0])
        with torch.no_grad():
            ref = model(x)
        assert (y - ref).abs().max().item() <= 1e-4  # float32 logits (tests/compile/test_families.py's bound)
    if check_layout:
        # TaLK 1-D's tables and DynamicConv's bands read the map channels-last, and the mixer's output reaches the
        # block's LayerNorm with no transpose: the form's and the block's cancel (mrconvnext.ops.map_layout); before,
        # a Transpose of the mixer's Reshape
        optimized = onnx.load(str(tmp_path / 'optimized.onnx')).graph
        producer = {out: n for n in optimized.node for out in n.output}
        norms = [n for n in optimized.node if n.op_type == 'LayerNormalization']
        fed = [producer.get(n.input[0]) for n in norms]
        after_mixer = [p for p in fed if p is not None and p.op_type == 'Transpose' and p.input[0] in producer]
        assert not [p for p in after_mixer if producer[p.input[0]].op_type == 'Reshape'], 'a transpose after a mixer'
    if dynamo and name.startswith('mrconvnext'):
        assert (size // 8) ** 2 <= ONNX_ROW_WIDTH**2 < (size // 4) ** 2  # the If at stage 1 only
        branches = [a.g for n in graph.node if n.op_type == 'If' for a in n.attribute if a.name.endswith('_branch')]
        assert any(n.op_type == 'MatMul' for g in branches for n in g.node), 'the row products switch on the batch'
        # ONNX Runtime copies a branch's closing Reshape into the If's output; the unfolding follows the If
        assert all(g.node[-1].op_type != 'Reshape' for g in branches), [g.node[-1].op_type for g in branches]
