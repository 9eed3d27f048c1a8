"""Shared machinery of the CPU op benchmarks in ``scripts/`` (not a benchmark itself).

Protocol: the parent process never runs a measured op. Every case is a JSON-serializable dict that a
benchmark script hands to a fresh copy of itself (``script --worker '<json>'``, :func:`spawn`); the worker
runs it and prints its measurements as one JSON line on stdout (:func:`serve_worker`). A fresh process per
case keeps allocator state, caches and one-time costs (library pages, oneDNN JIT, extension loading) of one
case from leaking into another.

Inside a worker, :func:`measure` runs ``case['warmup']`` untimed calls, then one phase:

* ``'time'``: ``case['repeats']`` timed calls (``time.perf_counter``, default allocator) -> median, min,
  max in ms (:func:`timing_stats`) and the raw times (``times_ms``, to pool over several runs of a case).
  Timings on a shared machine are noisy: read the spread.
* ``'memory'``: peak extra resident memory of one call (:func:`peak_extra_mb`). The parent runs this phase
  in a second process with the glibc mmap threshold fixed at 128 KiB (:data:`MEMORY_ENV`), so that every
  large buffer is mmap-ed and returned to the OS when freed and RSS tracks the live tensors; the kernel's
  peak-RSS mark is reset (``echo 5 > /proc/self/clear_refs``, Linux >= 4.0), one call runs, and ``VmHWM -
  VmRSS(before)`` from ``/proc/self/status`` is the peak extra memory of that call (outputs, saved tensors,
  gradients, temporaries; inputs excluded). torch's profiler reports allocation totals, not a CPU peak, and
  tracemalloc does not see torch, hence RSS. (A fixed threshold also makes repeated large allocations
  slow, hence the separate timing process.)

:func:`run_case` does both phases of one case; :func:`write_csv` and :func:`print_table` report.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mrconvnext.tools.memory import peak_extra_mb  # the package's one memory harness

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing the package

MEMORY_ENV = {'MALLOC_MMAP_THRESHOLD_': '131072'}


# --------------------------------------------------------------------------------------------- worker side


def setup_torch(threads: int, seed: int = 0) -> int:
    """Sets torch's intra-op threads (0: leave the default) and the seed; returns the thread count."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    return torch.get_num_threads()


def time_calls(call: Callable[[], object], repeats: int) -> list[float]:
    """Wall time in ms of each of ``repeats`` calls."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def timing_stats(times_ms: Sequence[float]) -> dict[str, float]:
    return {'median_ms': statistics.median(times_ms), 'min_ms': min(times_ms), 'max_ms': max(times_ms)}


def measure(case: dict, call: Callable[[], object], before_memory: Callable[[], None] | None = None) -> dict:
    """Warm-up, then the ``case['phase']`` measurement (``'time'`` or ``'memory'``) of ``call``.

    ``before_memory`` runs after the warm-up and before the memory measurement (e.g. drop the warm-up's
    gradients, so that the measured call allocates them afresh and its baseline does not include them).
    """
    for _ in range(case['warmup']):
        call()
    if case['phase'] == 'memory':
        if before_memory is not None:
            before_memory()
        return {'peak_extra_mb': peak_extra_mb(call)}
    if case['phase'] != 'time':
        raise ValueError(f'unknown phase {case["phase"]!r}')
    times = time_calls(call, case['repeats'])
    return dict(timing_stats(times), times_ms=times)


def serve_worker(worker: Callable[[dict], dict], payload: str) -> None:
    """Worker entry point: runs ``worker`` on the JSON case and prints its result as the last stdout line."""
    print(json.dumps(worker(json.loads(payload))), flush=True)


# --------------------------------------------------------------------------------------------- parent side


def spawn(script: str | Path, case: dict, env: dict[str, str] | None = None) -> dict:
    """Runs ``case`` in a fresh ``python script --worker <json>`` and returns its JSON result."""
    full_env = dict(os.environ, **(env or {}))
    cmd = [sys.executable, str(script), '--worker', json.dumps(case)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=full_env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f'case {case} failed (exit {proc.returncode}):\n{proc.stderr}')
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_case(script: str | Path, case: dict, memory: bool = True) -> dict:
    """Times ``case`` with the default allocator, then (``memory``) measures its peak in a second process."""
    result = spawn(script, dict(case, phase='time'))
    if memory:
        result.update(spawn(script, dict(case, phase='memory'), MEMORY_ENV))
    return result


def ratio(value: float, base: float, digits: int = 2) -> float:
    return round(value / max(base, 1e-9), digits)


def write_csv(path: str | Path, rows: Iterable[dict], fields: Sequence[str]) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open('w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=list(fields))
        writer.writeheader()
        writer.writerows(rows)
    return out


@dataclass(frozen=True)
class Column:
    """One table column: ``value`` is a row key or a function of the row; ``gap`` spaces precede it."""

    header: str
    width: int
    value: str | Callable[[dict], object]
    fmt: str = ''
    align: str = '>'
    gap: int = 0

    def cell(self, text: object, fmt: str = '') -> str:
        return ' ' * self.gap + format(text, f'{self.align}{self.width}{fmt}')

    def render(self, row: dict) -> str:
        v = self.value(row) if callable(self.value) else row[self.value]
        return self.cell(v, self.fmt if isinstance(v, (int, float)) else '')


def format_table(rows: Iterable[dict], columns: Sequence[Column]) -> list[str]:
    """Header, a rule, and one line per row."""
    header = ''.join(c.cell(c.header) for c in columns)
    return [header, '-' * len(header), *(''.join(c.render(r) for c in columns) for r in rows)]


def print_table(rows: Iterable[dict], columns: Sequence[Column], title: str | None = None) -> None:
    if title:
        print(title)
    print('\n'.join(format_table(rows, columns)))


def gpu_time_and_peak(run: Callable[[], object]) -> tuple[float, float]:
    """The GPU benchmarks' measurement of one case: ``triton.testing.do_bench``'s median in ms (CUDA events, after
    warm-up), and the peak extra CUDA memory of one more call in MiB (``max_memory_allocated`` minus what was
    allocated before)."""
    import torch
    from triton.testing import do_bench

    ms = do_bench(run, warmup=25, rep=200, return_mode='median')
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    run()
    torch.cuda.synchronize()
    return ms, (torch.cuda.max_memory_allocated() - before) / 2**20


def markdown_report(
    rows: Sequence[dict], title: str, out: str | Path, stem: str, extra: Sequence[str] = ()
) -> list[str]:
    """A markdown table of ``rows`` (every key of any row, in first-seen order) under ``title``, then ``extra``
    lines; written with the CSV to ``out/stem.{md,csv}`` unless ``out`` is empty. Returns the lines."""
    header = list(dict.fromkeys(k for r in rows for k in r))
    lines = [title, '', *markdown_rows(rows)]
    lines += ['', *extra] if extra else []
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f'{stem}.md').write_text('\n'.join(lines) + '\n')
        write_csv(Path(out) / f'{stem}.csv', rows, header)
    return lines


BENCHMARKS_DOC = ROOT / 'docs' / 'benchmarks.md'
_DOC_INTRO = """# Benchmarks

The numbers that chose the package's constants and forms, each table written by the command named under it
(`--doc`): the date, the machine, the commit and the versions it ran with. Regenerate a table by running its command
again; the other tables stay. Code comments name the command behind a constant and point here, never a number.

Timings on a shared machine are noisy: read the spread, and compare only rows of one table (one run, interleaved
or side by side). GPU measurements are under [gpu/](gpu/README.md), ONNX Runtime's whole-model table is
[deploy/onnx_cpu.md](deploy/onnx_cpu.md).
"""


def machine_line(command: str) -> str:
    """``Generated <date> on <host> (<CPU>, <threads> threads), commit <sha>, torch <version>, by `<command>`.``"""
    import datetime
    import platform

    import torch

    cpu = next(
        (ln.split(':', 1)[1].strip() for ln in Path('/proc/cpuinfo').read_text().splitlines() if 'model name' in ln),
        platform.processor() or platform.machine(),
    ) if Path('/proc/cpuinfo').exists() else platform.processor() or platform.machine()  # fmt: skip
    try:
        sha = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()  # fmt: skip
        dirty = subprocess.run(['git', 'status', '--porcelain', '-uno'], cwd=ROOT, capture_output=True, text=True)
        sha += ' (with uncommitted changes)' if dirty.stdout.strip() else ''
    except (OSError, subprocess.CalledProcessError):
        sha = 'unknown (not a git checkout)'
    return (
        f'Generated {datetime.date.today().isoformat()} on {platform.node()} ({cpu}, {torch.get_num_threads()} '
        f'threads), commit {sha}, torch {torch.__version__}, by `{command}`.'
    )


def write_doc_section(key: str, title: str, command: str, lines: Sequence[str], doc: Path = BENCHMARKS_DOC) -> Path:
    """Write (or replace) the section ``key`` of ``docs/benchmarks.md``: ``## title``, :func:`machine_line` and
    ``lines`` (a markdown table and notes), between ``<!-- bench:key -->`` markers; other sections stay."""
    begin, end = f'<!-- bench:{key} -->', f'<!-- /bench:{key} -->'
    section = '\n'.join([begin, f'## {title}', '', machine_line(command), '', *lines, end])
    text = doc.read_text() if doc.exists() else _DOC_INTRO
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + section + rest.split(end, 1)[1]
    else:
        text = text.rstrip('\n') + '\n\n' + section + '\n'
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
    return doc


def markdown_rows(rows: Sequence[dict]) -> list[str]:
    """A markdown table of ``rows``: every key of any row, in first-seen order."""
    header = list(dict.fromkeys(k for r in rows for k in r))
    lines = ['| ' + ' | '.join(header) + ' |', '|' + ' --- |' * len(header)]
    return lines + ['| ' + ' | '.join(str(r.get(k, '')) for k in header) + ' |' for r in rows]


def spread(row: dict, digits: int = 1) -> str:
    """``min-max`` of a row's ``min_ms`` / ``max_ms``."""
    return f'{row["min_ms"]:.{digits}f}-{row["max_ms"]:.{digits}f}'
