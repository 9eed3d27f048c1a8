"""Model-level MAC counts (mrconvnext.tools.flops): the mixers of every family are counted, and a deployed
MRConvNeXt's FFT work equals a hand count over its layers."""

import math

import pytest
import timm
import torch
from timm.utils import reparameterize_model
from torch.utils.flop_counter import FlopCounterMode

from mrconvnext.layers import MRConv2d
from mrconvnext.models import set_engine
from mrconvnext.tools import flops


def smooth7(n: int) -> int:
    """Smallest 2^a 3^b 5^c 7^d >= n."""
    while True:
        r = n
        for p in (2, 3, 5, 7):
            while r % p == 0:
                r //= p
        if r == 1:
            return n
        n += 1


def rfft(n: int) -> float:
    return 2.5 * n * math.log2(n)


def test_deployed_mrconvnext_fft_work_is_the_sum_of_its_layers():
    """Each deployed mixer on a (1, C, H*W) map with a (C, K) kernel: the taps that reach an output, the 7-smooth FFT
    size without wrap-around, C input + C kernel + C inverse transforms, C products and the bias add."""
    model = reparameterize_model(timm.create_model('mrconvnext_atto', img_size=32).eval())
    assert set_engine(model, method='fft') > 0
    sizes = {}
    hooks = [
        m.register_forward_pre_hook(lambda mod, args: sizes.__setitem__(mod, args[0].shape[-2:]))
        for m in model.modules()
        if isinstance(m, MRConv2d)
    ]
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.randn(1, 3, 32, 32))
    for h in hooks:
        h.remove()
    expected = 0
    for layer, (H, W) in sizes.items():
        C, K = layer.kernel.shape
        L, z = H * W, layer.zero_lag
        reach_past, reach_future = min(K - 1 - z, L - 1), min(z, L - 1)
        n = smooth7(L + max(reach_past, reach_future))
        expected += round(3 * C * rfft(n) + 6 * (n // 2 + 1) * C + C * L)
    assert (
        len(sizes) == sum(len(s.blocks) for s in model.stages)
        and counter.get_flop_counts()['Global'][torch.ops.mrconvnext.fft_conv] == expected
    )


@pytest.mark.parametrize(
    'name, mixer_op',
    [
        ('mrconvnext_atto', 'mrconvnext.fft_conv'),
        ('talkconvnext_atto', 'mrconvnext.talk1d'),
        ('talkconvnext2d_atto', 'mrconvnext.talk2d'),
        ('dynconvnext_atto', 'mrconvnext.dynamic_conv'),
    ],
)
def test_every_family_counts_its_mixers(name, mixer_op):
    model = timm.create_model(name, img_size=32)
    count = flops.count_macs(model, 32)
    assert model.training  # mode restored
    assert count.by_op[mixer_op] > 0 and count.mixers >= count.by_op[mixer_op]
    assert count.total == pytest.approx(sum(count.by_op.values())) and count.total > count.mixers
    assert count.params_m == pytest.approx(sum(p.numel() for p in model.parameters()) / 1e6)


def test_the_flops_command_prints_a_table(capsys, tmp_path):
    out = tmp_path / 'flops.csv'
    rows = flops.run(['--models', 'convnext_atto', 'mrconvnext_atto:reparam', '--img-size', '32', '--results-file',
                      str(out)])  # fmt: skip
    base, deployed = rows
    assert base['mixer_gmacs'] == 0 and deployed['mixer_gmacs'] > 0
    printed = capsys.readouterr().out
    assert '| mrconvnext_atto:reparam |' in printed and out.exists()
