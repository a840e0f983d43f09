"""Record what an Informer delivers, for the runtime integration tests of this directory.

Not a test module: the tests import it (``conftest.py`` puts the directory on ``sys.path``).
"""

from __future__ import annotations

from kube_agent_sandbox.controller.runtime import EventHandler, Informer


def record_events(informer: Informer) -> list[tuple[str, str]]:
    """Register a handler that appends ``(kind, object name)`` for each event ``informer`` sends.

    Args:
        informer: The informer to listen to (before or after it starts).

    Returns:
        The list the handler appends to: ``("add", name)``, ``("update", new name)`` or
        ``("delete", name)``, in delivery order.
    """
    events: list[tuple[str, str]] = []
    informer.add_event_handler(
        EventHandler(
            on_add=lambda o: events.append(("add", o["metadata"]["name"])),
            on_update=lambda _old, new: events.append(("update", new["metadata"]["name"])),
            on_delete=lambda o: events.append(("delete", o["metadata"]["name"])),
        )
    )
    return events
