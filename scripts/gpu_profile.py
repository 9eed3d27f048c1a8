"""Measured time per op on the GPU: the data the cost model (``scripts/gpu_cost.py``) is calibrated on, and the
long-convolution method choices of MRConvNeXt measured side by side.

    python scripts/gpu_profile.py --out DIR [--budget 420] [--groups convnext,reparam,...]
    python scripts/gpu_profile.py --out DIR --device cpu --img-size 32 --batch 2 --tiny   # dry run (the test's)

For every row (a model, eval or a training step, a batch size, MRConv's long-convolution method), in one process
per group of rows: bf16 autocast, channels-last, eager; warm-up, then the median of ``--repeats`` timed calls
(CUDA events), the peak of allocated memory, and one call under torch's profiler, whose events are kept per ATen
op and per operator of this package: calls, self device time, device time including children. One JSON line per
row goes to ``DIR/rows.jsonl`` as it is measured; a group that fails or outlives the budget is logged and the
next one runs. The table of medians is printed last.

``method`` rows set every MRConv mixer's method: ``auto`` (what the package picks), ``fft`` (torch.fft), ``mixed``
(torch.fft beyond ``TOEPLITZ_MAX_LENGTH``, the Toeplitz product up to it), ``matmul`` (the row DFT beyond it: what
'auto' ran on CUDA for half precision before 812fc19); ``nofold`` runs the branches
unfolded (one convolution per branch and ``F.batch_norm``), the training path before the fold.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing the package

# group -> (model spec, model kwargs, rows of (mode, batch, method)); the order is the priority when the budget cuts
GROUPS: dict[str, tuple[str, dict, list[tuple[str, int, str]]]] = {
    'convnext': ('convnext_tiny', {}, [('eval', 1, 'auto'), ('eval', 128, 'auto'), ('train', 128, 'auto')]),
    'reparam': (
        'mrconvnext_t:reparam',
        {},
        [(m, b, meth) for b in (1, 128) for meth in ('auto', 'fft', 'mixed') for m in ('eval',)],
    ),
    'bn': (
        'mrconvnext_t',
        {},
        [('train', 128, 'fft'), ('train', 128, 'mixed'), ('train', 128, 'nofold'), ('train', 128, 'auto')],
    ),
    'scale': ('mrconvnext_t', {'combine': 'scale'}, [('train', 128, 'auto'), ('train', 128, 'mixed')]),
    'talk': ('talkconvnext_t', {}, [('eval', 128, 'auto'), ('train', 128, 'auto')]),
    'talk2d': ('talkconvnext2d_t', {}, [('eval', 128, 'auto'), ('train', 128, 'auto')]),
    'light': ('lightconvnext_t', {}, [('eval', 128, 'auto'), ('train', 128, 'auto')]),
    'dyn': ('dynconvnext_t', {}, [('eval', 128, 'auto'), ('train', 128, 'auto')]),
    'branched': ('mrconvnext_t', {}, [('eval', 128, 'auto'), ('eval', 128, 'mixed')]),
    # the second call: the batch sizes between, torch.fft everywhere, and the compiled eval
    'convnext_batches': ('convnext_tiny', {}, [('eval', 8, 'auto'), ('eval', 32, 'auto')]),
    'reparam_batches': (
        'mrconvnext_t:reparam',
        {},
        [('eval', b, meth) for b in (8, 32) for meth in ('fft', 'mixed')]
        + [('eval', 1, 'auto'), ('eval', 128, 'auto')],
    ),
    'bn_fft': ('mrconvnext_t', {}, [('train', 128, 'auto'), ('train', 128, 'fft'), ('eval', 128, 'fft')]),
    'scale_fft': ('mrconvnext_t', {'combine': 'scale'}, [('train', 128, 'auto'), ('train', 128, 'fft')]),
    'compiled': ('convnext_tiny', {}, [('eval-compiled', 128, 'auto')]),
    # the third call: the landed choice (812fc19) and the fold without float64 passes, in larger chunks
    'final_bn': ('mrconvnext_t', {}, [('train', 128, 'auto'), ('eval', 128, 'auto')]),
    'final_scale': ('mrconvnext_t', {'combine': 'scale'}, [('train', 128, 'auto')]),
    'final_reparam': ('mrconvnext_t:reparam', {}, [('eval', 1, 'auto'), ('eval', 8, 'auto'), ('eval', 128, 'auto')]),
    'reparam_compiled': ('mrconvnext_t:reparam', {}, [('eval-compiled', 128, 'auto')]),
    # the fourth call: LightConv's mixers on the DynamicConv Triton kernels (that call's 'auto' took the grouped conv)
    'light_triton': ('lightconvnext_t', {'engine': 'triton'}, [('eval', 128, 'auto'), ('train', 128, 'auto')]),
    # the fifth call: LightConv's 'auto' (the Triton kernels on CUDA from 8cb8f3c) and the grouped conv at small batches
    'light_small': ('lightconvnext_t', {}, [('eval', 1, 'auto'), ('eval', 8, 'auto')]),
    'light_torch_small': ('lightconvnext_t', {'engine': 'torch'}, [('eval', 1, 'auto'), ('eval', 8, 'auto')]),
}
CALL1 = 'convnext,reparam,bn,scale,talk,talk2d,light,dyn,branched'
TINY = {'convnext_tiny': 'convnext_atto', 'mrconvnext_t:reparam': 'mrconvnext_atto:reparam'}
TINY.update({f'{f}_t': f'{f}_atto' for f in ('mrconvnext', 'talkconvnext', 'talkconvnext2d', 'lightconvnext')})
TINY['dynconvnext_t'] = 'dynconvnext_atto'


_PACKAGE_RULES: dict = {}  # the package's functions a row replaces, to put back for the next row


def _turn_fold(off: bool) -> None:
    """The fold off for this row (CUDA joins the dispatch's ``NO_FOLD_DEVICES``) or as the package has it. A checkout
    from before that switch (the cost model's ``--code``) has its ``branch_norm.fold_applies`` rule replaced."""
    import importlib

    try:
        dispatch = importlib.import_module('mrconvnext.ops.long_conv.dispatch')
    except ImportError:
        dispatch = None
    if dispatch is not None and hasattr(dispatch, 'NO_FOLD_DEVICES'):
        _PACKAGE_RULES.setdefault('NO_FOLD_DEVICES', dispatch.NO_FOLD_DEVICES)  # kept for the rows after a nofold row
        dispatch.NO_FOLD_DEVICES = ('cpu', 'cuda') if off else _PACKAGE_RULES['NO_FOLD_DEVICES']
        return
    from mrconvnext.layers import branch_norm

    _PACKAGE_RULES.setdefault('fold_applies', branch_norm.fold_applies)
    branch_norm.fold_applies = (lambda bn, x: False) if off else _PACKAGE_RULES['fold_applies']


def set_method(model, method: str) -> None:
    """Every MRConv mixer's method (module docstring); ``nofold`` keeps ``auto`` and turns the fold off for this row,
    ``nofold+METHOD`` also sets METHOD. ``auto`` changes nothing (the package's own choice, at any commit)."""
    nofold = method == 'nofold' or method.startswith('nofold+')
    method = method.removeprefix('nofold').removeprefix('+') or 'auto'
    if nofold or 'mrconvnext.layers.branch_norm' in sys.modules:
        _turn_fold(off=nofold)
    if method == 'auto':
        return
    if method != 'mixed':  # the package's own setter ('matmul' included)
        try:
            from mrconvnext.models import set_engine
        except ImportError:  # a checkout from before set_engine (the cost model's --code)
            from mrconvnext.tools.common import set_mixer_method

            set_mixer_method(model, method)
        else:
            set_engine(model, method=method, engine='auto')
        return
    from mrconvnext.layers import MRConv1d

    try:
        from mrconvnext.ops.long_conv.dispatch import TOEPLITZ_MAX_LENGTH
    except ImportError:  # a checkout from before the family dispatch modules
        from mrconvnext.ops.engines import TOEPLITZ_MAX_LENGTH

    for m in model.modules():
        if isinstance(m, MRConv1d):
            m.method = 'fft' if m.seq_len > TOEPLITZ_MAX_LENGTH else 'toeplitz'
            m.engine = 'auto'


def profile_events(prof) -> dict:
    """Per op of the profile (ATen and this package's operators): calls, self and total device time in µs; the
    kernels' total and count."""
    import torch

    events = prof.key_averages()
    cuda = torch.autograd.DeviceType.CUDA
    kernels = [e for e in events if e.device_type == cuda]
    ops = {}
    for e in events:
        if e.device_type != cuda and '::' in e.key:
            ops[e.key] = [e.count, round(e.self_device_time_total, 1), round(e.device_time_total, 1)]
            ops[e.key].append(round(e.self_cpu_time_total, 1))
    top = sorted(kernels, key=lambda e: e.self_device_time_total, reverse=True)[:40]
    return {
        'kernel_us': round(sum(e.self_device_time_total for e in kernels), 1),
        'kernel_count': sum(e.count for e in kernels),
        'ops': ops,
        'top_kernels': [[e.key[:160], e.count, round(e.self_device_time_total, 1)] for e in top],
    }


def run_group(args: argparse.Namespace, name: str) -> None:
    """Measure one group's rows in this process; one JSON line per row appended to ``rows.jsonl``."""
    import torch

    spec, kwargs, rows = GROUPS[name]
    if args.tiny:
        spec = TINY[spec]
    cuda = args.device.startswith('cuda')
    for mode, batch, method in rows:
        batch = min(batch, args.batch) if args.batch else batch
        try:
            measure_row(args, name, spec, kwargs, mode, batch, method)
        except Exception as e:  # noqa: BLE001 - logged; the group's other rows still run
            print(f'{name} {spec} {mode} b{batch} {method}: failed: {type(e).__name__}: {e}', flush=True)
        if cuda:
            torch.cuda.empty_cache()


def measure_row(args: argparse.Namespace, name: str, spec: str, kwargs: dict, mode: str, batch: int, method: str):
    """One row: build, warm up, time, profile; append its JSON line."""
    import torch
    from torch import nn

    from mrconvnext.tools import common

    device = torch.device(args.device)
    cuda = device.type == 'cuda'
    model_name, variant = common.parse_model_spec(spec)
    img = args.img_size
    torch.manual_seed(0)
    model = common.create_model(model_name, num_classes=1000, img_size=img, model_kwargs=kwargs)
    if variant == 'reparam':
        from timm.utils import reparameterize_model

        model = reparameterize_model(model.eval())
    set_method(model, method)
    model.to(device).to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, img, img, device=device).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (batch,), device=device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)

    run = torch.compile(model) if mode == 'eval-compiled' else model

    def step():
        if mode.startswith('eval'):
            model.eval()
            with torch.no_grad(), autocast:
                run(x)
            return
        model.train()
        with autocast:
            loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def timed() -> float:
        if not cuda:
            t0 = time.perf_counter()
            step()
            return (time.perf_counter() - t0) * 1e3
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end)

    t0 = time.perf_counter()
    for _ in range(args.warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times = [timed() for _ in range(args.repeats)]
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else None
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        step()
        if cuda:
            torch.cuda.synchronize()
    row = dict(
        group=name,
        model=spec,
        kwargs=kwargs,
        mode=mode,
        batch=batch,
        method=method,
        img_size=img,
        ms=round(statistics.median(times), 3),
        times=[round(t, 3) for t in times],
        peak_mib=peak,
        seconds=round(time.perf_counter() - t0, 1),
    )
    row.update(profile_events(prof))
    with open(Path(args.out) / 'rows.jsonl', 'a') as f:
        f.write(json.dumps(row) + '\n')
    print(
        f'{name:16s} {spec:24s} {mode:5s} b{batch:<4d} {method:7s} {row["ms"]:9.2f} ms  peak {peak} MiB'
        f'  kernels {row["kernel_us"] / 1e3:.2f} ms in {row["kernel_count"]}  ({row["seconds"]} s)',
        flush=True,
    )


def versions() -> dict:
    import torch

    out = {'torch': torch.__version__, 'cuda': str(torch.version.cuda)}
    with contextlib.suppress(ImportError):
        import triton

        out['triton'] = triton.__version__
    with contextlib.suppress(ImportError):
        import timm

        out['timm'] = timm.__version__
    if torch.cuda.is_available():
        out['gpu'] = torch.cuda.get_device_name()
        with contextlib.suppress(OSError):
            q = [
                'nvidia-smi',
                '--query-gpu=driver_version,clocks.sm,clocks.max.sm,power.limit',
                '--format=csv,noheader',
            ]
            out['driver_clocks_power'] = subprocess.run(q, capture_output=True, text=True).stdout.strip()
    return out


def summary(out: Path) -> list[str]:
    """The table of medians, ratios to ``convnext_tiny`` at the same mode and batch."""
    path = out / 'rows.jsonl'
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    base = {(r['mode'], r['batch']): r['ms'] for r in rows if r['model'] in ('convnext_tiny', 'convnext_atto')}
    lines = [
        'group            model                    kwargs             mode  batch method       ms  ratio  peak MiB'
    ]
    for r in rows:
        b = base.get((r['mode'], r['batch']))
        ratio = f'{r["ms"] / b:6.2f}' if b else '     -'
        kw = ','.join(f'{k}={v}' for k, v in r['kwargs'].items()) or '-'
        peak = f'{r["peak_mib"]:.0f}' if r['peak_mib'] else '-'
        lines.append(
            f'{r["group"]:16s} {r["model"]:24s} {kw:18s} {r["mode"]:5s} {r["batch"]:5d} {r["method"]:7s}'
            f' {r["ms"]:8.2f} {ratio} {peak:>9s}'
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--out', required=True)
    p.add_argument('--budget', type=float, default=420.0, help='seconds for all groups')
    p.add_argument('--groups', default=CALL1, help=f'comma-separated, in this order, of {list(GROUPS)}')
    p.add_argument('--device', default='cuda')
    p.add_argument('--img-size', type=int, default=224)
    p.add_argument('--batch', type=int, default=0, help='cap every row batch size (the dry run)')
    p.add_argument('--tiny', action='store_true', help='atto models in place of the T ones (the dry run)')
    p.add_argument('--warmup', type=int, default=2)
    p.add_argument('--repeats', type=int, default=7)
    p.add_argument('--worker', default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.worker:
        run_group(args, args.worker)
        return 0
    names = [g for g in args.groups.split(',') if g]
    unknown = [g for g in names if g not in GROUPS]
    if unknown:
        p.error(f'--groups: unknown {unknown}; expected names from {list(GROUPS)}')
    (out / 'versions.json').write_text(json.dumps(versions(), indent=1))
    print(json.dumps(versions()), flush=True)
    deadline = time.monotonic() + args.budget
    failed = 0
    for name in names:
        left = deadline - time.monotonic()
        if left < 10:
            print(f'{name}: skipped (budget)', flush=True)
            continue
        cmd = [sys.executable, __file__, '--worker', name, *(argv if argv is not None else sys.argv[1:])]
        env = dict(os.environ, PYTHONUNBUFFERED='1')
        try:
            rc = subprocess.run(cmd, timeout=left, env=env).returncode
        except subprocess.TimeoutExpired:
            rc = 'timeout'
        if rc != 0:
            failed += 1
            print(f'{name}: failed ({rc})', flush=True)
    print('\n'.join(summary(out)))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
