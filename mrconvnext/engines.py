"""``python -m mrconvnext.engines`` (or ``mrconvnext-engines``): what ``engine='auto'`` runs for each operator on
the CPU and on CUDA, and the state of every engine here (:func:`mrconvnext.ops.engines.report`)."""

from __future__ import annotations

from .ops.engines import report

__all__ = ['main']


def main() -> None:
    """Print :func:`~mrconvnext.ops.engines.report`."""
    print(report())


if __name__ == '__main__':
    main()
