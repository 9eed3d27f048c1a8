"""The run directory (mrconvnext.tools.run_dir): real save failures (a write to /dev/full, a file-size limit) are
named, leave no partial file and no summary row; the start-up check catches them before an epoch; resumed runs
never log an epoch twice."""

import csv
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mrconvnext.tools import run_dir, train
from tests.limits import HANG_LIMIT_S

needs_dev_full = pytest.mark.skipif(not Path('/dev/full').exists(), reason='no /dev/full on this system')
needs_rlimit = pytest.mark.skipif(sys.platform == 'win32', reason='no RLIMIT_FSIZE on Windows')


def _saver(directory: Path, size: int = 10**6) -> run_dir.RunSaver:
    model = torch.nn.Linear(300, 300)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return run_dir.RunSaver(
        model=model, optimizer=opt, checkpoint_dir=str(directory), recovery_dir=str(directory), checkpoint_size=size
    )


@needs_dev_full
def test_a_full_disk_is_named_and_the_previous_checkpoint_kept(tmp_path):
    saver = _saver(tmp_path)
    saver.save_checkpoint(0)
    os.symlink('/dev/full', tmp_path / 'tmp.pth.tar')  # the next write goes to a device that is always full
    with pytest.raises(OSError, match=r'epoch 1 to .*tmp.pth.tar failed: disk full') as info:
        saver.save_checkpoint(1)
    assert info.value.errno == errno.ENOSPC and 'last.pth.tar keeps the previous epoch' in str(info.value)
    assert not (tmp_path / 'tmp.pth.tar').exists()  # no partial file (here: the link) left behind
    assert torch.load(tmp_path / 'last.pth.tar', weights_only=True)['epoch'] == 0


SAVE_UNDER_LIMIT = """
import resource, sys
from pathlib import Path
import torch
from mrconvnext.tools import run_dir
d = Path(sys.argv[1])
model = torch.nn.Linear(300, 300)  # about 360 kB of weights
saver = run_dir.RunSaver(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), checkpoint_dir=str(d),
                         recovery_dir=str(d), checkpoint_size=run_dir.checkpoint_bytes(model, with_ema=False))
resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, resource.RLIM_INFINITY))
try:
    run_dir.check_writable(d, saver.checkpoint_size)
except OSError as e:
    print('start:', e)
try:
    saver.save_checkpoint(0)
except OSError as e:
    print('save:', e.errno, e)
"""


@needs_rlimit
def test_a_file_size_limit_is_named_at_start_and_when_a_save_fails(tmp_path):
    proc = subprocess.run(
        [sys.executable, '-c', SAVE_UNDER_LIMIT, str(tmp_path)], capture_output=True, text=True, timeout=HANG_LIMIT_S
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    start, save = proc.stdout.splitlines()
    assert start.startswith(f'start: [Errno {errno.EFBIG}] file-size limit (ulimit -f) of 0.1 MB is below one')
    assert save.startswith(f'save: {errno.EFBIG} [Errno {errno.EFBIG}] saving the checkpoint of epoch 0')
    assert 'failed: file-size limit (ulimit -f) of 0.1 MB exceeded' in save
    assert list(tmp_path.iterdir()) == []


def test_the_start_check_names_a_directory_that_takes_no_file_or_no_checkpoint(tmp_path):
    not_a_dir = tmp_path / 'file'
    not_a_dir.write_text('')
    with pytest.raises(OSError, match='is not writable'):
        run_dir.check_writable(not_a_dir, 1)
    free = __import__('shutil').disk_usage(tmp_path).free
    with pytest.raises(OSError, match=r'disk full: \d+ MB free in .*, one checkpoint needs about') as info:
        run_dir.check_writable(tmp_path, free + (1 << 40))
    assert info.value.errno == errno.ENOSPC
    run_dir.check_writable(tmp_path, 1)
    assert list(tmp_path.iterdir()) == [not_a_dir]  # the probe is gone


def test_trimming_keeps_the_rows_before_the_resumed_epoch(tmp_path):
    rows = [{'epoch': e, 'train_loss': 1.0 / (e + 1)} for e in range(4)]
    (tmp_path / 'summary.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in rows))
    with open(tmp_path / 'summary.csv', 'w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=['epoch', 'train_loss'])
        w.writeheader()
        w.writerows(rows)
    assert run_dir.trim_summaries(tmp_path, 2) == 2
    kept = [json.loads(line)['epoch'] for line in (tmp_path / 'summary.jsonl').read_text().splitlines()]
    with open(tmp_path / 'summary.csv', newline='') as f:
        assert kept == [0, 1] and [int(r['epoch']) for r in csv.DictReader(f)] == [0, 1]
    assert run_dir.trim_summaries(tmp_path, 2) == 0


@needs_dev_full
def test_training_writes_no_summary_row_for_an_epoch_whose_checkpoint_failed_and_resumes_once(digits_dir, tmp_path):
    """Epoch 1's checkpoint cannot be written (its temporary file leads to /dev/full): the run stops naming the
    cause, the summary holds epoch 0 only, and a resume from last.pth.tar logs epochs 0 and 1 once each."""
    run = tmp_path / 'run'
    argv = ['--data-dir', str(digits_dir), '--model', 'mrconvnext_atto', '--img-size', '32', '-b', '64', '-j', '0']
    argv += ['--device', 'cpu', '--no-progress', '--output', str(tmp_path), '--experiment', 'run', '--epochs', '2']
    argv += ['--no-aug', '--mixup', '0', '--cutmix', '0', '--reprob', '0', '--aa', '', '--warmup-epochs', '0']
    argv += ['--model-kwargs', 'depths=(1,1,1,1)']  # one block per stage: the run directory is under test
    calls = []
    original = train.train_one_epoch

    def fill_disk_after_epoch_0(*args, **kwargs):
        if calls:
            os.symlink('/dev/full', run / 'tmp.pth.tar')
        calls.append(1)
        return original(*args, **kwargs)

    train.train_one_epoch = fill_disk_after_epoch_0
    try:
        with pytest.raises(OSError, match='checkpoint of epoch 1 .* failed: disk full'):
            train.run(argv)
    finally:
        train.train_one_epoch = original
    epochs = [json.loads(line)['epoch'] for line in (run / 'summary.jsonl').read_text().splitlines()]
    assert epochs == [0] and not (run / 'tmp.pth.tar').exists()
    train.run([*argv, '--resume', str(run / 'last.pth.tar')])
    epochs = [json.loads(line)['epoch'] for line in (run / 'summary.jsonl').read_text().splitlines()]
    with open(run / 'summary.csv', newline='') as f:
        assert epochs == [0, 1] and [int(r['epoch']) for r in csv.DictReader(f)] == [0, 1]
