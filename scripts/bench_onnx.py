"""Exported models in ONNX Runtime on the CPU, side by side with timm's ConvNeXt of the same size.

    python scripts/bench_onnx.py                                  # the atto models, batch 1 and 8, 2 threads
    python scripts/bench_onnx.py --sizes atto t --out docs/deploy # and the T models, results written to docs/deploy

Each model is built for ``--img-size`` (224: the nominal size), reparameterized (timm's ``reparameterize_model``: one long kernel per
MRConv mixer), exported as ``mrconvnext-export --onnx`` exports it (``mrconvnext.tools.export.export_onnx``,
opset 20 unless ``--opset``), and checked against PyTorch: the relative error ``||y_ort - y_torch|| / ||y_torch||`` of the logits of
two fresh random images. ONNX Runtime runs each file on the CPU provider with ``--threads`` intra-op threads, after
two warm-up runs, in ``--rounds`` rounds (rotating the order of the models); in each round every model runs back to
back with the ConvNeXt of its size, one first and then the other, alternately. Reported: the median of each model's
runs (``b*_ms``), the median of its paired ratios of throughput to that ConvNeXt (``b*_ratio``; only the second
run's pause and untimed run lie between a pair's timed runs, so the speed of a shared machine, which drifts over
seconds, cancels in each ratio) and their interquartile range (``b*_ratio_iqr``), the export time and the number of ONNX nodes. Tables generated before
2026-12-02 took the ratio of the two medians, from runs up to a round apart. Each session has its own intra-op
threads, which spin-wait after a run: a session run right after another shares the cores with them (convnext_atto
at batch 1 took 31 ms so, 11 ms alone). So each timed run follows a pause of ``--pause`` seconds and one untimed run
of the same session, as a model serving a stream of requests alone runs; tables generated before 2026-11-27 lack
this, and their batch-1 columns favour the larger graphs.

``--deform-conv`` adds a row per TaLK 2-D model exported with ``deform_conv=True`` (``<name>+deform``: its large maps
as ONNX ``DeformConv``), which OpenVINO cannot load (its ``openvino_rel_error`` is left empty). ``--opset`` sets every
export's opset (default: ``export_onnx``'s, 20; tables generated before 2026-12-04 exported at 18, where GELU is five
nodes, which ONNX Runtime runs slower than opset 20's one ``Gelu``).

``--openvino`` also loads each file in OpenVINO (``pip install openvino``; CPU device, float32 inference precision,
since its default on CPUs with bf16 support is bf16) and reports the relative error of its logits against PyTorch
(``openvino_rel_error``); it times nothing there.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing the package

import torch  # noqa: E402
from _bench import write_csv  # noqa: E402

FAMILIES = ('mrconvnext', 'talkconvnext', 'talkconvnext2d', 'lightconvnext', 'dynconvnext')
BASELINE = {'atto': 'convnext_atto', 't': 'convnext_tiny'}
SUFFIX = {'atto': 'atto', 't': 't'}


def _session(path: Path, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=['CPUExecutionProvider'])


def _openvino_rel_error(path: Path, model: torch.nn.Module, x: torch.Tensor) -> float:
    import numpy as np
    import openvino

    core = openvino.Core()
    compiled = core.compile_model(core.read_model(str(path)), 'CPU', {'INFERENCE_PRECISION_HINT': 'f32'})
    y = torch.from_numpy(np.asarray(compiled(x.numpy())[0])).double()
    with torch.no_grad():
        ref = model(x).double()
    return float((y - ref).norm() / ref.norm())


def _openvino_version(wanted: bool) -> str:
    if not wanted:
        return ''
    import openvino

    return f', openvino {openvino.__version__.split("-")[0]} (f32)'


def export_case(
    name: str,
    folder: Path,
    img_size: int,
    threads: int,
    openvino: bool = False,
    deform_conv: bool = False,
    opset: int | None = None,
) -> dict:
    """Build, reparameterize, export and check one model; the row without timings, plus its session."""
    import onnx
    import timm
    from timm.utils import reparameterize_model

    import mrconvnext  # noqa: F401 - registers the models
    from mrconvnext.tools.export import export_onnx

    torch.manual_seed(0)
    extra = {} if name in BASELINE.values() else {'img_size': img_size}  # the mixers' kernels fit their map
    model = reparameterize_model(timm.create_model(name, pretrained=False, **extra).eval())
    label = f'{name}+deform' if deform_conv else name
    path = folder / f'{label}.onnx'
    x = torch.randn(2, 3, img_size, img_size)
    t0 = time.perf_counter()
    export_onnx(model, path, x, opset, deform_conv=deform_conv)
    export_s = time.perf_counter() - t0
    session = _session(path, threads)
    check = torch.randn(2, 3, img_size, img_size)
    y = torch.from_numpy(session.run(None, {session.get_inputs()[0].name: check.numpy()})[0]).double()
    with torch.no_grad():
        ref = model(check).double()
    graph = onnx.load(str(path)).graph
    row = dict(
        model=label, img_size=img_size, export_s=round(export_s, 1), rel_error=float((y - ref).norm() / ref.norm()),
        nodes=len(graph.node), mb=round(path.stat().st_size / 2**20, 1), session=session,
    )  # fmt: skip
    if openvino:
        row['openvino_rel_error'] = None if deform_conv else _openvino_rel_error(path, model, check)
    return row


def _baseline(model: str, sizes: list[str]) -> str:
    """The ConvNeXt that ``model`` (a row's label) is compared with: timm's of the same size."""
    model = model.removesuffix('+deform')
    return next(BASELINE[s] for s in sizes if model.endswith(SUFFIX[s]) or model == BASELINE[s])


def _timed(name: str, session, x, pause: float) -> float:
    """Seconds of one run of ``session`` on ``x`` (the model ``name``), after a pause and an untimed run."""
    feed = {session.get_inputs()[0].name: x}
    time.sleep(pause)  # the last session's threads stop spinning
    session.run(None, feed)  # this session's threads awake, as in a stream of requests
    t0 = time.perf_counter()
    session.run(None, feed)
    return time.perf_counter() - t0


def run(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--sizes', nargs='+', default=['atto'], choices=sorted(BASELINE))
    p.add_argument('--families', nargs='+', default=list(FAMILIES), choices=FAMILIES)
    p.add_argument('--batches', nargs='+', type=int, default=[1, 8])
    p.add_argument('--img-size', type=int, default=224)
    p.add_argument('--threads', type=int, default=2, help='ONNX Runtime intra-op threads')
    p.add_argument('--rounds', type=int, default=5, help='timed interleaved rounds')
    p.add_argument('--out', default='', help='folder for onnx_cpu.{csv,md} (default: print only)')
    p.add_argument('--openvino', action='store_true', help='also check each file in OpenVINO (see above)')
    p.add_argument('--deform-conv', action='store_true', help='also TaLK 2-D exported with DeformConv (see above)')
    p.add_argument('--opset', type=int, default=None, help='ONNX opset of every export (default: see above)')
    p.add_argument('--pause', type=float, default=0.05, help='seconds between two sessions (see above)')
    args = p.parse_args(argv)
    import numpy as np
    import onnxruntime as ort

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            for name in [BASELINE[size]] + [f'{f}_{SUFFIX[size]}' for f in args.families]:
                print(f'exporting {name} ...', file=sys.stderr, flush=True)
                case = (Path(tmp), args.img_size, args.threads, args.openvino)
                rows.append(export_case(name, *case, opset=args.opset))
                if args.deform_conv and name.startswith('talkconvnext2d_'):
                    rows.append(export_case(name, *case, deform_conv=True, opset=args.opset))
        rng = np.random.default_rng(0)
        inputs = {b: rng.standard_normal((b, 3, args.img_size, args.img_size), dtype=np.float32) for b in args.batches}
        times: dict[tuple[int, int], list[float]] = {(i, b): [] for i in range(len(rows)) for b in args.batches}
        ratios: dict[tuple[int, int], list[float]] = {(i, b): [] for i in range(len(rows)) for b in args.batches}
        for row in rows:  # warm-up
            for b in args.batches:
                for _ in range(2):
                    row['session'].run(None, {row['session'].get_inputs()[0].name: inputs[b]})
        names = [row['model'] for row in rows]
        base_of = [names.index(_baseline(name, args.sizes)) for name in names]
        timed = [i for i in range(len(rows)) if base_of[i] != i] or list(range(len(rows)))
        for r in range(args.rounds):
            print(f'round {r + 1}/{args.rounds}', file=sys.stderr, flush=True)
            order = timed[r % len(timed) :] + timed[: r % len(timed)]
            for n, i in enumerate(order):
                for b in args.batches:
                    # the model and its baseline back to back, first one then the other
                    pair = (i, base_of[i]) if (r + n) % 2 else (base_of[i], i)
                    t = {}
                    for j in dict.fromkeys(pair):  # one run where the model is its own baseline
                        t[j] = _timed(rows[j]['model'], rows[j]['session'], inputs[b], args.pause)
                        times[j, b].append(t[j])
                    ratios[i, b].append(t[base_of[i]] / t[i])
    for i, row in enumerate(rows):
        del row['session']
        for b in args.batches:
            row[f'b{b}_ms'] = round(1e3 * statistics.median(times[i, b]), 2)
            paired = ratios[i, b] or [1.0]  # a baseline's own ratio
            quartiles = statistics.quantiles(paired, n=4) if len(paired) > 1 else paired * 3
            row[f'b{b}_ratio'] = round(statistics.median(paired), 3)
            row[f'b{b}_ratio_iqr'] = round(quartiles[2] - quartiles[0], 3)
    versions = (
        f'onnxruntime {ort.__version__}{_openvino_version(args.openvino)}, torch {torch.__version__}, '
        f'{platform.processor() or platform.machine()}, '
        f'{args.threads} intra-op threads'
    )
    fields = ['model', 'img_size'] + [f'b{b}_{k}' for b in args.batches for k in ('ms', 'ratio', 'ratio_iqr')]
    fields += ['export_s', 'rel_error', 'nodes', 'mb'] + (['openvino_rel_error'] if args.openvino else [])
    lines = _markdown(rows, fields, versions, argv)
    print('\n'.join(lines))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        write_csv(out / 'onnx_cpu.csv', rows, fields)
        (out / 'onnx_cpu.md').write_text('\n'.join(lines) + '\n')
    return rows


def _markdown(rows: list[dict], fields: list[str], versions: str, argv: list[str] | None) -> list[str]:
    commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True, cwd=ROOT)
    command = 'python scripts/bench_onnx.py ' + ' '.join(sys.argv[1:] if argv is None else argv)
    lines = [
        '# Exported models in ONNX Runtime (CPU)',
        '',
        f'Generated {datetime.date.today()} on {platform.node()}, commit {commit.stdout.strip() or "?"}, {versions}, '
        f"by `{command.strip()}`. Ratios: throughput against timm's ConvNeXt of the same size (higher is better); "
        'each model timed back to back with that ConvNeXt in every round (each run after a pause and an untimed run '
        'of the same session), the ratio the median of those paired ratios and ratio_iqr their interquartile range, '
        'ms the median of the runs; rel_error: logits against PyTorch.',
        '',
        '| ' + ' | '.join(fields) + ' |',
        '| ' + ' | '.join('---' for _ in fields) + ' |',
    ]
    for row in rows:
        cells = [
            ('' if row[f] is None else f'{row[f]:.1e}') if f.endswith('rel_error') else str(row[f]) for f in fields
        ]
        lines.append('| ' + ' | '.join(cells) + ' |')
    return lines


if __name__ == '__main__':
    run()
