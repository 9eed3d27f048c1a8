"""Limits of the tests' subprocesses: against hangs only, never a speed check (a loaded machine may take many times
what a quiet one does; the slowest of these needs about 80 s alone on two cores); and the fresh process that runs
Triton compiled rather than interpreted."""

from __future__ import annotations

import os
import subprocess
import sys

HANG_LIMIT_S = 3600


def run_compiled_triton(
    *args: str, env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None
) -> subprocess.CompletedProcess:
    """``python *args`` in a fresh process without ``TRITON_INTERPRET`` (this suite sets it, and Triton reads it once
    at import): the kernels compile, so fake tensors, sm_90 builds and the missing-interpreter errors work there."""
    base = {k: v for k, v in os.environ.items() if k != 'TRITON_INTERPRET'}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env={**base, **(env or {})}, cwd=cwd,
        timeout=HANG_LIMIT_S,
    )  # fmt: skip
