"""Make helper modules of this directory (e.g. ``conversion_support``) importable from tests.

pytest runs with ``--import-mode=importlib``, which does not put test directories on
``sys.path``.
"""

import sys
from pathlib import Path

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
