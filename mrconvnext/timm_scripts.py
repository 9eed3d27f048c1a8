"""Run one of timm's own scripts with this package's models registered.

    python -m mrconvnext.timm_scripts path/to/validate.py --model mrconvnext_t --data-dir /data/imagenet ...
    python -m mrconvnext.timm_scripts path/to/benchmark.py --model mrconvnext_t --reparam ...
    torchrun --nproc_per_node 8 -m mrconvnext.timm_scripts path/to/train.py --model mrconvnext_t ...

timm's ``train.py`` can import the package itself (``--device-modules mrconvnext``); ``validate.py``,
``benchmark.py`` and ``inference.py`` have no such flag. This launcher imports ``mrconvnext`` (which
registers every model with timm), then runs the script exactly as ``python SCRIPT ARGS`` would:
``sys.argv`` becomes ``[SCRIPT, *ARGS]``, the script's directory goes first on ``sys.path`` and the
file runs as ``__main__`` (``runpy.run_path``). The scripts live in timm's GitHub repository, not in
the timm wheel: use a checkout of the timm version you have installed. Before running the script the
launcher also makes timm's RandAugment posterize accept 0 bits where Pillow rejects them (13.0 does)
(:mod:`mrconvnext.tools.compat`), so the ConvNeXt policy ``rand-m9-mstd0.5-inc1`` cannot crash a run.
"""

from __future__ import annotations

import os
import runpy
import sys

__all__ = ['main']

_USAGE = 'usage: python -m mrconvnext.timm_scripts SCRIPT.py [ARGS ...]'


def main(argv: list[str] | None = None) -> None:
    """Import :mod:`mrconvnext`, then run ``argv[0]`` as ``__main__`` with ``argv[1:]`` as its arguments."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ('-h', '--help'):
        print(__doc__.strip() if argv else _USAGE)
        raise SystemExit(0 if argv else 2)
    script, args = argv[0], argv[1:]
    if not os.path.isfile(script):
        raise SystemExit(f'mrconvnext.timm_scripts: no script at {script!r}\n{_USAGE}')

    import mrconvnext  # noqa: F401  (registers the models with timm)

    try:
        from mrconvnext.tools.compat import patch_timm_posterize
    except ImportError:  # an install without the tools package: run the script as it is
        pass
    else:
        patch_timm_posterize()  # RandAugment's 0-bit posterize crashes on recent Pillow (tools/compat.py)

    script = os.path.abspath(script)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(script))
    try:
        runpy.run_path(script, run_name='__main__')
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path


if __name__ == '__main__':
    main()
