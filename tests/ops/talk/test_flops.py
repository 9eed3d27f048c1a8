"""FlopCounterMode counts the TaLK operators: hand counts of one small layer, forward and backward, the same for
every engine (the formulas count the algorithm of kernels/talk/talk_math.h, see ops/talk/flops.py)."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from mrconvnext.ops import availability, talk1d, talk2d

ENGINES = ['torch'] + (['native'] if availability.native_available(availability.TALK_EXT) else [])


def counted(fn) -> dict[str, int]:
    with FlopCounterMode(display=False) as counter:
        fn()
    return {str(op): v for op, v in counter.get_flop_counts()['Global'].items()}


def op_name(engine: str, dims: int) -> str:
    return f'mrconvnext.talk{dims}d' + ('_torch' if engine == 'torch' else '')


@pytest.mark.parametrize('engine', ENGINES)
def test_talk1d_counts(engine):
    # x (B=2, C=4, L=9), 2 heads: 72 elements, 36 head positions.
    # forward: prefix table 1 + two interpolated reads 2 * 2 + difference 1 + normalization 1 per element,
    # boundaries i -/+ o * m (2 mul + 2 add) per head position.
    x = torch.randn(2, 4, 9, requires_grad=True)
    offsets = torch.rand(2, 2, 9, 2, requires_grad=True)
    fwd = counted(lambda: talk1d(x, offsets, 3, 2, engine=engine))
    assert fwd == {op_name(engine, 1): 72 * (1 + 4 + 1 + 1) + 36 * 4}
    y = talk1d(x, offsets, 3, 2, engine=engine)
    bwd = counted(lambda: y.backward(torch.ones_like(y)))
    # dx: the forward's count; d offsets: two slopes times the gradient, accumulated (4 per element), boundaries
    # and the m * inv_norm factors (8 per head position)
    assert bwd[op_name(engine, 1) + '_backward'] == (72 * 7 + 36 * 4) + (72 * 4 + 36 * 8)


@pytest.mark.parametrize('engine', ENGINES)
def test_talk2d_counts(engine):
    # x (B=1, C=4, 5x6) = 120 elements, 2 heads: 60 head pixels. forward: integral image 2, four bilinear reads of
    # 9 flops each (two row lerps of 3, one column lerp of 3), box sum 3, normalization 1 per element; four
    # boundaries (8) and four weights 1 - f (4) per head pixel.
    x = torch.randn(1, 4, 5, 6, requires_grad=True)
    offsets = torch.rand(1, 2, 5, 6, 4, requires_grad=True)
    fwd = counted(lambda: talk2d(x, offsets, 2, 2, 1, 1, engine=engine))
    assert fwd == {op_name(engine, 2): 120 * (2 + 4 * 9 + 3 + 1) + 60 * (8 + 4)}
    y = talk2d(x, offsets, 2, 2, 1, 1, engine=engine)
    bwd = counted(lambda: y.backward(torch.ones_like(y)))
    # d offsets: eight bilinear derivatives (2 differences + a lerp of 3 = 5 each), four differences, four products
    # with the gradient, four accumulations per element; boundaries and factors (16) per head pixel
    assert bwd[op_name(engine, 2) + '_backward'] == (120 * 42 + 60 * 12) + (120 * (8 * 5 + 4 + 4 + 4) + 60 * 16)


def test_the_triton_operators_count_alike():
    pytest.importorskip('triton')
    from torch.utils.flop_counter import flop_registry

    from mrconvnext.ops.talk import engine_triton  # noqa: F401 - defines and registers the Triton operators

    for name in ('talk1d', 'talk1d_backward', 'talk2d', 'talk2d_backward'):
        stem, _, rest = name.partition('_')
        triton_op = getattr(torch.ops.mrconvnext, stem + '_triton' + (f'_{rest}' if rest else ''))
        assert triton_op in flop_registry, triton_op
    shapes = ((2, 4, 9), (2, 2, 9, 2), 3, 2)
    formula = flop_registry[torch.ops.mrconvnext.talk1d_triton]
    assert formula(*(torch.empty(s) for s in shapes[:2]), *shapes[2:]) == 72 * 7 + 36 * 4
