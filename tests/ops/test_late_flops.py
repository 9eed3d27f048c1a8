"""An operator defined and given its FLOP formula while a FlopCounterMode is active (the Triton operators are
defined on first use) is counted by that counter, from that call on."""

import torch
from torch.utils.flop_counter import FlopCounterMode, register_flop_formula

from mrconvnext.ops.late_flops import share_with_active_counters


def test_an_operator_defined_under_an_active_counter_is_counted():
    x = torch.randn(3, 4)
    with FlopCounterMode(display=False) as counter:

        @torch.library.custom_op('mrconvnext_test::late_scale', mutates_args=())
        def late_scale(t: torch.Tensor) -> torch.Tensor:
            return t * 2

        op = torch.ops.mrconvnext_test.late_scale

        @register_flop_formula(op)
        def _(t_shape, *args, out_shape=None, **kwargs) -> int:
            return 7 * t_shape[0] * t_shape[1]

        share_with_active_counters([op])
        late_scale(x)
    assert counter.get_flop_counts()['Global'] == {op: 7 * 12}
