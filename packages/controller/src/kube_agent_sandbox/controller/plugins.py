"""The one contract through which controllers plug into the controller process.

Upstream compiles the Sandbox, SandboxTemplate, SandboxWarmPool and SandboxClaim controllers
into one binary and starts the last three with ``--extensions``. Here the extensions live in
another distribution (``kube-agent-sandbox-extensions``) that depends on this one, so this
package must not import it (an import-linter contract forbids it); platform teams add their own
controllers the same way. Every controller, the core Sandbox controller included, is described
by a :class:`ControllerPlugin`: a name, the RBAC rules it needs (``rbacgen`` writes them into
the generated roles) and a synchronous :class:`SetupFunction` that registers its caches and
controllers on the :class:`~kube_agent_sandbox.controller.runtime.manager.Manager`.

The core plugin (:data:`kube_agent_sandbox.controller.sandbox.plugin`) is always present and
imported statically. Optional plugins are found through the entry point group
``kube_agent_sandbox.extensions``; each entry point names a :class:`ControllerPlugin` object::

    [project.entry-points."kube_agent_sandbox.extensions"]
    extensions = "kube_agent_sandbox.extensions.plugin:plugin"

Setup is synchronous because registration does no I/O: it creates informers, adds
controllers and registers collectors; everything that talks to the API server starts later,
when the manager runs. An ``async def`` setup would return a coroutine nobody awaits, so mypy
rejects it (the protocol returns ``None``) and :func:`install_plugin` refuses it at run time.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Final, Protocol

from kube_agent_sandbox.controller.rbac import PolicyRule

if TYPE_CHECKING:
    from kube_agent_sandbox.controller.config import ControllerOptions
    from kube_agent_sandbox.controller.runtime import Manager

__all__ = [
    "ENTRY_POINT_GROUP",
    "ControllerPlugin",
    "PluginError",
    "SetupFunction",
    "install_plugin",
    "load_plugins",
    "plugin_rules",
]

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP: Final = "kube_agent_sandbox.extensions"
"""Entry point group of the optional plugins that ``--extensions`` turns on."""


class PluginError(Exception):
    """A plugin could not be loaded or does not follow the contract."""


class SetupFunction(Protocol):
    """Registers a plugin's caches and controllers on the manager.

    Called once, before the manager runs, with the parsed flags. Synchronous: it must not
    start tasks or talk to the API server (the manager starts everything it was given).
    """

    def __call__(self, manager: Manager, options: ControllerOptions, /) -> None:
        """Register on ``manager``.

        Args:
            manager: The process's manager (informers, controllers, metrics, events).
            options: The parsed controller flags.
        """


@dataclass(frozen=True, slots=True)
class ControllerPlugin:
    """A set of controllers that registers into the manager, and the permissions they need.

    Attributes:
        name: Short name, used in logs and startup errors (``controller=<name>``).
        setup: Registers the controllers; see :class:`SetupFunction`.
        rbac_rules: Permissions the controllers need; written by ``rbacgen`` into the core
            ClusterRole (the core plugin) or the extensions ClusterRole (entry point plugins).

    Raises:
        TypeError: ``name`` is empty, ``setup`` is not callable or a rule is not a
            :class:`~kube_agent_sandbox.controller.rbac.PolicyRule`.

    Example:
        ```python
        plugin = ControllerPlugin(
            name="quota",
            setup=register_quota_controller,
            rbac_rules=(rule("", "configmaps", ("get", "list", "watch", "patch")),),
        )
        ```
    """

    name: str
    setup: SetupFunction
    rbac_rules: tuple[PolicyRule, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.name:
            raise TypeError("a plugin needs a name")
        if not callable(self.setup):
            raise TypeError(f"plugin {self.name}: setup is not callable: {self.setup!r}")
        rules = tuple(self.rbac_rules)
        for declared in rules:
            if not isinstance(declared, PolicyRule):
                raise TypeError(
                    f"plugin {self.name}: RBAC rules must be PolicyRule "
                    f"(kube_agent_sandbox.controller.rbac.rule(...)), got {declared!r}"
                )
        object.__setattr__(self, "rbac_rules", rules)


def load_plugins(
    entry_points: Iterable[metadata.EntryPoint] | None = None,
) -> list[ControllerPlugin]:
    """Load every plugin of the ``kube_agent_sandbox.extensions`` group, sorted by name.

    Args:
        entry_points: The entry points to load; the installed ones when omitted.

    Returns:
        The plugins, sorted by entry point name.

    Raises:
        PluginError: An entry point failed to import or does not name a
            :class:`ControllerPlugin`.
    """
    found = metadata.entry_points(group=ENTRY_POINT_GROUP) if entry_points is None else entry_points
    plugins: list[ControllerPlugin] = []
    for entry_point in sorted(found, key=lambda ep: ep.name):
        try:
            target = entry_point.load()
        except Exception as err:
            raise PluginError(
                f"cannot load plugin {entry_point.name} ({entry_point.value}): {err}"
            ) from err
        if not isinstance(target, ControllerPlugin):
            raise PluginError(
                f"plugin {entry_point.name} ({entry_point.value}) is not a ControllerPlugin: "
                f"got {type(target).__name__}; point the entry point at a ControllerPlugin "
                "object, e.g. 'package.module:plugin'"
            )
        plugins.append(target)
    return plugins


def install_plugin(plugin: ControllerPlugin, manager: Manager, options: ControllerOptions) -> None:
    """Let ``plugin`` register its controllers on ``manager``.

    Args:
        plugin: The plugin.
        manager: The process's manager, not yet running.
        options: The parsed controller flags.

    Raises:
        PluginError: The setup returned an awaitable (an ``async def`` setup; the contract is
            synchronous).
        Exception: Whatever the setup raised.
    """
    logger.info("setting up plugin", extra={"plugin": plugin.name})
    setup: Callable[[Manager, ControllerOptions], object] = plugin.setup
    result = setup(manager, options)
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()  # never awaited: close it so Python does not warn about it
        raise PluginError(
            f"plugin {plugin.name}: setup returned an awaitable; setup must be synchronous "
            "(register informers and controllers, the manager starts them)"
        )


def plugin_rules(plugins: Sequence[ControllerPlugin]) -> list[PolicyRule]:
    """All rules the plugins declare, in order (not yet normalized)."""
    return [declared for plugin in plugins for declared in plugin.rbac_rules]
