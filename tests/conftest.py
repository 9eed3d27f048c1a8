import os

import pytest
import torch

# Triton's interpreter runs the Triton kernels on CPU tensors; it is chosen when the kernels are defined (the first
# import of mrconvnext.ops.talk.engine_triton), so it is set here, before any test imports them. With a GPU the kernels are
# compiled and the CUDA suite (pytest -m cuda) runs them.
if not torch.cuda.is_available():
    os.environ.setdefault('TRITON_INTERPRET', '1')


@pytest.fixture(autouse=True)
def _fresh_seed(request):
    """A different seed per test (derived from its name), so inputs are random but reproducible."""
    import zlib

    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))
    yield
