"""``--sync-period`` repairs drift that no watch event reports (real kube-apiserver, kwok nodes).

Another client removes the tracking label (``agents.x-k8s.io/sandbox-name-hash``) from a
Sandbox's Pod and Service. The Sandbox controller's owned-object predicate only passes children
that carry that label, so the removal reaches no reconcile: the drift stays, unless the periodic
resync reconciles every Sandbox again. With a 2 s sync period both children get their label
back; with resync off (the control case) they stay unlabelled, so the test can fail.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS, SERVICES
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.runtime import Obj, Resource
from kube_agent_sandbox.testing.nsapi import NamespaceApi

pytestmark = pytest.mark.integration

SYNC_PERIOD = 2.0
LABEL = c.LABEL_SANDBOX_NAME_HASH
DRIFT_WINDOW = 6.0
"""Seconds the control case waits: three sync periods (with jitter) of the other case."""


@pytest.fixture
async def env(
    cluster: Any, namespace: str, sandbox_controller: object
) -> AsyncIterator[NamespaceApi]:
    async with NamespaceApi.connect(cluster.kubeconfig, namespace) as api:
        yield api


def labels(obj: Obj | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


async def sandbox_with_children(env: NamespaceApi, name: str) -> str:
    """Create a Sandbox with a Service; return the tracking label value once both exist."""
    spec = {
        "service": True,
        "podTemplate": {"spec": {"containers": [{"name": "c", "image": "pause:3.10"}]}},
    }
    await env.create(SANDBOXES, {"metadata": {"name": name}, "spec": spec})

    async def settled() -> str | None:
        # Ready: the pod runs, so no pod status change (and no reconcile) is still to come
        sandbox = await env.get(SANDBOXES, name)
        conditions = ((sandbox or {}).get("status") or {}).get("conditions") or ()
        if not any(cd["type"] == "Ready" and cd["status"] == "True" for cd in conditions):
            return None
        pod, svc = await env.get(PODS, name), await env.get(SERVICES, name)
        value = labels(pod).get(LABEL)
        return value if value and labels(svc).get(LABEL) == value else None

    value = await env.until(settled, f"{name} Ready, pod and service with {LABEL}")
    await asyncio.sleep(1.0)  # let the last status write's own event be handled
    return value


async def strip_label(env: NamespaceApi, resource: Resource, name: str) -> None:
    await env.patch(resource, name, {"metadata": {"labels": {LABEL: None}}})


class TestResyncRepairsHiddenDrift:
    controller_options: ClassVar[ControllerOptions] = ControllerOptions(sync_period=SYNC_PERIOD)

    async def test_removed_tracking_labels_come_back(self, env: NamespaceApi) -> None:
        value = await sandbox_with_children(env, "drift")
        started = time.monotonic()
        await strip_label(env, PODS, "drift")
        await strip_label(env, SERVICES, "drift")

        async def repaired() -> bool:
            pod, svc = await env.get(PODS, "drift"), await env.get(SERVICES, "drift")
            return labels(pod).get(LABEL) == value and labels(svc).get(LABEL) == value

        await env.until(repaired, "tracking labels restored by the resync")
        took = time.monotonic() - started
        # one resync (period + 10% jitter) plus a reconcile; generous for a loaded machine
        assert took < 3 * SYNC_PERIOD + 10, took


class TestWithoutResyncTheDriftStays:
    controller_options: ClassVar[ControllerOptions] = ControllerOptions(sync_period=0)

    async def test_removed_tracking_labels_stay_removed(self, env: NamespaceApi) -> None:
        await sandbox_with_children(env, "drift")
        await strip_label(env, PODS, "drift")
        await strip_label(env, SERVICES, "drift")
        await asyncio.sleep(DRIFT_WINDOW)
        assert LABEL not in labels(await env.get(PODS, "drift"))
        assert LABEL not in labels(await env.get(SERVICES, "drift"))
