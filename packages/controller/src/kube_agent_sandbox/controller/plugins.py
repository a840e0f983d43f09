"""How optional controllers (the extensions) plug into the controller process.

Upstream compiles the SandboxTemplate, SandboxWarmPool and SandboxClaim controllers into the
same binary and starts them with ``--extensions``. Here they live in another distribution
(``kube-agent-sandbox-extensions``) that depends on this one, so this package must not import
it (an import-linter contract forbids it). Instead the extensions advertise themselves through
the entry point group ``kube_agent_sandbox.extensions``; each entry point loads an object
(a module or an instance) with:

* ``setup(manager, options)`` - register its controllers on the manager; may be a coroutine
  function. ``options`` is the parsed
  :class:`~kube_agent_sandbox.controller.config.ControllerOptions`.
* ``rbac_rules`` (optional) - the RBAC rules it needs, in any shape
  :func:`kube_agent_sandbox.controller.rbac.coerce_rule` accepts; ``rbacgen`` writes them into
  the ``agent-sandbox-controller-extensions`` ClusterRole.

Example ``pyproject.toml`` of a plugin::

    [project.entry-points."kube_agent_sandbox.extensions"]
    extensions = "kube_agent_sandbox.extensions.plugin"
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Final

__all__ = [
    "ENTRY_POINT_GROUP",
    "Plugin",
    "PluginError",
    "load_plugins",
    "run_setup",
]

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP: Final = "kube_agent_sandbox.extensions"


class PluginError(Exception):
    """A plugin could not be loaded or does not follow the contract."""


@dataclass(frozen=True, slots=True)
class Plugin:
    """A loaded plugin: its entry point name, value and the object it loaded."""

    name: str
    value: str
    target: Any

    @property
    def setup(self) -> Callable[..., Any]:
        """The plugin's ``setup(manager, options)``."""
        setup: object = getattr(self.target, "setup", None)
        if not callable(setup):
            raise PluginError(f"plugin {self.name} ({self.value}) has no callable setup()")
        return setup

    @property
    def rbac_rules(self) -> Sequence[object]:
        """The rules the plugin declares (empty when it declares none)."""
        rules: Iterable[object] | None = getattr(self.target, "rbac_rules", None)
        if rules is None:
            rules = getattr(self.target, "RBAC_RULES", ())
        return tuple(rules or ())


def load_plugins(entry_points: Iterable[metadata.EntryPoint] | None = None) -> list[Plugin]:
    """Load every plugin of the ``kube_agent_sandbox.extensions`` group, sorted by name.

    Args:
        entry_points: the entry points to load; the installed ones when omitted.

    Returns:
        The loaded plugins.

    Raises:
        PluginError: an entry point failed to import.
    """
    found = metadata.entry_points(group=ENTRY_POINT_GROUP) if entry_points is None else entry_points
    plugins: list[Plugin] = []
    for entry_point in sorted(found, key=lambda ep: ep.name):
        try:
            target = entry_point.load()
        except Exception as err:
            raise PluginError(
                f"cannot load plugin {entry_point.name} ({entry_point.value}): {err}"
            ) from err
        plugins.append(Plugin(name=entry_point.name, value=entry_point.value, target=target))
    return plugins


async def run_setup(plugin: Plugin, manager: object, options: object) -> None:
    """Call a plugin's ``setup(manager, options)``, awaiting it when it is a coroutine."""
    logger.info("setting up plugin", extra={"plugin": plugin.name, "entryPoint": plugin.value})
    result = plugin.setup(manager, options)
    if inspect.isawaitable(result):
        await result
