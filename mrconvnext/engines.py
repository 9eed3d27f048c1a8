"""``python -m mrconvnext.engines`` (or ``mrconvnext-engines``): what ``engine='auto'`` runs for each operator on
the CPU and on CUDA, and the state of every engine here (:func:`report`).

``--build`` compiles the native CPU kernels ahead of time (into the shared cache; a no-op where they are built),
so that no forward pass waits for a compiler, and exits with status 1, saying why, if one cannot be built.
"""

from __future__ import annotations

import concurrent.futures
import sys
import warnings

import torch

from .ops import availability, engines
from .tools.cli_args import engines_parser

__all__ = ['main', 'report', 'build_all']


def report() -> str:
    """What ``'auto'`` runs for each operator on the CPU and on CUDA, and the state of each engine."""
    lines = [
        'mrconvnext engines: what engine="auto" runs',
        '',
        f'{"operator (batch 128)":<34} {"device":<6} {"dtype":<9} {"method":<8} engine',
    ]
    # (op, sequence length, taps): long convolutions at ConvNeXt-T's stage-1 and stage-3 lengths, and a short kernel
    rows = [('long_conv1d', 3136, 3136), ('long_conv1d', 196, 196), ('long_conv1d', 3136, 7)]
    rows += [('branch_conv_bn_sum', 3136, 3136), ('talk1d', 1, 1), ('talk2d', 1, 1), ('dynamic_conv1d', 1, 1)]
    rows += [('light_conv1d', 1, 1)]
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        for op, length, taps in rows:
            for device in ('cpu', 'cuda'):
                for dtype in (torch.float32, torch.bfloat16):
                    try:
                        method, engine = engines.resolve(op, device, dtype, length=length, taps=taps, batch=128)
                    except RuntimeError as exc:
                        method, engine = '-', f'unavailable ({exc})'
                    name = f'{op}' + (f' (L={length}, {taps} taps)' if op == 'long_conv1d' else '')
                    lines.append(f'{name:<34} {device:<6} {str(dtype)[6:]:<9} {method:<8} {engine}')
    lines += ['', 'native CPU kernels (built on first use, or by `python -m mrconvnext.engines --build`)']
    for ext in (availability.TALK_EXT, availability.FFTCONV_EXT):
        lines.append(f'  {ext}: {availability.native_state(ext)}')
    lines.append(f'  sources: {availability.native_sources_dir()}')
    lines.append(f'  cache:   {availability.build_root()}')
    triton = availability.triton_unavailable('cuda')
    lines += [
        '',
        f'Triton: {"importable" if triton is None else triton}; CUDA device: {torch.cuda.is_available()}; '
        f'CPU tensors: {availability.triton_unavailable("cpu") or "interpreter on"}',
        f'flashfftconv: {"installed" if availability.flashfft_module() is not None else "not installed"}',
    ]
    return '\n'.join(lines)


def build_all() -> int:
    """Build (or find in the cache) every native extension, compiling them in parallel; 0 if all are usable, else 1
    with the reasons on stderr."""
    if availability.native_disabled():
        print('mrconvnext: native kernels disabled by MRCONVNEXT_DISABLE_NATIVE; nothing to build', file=sys.stderr)
        return 1
    exts = (availability.TALK_EXT, availability.FFTCONV_EXT)
    # one thread per extension: the compilers run at once (each build's file lock keeps it apart from any other
    # process or thread building the same)
    with concurrent.futures.ThreadPoolExecutor(len(exts)) as pool:
        futures = {ext: pool.submit(availability.build_native, ext) for ext in exts}
    failed = 0
    for ext, future in futures.items():
        exc = future.exception()
        if exc is not None:
            failed += 1
            print(f'mrconvnext: {ext} cannot be built: {type(exc).__name__}: {exc}', file=sys.stderr)
        else:
            print(f'{ext}: {future.result().__file__}')
    if failed:
        print('mrconvnext: the models still run, on the slower PyTorch engine for these operators', file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Print :func:`report`, or with ``--build`` build the native kernels first."""
    args = engines_parser().parse_args(argv)
    status = build_all() if args.build else 0
    print(report())
    return status


if __name__ == '__main__':
    sys.exit(main())
