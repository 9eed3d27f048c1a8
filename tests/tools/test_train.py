"""Training on the digits ImageFolder, the recipe defaults, the kernel parameter groups and resume."""

import csv
import json
from pathlib import Path

import pytest
import timm
import torch
from timm.optim import create_optimizer_v2

import mrconvnext  # noqa: F401
from mrconvnext.tools import train

from .conftest import EPOCHS


def test_defaults_are_the_convnext_imagenet_recipe():
    a = train.parse_args(['--data-dir', 'x'])
    assert (a.model, a.opt, a.weight_decay, a.epochs, a.warmup_epochs) == ('mrconvnext_t', 'adamw', 0.05, 300, 20)
    assert (a.lr, a.lr_base, a.lr_base_size, a.lr_base_scale) == (None, 4e-3, 4096, 'linear')
    assert (a.kernel_lr, a.kernel_lr_base, a.kernel_weight_decay) == (None, 1e-3, 0.0)
    assert (a.mixup, a.cutmix, a.smoothing, a.reprob) == (0.8, 1.0, 0.1, 0.25)
    assert a.aa == 'rand-m9-mstd0.5-inc1' and a.train_interpolation == 'bicubic'
    assert a.model_ema and a.model_ema_decay == 0.9999 and a.sched == 'cosine' and a.min_lr == 1e-6
    assert [train.default_drop_path(m) for m in ('mrconvnext_t', 'mrconvnext_s', 'mrconvnext_b')] == [0.1, 0.4, 0.5]
    assert train.default_drop_path('mrconvnext_atto') == 0.0 and train.default_drop_path('convnext_tiny') == 0.1
    # linear scaling of both rates from the base batch of 4096
    a.batch_size, a.world_size = 128, 2
    assert train._scaled_lr(a.lr_base, a) == pytest.approx(4e-3 * 256 / 4096)
    assert train._scaled_lr(a.kernel_lr_base, a) == pytest.approx(1e-3 * 256 / 4096)


def test_kernel_parameters_get_their_own_lr_and_no_weight_decay():
    model = timm.create_model('mrconvnext_atto', num_classes=10, img_size=64)
    groups = train.kernel_param_groups(model, weight_decay=0.05, kernel_lr=1e-4)
    names = {id(p): n for n, p in model.named_parameters()}
    by_group = {g['name']: {names[id(p)] for p in g['params']} for g in groups}
    assert by_group['kernel'] == model.mixer_kernel_parameter_names()
    alphas = model.no_weight_decay() - model.mixer_kernel_parameter_names()
    assert alphas and all(n.endswith('.alpha') for n in alphas) and alphas <= by_group['no_decay']
    assert 'stem.0.weight' in by_group['decay'] and 'head.fc.weight' in by_group['decay']
    assert not any(p.ndim <= 1 for g in groups if g['name'] == 'decay' for p in g['params'])
    assert sum(len(v) for v in by_group.values()) == len(list(model.parameters()))  # every tensor, once
    opt = create_optimizer_v2(model, 'adamw', lr=1e-3, weight_decay=0.05, param_group_fn=lambda m: groups)
    got = {g['name']: (g['lr'], g['weight_decay']) for g in opt.param_groups}
    assert got == {'decay': (1e-3, 0.05), 'no_decay': (1e-3, 0.0), 'kernel': (1e-4, 0.0)}
    # a deployed model's merged kernels are the kernel group
    deployed = timm.utils.reparameterize_model(model.eval())
    groups = train.kernel_param_groups(deployed, 0.05, 1e-4)
    kernel = [g for g in groups if g['name'] == 'kernel'][0]['params']
    assert len(kernel) == len(deployed.mixers()) and all(p.ndim == 2 for p in kernel)
    # timm's own ConvNeXt has no kernel parameters: timm's default groups
    assert train.kernel_param_groups(timm.create_model('convnext_atto'), 0.05, 1e-4) is None


def test_digits_training_reaches_90_percent(trained_run, validated):
    # (no wall-clock bound: CI's shared cores make time a benchmark's business, not a test's)
    assert trained_run['last_epoch'] == EPOCHS - 1
    res = validated['branched']
    assert res['samples'] == 359  # the whole held-out split
    assert res['top1'] >= 90.0, res
    # the validate tool and the in-training evaluation agree on the same weights
    assert res['top1'] == pytest.approx(trained_run['eval_metrics']['top1'], abs=0.3)  # <= 1 image apart


def test_reparameterized_top1_is_unchanged(validated):
    branched, rep = validated['branched'], validated['reparam']
    assert rep['reparam'] and rep['deployed'] and not branched['deployed']
    assert abs(rep['top1'] - branched['top1']) <= 0.2
    assert rep['loss'] == pytest.approx(branched['loss'], abs=1e-3)
    assert json.loads(validated['reparam_file'].read_text())['top1'] == rep['top1']


def test_validate_with_torchcompile_gives_the_same_top1(trained_run, digits_dir, validated):
    """``--torchcompile`` is wired through validate (aot_eager: dynamo capture + AOTAutograd on fake tensors, cheap in
    CI; inductor is exercised by tests/compile and the benchmark)."""
    from mrconvnext.tools import validate

    argv = ['--data-dir', str(digits_dir), '--checkpoint', trained_run['checkpoint'], '-j', '0', '--no-progress']
    res = validate.run(argv + ['--reparam', '--torchcompile', 'aot_eager'])
    assert res['torchcompile'] == 'aot_eager'
    assert abs(res['top1'] - validated['reparam']['top1']) <= 0.2


def test_run_outputs_per_epoch_logs_and_weights_only_checkpoints(trained_run):
    out = Path(trained_run['output_dir'])
    with open(out / 'summary.csv') as f:
        rows = list(csv.DictReader(f))
    assert [int(r['epoch']) for r in rows] == list(range(EPOCHS))
    assert {'train_loss', 'eval_top1', 'eval_top5', 'lr'} <= set(rows[0])
    lines = [json.loads(line) for line in (out / 'summary.jsonl').read_text().splitlines()]
    assert [r['epoch'] for r in lines] == list(range(EPOCHS))
    assert all(r['kernel_lr'] is not None and r['train_img_s'] > 0 for r in lines)
    assert (out / 'args.yaml').is_file() and (out / 'model_best.pth.tar').is_file()
    ckpt = torch.load(out / 'last.pth.tar', map_location='cpu', weights_only=True)  # no pickled objects
    assert ckpt['epoch'] == EPOCHS - 1 and {'state_dict', 'optimizer', 'saver'} <= set(ckpt)
    groups = {g['name']: g for g in ckpt['optimizer']['param_groups']}
    assert groups['kernel']['weight_decay'] == 0.0 and groups['kernel']['initial_lr'] == 1e-3
    assert groups['decay']['initial_lr'] == 2e-3


def test_resume_continues_from_the_saved_epoch(trained_run, tmp_path):
    saved = Path(trained_run['output_dir']) / f'checkpoint-{EPOCHS - 2}.pth.tar'
    argv = trained_run['argv'] + ['--resume', str(saved), '--output', str(tmp_path), '--experiment', 'resumed']
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = train.run(argv)
    finally:
        torch.set_num_threads(threads)
    rows = [json.loads(line) for line in (tmp_path / 'resumed' / 'summary.jsonl').read_text().splitlines()]
    assert [r['epoch'] for r in rows] == [EPOCHS - 1]  # only the epoch after the saved one ran
    original = [
        json.loads(line) for line in (Path(trained_run['output_dir']) / 'summary.jsonl').read_text().splitlines()
    ]
    assert rows[0]['lr'] == original[-1]['lr'] and rows[0]['kernel_lr'] == original[-1]['kernel_lr']  # same schedule
    # trained weights and optimizer state were restored: at the schedule's tail lr a fresh model would stay near chance
    assert result['eval_metrics']['top1'] >= 90.0
    end = torch.load(tmp_path / 'resumed' / 'last.pth.tar', map_location='cpu', weights_only=True)
    ref = torch.load(trained_run['checkpoint'], map_location='cpu', weights_only=True)
    assert end['epoch'] == EPOCHS - 1
    assert end['optimizer']['state'][0]['step'] == ref['optimizer']['state'][0]['step']  # Adam step count continued
