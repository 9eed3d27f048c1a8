"""MRConv: reparameterizable multi-resolution long convolution (Cunningham et al., NeurIPS 2024).

Shapes: :class:`MRConv1d` maps ``(B, C, L) -> (B, C, L)``; :class:`MRConv2d` maps
``(B, C, H, W) -> (B, C, H, W)`` by flattening row-major to ``L = H * W`` and back.

Resolutions
    Branch ``i`` has reach ``l_i = min(l0 * 2**i, seq_len)`` (see :mod:`.kernel_params` for what a
    reach covers). Branches are added until one reaches the whole nominal sequence or
    ``max_branches`` is hit, i.e. ``N = min(max_branches, ceil(log2(seq_len / l0)) + 1)``, so the
    last branch is global whenever the budget allows (the paper's ``N = log2(L / l0) + 1`` with the
    ceiling taken for lengths that are not ``l0`` times a power of two). Dilated branches use
    ``num_taps`` (default ``l0``) taps per side spaced by ``2**i``; taps past the common reach are left
    out when their lags are beyond the nominal length (they could reach no output), and a ``num_taps``
    whose taps would be cut inside it is a ValueError.

Branch combination
    ``'bn'``: one BatchNorm per branch (stored as a single ``BatchNorm1d(N * C)`` whose channel
    ``i * C + c`` is branch ``i``'s channel ``c``; per-channel statistics make this identical to
    ``N`` separate BatchNorms), then the learned ``alpha (N, C)`` weighted sum (Eq. 10-12); alpha
    starts at ``1 / N``. ``'scale'``: ``beta (N, C)`` linear rescaling (Eq. 9) plus a per-channel
    bias, merged into one kernel at every forward, so training costs one convolution. Training with
    ``'bn'`` on CPU float32/float64 runs convolution, BatchNorms and weighted sum as one fused op
    (:func:`~mrconvnext.ops.branch_conv_bn_sum`, the same statistics, running-stat updates and gradients);
    other devices, dtypes and norm modules use ``F.batch_norm`` with alpha folded into its affine.

Sequences of other lengths than ``seq_len``
    Kernels are built for the nominal ``seq_len``. For :class:`MRConv1d` a shorter input simply ignores
    the lags it cannot reach; a longer input is convolved with the same kernels, which are then no longer
    global. Nothing is resampled. :class:`MRConv2d` keeps the kernel's 2-D meaning at other image widths
    (see its docstring).

Inference
    :meth:`MRConv1d.reparameterize` folds the BatchNorms (running statistics) and alpha (or beta)
    into one ``kernel (C, P)`` and ``bias (C,)`` and deletes the branches; it is idempotent.
    ``deploy=True`` builds that form directly; a branched layer that receives a deployed state dict
    converts itself before loading, and a deployed layer that receives a branched one builds, loads and
    folds the branches. Nothing derived from the kernel is kept between calls: every forward uses the
    kernel's current values (a cache of the adapted kernel and its spectrum saved next to nothing on the CPU:
    ``docs/resolution/bench_cache.txt``, from a script since removed).
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import register_notrace_module

from ..ops import engines
from ..ops.checks import check_choice, check_int, check_size2
from ..ops.long_conv import conv2d_lags, conv2d_padding, long_conv1d, remap_lags
from ..ops.long_conv import dispatch as long_conv_dispatch
from ..ops.symbolic import known_true, static_size
from . import branch_norm
from .checks import check_mixer_input
from .kernel_bank import stack_branch_kernels
from .kernel_params import (
    KERNEL_PARAM_NAMES,
    BranchKernel,
    DenseKernel,
    DilatedKernel,
    FourierKernel,
    FourierSparseKernel,
    SparseKernel,
)
from .torchscript import ScriptedInPython, python_forward

__all__ = [
    'MRConv1d',
    'MRConv2d',
    'KERNEL_TYPES',
    'COMBINE_MODES',
    'LAG_REMAP_RULES',
    'SPARSE_TAPS',
    'default_num_taps',
    'num_branches',
    'read_grid',
]

KERNEL_TYPES = ('dilated', 'fourier', 'sparse', 'fourier_sparse', 'dense')
COMBINE_MODES = ('bn', 'scale')
_SIZES = ('dim', 'seq_len', 'max_branches')
LAG_REMAP_RULES = ('split', 'conv2d', 'none')

# ``geometry`` of an input (the forward's argument): ``None`` for the nominal layout (the kernel as it is), else
# ``(rule, new_width, padded_width)`` of the lag op that adapts the kernel (:meth:`MRConv2d._adapt`).


def num_branches(seq_len: int, l0: int, max_branches: int) -> int:
    """Resolutions needed for ``l0 * 2**(N-1) >= seq_len``, capped at ``max_branches``."""
    n = 1
    while n < max_branches and l0 * 2 ** (n - 1) < seq_len:
        n += 1
    return n


# Taps per branch of the sparse kernel types when none are given: the zoo models' (MRConvNeXt) architecture.
SPARSE_TAPS = 80


def default_num_taps(kernel_type: str, kernel_size: int) -> int:
    """The one default of ``num_taps``: ``kernel_size`` taps per side for ``dilated`` (a dilated branch then spans
    its resolution), :data:`SPARSE_TAPS` for the others (``sparse``, ``fourier_sparse``; unused by the rest)."""
    return kernel_size if kernel_type == 'dilated' else SPARSE_TAPS


def resolve_lag_remap(rule: str | bool) -> str:
    """A :data:`LAG_REMAP_RULES` name for ``lag_remap``; ``True`` / ``False`` mean ``'split'`` / ``'none'``."""
    if isinstance(rule, bool):
        return 'split' if rule else 'none'
    if rule not in LAG_REMAP_RULES:
        raise ValueError(f'lag_remap must be one of {LAG_REMAP_RULES} (or a bool), got {rule!r}')
    return rule


def read_grid(value: object, owner: str) -> tuple[int, int]:
    """A recorded ``nominal_size`` as ``(H, W)``; a ``ValueError`` naming ``owner`` unless it holds two positive
    integers (checked before anything is built for it)."""
    ok = isinstance(value, torch.Tensor) and value.shape == (2,) and not value.is_floating_point()
    if ok and not value.is_complex():
        H, W = (int(v) for v in value.tolist())
        if H >= 1 and W >= 1:
            return H, W
    got = value.tolist() if isinstance(value, torch.Tensor) and value.numel() <= 8 else value
    raise ValueError(f'{owner}: nominal_size must be a grid of two positive ints (H, W), got {got!r:.80}')


def _fold_loaded_branches(module: nn.Module, incompatible_keys) -> None:
    """Load post hook of :class:`MRConv1d`: a deployed layer that received a branched state dict folds it."""
    if module.__dict__.pop('_fold_after_load', False):
        module.reparameterize()


@register_notrace_module  # an FX leaf: the operators inside are not traceable
class MRConv1d(ScriptedInPython):
    """Multi-resolution depthwise long convolution over ``(B, C, L)``.

    Args:
        dim: channels ``C``.
        seq_len: nominal sequence length ``L`` (sets the number of branches and the longest reach).
        kernel_size: reach ``l0`` of the first branch; default ``ceil(seq_len / 2**(max_branches-1))``.
        max_branches: at most this many resolutions (the paper uses <= 5).
        kernel_type: one of :data:`KERNEL_TYPES`.
        combine: ``'bn'`` or ``'scale'``.
        causal: causal instead of bidirectional (the default for images).
        num_modes: Fourier modes per branch (``fourier`` / ``fourier_sparse``).
        num_taps: taps per branch for ``sparse`` / ``fourier_sparse``; for ``dilated`` the taps per
            side; default :func:`default_num_taps`.
        seed: seed of the sparse tap positions; ``None`` draws one from torch's global RNG.
        deploy: build the reparameterized single-kernel form.
        groups: reduced-dimension convolutions (paper App. B.2): the ``C`` channels are ``groups`` groups of
            ``M = C / groups`` and every group shares one set of ``M`` filters, channel ``g M + m`` taking filter ``m``
            (``M`` filters per branch instead of ``C``; the BatchNorms, ``alpha`` / ``beta`` and the bias stay per
            channel). The deployed kernel is expanded to the ``C`` channels: the folded BatchNorm scales differ per
            channel, so the merged kernels do too (reparameterization stays exact); one merged convolution took
            1/1.8-1/8.2 of the time of keeping the filters grouped (``scripts/bench_mrconv.py --shared``, CPU). In
            training the filters stay shared through the convolutions. Default 1: a filter per channel.
        heads: multi-head convolutions (paper App. B.1): ``H`` copies of the input, each convolved with its own
            filters, so ``H C`` independent depthwise filters per branch and an output of ``out_dim = H C`` channels,
            head-major (channel ``h C + c`` is channel ``c`` of the input through head ``h``'s filter), like the heads
            of attention concatenated; whatever follows mixes them (in :class:`~mrconvnext.models.MRConvNeXt` the
            block's first pointwise layer). Each output channel has its own BatchNorm, ``alpha`` / ``beta`` and bias,
            and the deployed kernel is ``(H C, P)``. The copies are made by ``repeat`` before the convolution (an
            extra ``H``-fold input, which every engine then convolves as ``H C`` channels). With ``groups``, each head
            shares its ``C / groups`` filters across the groups: channel ``h C + g M + m`` takes head ``h``'s filter
            ``m``. Default 1.
        method: ``'auto'``, ``'fft'`` or ``'direct'``, passed to :func:`~mrconvnext.ops.long_conv1d`.
        engine: ``'auto'``, ``'native'``, ``'torch'`` or ``'flashfft'``, passed to it too
            (:mod:`mrconvnext.ops.long_conv.dispatch`).
        backend: deprecated spelling of ``method`` (``'fft'`` / ``'direct'``) or ``engine`` (``'flashfft'``).
    """

    def __init__(
        self,
        dim: int,
        seq_len: int,
        kernel_size: int | None = None,
        max_branches: int = 5,
        kernel_type: str = 'fourier_sparse',
        combine: str = 'bn',
        causal: bool = False,
        num_modes: int = 32,
        num_taps: int | None = None,
        seed: int | None = None,
        deploy: bool = False,
        groups: int = 1,
        heads: int = 1,
        method: str = 'auto',
        engine: str = 'auto',
        backend: str | None = None,
        bn_momentum: float = 0.1,
        bn_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        if kernel_type not in KERNEL_TYPES:
            raise ValueError(f'kernel_type must be one of {KERNEL_TYPES}, got {kernel_type!r}')
        if combine not in COMBINE_MODES:
            raise ValueError(f'combine must be one of {COMBINE_MODES}, got {combine!r}')
        cls = type(self).__name__
        if backend is not None:
            method, engine = engines.from_backend(cls, 'long_conv', backend, method, engine)
        self.method = check_choice(cls, 'method', method, long_conv_dispatch.LONG_CONV_METHODS)
        self.engine = check_choice(cls, 'engine', engine, long_conv_dispatch.LONG_CONV_ENGINES)
        dim, seq_len, max_branches = (check_int(cls, n, v) for n, v in zip(_SIZES, (dim, seq_len, max_branches)))
        if kernel_size is None:
            kernel_size = math.ceil(seq_len / 2 ** (max_branches - 1))
        kernel_size = check_int(cls, 'kernel_size', kernel_size)
        groups = check_int(cls, 'groups', groups)
        if dim % groups:
            raise ValueError(f'{cls}: groups ({groups}) must divide dim ({dim})')
        self.dim = dim
        self.groups = groups
        self.heads = check_int(cls, 'heads', heads)
        self.out_dim = self.heads * dim
        self.seq_len = seq_len
        self.kernel_size = kernel_size
        self.kernel_type = kernel_type
        self.combine = combine
        self.causal = causal
        self.num_branches = num_branches(seq_len, kernel_size, max_branches)
        # common layout of all branches: reach capped at the nominal length
        self.reach = min(kernel_size * 2 ** (self.num_branches - 1), seq_len)
        self.zero_lag = 0 if causal else self.reach - 1
        self.deployed = False
        taps = num_taps if num_taps is not None else default_num_taps(kernel_type, kernel_size)
        self._branch_options = dict(taps=taps, modes=num_modes, bn_eps=bn_eps, bn_momentum=bn_momentum)
        self.register_load_state_dict_post_hook(_fold_loaded_branches)
        if deploy:
            self._make_deployed()
        else:
            self._make_branched(seed)

    def set_engine(self, method: str | None = None, engine: str | None = None) -> None:
        """Choose the algorithm (``method``) and / or the implementation (``engine``) of this layer's convolutions,
        as the constructor's keywords do (None: keep). ``method='matmul'``: the matrix-product method for the
        layer's length (:func:`~mrconvnext.ops.long_conv.dispatch.matmul_method`)."""
        cls = type(self).__name__
        if method is not None:
            if method == 'matmul':
                method = long_conv_dispatch.matmul_method(self.seq_len)
            self.method = check_choice(cls, 'method', method, long_conv_dispatch.LONG_CONV_METHODS)
        if engine is not None:
            self.engine = check_choice(cls, 'engine', engine, long_conv_dispatch.LONG_CONV_ENGINES)

    def _make_branched(self, seed: int | None) -> None:
        """Build the training branches and their combination parameters (replacing a deployed kernel and bias, on
        their device and dtype). ``seed`` draws the sparse tap positions (``None``: from torch's global RNG)."""
        ref = next(self.parameters(), None)
        dd = {'device': ref.device, 'dtype': ref.dtype} if ref is not None else {}
        for name in ('kernel', 'bias'):
            if hasattr(self, name):
                delattr(self, name)
        if seed is None:
            seed = int(torch.randint(0, 2**62, (1,), device='cpu').item())
        generator = torch.Generator(device='cpu').manual_seed(seed)
        opt = self._branch_options
        self.branches = nn.ModuleList(
            [self._make_branch(i, opt['taps'], opt['modes'], generator) for i in range(self.num_branches)]
        ).to(**dd)
        N, dim = self.num_branches, self.out_dim
        if self.combine == 'bn':
            self.bn = nn.BatchNorm1d(N * dim, eps=opt['bn_eps'], momentum=opt['bn_momentum'], **dd)
            self.alpha = nn.Parameter(torch.full((N, dim), 1.0 / N, **dd))
        else:
            self.beta = nn.Parameter(torch.full((N, dim), 1.0 / N, **dd))
            self.bias = nn.Parameter(torch.zeros(dim, **dd))
        self.deployed = False

    def _make_branch(self, i: int, taps: int, modes: int, generator: torch.Generator) -> BranchKernel:
        reach = min(self.kernel_size * 2**i, self.seq_len)
        kt, dim, causal = self.kernel_type, self.out_dim // self.groups, self.causal  # filters per branch
        if kt == 'dilated':
            # taps past the common reach are never used: cap them (no parameter without a gradient) when they
            # lie beyond the nominal length anyway, refuse when they would have reached an output
            d = 2**i
            fit = min(taps, (self.reach - 1) // d + 1)
            if fit < taps and fit * d < self.seq_len:
                raise ValueError(
                    f'dilated branch {i} (dilation {d}) needs a reach of {(taps - 1) * d + 1} for num_taps={taps}, '
                    f'but the layer reaches {self.reach} (kernel_size={self.kernel_size}, {self.num_branches} '
                    f'branches): use num_taps <= {fit} or a larger kernel_size'
                )
            return DilatedKernel(dim, fit, d, causal)
        if kt == 'fourier':
            return FourierKernel(dim, reach, modes, causal)
        if kt == 'sparse':
            return SparseKernel(dim, reach, taps, causal, generator)
        if kt == 'fourier_sparse':
            return FourierSparseKernel(dim, reach, modes, taps, causal, generator)
        return DenseKernel(dim, reach, causal)

    def _make_deployed(self) -> None:
        """Replace the training branches (if any) by an all-zero ``kernel`` and ``bias`` on their device/dtype."""
        ref = next(self.parameters(), None)
        dd = {'device': ref.device, 'dtype': ref.dtype} if ref is not None else {}
        for name in ('branches', 'bn', 'alpha', 'beta', 'bias'):
            if hasattr(self, name):
                delattr(self, name)
        size = self.reach if self.causal else 2 * self.reach - 1
        self.kernel = nn.Parameter(torch.zeros(self.out_dim, size, **dd))
        self.bias = nn.Parameter(torch.zeros(self.out_dim, **dd))
        self.deployed = True

    # --- kernels -------------------------------------------------------------------------------

    def branch_kernels(self) -> torch.Tensor:
        """The branch kernels in the common layout (Eq. 7), ``(N, H C, P)`` with lag 0 at ``self.zero_lag``,
        synthesized for all branches together (:func:`~.kernel_bank.stack_branch_kernels`)."""
        return self._per_channel(stack_branch_kernels(list(self.branches), self.reach, self.causal))

    def _per_channel(self, filters: torch.Tensor) -> torch.Tensor:
        """Branch filters ``(N, H M, P)`` (``M = C / groups``) expanded to the output channels, ``(N, H C, P)``:
        channel ``h C + g M + m`` takes head ``h``'s filter ``m``."""
        if filters.shape[1] == self.out_dim:
            return filters
        N, _, P = filters.shape
        return filters.view(N, self.heads, -1, P).repeat(1, 1, self.groups, 1).view(N, self.out_dim, P)

    def merged_kernel(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The single ``(C, P)`` kernel and ``(C,)`` bias equal to the layer in eval mode."""
        if self.deployed:
            return self.kernel, self.bias
        k = self.branch_kernels()
        if self.combine == 'scale':
            return (self.beta.unsqueeze(-1) * k).sum(0), self.bias
        # Eq. 13 with the BatchNorms folded (paper Eq. 18), in float64 so the fold adds no error.
        N, C = self.num_branches, self.out_dim
        bn = self.bn
        inv_std = (bn.running_var.double() + bn.eps).rsqrt().view(N, C)
        gamma = bn.weight.double().view(N, C) if bn.affine else torch.ones_like(inv_std)
        shift = bn.bias.double().view(N, C) if bn.affine else torch.zeros_like(inv_std)
        scale = self.alpha.double() * gamma * inv_std
        kernel = (scale.unsqueeze(-1) * k.double()).sum(0)
        bias = (self.alpha.double() * (shift - gamma * inv_std * bn.running_mean.double().view(N, C))).sum(0)
        return kernel.to(k.dtype), bias.to(k.dtype)

    @torch.no_grad()
    def reparameterize(self) -> None:
        """Fold all branches into one kernel and bias (idempotent); the layer then runs one convolution."""
        if self.deployed:
            return
        kernel, bias = self.merged_kernel()
        self._make_deployed()
        self.kernel.copy_(kernel)
        self.bias.copy_(bias)

    def kernel_parameter_names(self) -> list[str]:
        """Names (relative to this module) of the long-kernel parameters (own lr, no weight decay)."""
        return [
            n
            for n, _ in self.named_parameters()
            if n == 'kernel' or (n.startswith('branches.') and n.rsplit('.', 1)[-1] in KERNEL_PARAM_NAMES)
        ]

    def no_weight_decay_names(self) -> list[str]:
        """Kernel parameters plus the branch weights alpha / beta."""
        return self.kernel_parameter_names() + [n for n in ('alpha', 'beta') if hasattr(self, n)]

    # --- forward -------------------------------------------------------------------------------

    def _adapt(self, kernel: torch.Tensor, geometry: tuple | None, length: int) -> tuple[torch.Tensor, int]:
        """The kernel (and its zero lag) to apply to an input of ``length`` in ``geometry`` (see the module's
        ``geometry`` note). A 1-D layer has only the nominal geometry: its kernel as it is."""
        return kernel, self.zero_lag

    def _forward_1d(
        self, x: torch.Tensor, geometry: tuple | None = None, valid: tuple[int, int] | None = None
    ) -> torch.Tensor:
        """``(B, C, L) -> (B, heads * C, L)`` for an input in ``geometry``. ``valid = (H, W)``: ``x`` is an ``H``-row
        map with padding columns after the first ``W`` of each row; the output keeps only those,
        ``(B, heads * C, H * W)``, and the BatchNorm statistics are taken over them alone."""
        L = static_size(x.shape[-1])
        if self.heads > 1:
            x = x.repeat(1, self.heads, 1)  # head-major copies: channel h C + c is input channel c

        def crop(y: torch.Tensor) -> torch.Tensor:
            if valid is None:
                return y
            return y.unflatten(-1, (valid[0], -1))[..., : valid[1]].flatten(-2)

        if self.deployed:
            kernel, zero_lag = self._adapt(self.kernel, geometry, L)
            return crop(long_conv1d(x, kernel, self.bias, zero_lag=zero_lag, method=self.method, engine=self.engine))
        if self.combine == 'scale':
            kernel, bias = self.merged_kernel()
            kernel, zero_lag = self._adapt(kernel, geometry, L)
            return crop(long_conv1d(x, kernel, bias, zero_lag=zero_lag, method=self.method, engine=self.engine))
        filters = stack_branch_kernels(list(self.branches), self.reach, self.causal)  # (N, H M, P)
        # one head: the filters stay shared (channel g M + m takes filter m) through the long convolutions, which
        # then run the groups as a batch dimension; heads take their filters expanded to the repeated input
        kernels, zero_lag = self._adapt(filters if self.heads == 1 else self._per_channel(filters), geometry, L)
        form = branch_norm.training_form(self.bn, x, self.method, self.engine, whole_map=valid is None)
        if form == 'fused':
            return branch_norm.fused_conv_norm_sum(self.bn, self.alpha, x, self._per_channel(kernels), zero_lag)
        if form == 'fold':
            return branch_norm.folded_conv_norm_sum(self.bn, self.alpha, x, kernels, zero_lag, self.method, self.engine)
        y = crop(long_conv1d(x, kernels, zero_lag=zero_lag, method=self.method, engine=self.engine))  # (B, N, C, L')
        return branch_norm.norm_sum(self.bn, self.alpha, y)

    @python_forward  # TorchScript calls it in Python (see torchscript.py)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, L) -> (B, heads * C, L)``."""
        check_mixer_input(self, x, 3)
        return self._forward_1d(x)

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        grid_key = prefix + 'nominal_size'
        if not hasattr(self, 'nominal_size') and grid_key in state_dict:
            # a 2-D layer's state dict: it fits a 1-D layer of the same length, its grid has no meaning here
            H, W = read_grid(state_dict.pop(grid_key), f'{type(self).__name__} {prefix!r}')
            if H * W != self.seq_len:
                error_msgs.append(f"{prefix!r}: a {H}x{W} grid's kernels do not fit seq_len={self.seq_len}")
                return
        # A deployed checkpoint loads into a branched layer by switching the layer to its deployed form first; a
        # branched one into a deployed layer by building the branches, loading them, then folding them (post hook).
        if not self.deployed and prefix + 'kernel' in state_dict:
            self._make_deployed()
        elif self.deployed and any(k.startswith(prefix + 'branches.') for k in state_dict):
            self._make_branched(0)  # any seed: the sparse tap positions are in the state dict
            self._fold_after_load = True
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def extra_repr(self) -> str:
        s = f'dim={self.dim}, seq_len={self.seq_len}, kernel_size={self.kernel_size}, branches={self.num_branches}'
        s += f', groups={self.groups}' if self.groups > 1 else ''
        s += f', heads={self.heads}' if self.heads > 1 else ''
        s += f', reach={self.reach}, causal={self.causal}'
        if self.deployed:
            return s + ', deployed=True'
        return s + f', kernel_type={self.kernel_type!r}, combine={self.combine!r}'


@register_notrace_module  # an FX leaf: the operators inside are not traceable
class MRConv2d(MRConv1d):
    """MRConv over a ``(B, C, H, W)`` feature map flattened row-major to ``L = H * W``.

    ``input_size`` is the nominal ``(H, W)`` the kernels are made for; it is also kept in the persistent buffer
    ``nominal_size`` so a checkpoint says which grid its kernels belong to.

    Other input sizes: a flattened lag means a 2-D offset that depends on the width. ``lag_remap`` chooses what the
    layer computes on an ``H' x W'`` map (the rules are in :mod:`mrconvnext.ops.long_conv.lag_remap`):

    - ``'split'`` (default): each lag's two 2-D readings written back at the new width, weighted by the fraction of
      the nominal columns each applied to (:func:`~mrconvnext.ops.long_conv.lag_remap.remap_lags`). Used whenever ``W' != W``;
      costs nothing measurable. Close to the 2-D convolution below, not equal to it: an off-centre tap's weight is
      split between its row and its wrapped reading.
    - ``'conv2d'``: exactly the 2-D convolution that the layer is at its nominal size, with the
      ``(2H - 1) x (2W - 1)`` kernel ``K2[dy, dx] = k[zero_lag + dy * W + dx]``, zero-padded, on the new map
      (:func:`~mrconvnext.ops.long_conv.lag_remap.conv2d_lags` on a map with ``min(W, W') - 1`` zero columns appended). Used
      whenever ``W' != W`` or ``H' > H``. Every tap keeps both readings at full weight, so a reading that at the
      nominal size only wrapped around the first or last column reaches interior pixels of a wider map. Convolves a
      longer sequence, ``H' * (W' + min(W, W') - 1)``.
    - ``'none'``: the nominal kernel's 1-D lags at every size.

    ``docs/resolution.md`` measures the three: on the digits ``'split'`` and ``'conv2d'`` are tied and both well
    ahead of ``'none'``; ``'split'`` is the default for its cost. ``True`` / ``False`` mean ``'split'`` / ``'none'``
    (their meaning in 0.1). Each rule is linear in the kernel and differentiable: the layer trains at the new size
    with the same parameters. Where a rule leaves the kernel as it is, the output is bitwise the nominal lags'; a
    graph compiled for dynamic sizes applies the rule at every size (the same result to float rounding), so it
    serves all sizes without recompiling.

    Loading: a state dict whose ``nominal_size`` differs from the layer's is an error (its kernels mean other
    offsets); a state dict without one (written by earlier versions) is taken to be of the layer's grid. The zoo's models
    rebuild such mixers at the checkpoint's grid instead (:class:`~mrconvnext.models.MixerConvNeXt`).
    """

    def __init__(self, dim: int, input_size: tuple[int, int], lag_remap: str | bool = 'split', **kwargs) -> None:
        H, W = check_size2(type(self).__name__, 'input_size', input_size)
        super().__init__(dim, H * W, **kwargs)
        self.input_size = (H, W)
        self.lag_remap = resolve_lag_remap(lag_remap)
        self.register_buffer('nominal_size', torch.tensor([H, W], dtype=torch.int64))

    def _adapt(self, kernel: torch.Tensor, geometry: tuple | None, length: int) -> tuple[torch.Tensor, int]:
        if geometry is None:
            return kernel, self.zero_lag
        rule, new_width, padded_width = geometry
        if rule == 'split':
            return remap_lags(kernel, self.zero_lag, self.input_size[1], new_width, length)
        return conv2d_lags(kernel, self.zero_lag, self.input_size, padded_width, padded_width - new_width)

    @python_forward  # TorchScript calls it in Python (see torchscript.py)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W) -> (B, heads * C, H, W)``."""
        check_mixer_input(self, x, 4)
        B, C, H, W = x.shape
        H, W = static_size(H), static_size(W)  # TorchScript's trace: sizes as tensors
        H0, W0 = self.input_size
        rule = self.lag_remap
        # known_true: plain ints compare as usual; a graph compiled for dynamic sizes takes the general
        # path at every size (the same convolution), so a stage meeting its nominal width adds no guard
        as_is = known_true(W == W0) and (rule == 'split' or known_true(H <= H0))
        if rule == 'none' or as_is:
            return self._forward_1d(x.reshape(B, C, H * W)).view(B, self.out_dim, H, W)
        if torch.jit.is_tracing():
            raise ValueError(
                f'{type(self).__name__}: torch.jit.trace (the TorchScript ONNX exporter, torch.onnx.export(..., '
                f'dynamo=False)) cannot trace the lag remap to a {H}x{W} map (nominal {H0}x{W0}): its graph loses the '
                'batch axis. Export at the nominal size, or with torch.onnx.export(..., dynamo=True), which exports '
                'every size'
            )
        if rule == 'split':
            return self._forward_1d(x.reshape(B, C, H * W), ('split', W, W)).view(B, self.out_dim, H, W)
        pad = conv2d_padding(W0, W)
        xp = F.pad(x, (0, pad)).reshape(B, C, H * (W + pad))
        return self._forward_1d(xp, ('conv2d', W, W + pad), (H, W)).view(B, self.out_dim, H, W)

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
    ):
        key = prefix + 'nominal_size'
        if key not in state_dict:  # written before the grid was recorded: the layer's own grid
            state_dict[key] = self.nominal_size.new_tensor(self.input_size, device='cpu')
        try:
            grid = read_grid(state_dict[key], f'{type(self).__name__} {prefix!r}')
        except ValueError as e:
            error_msgs.append(str(e))
            return
        if grid != self.input_size:
            error_msgs.append(
                f'{type(self).__name__} {prefix!r} was built for a {self.input_size} grid but the state dict holds '
                f'kernels for {grid}: build it with input_size={grid} (the zoo models do this when loading)'
            )
            return
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

    def extra_repr(self) -> str:
        return f'input_size={self.input_size}, lag_remap={self.lag_remap!r}, ' + super().extra_repr()
