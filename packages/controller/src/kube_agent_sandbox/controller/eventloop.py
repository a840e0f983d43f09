"""The event loop the controller process runs on: uvloop, unless told otherwise.

uvloop (libuv under asyncio's API) runs the same coroutines with less CPU per socket event,
TLS record and timer, which is most of what a controller's loop does between reconciles. The
figures behind the choice are in docs/design/decisions.md. ``AGENT_SANDBOX_EVENT_LOOP=asyncio``
selects the standard library's loop (for debugging, or to compare); a platform without uvloop
falls back to it as well.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Final

logger = logging.getLogger(__name__)

ENV_VAR: Final = "AGENT_SANDBOX_EVENT_LOOP"
CHOICES: Final = ("uvloop", "asyncio")


def loop_factory(choice: str | None = None) -> tuple[str, Callable[[], asyncio.AbstractEventLoop]]:
    """The event loop to run on: its name and a factory.

    Args:
        choice: ``uvloop`` or ``asyncio``; the environment variable's value when None, and
            ``uvloop`` when that is unset.

    Raises:
        ValueError: for any other value.
    """
    wanted = (choice if choice is not None else os.environ.get(ENV_VAR) or "uvloop").strip()
    if wanted not in CHOICES:
        raise ValueError(f"{ENV_VAR} must be one of {', '.join(CHOICES)}, not {wanted!r}")
    if wanted == "uvloop":
        try:
            import uvloop
        except ImportError:  # a platform without its wheels: the standard loop works the same
            logger.info("uvloop is not installed; running on asyncio's own event loop")
        else:
            return "uvloop", uvloop.new_event_loop
    return "asyncio", asyncio.new_event_loop
