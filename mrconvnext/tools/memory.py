"""The one CPU peak-memory harness of the tools and benchmark scripts: growth of the process's peak RSS."""

from __future__ import annotations

import sys
from collections.abc import Callable

__all__ = ['rss_peak_reader', 'peak_extra_mb']


def rss_peak_reader() -> Callable[[], float]:
    """A function giving the growth (MiB) of this process's peak resident set size from now on.

    Linux: the peak (``VmHWM``) is reset to the current RSS through ``/proc/self/clear_refs`` first, so
    earlier peaks (imports) do not hide the model's. Elsewhere: ``ru_maxrss`` from now on (a lower
    bound when an earlier peak was higher).
    """
    import re

    def status(key: str) -> float:
        with open('/proc/self/status') as f:
            return int(re.search(key + r':\s+(\d+)', f.read()).group(1)) / 1024.0

    try:
        with open('/proc/self/clear_refs', 'w') as f:
            f.write('5')
        base = status('VmRSS')
        return lambda: status('VmHWM') - base
    except (OSError, AttributeError):
        import resource

        scale = 1.0 / (1024.0 * 1024.0) if sys.platform == 'darwin' else 1.0 / 1024.0
        peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale  # noqa: E731
        base = peak()
        return lambda: peak() - base


def peak_extra_mb(call: Callable[[], object]) -> float:
    """Peak resident memory (MiB) that one ``call()`` adds on top of the current RSS (outputs, saved tensors,
    gradients, temporaries; not what existed before)."""
    read = rss_peak_reader()
    call()
    return read()
