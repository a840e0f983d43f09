"""Run the Sandbox controller inside your own program.

A platform team that ships its own operator binary can host the Sandbox controller in it:
build a Manager, install the core Sandbox plugin on it, run. This is what
``agent-sandbox-controller`` itself does, minus its flags, webhook and extensions.

Usage::

    python embedding_sandbox_controller.py --kubeconfig ~/.kube/config \
        --namespace team-a --lease-namespace team-a

The integration test ``test_embedding_examples.py`` runs this file against a real cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Sequence

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.config import ControllerOptions
from kube_agent_sandbox.controller.plugins import install_plugin
from kube_agent_sandbox.controller.runtime import (
    ApiClient,
    LeaderElectionConfig,
    Manager,
    load_config,
)
from kube_agent_sandbox.controller.sandbox import plugin as sandbox_plugin


async def run(args: argparse.Namespace) -> None:
    """Build the manager, install the Sandbox controller and run until SIGTERM/SIGINT."""
    config = load_config(args.kubeconfig)
    leader_election = None
    if args.lease_namespace:
        # One replica reconciles at a time; the Lease name is the one the generated RBAC grants.
        leader_election = LeaderElectionConfig(
            lease_name=c.LEADER_ELECTION_ID, lease_namespace=args.lease_namespace
        )
    async with ApiClient(config, qps=50, burst=100) as client:
        manager = Manager(
            client,
            leader_election=leader_election,
            namespace=args.namespace,  # None: every namespace
            metrics_bind_address=args.metrics_bind_address,
            health_bind_address=args.health_probe_bind_address,
        )
        # The controller's settings are the command's flags, as a dataclass.
        options = ControllerOptions(sandbox_concurrent_workers=4)
        install_plugin(sandbox_plugin, manager, options)
        await manager.run_until_signal()


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the arguments and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", default=None)
    parser.add_argument("--namespace", default=None, help="reconcile only this namespace")
    parser.add_argument("--lease-namespace", default=None, help="enable leader election")
    parser.add_argument("--metrics-bind-address", default=":8080")
    parser.add_argument("--health-probe-bind-address", default=":8081")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
