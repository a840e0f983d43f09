"""A platform team's own reconciler, running in the same manager as the Sandbox controller.

The team wants a per-namespace usage report that its billing tools read: a ConfigMap
``sandbox-usage`` whose ``data.sandboxes`` is the number of Sandboxes in the namespace. The
reconciler is a few lines on the public runtime API; it is packaged as a ``ControllerPlugin``
(setup + RBAC rules), exactly like the Sandbox controller, and both are installed on one
Manager: one process, one set of caches, one metrics endpoint.

Usage::

    python embedding_own_reconciler.py --kubeconfig ~/.kube/config --namespace team-a

The integration test ``test_embedding_examples.py`` runs this file against a real cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import logging
from collections.abc import Sequence
from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.plugins import ControllerPlugin, install_plugin
from kube_agent_sandbox.controller.rbac import rule
from kube_agent_sandbox.controller.runtime import (
    ApiClient,
    ApiError,
    Client,
    ControllerBuilder,
    EventRecorder,
    Manager,
    Obj,
    Reader,
    Request,
    Resource,
    Result,
    create_merge_patch,
    load_config,
)
from kube_agent_sandbox.controller.sandbox import plugin as sandbox_plugin

# --8<-- [start:reconciler]
SANDBOXES: Final = Resource(c.GROUP, c.V1BETA1, "sandboxes", c.KIND_SANDBOX)
CONFIG_MAPS: Final = Resource("", "v1", "configmaps", "ConfigMap")
USAGE_NAME: Final = "sandbox-usage"
USAGE_LABEL: Final = "platform.example.com/report"


def usage_request(sandbox: Obj) -> list[Request]:
    """Any change to a Sandbox means its namespace's report may be stale."""
    return [Request(sandbox["metadata"]["namespace"], USAGE_NAME)]


def is_usage_report(old: Obj | None, new: Obj | None) -> bool:
    """Only the report ConfigMap itself triggers a reconcile (someone edited or deleted it)."""
    obj = new if new is not None else old
    return obj is not None and obj["metadata"]["name"] == USAGE_NAME


class SandboxUsageReconciler:
    """Keeps ``sandbox-usage`` in each namespace equal to the number of its Sandboxes."""

    def __init__(
        self, client: Client, *, sandboxes: Reader, reports: Reader, recorder: EventRecorder
    ) -> None:
        self.client = client
        self.sandboxes = sandboxes
        self.reports = reports
        self.recorder = recorder

    async def reconcile(self, request: Request) -> Result:
        """Level-triggered: count from the cache, write only what differs."""
        count = len(self.sandboxes.list(request.namespace))
        data = {"sandboxes": str(count)}
        current = self.reports.get(request.namespace, USAGE_NAME)
        if current is None:
            if count == 0:
                return Result()  # nothing to report, nothing to create
            report: Obj = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": USAGE_NAME, "labels": {USAGE_LABEL: "usage"}},
                "data": data,
            }
            try:
                created = await self.client.create(CONFIG_MAPS, request.namespace, report)
            except ApiError as err:
                if not err.already_exists:
                    raise  # retried with backoff
                return Result()  # the cache lags behind: the event of the object will follow
            self.recorder.event(
                created,
                type_="Normal",
                reason="Created",
                action="Create",
                note=f"{count} sandboxes",
            )
            return Result()
        desired = copy.deepcopy(current)  # cached objects are shared: never change them
        desired["data"] = data
        patch = create_merge_patch(current, desired)
        if patch:
            await self.client.patch(CONFIG_MAPS, request.namespace, USAGE_NAME, patch)
        return Result()


def register_usage(manager: Manager, options: ControllerOptions) -> None:
    """The plugin's setup: caches and the controller, wired with the builder."""
    reports = manager.informer(CONFIG_MAPS, label_selector=USAGE_LABEL)  # only our ConfigMaps
    reconciler = SandboxUsageReconciler(
        manager.client,
        sandboxes=manager.reader(SANDBOXES),  # the cache the Sandbox controller uses too
        reports=reports,
        recorder=manager.event_recorder("sandbox-usage-controller"),
    )
    (
        ControllerBuilder(manager, "sandbox-usage")
        .for_resource(CONFIG_MAPS, predicate=is_usage_report)
        .watches(SANDBOXES, usage_request)
        .with_workers(2)
        .complete(reconciler)
    )


usage_plugin: Final = ControllerPlugin(
    name="sandbox-usage",
    setup=register_usage,
    rbac_rules=(
        rule(c.GROUP, "sandboxes", ("get", "list", "watch")),
        rule("", "configmaps", ("get", "list", "watch", "create", "patch")),
        rule("events.k8s.io", "events", ("create", "patch")),
    ),
)
# --8<-- [end:reconciler]


# --8<-- [start:main]
async def run(args: argparse.Namespace) -> None:
    """Both plugins on one manager, until SIGTERM/SIGINT."""
    async with ApiClient(load_config(args.kubeconfig), qps=50, burst=100) as client:
        manager = Manager(
            client,
            namespace=args.namespace,
            metrics_bind_address=args.metrics_bind_address,
            health_bind_address=args.health_probe_bind_address,
        )
        options = ControllerOptions()
        install_plugin(sandbox_plugin, manager, options)  # ours
        install_plugin(usage_plugin, manager, options)  # the platform team's
        await manager.run_until_signal()


# --8<-- [end:main]


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", default=None)
    parser.add_argument("--namespace", default=None, help="reconcile only this namespace")
    parser.add_argument("--metrics-bind-address", default=":8080")
    parser.add_argument("--health-probe-bind-address", default=":8081")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
