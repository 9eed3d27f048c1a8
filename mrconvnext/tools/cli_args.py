"""The command-line parsers of the tools, in the standard library alone.

``mrconvnext_cli`` (the console entry points) loads this file by its path to answer ``--help`` without importing
torch or timm (``import mrconvnext`` imports both to register the models: seconds on a small machine); the tools
import it as usual. So it imports nothing but the standard library: descriptions are read from the tools' own
docstrings (:func:`_doc`), ``--device auto`` is resolved when parsed (:func:`device`), and ``--model-kwargs`` is
parsed by timm's ``ParseKwargs`` at call time (:class:`KwargsAction`).
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

__all__ = [
    'DEVICE_HELP',
    'KwargsAction',
    'add_model_source_args',
    'benchmark_parser',
    'demo_parser',
    'device',
    'digits_parser',
    'engines_parser',
    'export_parser',
    'flops_parser',
    'plot_parser',
    'train_parser',
    'validate_parser',
]

DEVICE_HELP = "torch device; 'auto' (default): cuda where a GPU is visible, else cpu"


def _doc(path: str) -> str:
    """The docstring of ``mrconvnext/<path>``, read from its source without importing it ('' without the source)."""
    try:
        return ast.get_docstring(ast.parse((Path(__file__).resolve().parents[1] / path).read_text())) or ''
    except OSError:
        return ''


def _parser(prog: str, path: str) -> argparse.ArgumentParser:
    """A tool's parser: its console name and, as description, the docstring of ``mrconvnext/<path>``."""
    return argparse.ArgumentParser(
        prog=prog, description=_doc(path), formatter_class=argparse.RawDescriptionHelpFormatter
    )


def device(value: str) -> str:
    """``--device``: ``'auto'`` is ``'cuda'`` where a GPU is visible, else ``'cpu'`` (torch imported only here)."""
    if value != 'auto':
        return value
    import torch

    return 'cuda' if torch.cuda.is_available() else 'cpu'


class KwargsAction(argparse.Action):
    """``--model-kwargs k=v ...``: timm's ``ParseKwargs``, imported when the flag is parsed."""

    def __call__(self, parser, namespace, values, option_string=None):
        from timm.utils import ParseKwargs

        ParseKwargs(self.option_strings, self.dest, nargs=self.nargs)(parser, namespace, values, option_string)


def add_model_source_args(parser: argparse.ArgumentParser, pretrained: bool = False) -> None:
    """The tools' one set of model-source flags (``--model``, ``--checkpoint``, ``--use-ema``, ``--num-classes``,
    ``--img-size``, ``--model-kwargs``, and ``--pretrained`` where asked), read by
    :func:`mrconvnext.tools.common.model_from_args`."""
    g = parser.add_argument_group('Model source')
    source_help = "timm name, local-dir:DIR or hf-hub:NAME (default: from the checkpoint's run args.yaml)"
    g.add_argument('--model', '-m', default='', metavar='NAME', help=source_help)
    g.add_argument('--checkpoint', default='', metavar='PATH', help='training checkpoint, state-dict file or hub dir')
    g.add_argument('--use-ema', action='store_true', help='the EMA weights of a training checkpoint')
    if pretrained:
        g.add_argument('--pretrained', action='store_true', help="the model's pretrained weights (timm)")
    g.add_argument('--num-classes', type=int, default=None, metavar='N')
    g.add_argument('--img-size', type=int, default=None, metavar='N', help='input size (also sizes the zoo mixers)')
    g.add_argument('--model-kwargs', nargs='*', default={}, action=KwargsAction, help='extra create_model kwargs')


def train_parser() -> argparse.ArgumentParser:
    p = _parser('mrconvnext-train', 'tools/train.py')
    p.add_argument('-c', '--config', default='', metavar='FILE', help='YAML file of flag defaults (timm style)')
    p.add_argument('data', nargs='?', metavar='DIR', help='data set root (same as --data-dir)')
    g = p.add_argument_group('Dataset')
    g.add_argument('--data-dir', metavar='DIR', help='data set root (ImageFolder with train/ and val/)')
    g.add_argument('--dataset', metavar='NAME', default='', help='timm dataset "<type>/<name>" (default: folder)')
    g.add_argument('--train-split', default='train', metavar='NAME')
    g.add_argument('--val-split', default='validation', metavar='NAME', help="'' skips evaluation")
    g.add_argument('--dataset-download', action='store_true', help='allow torch/ and tfds/ data sets to download')
    g.add_argument('--class-map', default='', metavar='FILENAME')

    g = p.add_argument_group('Model')
    g.add_argument('--model', default='mrconvnext_t', metavar='MODEL')
    g.add_argument('--pretrained', action='store_true')
    g.add_argument('--initial-checkpoint', default='', metavar='PATH', help='weights to start from (weights only)')
    g.add_argument('--resume', default='', metavar='PATH', help='resume model, optimizer, EMA and epoch')
    g.add_argument('--no-resume-opt', action='store_true', help='resume the model but not the optimizer state')
    g.add_argument('--num-classes', type=int, default=None, metavar='N', help="default: the data set's classes")
    g.add_argument('--img-size', type=int, default=None, metavar='N', help="input size; sizes the zoo's mixers too")
    g.add_argument('--input-size', default=None, nargs=3, type=int, metavar='N')
    g.add_argument('--crop-pct', default=None, type=float, metavar='PCT', help='validation centre-crop fraction')
    g.add_argument('--mean', type=float, nargs='+', default=None, metavar='MEAN')
    g.add_argument('--std', type=float, nargs='+', default=None, metavar='STD')
    g.add_argument('--interpolation', default='', metavar='NAME')
    g.add_argument('-b', '--batch-size', type=int, default=128, metavar='N', help='per-process batch size')
    g.add_argument('-vb', '--validation-batch-size', type=int, default=None, metavar='N')
    g.add_argument('--channels-last', action='store_true')
    g.add_argument('--grad-checkpointing', action='store_true')
    g.add_argument('--model-kwargs', nargs='*', default={}, action=KwargsAction, help='extra create_model kwargs')

    g = p.add_argument_group('Device')
    g.add_argument('--device', default='auto', type=device, help=DEVICE_HELP)
    g.add_argument('--amp', action='store_true', help='mixed precision (bfloat16 on CPU)')
    g.add_argument('--amp-dtype', default='float16', help='float16 or bfloat16 (default: float16; CPU: bfloat16)')
    g.add_argument('--no-ddp-bb', action='store_true', help='DDP without buffer broadcast')
    g.add_argument('--local_rank', default=0, type=int)
    g.add_argument('--device-modules', default=None, nargs='+', help='modules to import first')
    g.add_argument('--torchcompile', nargs='?', default=None, const='inductor', help='torch.compile backend')

    g = p.add_argument_group('Optimizer')
    g.add_argument('--opt', default='adamw', metavar='OPTIMIZER')
    g.add_argument('--opt-eps', default=None, type=float)
    g.add_argument('--opt-betas', default=None, type=float, nargs='+')
    g.add_argument('--momentum', type=float, default=0.9)
    g.add_argument('--weight-decay', type=float, default=0.05)
    g.add_argument('--clip-grad', type=float, default=None, metavar='NORM')
    g.add_argument('--clip-mode', default='norm', help='norm, value or agc')
    g.add_argument('--kernel-lr', type=float, default=None, help='learning rate of the long-kernel parameters')
    g.add_argument('--kernel-lr-base', type=float, default=1e-3, help='kernel lr at --lr-base-size (default 1e-3)')
    g.add_argument('--kernel-weight-decay', type=float, default=0.0, help='weight decay of the kernel parameters')

    g = p.add_argument_group('Learning rate schedule')
    g.add_argument('--sched', default='cosine', metavar='SCHEDULER')
    g.add_argument(
        '--sched-on-updates', action=argparse.BooleanOptionalAction, default=True, help='step per update (default)'
    )
    g.add_argument('--lr', type=float, default=None, help='learning rate; default from --lr-base')
    g.add_argument('--lr-base', type=float, default=4e-3, help='lr at --lr-base-size (default 4e-3)')
    g.add_argument('--lr-base-size', type=int, default=4096, help='global batch of --lr-base (default 4096)')
    g.add_argument('--lr-base-scale', default='linear', help='linear or sqrt (default: linear)')
    g.add_argument('--warmup-lr', type=float, default=0.0)
    g.add_argument('--min-lr', type=float, default=1e-6)
    g.add_argument('--epochs', type=int, default=300)
    g.add_argument('--start-epoch', default=None, type=int)
    g.add_argument('--decay-milestones', default=[90, 180, 270], type=int, nargs='+')
    g.add_argument('--decay-epochs', type=float, default=90)
    g.add_argument('--warmup-epochs', type=int, default=20)
    g.add_argument('--warmup-prefix', action='store_true')
    g.add_argument('--cooldown-epochs', type=int, default=0)
    g.add_argument('--patience-epochs', type=int, default=10)
    g.add_argument('--decay-rate', '--dr', type=float, default=0.1)

    g = p.add_argument_group('Augmentation and regularization')
    g.add_argument('--no-aug', action='store_true')
    g.add_argument('--scale', type=float, nargs='+', default=[0.08, 1.0])
    g.add_argument('--ratio', type=float, nargs='+', default=[3.0 / 4.0, 4.0 / 3.0])
    g.add_argument('--hflip', type=float, default=0.5)
    g.add_argument('--vflip', type=float, default=0.0)
    g.add_argument('--color-jitter', type=float, default=0.4)
    g.add_argument('--aa', default='rand-m9-mstd0.5-inc1', help="RandAugment / AutoAugment policy; 'none' disables")
    g.add_argument('--reprob', type=float, default=0.25)
    g.add_argument('--remode', default='pixel')
    g.add_argument('--recount', type=int, default=1)
    g.add_argument('--mixup', type=float, default=0.8)
    g.add_argument('--cutmix', type=float, default=1.0)
    g.add_argument('--cutmix-minmax', type=float, nargs='+', default=None)
    g.add_argument('--mixup-prob', type=float, default=1.0)
    g.add_argument('--mixup-switch-prob', type=float, default=0.5)
    g.add_argument('--mixup-mode', default='batch')
    g.add_argument('--mixup-off-epoch', default=0, type=int)
    g.add_argument('--smoothing', type=float, default=0.1)
    g.add_argument('--train-interpolation', default='bicubic')
    g.add_argument('--drop', type=float, default=0.0)
    g.add_argument('--drop-path', type=float, default=None, help='default: per model size (see the module doc)')

    g = p.add_argument_group('BatchNorm (the MRConv branch BatchNorms)')
    g.add_argument('--sync-bn', action='store_true', help='synchronize BatchNorm statistics across processes')
    g.add_argument('--dist-bn', default='reduce', help="after each epoch: 'reduce', 'broadcast' or ''")

    g = p.add_argument_group('Model EMA')
    g.add_argument('--model-ema', action=argparse.BooleanOptionalAction, default=True, help='EMA of the weights')
    g.add_argument('--model-ema-decay', type=float, default=0.9999)
    g.add_argument('--model-ema-warmup', action='store_true')

    g = p.add_argument_group('Misc')
    g.add_argument('--seed', type=int, default=42)
    g.add_argument('--log-interval', type=int, default=50, help='progress-bar update interval (steps)')
    g.add_argument('--checkpoint-hist', type=int, default=10)
    g.add_argument('-j', '--workers', type=int, default=4)
    g.add_argument('--pin-mem', action='store_true')
    g.add_argument('--no-prefetcher', action='store_true', help='(the prefetcher is only used on CUDA)')
    g.add_argument('--output', default='', metavar='PATH', help='output root (default: ./output/train)')
    g.add_argument('--experiment', default='', metavar='NAME', help='run directory name under --output')
    g.add_argument('--eval-metric', default='top1', help='top1, top5 or loss: ranks checkpoints')
    g.add_argument('--no-progress', action='store_true', help='no progress bar')
    return p


def validate_parser() -> argparse.ArgumentParser:
    p = _parser('mrconvnext-validate', 'tools/validate.py')
    p.add_argument('data', nargs='?', metavar='DIR', help='data set root (same as --data-dir)')
    p.add_argument('--data-dir', metavar='DIR')
    p.add_argument('--dataset', default='', metavar='NAME', help='timm dataset "<type>/<name>" (default: folder)')
    p.add_argument('--split', default='validation', metavar='NAME')
    p.add_argument('--dataset-download', action='store_true')
    p.add_argument('--class-map', default='', metavar='FILENAME')
    add_model_source_args(p, pretrained=True)
    p.add_argument('--input-size', default=None, nargs=3, type=int, metavar='N')
    p.add_argument('--crop-pct', default=None, type=float)
    p.add_argument('--mean', type=float, nargs='+', default=None)
    p.add_argument('--std', type=float, nargs='+', default=None)
    p.add_argument('--interpolation', default='')
    p.add_argument('-b', '--batch-size', type=int, default=256)
    p.add_argument('-j', '--workers', type=int, default=4)
    p.add_argument('--device', default='auto', type=device, help=DEVICE_HELP)
    p.add_argument('--amp', action='store_true', help='mixed precision (bfloat16 on CPU)')
    p.add_argument('--amp-dtype', default='float16')
    p.add_argument('--channels-last', action='store_true')
    p.add_argument('--reparam', action='store_true', help='reparameterize (fold branches) before evaluating')
    p.add_argument('--torchcompile', nargs='?', default=None, const='inductor', help='torch.compile backend')
    p.add_argument('--results-file', default='', metavar='FILE', help='write results here (.json or .csv)')
    p.add_argument('--no-progress', action='store_true')
    return p


def benchmark_parser() -> argparse.ArgumentParser:
    p = _parser('mrconvnext-benchmark', 'tools/benchmark.py')
    p.add_argument('--models', nargs='+', default=None, metavar='NAME[:reparam]', help='first = baseline')
    p.add_argument('--bench', choices=('both', 'inference', 'train'), default='both')
    p.add_argument('-b', '--batch-size', type=int, default=None, help='default: 256 on CUDA, 8 on CPU')
    p.add_argument('--img-size', type=int, default=224, help="input size (also the zoo models' nominal size)")
    p.add_argument('--num-classes', type=int, default=1000)
    p.add_argument('--num-warm-iter', type=int, default=None, help='warm-up batches (default: 5 CUDA, 1 CPU)')
    p.add_argument('--num-bench-iter', type=int, default=None, help='timed rounds (default: 20 CUDA, 5 CPU)')
    p.add_argument('--device', default='auto', type=device, help=DEVICE_HELP)
    p.add_argument('--amp', action='store_true', help='mixed precision (bfloat16 on CPU)')
    p.add_argument('--amp-dtype', default='float16')
    p.add_argument('--channels-last', action='store_true')
    p.add_argument('--torchcompile', nargs='?', default=None, const='inductor', help='torch.compile backend')
    p.add_argument('--threads', type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument('--no-memory', action='store_true', help='skip the peak-memory subprocesses')
    p.add_argument(
        '--profile',
        type=int,
        default=0,
        metavar='TOP',
        help='after timing, profile one step per model and log its TOP kernels and operators',
    )
    p.add_argument('--results-file', default='benchmark.csv', help="CSV or JSON ('' to skip)")
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--memory-worker', default=None, help=argparse.SUPPRESS)
    return p


def export_parser() -> argparse.ArgumentParser:
    p = _parser('mrconvnext-export', 'tools/export.py')
    add_model_source_args(p)
    p.add_argument('--output', '-o', required=True, help='hub directory to write')
    p.add_argument('--no-reparam', action='store_true', help='export the branched model')
    p.add_argument('--onnx', nargs='?', const='model.onnx', default=None, help='also write ONNX (file in --output)')
    p.add_argument('--onnx-opset', type=int, default=None, help='default 20 (mrconvnext.tools.export.ONNX_OPSET)')
    p.add_argument(
        '--onnx-deform-conv', action='store_true',
        help="TaLK 2-D's large maps as ONNX DeformConv (ONNX Runtime; OpenVINO cannot load it)",
    )  # fmt: skip
    p.add_argument(
        '--onnx-exporter', choices=('auto', 'dynamo', 'torchscript'), default='auto', help='auto: dynamo if available'
    )
    p.add_argument('--onnx-atol', type=float, default=1e-4, help='largest allowed |onnxruntime - torch| logit diff')
    p.add_argument('--check-batch', type=int, default=4, help='batch size of the comparison inputs')
    p.add_argument('--seed', type=int, default=0)
    return p


def plot_parser() -> argparse.ArgumentParser:
    p = _parser('mrconvnext-plot', 'tools/plot.py')
    sub = p.add_subparsers(dest='figure', required=True)
    for name, help_ in (('kernels', 'reparameterized kernels per stage (Fig. 5)'), ('alpha', 'alpha norms (Fig. 3)')):
        q = sub.add_parser(name, help=help_)
        add_model_source_args(q)
        q.add_argument('--output', '-o', default=f'{name}.png')
        q.add_argument('--title', default='')
        if name == 'kernels':
            q.add_argument('--block', type=int, default=0, help='block index within each stage')
            q.add_argument('--channels', type=int, default=32, help='channels in the heat map')
    q = sub.add_parser('tradeoff', help='top-1 vs throughput')
    q.add_argument('--benchmark', required=True, help='mrconvnext-benchmark results (CSV or JSON)')
    q.add_argument('--results', nargs='*', default=[], help='mrconvnext-validate results files')
    q.add_argument('--accuracy', nargs='*', default=[], metavar='NAME=TOP1', help='accuracies given by hand')
    q.add_argument('--output', '-o', default='tradeoff.png')
    q.add_argument('--title', default='')
    return p


def flops_parser() -> argparse.ArgumentParser:
    p = _parser('mrconvnext-flops', 'tools/flops.py')
    p.add_argument('--models', nargs='+', default=['convnext_tiny', 'mrconvnext_t', 'mrconvnext_t:reparam'])
    p.add_argument('--img-size', type=int, default=224)
    p.add_argument('--results-file', default='', help='CSV or JSON of the rows')
    return p


def digits_parser() -> argparse.ArgumentParser:
    p = _parser('mrconvnext-digits', 'tools/digits.py')
    p.add_argument('root', help='output directory (train/ and val/ are created inside)')
    p.add_argument('--size', type=int, default=32, help='output image size in pixels (default: 32)')
    p.add_argument('--val-fraction', type=float, default=0.2, help='held-out fraction per class (default: 0.2)')
    p.add_argument('--seed', type=int, default=0, help='seed of the fixed split (default: 0)')
    return p


def demo_parser() -> argparse.ArgumentParser:
    p = _parser('mrconvnext-demo', 'demo.py')
    p.add_argument('--workdir', default='mrconvnext-demo', help='where data, run, export and results go')
    p.add_argument('--model', default='mrconvnext_atto')
    p.add_argument('--img-size', type=int, default=32)
    p.add_argument('--epochs', type=int, default=8)
    p.add_argument('--seed', type=int, default=42)
    p.add_argument('--threads', type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument('--no-progress', action='store_true')
    return p


def engines_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='python -m mrconvnext.engines', description=_doc('engines.py').split('\n\n')[0])
    p.add_argument('--build', action='store_true', help='build the native CPU kernels now (cached)')
    return p
