"""Makes ``benchlib`` importable for the benchmark harness's unit tests (bench/ is no package)."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH_DIR = str(Path(__file__).resolve().parents[1])
if BENCH_DIR not in sys.path:
    sys.path.insert(0, BENCH_DIR)
