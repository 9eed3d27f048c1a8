"""Inference / training throughput and peak memory of several models, side by side in one run.

    mrconvnext-benchmark                                              # ConvNeXt-T vs MRConvNeXt-T (+ zoo)
    mrconvnext-benchmark --models convnext_atto mrconvnext_atto mrconvnext_atto:reparam --img-size 64 -b 32

``--models`` takes timm names; ``NAME:reparam`` is the model after ``timm.utils.reparameterize_model``
(one long kernel per mixer). The first model is the baseline of the ratio columns. Default: timm's
``convnext_tiny``, ``mrconvnext_t`` branched and reparameterized, and the TaLK / LightConv /
DynamicConv ConvNeXt-T models of this package when they are registered.

Timing: every model is built and warmed up (``--num-warm-iter``), then the models are timed in
interleaved rounds (each round times one batch of every model, in a rotating order, so load changes
on a shared machine hit all models alike); ``--num-bench-iter`` rounds. On CUDA each batch is timed
with CUDA events; on the CPU with the wall clock (``time.perf_counter``). Reported: the median
throughput (img/s) and the spread, the interquartile range of the batch times in percent of their
median. A training step is forward + cross-entropy + backward + SGD step on random labels, in the
branched (training) form; ``:reparam`` rows have no training numbers.

Peak memory: each model runs once more in a fresh subprocess (one per model). CUDA:
``torch.cuda.max_memory_allocated`` (weights + activations). CPU: the growth of the process's peak
resident set size from just before the model is built (Linux: ``VmHWM`` reset through
``/proc/self/clear_refs``; elsewhere ``ru_maxrss``), i.e. weights + activations + allocator overhead;
the training peak includes the inference run before it. ``:reparam`` models are
built directly in deployed form there (``deploy=True``), so the branched weights do not count;
the memory run does not use ``--torchcompile``.

Parameters and GMACs (one image at ``--img-size``, every mixer counted: :mod:`mrconvnext.tools.flops`) are those
of the model as timed.

``--amp`` (bfloat16 on CPU), ``--channels-last``, ``--torchcompile [BACKEND]``, batch size and input
size apply to every model. The table is printed and written to ``--results-file`` (CSV or JSON).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from timm.utils import reparameterize_model

from . import common
from .cli_args import benchmark_parser as build_parser
from .flops import count_macs
from .memory import rss_peak_reader

__all__ = ['main', 'run', 'build_parser', 'default_models', 'format_table']

_logger = logging.getLogger('mrconvnext.benchmark')

_ZOO_T = ('talkconvnext_t', 'talkconvnext2d_t', 'lightconvnext_t', 'dynconvnext_t')


def default_models() -> list[str]:
    """``convnext_tiny``, ``mrconvnext_t`` branched and reparameterized, then the other registered T models."""
    import timm

    registered = set(timm.list_models())
    return ['convnext_tiny', 'mrconvnext_t', 'mrconvnext_t:reparam'] + [m for m in _ZOO_T if m in registered]


def _build(spec: str, args: argparse.Namespace, device: torch.device, deploy_direct: bool = False) -> nn.Module:
    name, variant = common.parse_model_spec(spec)
    extra = {}
    if variant == 'reparam' and deploy_direct and common.is_zoo_model(name):
        extra['deploy'] = True
    model = common.create_model(name, num_classes=args.num_classes, img_size=args.img_size, **extra)
    if variant == 'reparam' and not extra:
        model = reparameterize_model(model.eval())
    model.to(device)
    if args.channels_last:
        model.to(memory_format=torch.channels_last)
    return model


@dataclass
class _Entry:
    spec: str
    model: nn.Module
    params_m: float
    gmacs: float
    variant: str
    infer_step: Any = None
    train_step: Any = None
    infer_times: list[float] = field(default_factory=list)
    train_times: list[float] = field(default_factory=list)


def _steps(model: nn.Module, args: argparse.Namespace, device: torch.device, train: bool):
    autocast, _ = common.amp_autocast(args.amp, args.amp_dtype, device)
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    x = torch.randn(args.batch_size, 3, args.img_size, args.img_size, device=device).contiguous(memory_format=fmt)
    y = torch.randint(0, args.num_classes, (args.batch_size,), device=device)
    run = torch.compile(model, backend=args.torchcompile) if args.torchcompile else model

    def infer():
        model.eval()
        with torch.no_grad(), autocast():
            run(x)

    if not train:
        return infer, None
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)

    def train_step():
        model.train()
        with autocast():
            loss = nn.functional.cross_entropy(run(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return infer, train_step


def _time(fn, device: torch.device) -> float:
    if device.type == 'cuda':
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize(device)
        return start.elapsed_time(end) / 1000.0
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _profile(fn, device: torch.device, top: int) -> list[str]:
    """One call of ``fn`` under torch's profiler: its total device (CUDA) or CPU self time, kernel launches, and the
    ``top`` kernels and the ``top`` operators (time including their children) that took longest."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == 'cuda'
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize(device)
    events = prof.key_averages()
    if cuda:
        kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
        self_ms, total_ms = (lambda e: e.self_device_time_total / 1e3), (lambda e: e.device_time_total / 1e3)
    else:
        kernels = [e for e in events if e.key.startswith('aten::')]
        self_ms, total_ms = (lambda e: e.self_cpu_time_total / 1e3), (lambda e: e.cpu_time_total / 1e3)
    ops = [e for e in events if e.device_type == torch.autograd.DeviceType.CPU and '::' in e.key]
    total = sum(self_ms(e) for e in kernels)
    lines = [
        f'  {total:.2f} ms in {sum(e.count for e in kernels)} kernels' if cuda else f'  {total:.2f} ms of aten ops'
    ]
    lines += ['  top kernels (self ms, calls):' if cuda else '  top aten ops (self ms, calls):']
    for e in sorted(kernels, key=self_ms, reverse=True)[:top]:
        lines.append(f'    {self_ms(e):9.3f} {e.count:6d}  {e.key[:100]}')
    lines += ['  top operators (ms including what they call, calls):']
    for e in sorted(ops, key=total_ms, reverse=True)[:top]:
        lines.append(f'    {total_ms(e):9.3f} {e.count:6d}  {e.key[:100]}')
    return lines


def _spread_pct(times: list[float]) -> float:
    if len(times) < 2:
        return 0.0
    q = statistics.quantiles(times, n=4, method='inclusive')
    return 100.0 * (q[2] - q[0]) / statistics.median(times)


def _memory_worker(payload: str) -> None:
    """One model in a fresh process: peak memory of inference, then of a training step, as JSON."""
    cfg = json.loads(payload)
    args = argparse.Namespace(**cfg['args'])
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    _, variant = common.parse_model_spec(cfg['spec'])
    out: dict[str, float | None] = {}
    if device.type == 'cuda':
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        read = lambda: (torch.cuda.max_memory_allocated(device) - base) / 2**20  # noqa: E731
    else:
        read = rss_peak_reader()
    model = _build(cfg['spec'], args, device, deploy_direct=True)
    infer, train = _steps(model, args, device, train=variant == 'as-built' and args.bench != 'inference')
    if args.bench != 'train':
        infer()
        infer()
        if device.type == 'cuda':
            torch.cuda.synchronize(device)
        out['infer_peak_mb'] = read()
    if train is not None:
        train()
        train()
        if device.type == 'cuda':
            torch.cuda.synchronize(device)
        out['train_peak_mb'] = read()
    print('MEMORY ' + json.dumps(out), flush=True)


def _measure_memory(spec: str, args: argparse.Namespace) -> dict[str, float]:
    keys = ('bench', 'batch_size', 'img_size', 'num_classes', 'device', 'amp', 'amp_dtype', 'channels_last')
    payload = {'spec': spec, 'args': {k: getattr(args, k) for k in keys}}
    payload['args'].update(threads=args.threads, seed=args.seed, torchcompile=None)
    env = dict(os.environ)
    root = str(Path(common.mrconvnext.__file__).resolve().parents[1])
    env['PYTHONPATH'] = root + (os.pathsep + env['PYTHONPATH'] if env.get('PYTHONPATH') else '')
    cmd = [sys.executable, '-m', 'mrconvnext.tools.benchmark', '--memory-worker', json.dumps(payload)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith('MEMORY '):
            return json.loads(line[len('MEMORY ') :])
    _logger.warning(f'memory measurement of {spec} failed: {proc.stderr.strip()[-500:]}')
    return {}


def _fmt(v: Any, nd: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return '-'
    if isinstance(v, float):
        return f'{v:.{nd}f}'
    return str(v)


def format_table(rows: list[dict[str, Any]]) -> str:
    """The printed table: one line per model, ratios against the first row."""
    cols = [
        ('model', 'model', 0),
        ('params_m', 'params(M)', 2),
        ('gmacs', 'GMACs', 2),
        ('infer_img_s', 'infer img/s', 1),
        ('infer_spread_pct', '±IQR%', 1),
        ('infer_ratio', 'ratio', 2),
        ('train_img_s', 'train img/s', 1),
        ('train_spread_pct', '±IQR%', 1),
        ('train_ratio', 'ratio', 2),
        ('infer_peak_mb', 'infer MB', 0),
        ('train_peak_mb', 'train MB', 0),
        ('train_mem_ratio', 'mem ratio', 2),
    ]
    cells = [[h for _, h, _ in cols]] + [[_fmt(r.get(k), nd) for k, _, nd in cols] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(cols))]
    lines = [
        '  '.join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))) for row in cells
    ]
    lines.insert(1, '  '.join('-' * w for w in widths))
    return '\n'.join(lines)


def run(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Benchmark; returns the table rows (also printed and written to ``--results-file``)."""
    common.setup_logging()
    args = build_parser().parse_args(argv)
    device = torch.device(args.device)
    cuda = device.type == 'cuda'
    if args.batch_size is None:
        args.batch_size = 256 if cuda else 8
    if args.num_warm_iter is None:
        args.num_warm_iter = 5 if cuda else 1
    if args.num_bench_iter is None:
        args.num_bench_iter = 20 if cuda else 5
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_worker:
        _memory_worker(args.memory_worker)
        return []
    specs = args.models or default_models()
    torch.manual_seed(args.seed)

    entries: list[_Entry] = []
    for spec in specs:
        _, variant = common.parse_model_spec(spec)
        _logger.info(f'building, counting and warming up {spec} ...')
        model = _build(spec, args, device)
        macs = count_macs(model, args.img_size)
        params = macs.params_m
        do_train = variant == 'as-built' and args.bench != 'inference'
        infer, train = _steps(model, args, device, train=do_train)
        e = _Entry(spec, model, params, macs.total, variant, infer if args.bench != 'train' else None, train)
        for _ in range(args.num_warm_iter):  # warm-up (and compilation)
            if e.infer_step:
                e.infer_step()
            if e.train_step:
                e.train_step()
        if cuda:
            torch.cuda.synchronize(device)
        entries.append(e)
        _logger.info(f'built and warmed up {spec} ({params:.2f}M parameters)')

    for r in range(args.num_bench_iter):  # interleaved rounds, rotating order
        _logger.info(f'timing round {r + 1}/{args.num_bench_iter} ({len(entries)} models)')
        shift = r % len(entries)
        for e in entries[shift:] + entries[:shift]:
            if e.infer_step:
                e.infer_times.append(_time(e.infer_step, device))
            if e.train_step:
                e.train_times.append(_time(e.train_step, device))

    for e in entries if args.profile else []:
        for kind, step in (('eval', e.infer_step), ('training step', e.train_step)):
            if step:
                print(f'\nprofile of {e.spec}, one {kind}:\n' + '\n'.join(_profile(step, device, args.profile)))

    rows: list[dict[str, Any]] = []
    for e in entries:
        row: dict[str, Any] = {
            'model': e.spec,
            'variant': e.variant,
            'params_m': round(e.params_m, 3),
            'gmacs': round(e.gmacs, 6),
        }
        for kind, times in (('infer', e.infer_times), ('train', e.train_times)):
            row[f'{kind}_img_s'] = args.batch_size / statistics.median(times) if times else None
            row[f'{kind}_spread_pct'] = _spread_pct(times) if times else None
        if not args.no_memory:
            _logger.info(f'peak memory of {e.spec} (in a fresh process) ...')
            row.update(_measure_memory(e.spec, args))
        rows.append(row)
    base = rows[0]
    for row in rows:
        for key, ratio in (
            ('infer_img_s', 'infer_ratio'),
            ('train_img_s', 'train_ratio'),
            ('infer_peak_mb', 'infer_mem_ratio'),
            ('train_peak_mb', 'train_mem_ratio'),
        ):
            a, b = row.get(key), base.get(key)
            row[ratio] = a / b if a is not None and b else None
        row.update(
            batch_size=args.batch_size,
            img_size=args.img_size,
            device=str(device),
            amp=args.amp,
            channels_last=args.channels_last,
            torchcompile=args.torchcompile or '',
            threads=torch.get_num_threads() if not cuda else None,
            timer='cuda-events' if cuda else 'wall-clock',
            repeats=args.num_bench_iter,
            memory=('cuda-max-allocated' if cuda else 'rss-peak-growth') if not args.no_memory else '',
        )
        for k, v in list(row.items()):
            if isinstance(v, float):
                row[k] = round(v, 4)

    how = 'CUDA events' if cuda else f'wall clock, {torch.get_num_threads()} thread(s)'
    mem = (
        ''
        if args.no_memory
        else ('; memory: max allocated' if cuda else '; memory: peak RSS growth of a fresh process')
    )
    print(
        f'\n{device} batch {args.batch_size} at {args.img_size}x{args.img_size}, {how}; median of '
        f'{args.num_bench_iter} interleaved rounds after {args.num_warm_iter} warm-up{mem}; ratios vs {rows[0]["model"]}'
    )
    print(format_table(rows))
    if args.results_file:
        path = common.write_results(args.results_file, rows)
        print(f'written: {path}')
    return rows


def main(argv: list[str] | None = None) -> None:
    """Console entry point (``mrconvnext-benchmark``): :func:`run` without a return value."""
    run(argv)


if __name__ == '__main__':
    main()
