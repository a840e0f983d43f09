"""Make helper modules of this directory (``dataplane_fakes``) importable from tests, and
share the upstream fixture.

pytest runs with ``--import-mode=importlib``, which does not put test directories on
``sys.path``.
"""

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

_HERE = str(Path(__file__).parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from dataplane_fakes import serve  # noqa: E402  (importable once the path is set)
from upstream_app import Upstream  # noqa: E402


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[Upstream, int]]:
    """A local stand-in daemon and its port."""
    app = Upstream()
    async with serve(app) as port:
        yield app, port
