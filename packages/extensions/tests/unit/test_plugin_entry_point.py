"""The extensions follow the same plugin contract as the core Sandbox controller."""

from __future__ import annotations

from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.plugins import ControllerPlugin, install_plugin, load_plugins
from kube_agent_sandbox.controller.runtime import FakeApi, Manager
from kube_agent_sandbox.extensions import plugin as extensions_plugin


def test_the_installed_entry_point_names_the_extensions_plugin() -> None:
    (loaded,) = [p for p in load_plugins() if p.name == extensions_plugin.PLUGIN_NAME]
    assert loaded is extensions_plugin.plugin
    assert isinstance(loaded, ControllerPlugin)
    assert loaded.rbac_rules == extensions_plugin.RBAC_RULES


def test_installing_it_registers_the_three_controllers() -> None:
    manager = Manager(FakeApi(), metrics_bind_address="0", health_bind_address="0")
    install_plugin(extensions_plugin.plugin, manager, ControllerOptions(extensions=True))
    assert sorted(c.name for c in manager.controllers) == [
        "sandboxclaim",
        "sandboxtemplate",
        "sandboxwarmpool",
    ]


def test_idle_shutdown_adds_the_idle_controller() -> None:
    manager = Manager(FakeApi(), metrics_bind_address="0", health_bind_address="0")
    options = ControllerOptions(extensions=True, idle_shutdown=True)
    install_plugin(extensions_plugin.plugin, manager, options)
    assert "sandboxidle" in [c.name for c in manager.controllers]


def test_the_idle_rules_are_part_of_the_extensions_role() -> None:
    rules = {(r.api_groups, r.resources) for r in extensions_plugin.RBAC_RULES}
    assert (("coordination.k8s.io",), ("leases",)) in rules
