"""The plugin contract: typed rules, synchronous setup, entry points naming ControllerPlugins."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from kube_agent_sandbox.controller import rbacgen
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.plugins import (
    ENTRY_POINT_GROUP,
    ControllerPlugin,
    PluginError,
    install_plugin,
    load_plugins,
    plugin_rules,
)
from kube_agent_sandbox.controller.rbac import PolicyRule, normalize_rules, rule
from kube_agent_sandbox.controller.runtime import FakeApi, Manager
from kube_agent_sandbox.controller.sandbox import plugin as sandbox_plugin
from kube_agent_sandbox.controller.sandbox.setup import RBAC_RULES as SANDBOX_RULES

PLUGIN_BODY = """
from kube_agent_sandbox.controller.plugins import ControllerPlugin
from kube_agent_sandbox.controller.rbac import rule

CALLS = []

def setup(manager, options):
    CALLS.append((manager, options))

plugin = ControllerPlugin(
    name={name!r}, setup=setup, rbac_rules=(rule("x", "ys", "get"),)
)
"""


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, body: str) -> None:
    (tmp_path / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))


def _entry(name: str, value: str) -> metadata.EntryPoint:
    return metadata.EntryPoint(name, value, ENTRY_POINT_GROUP)


def _manager() -> Manager:
    return Manager(FakeApi(), metrics_bind_address="0", health_bind_address="0")


def _nothing(manager: Manager, options: ControllerOptions) -> None:
    """A setup that registers nothing."""


def test_plugins_load_sorted_with_typed_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _module(tmp_path, monkeypatch, "fake_plugin_one", PLUGIN_BODY.format(name="one"))
    _module(tmp_path, monkeypatch, "fake_plugin_two", PLUGIN_BODY.format(name="two"))
    plugins = load_plugins(
        [_entry("zeta", "fake_plugin_two:plugin"), _entry("alpha", "fake_plugin_one:plugin")]
    )
    assert [p.name for p in plugins] == ["one", "two"]
    assert plugins[0].rbac_rules == (PolicyRule(("x",), ("ys",), ("get",)),)
    assert normalize_rules(plugin_rules(plugins)) == [PolicyRule(("x",), ("ys",), ("get",))]


def test_an_entry_point_naming_a_module_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old shape (a module with ``setup``) is not guessed at: the error says what to do."""
    _module(tmp_path, monkeypatch, "fake_plugin_module", "def setup(m, o):\n    pass\n")
    with pytest.raises(PluginError, match="is not a ControllerPlugin: got module"):
        load_plugins([_entry("old", "fake_plugin_module")])


def test_plugin_import_failure_is_reported() -> None:
    with pytest.raises(PluginError, match="cannot load plugin gone"):
        load_plugins([_entry("gone", "no_such_module_xyz:thing")])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "", "setup": _nothing}, "needs a name"),
        ({"name": "p", "setup": 42}, "setup is not callable"),
        (
            {
                "name": "p",
                "setup": _nothing,
                "rbac_rules": ({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},),
            },
            "RBAC rules must be PolicyRule",
        ),
    ],
    ids=["no-name", "setup-not-callable", "dict-rule"],
)
def test_malformed_plugins_are_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(TypeError, match=match):
        ControllerPlugin(**kwargs)


def test_rules_given_as_a_list_are_stored_as_a_tuple() -> None:
    declared = [rule("", "pods", "get")]
    plugin = ControllerPlugin(name="p", setup=_nothing, rbac_rules=declared)  # type: ignore[arg-type]
    assert plugin.rbac_rules == (rule("", "pods", "get"),)


def test_install_calls_setup_with_manager_and_options() -> None:
    calls: list[tuple[Manager, ControllerOptions]] = []

    def setup(manager: Manager, options: ControllerOptions) -> None:
        calls.append((manager, options))

    manager, options = _manager(), ControllerOptions(sandbox_concurrent_workers=3)
    install_plugin(ControllerPlugin(name="p", setup=setup), manager, options)
    assert calls == [(manager, options)]


def test_an_async_setup_is_refused_and_not_left_unawaited() -> None:
    started: list[str] = []

    async def setup(manager: Manager, options: ControllerOptions) -> None:
        started.append("ran")  # pragma: no cover - never awaited

    plugin = ControllerPlugin(name="async", setup=setup)  # type: ignore[arg-type]
    with pytest.raises(PluginError, match="setup must be synchronous"):
        install_plugin(plugin, _manager(), ControllerOptions())
    assert started == []


def test_the_core_plugin_registers_the_sandbox_controller() -> None:
    manager = _manager()
    install_plugin(sandbox_plugin, manager, ControllerOptions())
    assert [c.name for c in manager.controllers] == ["sandbox"]
    assert sandbox_plugin.name == "Sandbox"
    assert sandbox_plugin.rbac_rules == SANDBOX_RULES


def test_rbacgen_reads_the_core_rules_from_the_core_plugin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    extra = rule("example.com", "widgets", "get")
    patched = ControllerPlugin(
        name="Sandbox", setup=_nothing, rbac_rules=(*sandbox_plugin.rbac_rules, extra)
    )
    monkeypatch.setattr(rbacgen, "sandbox_plugin", patched)
    assert PolicyRule(("example.com",), ("widgets",), ("get",)) in rbacgen.core_rules()
