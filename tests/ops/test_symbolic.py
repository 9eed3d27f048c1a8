"""ops/symbolic.py: the size helpers on plain ints (the eager path), on traced sizes (0-dim tensors) and on symbolic
sizes under torch.compile (no guard, no recompile)."""

from __future__ import annotations

import random

import torch

from mrconvnext.ops.symbolic import known_true, static_size, sym_max, sym_min


def test_plain_ints_and_traced_sizes_give_python_s_min_and_max():
    rng = random.Random(0)
    for _ in range(50):
        a, b = rng.randint(-9, 9), rng.randint(-9, 9)
        assert (sym_min(a, b), sym_max(a, b)) == (min(a, b), max(a, b))
        ta, tb = torch.tensor(a), torch.tensor(b)  # what torch.jit.trace gives for sizes
        assert (sym_min(ta, b), sym_max(a, tb)) == (min(a, b), max(a, b))
        assert type(sym_min(ta, tb)) is int and static_size(ta) == a and type(static_size(ta)) is int
    assert static_size(7) == 7 and known_true(True) is True and known_true(False) is False
    assert known_true(torch.tensor(3) > 2) is True and known_true(torch.tensor(3) < 2) is False


def test_symbolic_sizes_stay_symbolic_without_a_recompile():
    counts = []

    def backend(gm, example_inputs):
        counts.append(1)
        return gm

    @torch.compile(backend=backend, fullgraph=True)
    def f(x):
        n = x.shape[-1]
        y = x * sym_min(n, 7) + sym_max(0, n - 5)
        return y + known_true(n >= 0)  # a size is never negative: known for every size, without a guard

    for n in (9, 12, 4):
        x = torch.randn(2, n)
        torch._dynamo.mark_dynamic(x, 1)  # symbolic from the first call
        assert torch.equal(f(x), x * min(n, 7) + max(0, n - 5) + 1)
    assert len(counts) == 1
