"""Unit-test set-up: pytest runs with ``--import-mode=importlib``, so this directory is put on
``sys.path`` for the shared helper module (``sandboxd_helpers``)."""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
