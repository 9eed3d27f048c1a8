"""Thin wrapper: ``python scripts/validate.py ARGS`` = ``mrconvnext-validate ARGS`` (see mrconvnext/tools/validate.py)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing the package

from mrconvnext.tools.validate import main  # noqa: E402

if __name__ == '__main__':
    main()
