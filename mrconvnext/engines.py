"""``python -m mrconvnext.engines`` (or ``mrconvnext-engines``): what ``engine='auto'`` runs for each operator on
the CPU and on CUDA, and the state of every engine here (:func:`mrconvnext.ops.engines.report`).

``--build`` compiles the native CPU kernels ahead of time (into the shared cache; a no-op where they are built),
so that no forward pass waits for a compiler, and exits with status 1, saying why, if one cannot be built.
"""

from __future__ import annotations

import sys

from .ops import engines
from .tools.cli_args import engines_parser

__all__ = ['main']


def build_all() -> int:
    """Build (or find in the cache) every native extension; 0 if all are usable, else 1 with the reasons on
    stderr."""
    if engines.native_disabled():
        print('mrconvnext: native kernels disabled by MRCONVNEXT_DISABLE_NATIVE; nothing to build', file=sys.stderr)
        return 1
    failed = 0
    for ext in (engines.TALK_EXT, engines.FFTCONV_EXT):
        try:
            module = engines.build_native(ext)
        except Exception as exc:  # noqa: BLE001 - report every failure, then exit non-zero
            failed += 1
            print(f'mrconvnext: {ext} cannot be built: {type(exc).__name__}: {exc}', file=sys.stderr)
        else:
            print(f'{ext}: {module.__file__}')
    if failed:
        print('mrconvnext: the models still run, on the slower PyTorch engine for these operators', file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """Print :func:`~mrconvnext.ops.engines.report`, or with ``--build`` build the native kernels first."""
    args = engines_parser().parse_args(argv)
    status = build_all() if args.build else 0
    print(engines.report())
    return status


if __name__ == '__main__':
    sys.exit(main())
