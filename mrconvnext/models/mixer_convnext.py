"""The shared mechanism of the zoo: timm's own ConvNeXt with each block's depthwise conv swapped.

:class:`MixerConvNeXt` subclasses :class:`timm.models.convnext.ConvNeXt` and, after timm has built
the whole network (stem, downsampling, norms, MLPs, layer scale, drop path, head), replaces every
``stages.i.blocks.j.conv_dw`` with a token mixer made by :meth:`MixerConvNeXt.make_mixer`. All
other weights keep timm's names and shapes, so timm ConvNeXt checkpoints warm-start the model
(:func:`load_convnext_weights`), and everything timm's ConvNeXt offers (features, intermediates,
classifier reset, grad checkpointing, group matcher) is inherited, not rewritten.

Subclasses implement :meth:`make_mixer` from JSON-serializable constructor arguments only, so
``timm.models.save_for_hf`` configs rebuild the same model.

Checkpoints between resolutions: a mixer whose kernels depend on its grid (MRConv) records it in the buffer
``nominal_size``. Loading a state dict whose mixers were made for another grid (a checkpoint trained at another
``img_size``) first rebuilds those mixers with :meth:`make_mixer` at the checkpoint's grid, then loads as usual, so
``timm.create_model(name, img_size=384, pretrained=True, pretrained_cfg_overlay=dict(file=ckpt_at_224))`` and
``model.load_state_dict(sd)`` both give the checkpoint's kernels, applied at the new size by the mixer's own rule.
The rebuilt mixers are new modules: load before building an optimizer, as usual.
"""

import contextlib
import inspect
import operator
import os
from collections.abc import Mapping

import torch
import torch.nn as nn
from timm.data import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD
from timm.layers import register_notrace_function, trunc_normal_
from timm.models import PretrainedCfg, build_model_with_cfg, get_pretrained_cfg
from timm.models.convnext import ConvNeXt

from ..layers import DynamicConv1d, LightConv1d, MRConv1d, TaLKConv1d, TaLKConv2d
from ..layers.mrconv import read_grid
from .checkpoint import read_state_dict

__all__ = [
    'MixerConvNeXt',
    'CONVNEXT_ARCHS',
    'convnext_cfg',
    'create_mixer_convnext',
    'stage_feature_sizes',
    'load_convnext_weights',
    'check_image_input',
    'MIXERS',
    'set_engine',
]

# depths / dims of timm's ConvNeXt sizes (atto..nano use timm's conv-MLP variant, as timm does)
CONVNEXT_ARCHS = {
    'atto': dict(depths=(2, 2, 6, 2), dims=(40, 80, 160, 320), conv_mlp=True),
    'femto': dict(depths=(2, 2, 6, 2), dims=(48, 96, 192, 384), conv_mlp=True),
    'pico': dict(depths=(2, 2, 6, 2), dims=(64, 128, 256, 512), conv_mlp=True),
    'nano': dict(depths=(2, 2, 8, 2), dims=(80, 160, 320, 640), conv_mlp=True),
    't': dict(depths=(3, 3, 9, 3), dims=(96, 192, 384, 768)),
    's': dict(depths=(3, 3, 27, 3), dims=(96, 192, 384, 768)),
    'b': dict(depths=(3, 3, 27, 3), dims=(128, 256, 512, 1024)),
}


def _pair(size: int | tuple[int, int] | list[int]) -> tuple[int, int]:
    """``img_size`` as ``(H, W)``: an integer, or a pair of them (a string, float or bool is a ``TypeError``)."""

    def integer(v) -> int | None:
        return None if isinstance(v, bool) or not hasattr(v, '__index__') else operator.index(v)

    if integer(size) is not None:
        return integer(size), integer(size)
    if (
        not isinstance(size, (str, bytes))
        and hasattr(size, '__len__')
        and len(size) == 2
        and None not in map(integer, size)
    ):
        return integer(size[0]), integer(size[1])
    raise TypeError(f'img_size must be an int or a pair of ints (H, W), got {size!r} ({type(size).__name__})')


def stage_feature_sizes(img_size: tuple[int, int], reductions: list[int]) -> list[tuple[int, int]]:
    """Nominal (H, W) of each stage's feature map: ``img_size // reduction`` (timm's strided convs floor)."""
    return [(img_size[0] // r, img_size[1] // r) for r in reductions]


def _widen_block_input(block: nn.Module, width: int) -> None:
    """Make a timm ConvNeXt block's norm and first pointwise layer take a mixer output of ``width`` channels (a
    multi-head mixer's ``heads * dim``), initialised as timm initialises them; the MLP's other widths stay."""
    norm, fc1 = block.norm, block.mlp.fc1
    dd = {'device': fc1.weight.device, 'dtype': fc1.weight.dtype}
    block.norm = type(norm)(width, eps=norm.eps, **dd)
    if isinstance(fc1, nn.Conv2d):
        new = nn.Conv2d(width, fc1.out_channels, 1, bias=fc1.bias is not None, **dd)
    else:
        new = nn.Linear(width, fc1.out_features, bias=fc1.bias is not None, **dd)
    if new.weight.device.type != 'meta':
        trunc_normal_(new.weight, std=0.02)
        if new.bias is not None:
            nn.init.zeros_(new.bias)
    block.mlp.fc1 = new


MIXERS = (MRConv1d, TaLKConv1d, TaLKConv2d, LightConv1d, DynamicConv1d)


def set_engine(model: nn.Module, method: str | None = None, engine: str | None = None) -> int:
    """Set ``method`` (the algorithm; MRConv only, ``'matmul'``: each mixer's matrix-product method for its length)
    and / or ``engine`` (the implementation) on every mixer of ``model``, as the models' keywords do at construction
    (None: keep). ``model``: a model of the package, its ``features_only`` wrapper, or any module holding its mixers.
    A family with one method raises ``ValueError`` for a ``method``. Returns how many mixers were set."""
    mixers = [m for m in model.modules() if isinstance(m, MIXERS)]
    for m in mixers:
        m.set_engine(method=method, engine=engine)
    return len(mixers)


class MixerConvNeXt(ConvNeXt):
    """timm ConvNeXt whose 7x7 depthwise convs are replaced by :meth:`make_mixer` modules.

    A mixer with more output than input channels (``out_dim``: a multi-head MRConv) widens its block's norm and
    first pointwise layer to take them; the block's output width stays.

    Args:
        img_size: nominal input size; sets the grid each mixer is built for (any input size at least the
            network stride works at run time; a checkpoint of another grid brings its own, see above).
        deploy: build the mixers in their reparameterized (inference) form.
        **kwargs: timm ``ConvNeXt`` arguments (depths, dims, drop_path_rate, ...).
    """

    __jit_unused_properties__ = ['_model_args']  # a Python-side record; TorchScript need not compile it

    def __init__(
        self,
        img_size: int | tuple[int, int] = 224,
        deploy: bool = False,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        **kwargs,
    ) -> None:
        _check_kwargs(type(self), kwargs)
        super().__init__(device=device, dtype=dtype, **kwargs)
        self.img_size = _pair(img_size)
        self.deploy = deploy
        self.stride = self.feature_info[-1]['reduction']
        self.class_name = type(self).__name__  # for error messages, also under TorchScript
        sizes = stage_feature_sizes(self.img_size, [f['reduction'] for f in self.feature_info])
        if min(min(s) for s in sizes) < 1:
            raise ValueError(f'img_size {self.img_size} is smaller than the network stride {self.stride}')
        for i, stage in enumerate(self.stages):
            for block in stage.blocks:
                dim = block.conv_dw.in_channels
                # timm's factory arguments: parameters are created on ``device`` (e.g. 'meta': nothing allocated);
                # the few tensors a mixer draws on the CPU (sparse tap positions) follow with .to()
                with torch.device(device) if device is not None else contextlib.nullcontext():
                    mixer = self.make_mixer(i, dim, sizes[i])
                block.conv_dw = mixer.to(device=device, dtype=dtype) if device or dtype else mixer
                if getattr(mixer, 'out_dim', dim) != dim:
                    _widen_block_input(block, mixer.out_dim)

    def make_mixer(self, stage: int, dim: int, input_size: tuple[int, int]) -> nn.Module:
        """The token mixer of a block in ``stage`` with ``dim`` channels on an ``input_size`` map."""
        raise NotImplementedError

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # runs before the children load (nn.Module.load_state_dict goes top down): mixers rebuilt here are the
        # ones that then receive their weights
        self._adopt_checkpoint_grids(state_dict, prefix)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def _adopt_checkpoint_grids(self, state_dict: Mapping[str, torch.Tensor], prefix: str) -> None:
        """Rebuild every mixer whose ``nominal_size`` in ``state_dict`` differs from its own at that grid.

        The grid is checked first (two positive ints) and then against the checkpoint's own tensors, by a mixer made
        for it on the meta device: a grid its tensors do not fit is a ``ValueError`` before anything is allocated."""
        for i, stage in enumerate(self.stages):
            for j, block in enumerate(stage.blocks):
                mixer = block.conv_dw
                mixer_prefix = f'{prefix}stages.{i}.blocks.{j}.conv_dw.'
                grid = state_dict.get(mixer_prefix + 'nominal_size')
                if grid is None or not hasattr(mixer, 'nominal_size'):
                    continue
                grid = read_grid(grid, f'{self.class_name}: checkpoint entry {mixer_prefix}nominal_size')
                if grid == tuple(mixer.input_size):
                    continue
                self._check_checkpoint_grid(state_dict, mixer_prefix, i, mixer.dim, grid)
                ref = next(mixer.parameters())
                new = self.make_mixer(i, mixer.dim, grid).to(device=ref.device, dtype=ref.dtype)
                block.conv_dw = new.train(mixer.training)

    def _check_checkpoint_grid(
        self, state_dict: Mapping[str, torch.Tensor], mixer_prefix: str, stage: int, dim: int, grid: tuple[int, int]
    ) -> None:
        """``ValueError`` unless the checkpoint's tensors under ``mixer_prefix`` have the shapes of a mixer made for
        ``grid`` (in the checkpoint's form, deployed or branched); built on the meta device, so nothing is allocated."""
        with torch.device('meta'):
            probe = self.make_mixer(stage, dim, grid)
            if mixer_prefix + 'kernel' in state_dict and hasattr(probe, 'reparameterize'):
                probe.reparameterize()
        shapes = {k: tuple(v.shape) for k, v in probe.state_dict().items()}
        for key, value in state_dict.items():
            name = key[len(mixer_prefix) :]
            if key.startswith(mixer_prefix) and name in shapes and tuple(value.shape) != shapes[name]:
                raise ValueError(
                    f'{self.class_name}: the checkpoint records a {grid[0]}x{grid[1]} grid for {mixer_prefix[:-1]}, '
                    f'but its tensors do not fit one: {key} is {tuple(value.shape)}, a mixer for that grid has '
                    f'{shapes[name]} (a damaged or edited checkpoint?)'
                )

    # --- the timm model-args record reflects the deployed state, whoever reparameterized the mixers
    @property
    def _model_args(self) -> dict:
        args = dict(self.__dict__.get('_stored_model_args', {}))
        if self.is_deployed():
            args['deploy'] = True
        return args

    @_model_args.setter
    def _model_args(self, value: Mapping) -> None:
        self.__dict__['_stored_model_args'] = dict(value)

    def mixers(self) -> list[nn.Module]:
        return [block.conv_dw for stage in self.stages for block in stage.blocks]

    def set_engine(self, method: str | None = None, engine: str | None = None) -> int:
        """:func:`set_engine` on this model."""
        return set_engine(self, method, engine)

    def is_deployed(self) -> bool:
        return all(getattr(m, 'deployed', False) for m in self.mixers())

    @torch.no_grad()
    def reparameterize(self) -> None:
        """Reparameterize every mixer that supports it, in place (idempotent)."""
        for m in self.mixers():
            if hasattr(m, 'reparameterize'):
                m.reparameterize()

    def mixer_kernel_parameter_names(self) -> set[str]:
        """Full names of the long-kernel parameters (their own lr and no weight decay)."""
        names = set()
        for name, module in self.named_modules():
            if hasattr(module, 'kernel_parameter_names'):
                names.update(f'{name}.{n}' for n in module.kernel_parameter_names())
        return names

    @torch.jit.ignore
    def no_weight_decay(self) -> set[str]:
        """Long-kernel parameters and per-branch mixing weights: excluded from weight decay."""
        names = set()
        for name, module in self.named_modules():
            if hasattr(module, 'no_weight_decay_names'):
                names.update(f'{name}.{n}' for n in module.no_weight_decay_names())
        return names

    # --- timm's forward paths with input validation
    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        x = check_image_input(x, self.in_chans, self.stride, self.class_name, self.stem[0].weight)
        x = self.stem(x)
        x = self.stages(x)
        return self.norm_pre(x)

    def forward_intermediates(self, x: torch.Tensor, *args, **kwargs):
        x = check_image_input(x, self.in_chans, self.stride, self.class_name, self.stem[0].weight)
        return super().forward_intermediates(x, *args, **kwargs)


def _own_arguments(cls: type) -> set[str]:
    """The named ``__init__`` arguments of ``cls`` and its bases up to timm's ``ConvNeXt``."""
    names = set()
    for c in cls.__mro__:
        if '__init__' in vars(c):
            names |= {
                p.name
                for p in inspect.signature(c.__init__).parameters.values()
                if p.kind == p.KEYWORD_ONLY or p.kind == p.POSITIONAL_OR_KEYWORD
            }
        if c is ConvNeXt:
            break
    return names - {'self'}


def _check_kwargs(cls: type, kwargs: dict) -> None:
    """A ``TypeError`` naming the family for arguments that neither ``cls`` nor timm's ``ConvNeXt`` takes (timm's own
    message names ``ConvNeXt.__init__``), and the families that do take them."""
    unknown = sorted(set(kwargs) - _own_arguments(cls))
    if not unknown:
        return
    families, todo = [], list(MixerConvNeXt.__subclasses__())
    while todo:
        c = todo.pop(0)
        todo += c.__subclasses__()
        if c is not cls and set(unknown) & _own_arguments(c) - _own_arguments(MixerConvNeXt):
            families.append(c.__name__)
    elsewhere = f'; {", ".join(families)} take{"s" if len(families) == 1 else ""} them' if families else ''
    raise TypeError(
        f'{cls.__name__} got unexpected keyword argument(s) {unknown}{elsewhere}. {cls.__name__} takes '
        f"{sorted(_own_arguments(cls) - _own_arguments(ConvNeXt))} and timm ConvNeXt's arguments"
    )


_AUTOCAST_DEVICES = ('cpu', 'cuda', 'xpu', 'mps', 'hpu')


@register_notrace_function  # an FX call node (not traced into): traced models keep the check
@torch.jit.ignore  # TorchScript calls it in Python
def check_image_input(x: torch.Tensor, in_chans: int, stride: int, name: str, weight: torch.Tensor) -> torch.Tensor:
    """``x`` if it is a floating-point ``(B, in_chans, H, W)`` image batch with ``H, W >= stride`` in the dtype of
    the first layer's ``weight`` (any floating dtype under autocast), else a ``TypeError`` / ``ValueError`` naming
    what was expected and what arrived.

    Under ``torch.compile`` / ``torch.export`` the size condition becomes a runtime assert (a Python raise would
    break the graph); dtype, rank and channels are static there and checked at trace time.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f'{name} expects a torch.Tensor, got {type(x).__name__}')
    if not x.is_floating_point():
        raise TypeError(
            f'{name} expects a floating-point image tensor, got dtype {x.dtype} '
            '(convert integer images with x.float() and normalize them first)'
        )
    # dtypes first: the autocast query runs only on a mismatch (compiled graphs of matching dtypes never see it), and
    # only for device types that have autocast (torch.is_autocast_enabled raises for others, such as meta)
    if x.dtype != weight.dtype and not (
        x.device.type in _AUTOCAST_DEVICES and torch.is_autocast_enabled(x.device.type)
    ):
        raise TypeError(
            f'{name} has {weight.dtype} parameters, got a {x.dtype} input: convert the input with '
            f'x.to({weight.dtype}), the model with model.to({x.dtype}), or run it under torch.autocast'
        )
    if x.dim() != 4:
        raise ValueError(f'{name} expects images of shape (B, C, H, W), got {tuple(x.shape)}')
    if x.shape[1] != in_chans:
        raise ValueError(f'{name} was built for in_chans={in_chans}, got an input with {x.shape[1]} channels')
    if torch.compiler.is_compiling():
        torch._check(x.shape[-2] >= stride)
        torch._check(x.shape[-1] >= stride)
    elif x.shape[-2] < stride or x.shape[-1] < stride:
        raise ValueError(
            f'input {tuple(x.shape[-2:])} is smaller than the network stride {stride}: H and W must be >= {stride}'
        )
    return x


torch.fx.wrap('check_image_input')  # timm's list above only covers functions in its root module's globals


def load_convnext_weights(
    model: MixerConvNeXt, source: str | os.PathLike | Mapping[str, torch.Tensor], use_ema: bool = False
) -> list[str]:
    """Warm start: copy every non-mixer weight of a timm ConvNeXt checkpoint into ``model``.

    ``source`` is a state dict, or a ``.safetensors`` / ``torch.save`` file, read by the package's one reader
    (:func:`~mrconvnext.models.checkpoint.read_state_dict`: weights only, the trained weights of a training
    checkpoint unless ``use_ema``). timm's own checkpoint filter maps original-repo names. All non-mixer
    tensors must be present with matching shapes (the same ConvNeXt size); the classifier is
    skipped if its class count differs.

    Returns:
        The model's state-dict keys left at their initialization: exactly the mixer keys (and the
        classifier's, when skipped).
    """
    from timm.models.convnext import checkpoint_filter_fn

    sd = checkpoint_filter_fn(read_state_dict(source, use_ema=use_ema)[0], model)
    own = model.state_dict()
    mixer_prefixes = tuple(f'{n}.' for n, m in model.named_modules() if n.endswith('.conv_dw'))
    load, problems = {}, []
    for k, v in own.items():
        if k.startswith(mixer_prefixes):
            continue
        if k not in sd:
            problems.append(f'missing {k}')
        elif sd[k].shape != v.shape:
            if k.startswith('head.fc.'):
                continue  # a different class count: keep the new classifier
            problems.append(f'{k}: checkpoint {tuple(sd[k].shape)} vs model {tuple(v.shape)}')
        else:
            load[k] = sd[k]
    if problems:
        raise ValueError('checkpoint does not match this ConvNeXt size: ' + '; '.join(problems[:8]))
    model.load_state_dict(load, strict=False)
    return sorted(k for k in own if k not in load)


def convnext_cfg(**kwargs) -> dict:
    """timm ``pretrained_cfg`` of a 224x224 ImageNet ConvNeXt-style model with no released weights."""
    return {
        'url': '',
        'num_classes': 1000,
        'input_size': (3, 224, 224),
        'pool_size': (7, 7),
        'crop_pct': 0.875,
        'interpolation': 'bicubic',
        'mean': IMAGENET_DEFAULT_MEAN,
        'std': IMAGENET_DEFAULT_STD,
        'first_conv': 'stem.0',
        'classifier': 'head.fc',
        'license': 'apache-2.0',
        **kwargs,
    }


def _check_weight_source(variant: str, kwargs: dict) -> None:
    """No ImageNet weights exist for these models: refuse ``pretrained=True`` without a source."""
    cfg = kwargs.get('pretrained_cfg') or get_pretrained_cfg(variant)
    if isinstance(cfg, dict):
        cfg = PretrainedCfg(**cfg)
    overlay = kwargs.get('pretrained_cfg_overlay') or {}
    has_source = any(overlay.get(k) for k in ('file', 'url', 'hf_hub_id', 'state_dict')) or (
        isinstance(cfg, PretrainedCfg) and any((cfg.file, cfg.url, cfg.hf_hub_id, cfg.state_dict))
    )
    if not has_source:
        raise ValueError(
            f'{variant}: no pretrained ImageNet weights exist for this model. Pass a weight source '
            "(pretrained_cfg_overlay=dict(file='model.safetensors'), or create_model('local-dir:<dir>' / "
            "'hf-hub:<repo>')), or warm-start from timm's ConvNeXt with mrconvnext.load_convnext_weights()."
        )


def create_mixer_convnext(model_cls: type[MixerConvNeXt], variant: str, pretrained: bool = False, **kwargs):
    """``build_model_with_cfg`` with ConvNeXt's feature config and the weight-source check."""
    if pretrained:
        _check_weight_source(variant, kwargs)
    model = build_model_with_cfg(
        model_cls,
        variant,
        pretrained,
        feature_cfg=dict(out_indices=(0, 1, 2, 3), flatten_sequential=True),
        **kwargs,
    )
    _follow_img_size(model, _pair(kwargs.get('img_size', 224)), kwargs.get('in_chans'))
    return model


def _follow_img_size(model: nn.Module, size: tuple[int, int], in_chans: int | None) -> None:
    """The ``pretrained_cfg``'s ``input_size`` / ``pool_size`` follow the size the model (or its ``features_only``
    wrapper) was built for, so that ``save_for_hf`` / ``push_to_hf_hub`` configs and timm's ``resolve_data_config``
    feed it images of that size; ``crop_pct`` and the normalization stay the configuration's."""
    cfg = getattr(model, 'pretrained_cfg', None)
    if not isinstance(cfg, dict) or 'input_size' not in cfg:
        return
    H, W = size
    stride = getattr(model, 'stride', 32)  # every ConvNeXt here reduces by 32
    model.pretrained_cfg = dict(
        cfg, input_size=(in_chans or cfg['input_size'][0], H, W), pool_size=(H // stride, W // stride)
    )
    if hasattr(model, 'default_cfg'):
        model.default_cfg = model.pretrained_cfg
