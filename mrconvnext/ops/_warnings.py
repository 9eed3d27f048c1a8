"""One-time warnings for fallbacks (an unusable backend is reported once per process, never silently)."""

from __future__ import annotations

import warnings

_warned: set[str] = set()


def warn_once(key: str, message: str, category: type[Warning] = RuntimeWarning) -> None:
    """``warnings.warn(message)`` the first time ``key`` is seen in this process."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, category, stacklevel=3)
