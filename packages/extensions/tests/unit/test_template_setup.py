"""The SandboxTemplate controller wired into a real Manager over the in-memory API server.

Checks what ``setup`` wires (caches, owned-policy and foreign-policy watches, workers, RBAC
declaration); the reconcile rules are in ``test_template_reconciler.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOX_TEMPLATES
from kube_agent_sandbox.api.rest import NETWORK_POLICIES
from kube_agent_sandbox.controller import rbac
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import FakeApi, Manager, Obj, Request
from kube_agent_sandbox.extensions.template.policy import desired_spec
from kube_agent_sandbox.extensions.template.setup import (
    CONTROLLER_NAME,
    RBAC_RULES,
    foreign_policy_mapper,
    setup,
)
from kube_agent_sandbox.testing.waiting import eventually

NS = "default"
NP = "tpl-network-policy"


def _template(name: str = "tpl", **spec: object) -> Obj:
    body: Obj = {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    body.update(spec)
    return {
        "apiVersion": SANDBOX_TEMPLATES.api_version,
        "kind": "SandboxTemplate",
        "metadata": {"name": name},
        "spec": body,
    }


@pytest.fixture
async def running() -> AsyncIterator[tuple[FakeApi, Manager]]:
    api = FakeApi(default_namespace=NS)
    manager = Manager(api, metrics_bind_address="0", health_bind_address="0")
    setup(manager, ControllerOptions(extensions=True, sandbox_template_concurrent_workers=0))
    task = asyncio.create_task(manager.run())
    await asyncio.wait_for(manager.controllers_started.wait(), 10)
    try:
        yield api, manager
    finally:
        manager.request_stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)


def _spec(api: FakeApi) -> Obj | None:
    policy = api.obj(NETWORK_POLICIES, NP)
    return None if policy is None else policy.get("spec")


class TestWiring:
    async def test_template_gets_label_and_policy_and_drift_is_repaired(
        self, running: tuple[FakeApi, Manager]
    ) -> None:
        api, manager = running
        [controller] = [ctl for ctl in manager.controllers if ctl.name == CONTROLLER_NAME]
        assert controller.workers == 1  # --sandbox-template-concurrent-workers=0 runs one
        template = await api.create(SANDBOX_TEMPLATES, NS, _template())
        await eventually(lambda: _spec(api) == desired_spec(template))
        labels = api.obj(SANDBOX_TEMPLATES, "tpl")["metadata"]["labels"]  # type: ignore[index]
        assert labels == {c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "9d22159f"}

        # A hand edit of the owned policy triggers a reconcile through the owner watch.
        await api.patch(NETWORK_POLICIES, NS, NP, {"spec": {"egress": []}})
        await eventually(lambda: _spec(api) == desired_spec(template))

        # So does its deletion.
        await api.delete(NETWORK_POLICIES, NS, NP)
        await eventually(lambda: _spec(api) == desired_spec(template))

    async def test_removing_a_foreign_policy_lets_the_template_take_the_name(
        self, running: tuple[FakeApi, Manager]
    ) -> None:
        api, _ = running
        foreign = api.add(NETWORK_POLICIES, {"metadata": {"name": NP}, "spec": {"podSelector": {}}})
        template = await api.create(SANDBOX_TEMPLATES, NS, _template())
        await eventually(lambda: api.obj(SANDBOX_TEMPLATES, "tpl")["metadata"].get("labels"))  # type: ignore[index]
        await asyncio.sleep(0.1)
        assert api.obj(NETWORK_POLICIES, NP) == foreign  # never written
        # The template re-checks only every minute; the deletion event brings it back now.
        await api.delete(NETWORK_POLICIES, NS, NP)
        await eventually(lambda: _spec(api) == desired_spec(template))

    async def test_switch_to_unmanaged_deletes_the_policy(
        self, running: tuple[FakeApi, Manager]
    ) -> None:
        api, _ = running
        await api.create(SANDBOX_TEMPLATES, NS, _template())
        await eventually(lambda: _spec(api) is not None)
        await api.patch(
            SANDBOX_TEMPLATES, NS, "tpl", {"spec": {"networkPolicyManagement": "Unmanaged"}}
        )
        await eventually(lambda: api.obj(NETWORK_POLICIES, NP) is None)


def test_foreign_policy_mapper() -> None:
    api = FakeApi(default_namespace=NS)
    template = api.add(SANDBOX_TEMPLATES, _template())
    mapper = foreign_policy_mapper(api.reader(SANDBOX_TEMPLATES))

    def policy(name: str, refs: list[Obj] | None = None) -> Obj:
        meta: Obj = {"name": name, "namespace": NS}
        if refs is not None:
            meta["ownerReferences"] = refs
        return {"metadata": meta}

    owned = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "name": "tpl",
        "uid": template["metadata"]["uid"],
        "controller": True,
    }
    other = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "d",
        "uid": "x",
        "controller": True,
    }
    assert list(mapper(policy(NP))) == [Request(NS, "tpl")]
    assert list(mapper(policy(NP, [other]))) == [Request(NS, "tpl")]
    assert list(mapper(policy(NP, [owned]))) == []  # the owner handler maps it
    assert list(mapper(policy("other-network-policy"))) == []  # no such template
    assert list(mapper(policy("tpl"))) == []  # not a template policy name


def test_rbac_rules_cover_what_the_controller_does() -> None:
    rules = {
        (group, resource): set(r.verbs)
        for r in rbac.normalize_rules(RBAC_RULES)
        for group in r.api_groups
        for resource in r.resources
    }
    assert rules == {
        ("extensions.agents.x-k8s.io", "sandboxtemplates"): {
            "get",
            "list",
            "watch",
            "patch",
            "update",
        },
        ("extensions.agents.x-k8s.io", "sandboxtemplates/finalizers"): {"get", "patch", "update"},
        ("networking.k8s.io", "networkpolicies"): {
            "get",
            "list",
            "watch",
            "create",
            "update",
            "delete",
        },
        ("", "events"): {"create", "patch"},
        ("events.k8s.io", "events"): {"create", "patch"},
    }
