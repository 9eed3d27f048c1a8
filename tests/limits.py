"""Limits of the tests' subprocesses: against hangs only, never a speed check (a loaded machine may take many times
what a quiet one does; the slowest of these needs about 80 s alone on two cores)."""

HANG_LIMIT_S = 3600
