"""Static checks of Triton kernels for a Hopper GPU (sm_90) on a machine without one.

:func:`compile_for_hopper` compiles kernels in a fresh process (without Triton's interpreter, which the test
session turns on) through Triton's whole pipeline to a cubin, and reads each one's resource usage with the
``cuobjdump`` Triton ships: registers, stack and local memory (a spill goes to local memory), shared memory, and the
local loads and stores (``LDL`` / ``STL``) in its SASS.
"""

from __future__ import annotations

import json
import os
import textwrap

from tests.limits import run_compiled_triton

# Per block on sm_90: 227 KB of shared memory (232448 bytes) at most.
HOPPER_SHARED_LIMIT = 232448

_DRIVER = textwrap.dedent(
    """
    import importlib, json, os, re, subprocess, sys, tempfile
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    bin_dir = os.path.join(os.path.dirname(triton.__file__), 'backends', 'nvidia', 'bin')
    target = GPUTarget('cuda', 90, 32)
    out = []
    for module, name, signature, constexprs, *options in json.loads(sys.argv[1]):
        fn = getattr(importlib.import_module(module), name)
        src = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
        kernel = triton.compile(src, target=target, options=options[0] if options else None)
        with tempfile.NamedTemporaryFile(suffix='.cubin', delete=False) as f:
            f.write(kernel.asm['cubin'])
        usage = subprocess.run([os.path.join(bin_dir, 'cuobjdump'), '-res-usage', f.name], capture_output=True,
                               text=True, check=True).stdout
        sass = subprocess.run([os.path.join(bin_dir, 'cuobjdump'), '-sass', f.name], capture_output=True, text=True,
                              check=True).stdout
        os.unlink(f.name)
        fields = dict(re.findall(r'(REG|STACK|SHARED|LOCAL):(\\d+)', usage.split('Function', 1)[1]))
        row = {k: int(v) for k, v in fields.items()}
        row.update(name=name, constexprs=constexprs, num_warps=kernel.metadata.num_warps,
                   local_ops=len(re.findall(r'\\b(?:LDL|STL)\\b', sass)), wgmma='HGMMA' in sass)
        out.append(row)
    print('REPORT', json.dumps(out))
    """
)


def compile_for_hopper(kernels: list[tuple]) -> list[dict]:
    """``kernels``: ``(module, function name, signature, constexprs[, options])``, options as the launch gives them
    (``num_warps``). Returns one dict per kernel: ``REG``,
    ``STACK``, ``LOCAL``, ``SHARED`` (bytes), ``local_ops`` (LDL/STL instructions), ``wgmma`` (HGMMA in the SASS),
    ``num_warps``, with its name and constexprs."""
    # Triton 3.9 warns when TRITON_DEFAULT_FP_FUSION is unset; 1 is its (and 3.6's) default
    fusion = {'TRITON_DEFAULT_FP_FUSION': os.environ.get('TRITON_DEFAULT_FP_FUSION', '1')}
    proc = run_compiled_triton('-c', _DRIVER, json.dumps(kernels), env=fusion)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith('REPORT '))
    return json.loads(line[len('REPORT ') :])


def assert_fits_hopper(report: list[dict]) -> None:
    """No spills (no stack or local memory, no LDL/STL), shared memory within a block's limit."""
    bad = [
        r for r in report if r['STACK'] or r['LOCAL'] or r['local_ops'] or not 0 <= r['SHARED'] <= HOPPER_SHARED_LIMIT
    ]
    assert not bad, bad
