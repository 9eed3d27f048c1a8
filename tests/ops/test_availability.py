"""What can run here (mrconvnext.ops.availability) is learnt without importing any family's kernels."""

import subprocess
import sys

from tests.limits import HANG_LIMIT_S

PROBE = """
import sys
from mrconvnext.ops import availability
availability.triton_unavailable('cpu'), availability.triton_unavailable('cuda'), availability.flashfft_module()
kernels = [m for m in sys.modules if m.startswith('mrconvnext.ops.') and ('triton' in m.split('.')[-1]
           and m != 'mrconvnext.ops.triton_probe')]
print('KERNELS', kernels)
"""


def test_triton_is_probed_without_a_familys_kernels():
    out = subprocess.run([sys.executable, '-c', PROBE], capture_output=True, text=True, timeout=HANG_LIMIT_S)
    assert out.returncode == 0, out.stderr[-2000:]
    assert 'KERNELS []' in out.stdout, out.stdout
