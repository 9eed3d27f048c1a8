"""Export a trained model: reparameterize it, write a timm hub directory, optionally ONNX.

    mrconvnext-export --checkpoint run/model_best.pth.tar --output exported/
    mrconvnext-export --checkpoint run/model_best.pth.tar --output exported/ --onnx      # + exported/model.onnx

Steps:

1. Build the model and load the weights (as ``mrconvnext-validate`` does: a training checkpoint with
   its ``args.yaml``, a state-dict / ``.safetensors`` file with ``--model``, or a hub directory).
2. Reparameterize (``timm.utils.reparameterize_model``: every MRConv mixer becomes one long kernel);
   ``--no-reparam`` keeps the branches. The branched and the exported outputs are compared.
3. ``timm.models.save_for_hf(model, DIR, safe_serialization=True)``: ``model.safetensors`` +
   ``config.json`` (architecture, ``model_args`` with ``deploy=True`` and ``img_size``, and the
   preprocessing of the training run). The directory is reloaded with
   ``timm.create_model('local-dir:DIR', pretrained=True)`` (``import mrconvnext`` first) and its logits
   are compared with the in-memory model's.
4. ``--onnx``: the model is exported with ``torch.onnx.export(..., dynamo=True)`` (batch axis dynamic; the
   spatial size is fixed at export because the kernels are fitted to the feature map): every mixer takes its
   ONNX form (standard operators: matrix products and, on short maps, a depthwise Conv for MRConv, prefix sums
   and gathers for TaLK), and
   onnxruntime's output is compared with PyTorch's: the run fails if the largest absolute logit
   difference exceeds ``--onnx-atol`` (default 1e-4; float32 agreement is typically ~1e-6).
   The TorchScript exporter (``--onnx-exporter torchscript``, deprecated by PyTorch) traces the same forms, but
   for MRConv's short maps, which it exports as Toeplitz products. ``--onnx-opset``: 20 by default.
   ``--onnx-deform-conv`` (for ONNX Runtime; opset 19 or later): TaLK 2-D's large maps as ONNX ``DeformConv``, which
   OpenVINO cannot load.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import timm
import torch
from timm.utils import reparameterize_model

from . import common
from .cli_args import export_parser as build_parser

__all__ = ['ONNX_OPSET', 'main', 'run', 'build_parser', 'deform_conv_translated', 'export_onnx']

_logger = logging.getLogger('mrconvnext.export')


# The ONNX opset of export_onnx and mrconvnext-export by default. From opset 20 on, GELU exports as one Gelu node (five
# nodes before), which ONNX Runtime 1.32 runs faster: convnext_atto at batch 1 took 0.85 of the time at opset 18 on 1
# intra-op thread (100 alternating runs); opset 20 is also the exporter's own default in torch 2.14, and what
# deform_conv's DeformConv (opset 19) needs. OpenVINO 2026.4 loads both.
ONNX_OPSET = 20


def _input_size(model: torch.nn.Module, img_size: int | None) -> tuple[int, int, int]:
    if img_size:
        return (3, img_size, img_size)
    own = getattr(model, 'img_size', None)
    if own:
        return (3, *own)
    return tuple(model.pretrained_cfg.get('input_size', (3, 224, 224)))


def export_onnx(
    model: torch.nn.Module,
    path: str | Path,
    example: torch.Tensor,
    opset: int | None = None,
    exporter: str = 'auto',
    deform_conv: bool = False,
) -> str:
    """Write ``model`` (eval) to ONNX with a dynamic batch axis; returns the exporter used. ``opset``: default 20
    (:data:`ONNX_OPSET`).

    The call any user makes, ``torch.onnx.export(model, (example,), dynamo=True, dynamic_shapes=...)``, with
    onnxscript's optimizer run without its pattern rewriter (:func:`_optimize`: the same graph, in about half the
    export time for the largest models). While it traces, every mixer's ``'auto'`` resolves to its ONNX form
    (:func:`mrconvnext.ops.availability.onnx_exporting`), so the graph holds standard ONNX operators only. MRConv
    mixers become one depthwise ``Conv`` of the map folded into rows on short maps, and on long ones matrix products
    (row DFTs and Toeplitz products along short rows, as blocks or, at batches of 1 and 2, as a DFT along the rows:
    an ``If`` on the batch), whose kernel-derived operands depend on the weights alone, which ONNX Runtime folds at
    load; TaLK prefix sums and
    gathers (2-D on small maps: one box matrix per image and head), DynamicConv band matrices over chunks of the
    sequence, LightConv a grouped ``Conv``. The program is traced with at least two images (an example batch of 1
    would fix the batch axis). ``exporter='torchscript'`` (PyTorch's deprecated exporter, ``dynamo=False``) traces
    the same forms, but for MRConv's short maps (Toeplitz products).

    ``deform_conv=True`` (dynamo exporter, opset 19 or later): TaLK 2-D's maps past 196 positions export as one ONNX
    ``DeformConv`` each (:func:`mrconvnext.ops.talk.dispatch.onnx_deform_conv`), which ONNX Runtime runs faster than
    the tables but OpenVINO 2026.4 cannot load.
    """
    if not isinstance(deform_conv, bool):
        raise TypeError(f'export_onnx: deform_conv must be a bool, got {type(deform_conv).__name__}')
    if opset is None:
        opset = ONNX_OPSET
    if deform_conv and opset < 19:
        raise ValueError(f'export_onnx: deform_conv needs opset 19 or later (ONNX DeformConv), got opset {opset}')
    if exporter == 'auto':
        try:
            import onnxscript  # noqa: F401

            exporter = 'dynamo'
        except ImportError:
            exporter = 'torchscript'
    if deform_conv and exporter != 'dynamo':
        raise ValueError(f'export_onnx: deform_conv needs the dynamo exporter (onnxscript), got exporter {exporter!r}')
    if deform_conv and not deform_conv_translated():
        import onnxscript

        raise ValueError(
            f'export_onnx: deform_conv needs an onnxscript that translates torchvision::deform_conv2d to DeformConv; '
            f'onnxscript {onnxscript.__version__} has none'
        )
    model = copy.deepcopy(model).eval()
    kwargs: dict[str, Any] = dict(input_names=['input'], output_names=['logits'], opset_version=opset)
    import warnings

    from ..ops.talk.dispatch import onnx_deform_conv

    with warnings.catch_warnings(), torch.no_grad(), onnx_deform_conv(deform_conv):
        warnings.simplefilter('ignore')  # exporter chatter about the (constant) input-size checks
        if exporter == 'dynamo':
            if example.shape[0] < 2:  # traced at batch 1, torch.export specializes the axis ('Constraints violated')
                example = example.expand(2, *example.shape[1:])
            program = torch.onnx.export(
                model, (example,), dynamo=True, dynamic_shapes=({0: 'batch'},), optimize=False, verbose=False,
                **kwargs,
            )  # fmt: skip
            _optimize(program.model)
            program.save(str(path), external_data=False)
        else:
            kwargs.update(dynamo=False, dynamic_axes={'input': {0: 'batch'}, 'logits': {0: 'batch'}})
            torch.onnx.export(model, (example,), str(path), **kwargs)
    return exporter


def deform_conv_translated() -> bool:
    """Whether the installed onnxscript exports torchvision's ``deform_conv2d`` (as ONNX ``DeformConv``), which
    ``export_onnx(..., deform_conv=True)`` needs."""
    try:
        from onnxscript.function_libs.torch_lib.ops import vision
    except ImportError:
        return False
    return hasattr(vision, 'torchvision_deform_conv2d')


def _optimize(model: Any) -> None:
    """What ``torch.onnx.export(optimize=True)`` runs on the exported graph (onnxscript's optimizer), less its pattern
    rewriter: constant folding, dead-node removal, constants lifted to deduplicated initializers, common
    subexpressions merged, then the ONNX op fusions. The rewriter matches every rule at every node; on
    ``talkconvnext2d_t``'s 8,400 nodes it took 30 of the export's 71 s to remove 27 nodes (3,672 against 3,699),
    and ONNX Runtime ran both files alike (``scripts/bench_onnx.py`` measures the export time)."""
    import onnx_ir.passes.common as passes
    import onnxscript.optimizer
    import onnxscript.rewriter.onnx_fusions

    passes.InlinePass()(model)
    for _ in range(2):  # folding exposes more to fold, as the optimizer's two iterations do
        onnxscript.optimizer.fold_constants_ir(model, onnx_shape_inference=True)
        passes.RemoveUnusedNodesPass()(model)
    passes.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(model)
    passes.DeduplicateInitializersPass()(model)
    passes.CommonSubexpressionEliminationPass()(model)
    passes.RemoveUnusedNodesPass()(model)
    onnxscript.rewriter.onnx_fusions.fuse(model)


def _onnx_check(path: Path, model: torch.nn.Module, x: torch.Tensor) -> float:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    y = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    with torch.no_grad():
        ref = model(x)
    return float((torch.from_numpy(y) - ref).abs().max())


def run(argv: list[str] | None = None) -> dict[str, Any]:
    """Export; returns a dict of paths and the measured differences."""
    common.setup_logging()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.onnx_deform_conv and not args.onnx:
        parser.error('--onnx-deform-conv shapes the ONNX file: it needs --onnx')
    torch.manual_seed(args.seed)
    model, info = common.model_from_args(args)
    run = info.get('run_args') or {}
    input_size = _input_size(model, args.img_size or run.get('img_size'))
    x = torch.randn(args.check_batch, *input_size)
    with torch.no_grad():
        y_branched = model(x)
    if not args.no_reparam:
        model = reparameterize_model(model)
    with torch.no_grad():
        y_model = model(x)
    result: dict[str, Any] = {
        'model': info['model'],
        'checkpoint': info['checkpoint'],
        'reparam': not args.no_reparam,
        'deployed': bool(getattr(model, 'is_deployed', lambda: False)()),
        'input_size': list(input_size),
        'reparam_max_abs_diff': float((y_model - y_branched).abs().max()),
    }

    out = Path(args.output)
    data_config = {'input_size': input_size}
    for key in ('crop_pct', 'mean', 'std', 'interpolation'):
        if run.get(key):
            data_config[key] = run[key]
    timm.models.save_for_hf(model, out, safe_serialization=True, data_config=data_config)
    reloaded = timm.create_model(f'local-dir:{out}', pretrained=True).eval()
    with torch.no_grad():
        y_reloaded = reloaded(x)
    result['hub_dir'] = str(out)
    result['hub_max_abs_diff'] = float((y_reloaded - y_model).abs().max())
    _logger.info(
        f'{out}: model.safetensors + config.json ({"reparameterized" if result["reparam"] else "branched"}); '
        f'|reparam - branched| max {result["reparam_max_abs_diff"]:.2e}, '
        f'|local-dir reload - model| max {result["hub_max_abs_diff"]:.2e}'
    )

    if args.onnx:
        onnx_path = Path(args.onnx)
        if not onnx_path.is_absolute() and onnx_path.parent == Path('.'):
            onnx_path = out / onnx_path
        result['onnx_exporter'] = export_onnx(
            model, onnx_path, x, args.onnx_opset, args.onnx_exporter, deform_conv=args.onnx_deform_conv
        )
        result['onnx'] = str(onnx_path)
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            _logger.info(f'{onnx_path}: written; onnxruntime is not installed, so it was not checked')
        else:
            x2 = torch.randn(args.check_batch + 1, *input_size)  # another batch size: the batch axis is dynamic
            diff = _onnx_check(onnx_path, model, x2)
            result['onnx_max_abs_diff'] = diff
            result['onnx_atol'] = args.onnx_atol
            _logger.info(f'{onnx_path}: onnxruntime vs torch max |diff| {diff:.2e} (tolerance {args.onnx_atol:g})')
            if not diff <= args.onnx_atol:
                raise SystemExit(f'ONNX output differs from PyTorch by {diff:.3e} > {args.onnx_atol:g}')
    common.write_results(out / 'export.json', result)
    return result


def main(argv: list[str] | None = None) -> None:
    """Console entry point (``mrconvnext-export``): :func:`run` without a return value."""
    run(argv)


if __name__ == '__main__':
    main()
