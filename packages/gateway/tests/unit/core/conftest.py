"""Fixtures of the gateway core's unit tests (helpers live in ``gateway_fakes``).

pytest runs with ``--import-mode=importlib``, so this directory is put on ``sys.path``.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from gateway_fakes import Gateway, started_gateway  # noqa: E402


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    """A started gateway with tenants A and B, a pool ``base`` in both, a fake controller."""
    async with started_gateway() as gw:
        yield gw
