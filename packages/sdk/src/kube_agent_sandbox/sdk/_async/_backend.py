"""Asyncio primitives the async source needs and the sync copy replaces (hand-written pair).

Like httpcore's backends: the only code written twice, because it cannot be token-rewritten.
``_sync/_backend.py`` has the same names with blocking bodies.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from kube_agent_sandbox.sdk.config import ClusterConfig, load_default

if TYPE_CHECKING:
    from httpx_ws import AsyncWebSocketSession


async def authorization(config: ClusterConfig) -> str | None:
    """A fresh ``Authorization`` value; a refreshable credential runs in a worker thread.

    Exec credential plugins and token files block, so they never run on the event loop.
    """
    if config.refreshable:
        return await asyncio.to_thread(config.authorization)
    return config.authorization()


async def sleep(seconds: float) -> None:
    """Pause without blocking other tasks."""
    await asyncio.sleep(seconds)


async def load_config(context: str | None) -> ClusterConfig:
    """In-cluster or kubeconfig configuration, loaded in a worker thread (it may run plugins)."""
    return await asyncio.to_thread(load_default, context=context)


def release_websocket_reader(session: AsyncWebSocketSession) -> None:
    """Nothing to release: httpx-ws reads in a task of the session's group, cancelled on close."""
    del session
