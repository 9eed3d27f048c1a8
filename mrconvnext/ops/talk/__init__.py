"""TaLK summation convolutions: the public functions (:mod:`.api`), the specification (:mod:`.reference`), the
operators (:mod:`.operators`) and one module per engine (``engine_torch``, ``engine_onnx``, ``engine_triton`` with its
kernels by algorithm in ``triton_*``; the native engine is ``kernels/talk``)."""

from .api import talk1d, talk2d, talk_offsets_dropout
from .checks import MAX_OFFSET
from .reference import talk1d_reference, talk2d_reference

__all__ = ['talk1d', 'talk2d', 'talk1d_reference', 'talk2d_reference', 'talk_offsets_dropout', 'MAX_OFFSET']
