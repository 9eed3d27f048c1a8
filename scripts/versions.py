"""One line of the versions that a result depends on: GPU, Python, torch, CUDA, Triton, timm, torchvision (what
scripts/gpu_check.sh and scripts/check_versions.sh record). ``--engines`` adds ``python -m mrconvnext.engines``'s
report (one interpreter for both)."""

import importlib.util
import sys
from pathlib import Path

import timm
import torch
import torchvision

triton = __import__('triton').__version__ if importlib.util.find_spec('triton') else 'absent'
gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else 'none visible'
print(
    f'gpu {gpu}; python {sys.version.split()[0]}; torch {torch.__version__}; cuda {torch.version.cuda}; '
    f'triton {triton}; timm {timm.__version__}; torchvision {torchvision.__version__}'
)
if '--engines' in sys.argv[1:]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # from a checkout without installing the package
    from mrconvnext.engines import report

    print(report())
