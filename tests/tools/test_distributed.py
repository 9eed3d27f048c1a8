"""DDP on CPU: ``torchrun --nproc_per_node 2`` (gloo) with the ImageNet recipe's defaults and --sync-bn.

Each process runs ``train.run`` through a small driver that then saves its own weights and checks the
synchronized BatchNorm against one-process BatchNorm over the global batch.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from mrconvnext.tools import validate
from tests.limits import HANG_LIMIT_S

from .conftest import REPO

DRIVER = """
import json, sys
import torch
import torch.distributed as dist
from mrconvnext.tools import train
from mrconvnext.layers.sync_bn import DistBatchNorm

out_dir = sys.argv[1]
result = train.run(sys.argv[2:])
rank, world = dist.get_rank(), dist.get_world_size()
model = result['model']
torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, f'{out_dir}/rank{rank}.pt')
n_sync = sum(isinstance(m, DistBatchNorm) for m in model.modules())

# DistBatchNorm on this rank's half of a batch == BatchNorm1d on the whole batch (outputs, grads, stats)
g = torch.Generator().manual_seed(0)
X = torch.randn(8, 6, 5, generator=g, dtype=torch.float64)
G = torch.randn(8, 6, 5, generator=g, dtype=torch.float64)
ref = torch.nn.BatchNorm1d(6).double()
with torch.no_grad():
    ref.weight.uniform_(0.5, 1.5, generator=g)
    ref.bias.uniform_(-0.5, 0.5, generator=g)
bn = DistBatchNorm(6).double()
bn.load_state_dict(ref.state_dict())
Xr = X.clone().requires_grad_()
y_ref = ref(Xr)
(y_ref * G).sum().backward()
sl = slice(rank * 4, rank * 4 + 4)
xl = X[sl].clone().requires_grad_()
y = bn(xl)
(y * G[sl]).sum().backward()
wg, bg = bn.weight.grad.clone(), bn.bias.grad.clone()
dist.all_reduce(wg)
dist.all_reduce(bg)
err = {
    'out': (y - y_ref[sl]).abs().max().item(),
    'x_grad': (xl.grad - Xr.grad[sl]).abs().max().item(),
    'w_grad': (wg - ref.weight.grad).abs().max().item(),
    'b_grad': (bg - ref.bias.grad).abs().max().item(),
    'running_mean': (bn.running_mean - ref.running_mean).abs().max().item(),
    'running_var': (bn.running_var - ref.running_var).abs().max().item(),
}
with open(f'{out_dir}/rank{rank}.json', 'w') as f:
    json.dump({'world': world, 'n_sync_bn': n_sync, 'err': err, 'last_epoch': result['last_epoch']}, f)
dist.destroy_process_group()
"""


def _subset(src, dst, per_class):
    for split, n in (('train', per_class), ('val', per_class // 2)):
        for c in range(10):
            d = dst / split / str(c)
            d.mkdir(parents=True)
            for p in sorted((src / split / str(c)).glob('*.png'))[:n]:
                shutil.copy(p, d / p.name)
    return dst


def test_torchrun_two_cpu_processes_end_with_identical_weights(digits_dir, tmp_path):
    """Also: the distributed evaluation counts every validation image once, on a set that 2 does not divide, and
    scores what one process scores on the same set."""
    data = _subset(digits_dir, tmp_path / 'data', per_class=16)  # 160 train images: 10 steps per process
    sorted((data / 'val' / '0').glob('*.png'))[0].unlink()  # 79 validation images
    driver = tmp_path / 'driver.py'
    driver.write_text(DRIVER)
    out = tmp_path / 'out'
    out.mkdir()
    # the ImageNet recipe's defaults (AdamW, Mixup/CutMix, RandAugment, random erasing, smoothing, EMA)
    # on a tiny model; only data, size, batch and length are set
    train_args = ['--data-dir', str(data), '--model', 'mrconvnext_atto', '--img-size', '32', '-b', '8']
    train_args += ['--epochs', '1', '-j', '0', '--device', 'cpu', '--sync-bn', '--no-progress']
    train_args += ['--output', str(tmp_path / 'runs'), '--experiment', 'ddp']
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node', '2']
    cmd += [str(driver), str(out), *train_args]
    env = dict(os.environ, OMP_NUM_THREADS='1', PYTHONPATH=str(REPO) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    env['PYTHONWARNINGS'] = 'always::DeprecationWarning,always::FutureWarning'
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=HANG_LIMIT_S)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # no deprecated API in the project's own code (DDP's buffer sync, the differentiable all_reduce of sync BN)
    ours = [ln for ln in proc.stderr.splitlines() if 'Warning' in ln and f'{os.sep}mrconvnext{os.sep}' in ln]
    assert not [ln for ln in ours if 'DeprecationWarning' in ln or 'FutureWarning' in ln], ours

    reports = [json.loads((out / f'rank{r}.json').read_text()) for r in (0, 1)]
    for rep in reports:
        assert rep['world'] == 2 and rep['last_epoch'] == 0
        assert rep['n_sync_bn'] == 12  # one branch BatchNorm per MRConv mixer of mrconvnext_atto
        assert max(rep['err'].values()) < 1e-10, rep['err']
    s0, s1 = (torch.load(out / f'rank{r}.pt', weights_only=True) for r in (0, 1))
    assert s0.keys() == s1.keys()
    different = [k for k in s0 if not torch.equal(s0[k], s1[k])]
    assert not different, different[:5]  # parameters and BatchNorm statistics
    run = tmp_path / 'runs' / 'ddp'
    assert (run / 'last.pth.tar').is_file()  # rank 0 saved
    ckpt = torch.load(run / 'last.pth.tar', map_location='cpu', weights_only=True)
    assert all(torch.equal(ckpt['state_dict'][k], s0[k]) for k in s0)
    assert 'state_dict_ema' in ckpt  # EMA (a recipe default) was tracked

    rows = [json.loads(line) for line in (run / 'summary.jsonl').read_text().splitlines()]
    assert rows[-1]['eval_samples'] == 79 and rows[-1]['eval_ema_samples'] == 79
    single = validate.run([str(data), '--checkpoint', str(run / 'last.pth.tar'), '-b', '8', '-j', '0',
                           '--device', 'cpu', '--no-progress'])  # fmt: skip
    assert single['samples'] == 79
    # the summary keeps 4 decimals
    assert single['top1'] == pytest.approx(rows[-1]['eval_top1'], abs=1e-4)
    assert single['loss'] == pytest.approx(rows[-1]['eval_loss'], abs=1e-4)
