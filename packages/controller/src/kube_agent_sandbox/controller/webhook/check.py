"""Wait until the API server converts Sandboxes through the conversion webhook.

``python3 -m kube_agent_sandbox.controller.webhook.check`` is the Helm chart's post-install and
post-upgrade hook (``conversionCheck``): ``helm install`` reports success only once a request
that needs conversion goes through. A Ready controller Pod is not enough: the Service's
endpoints and the Service routing on the API server's side (kube-proxy rules, an endpoint
resolver) catch up with the Pod's readiness asynchronously, and until they have, the API server
reaches the webhook Service's ClusterIP with nothing behind it ("connect: connection refused").

The probe is a server-side dry-run create of a ``v1alpha1`` Sandbox: the API server converts it
to the storage version (``v1beta1``) and back, so the webhook is called, and nothing is stored.
It needs ``create`` on ``sandboxes.agents.x-k8s.io`` in one namespace and no object to exist.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Final

import aiohttp

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.rest import Resource, resource_path
from kube_agent_sandbox.controller.runtime import ApiClient, ApiError, Obj, load_config

logger = logging.getLogger(__name__)

__all__ = [
    "PROBE_RESOURCE",
    "ConversionCheckTimeout",
    "main",
    "probe_sandbox",
    "wait_for_conversion",
]

#: The served version that is not the storage version: writing through it needs the webhook.
PROBE_RESOURCE: Final = Resource(c.GROUP, c.V1ALPHA1, "sandboxes", "Sandbox")
FIELD_MANAGER: Final = "agent-sandbox-conversion-check"
SERVICE_ACCOUNT_NAMESPACE_FILE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
#: Conversions that must succeed in a row: with several API servers (each with its own Service
#: routing) or replicas, one answer may have been the lucky one.
DEFAULT_SUCCESSES: Final = 3


class ConversionCheckTimeout(Exception):
    """Conversion did not work within the time allowed; the message has the last error."""


def probe_sandbox() -> Obj:
    """The smallest valid ``v1alpha1`` Sandbox (never stored: it is only dry-run created)."""
    return {
        "apiVersion": PROBE_RESOURCE.api_version,
        "kind": PROBE_RESOURCE.kind,
        "metadata": {"generateName": "conversion-check-"},
        "spec": {
            "podTemplate": {"spec": {"containers": [{"name": "probe", "image": "probe"}]}},
        },
    }


def dry_run_params() -> dict[str, str]:
    """Query parameters of the probe: a server-side dry run (nothing is persisted)."""
    return {"dryRun": "All", "fieldManager": FIELD_MANAGER}


async def wait_for_conversion(
    convert: Callable[[], Awaitable[object]],
    *,
    within: float,
    interval: float = 1.0,
    successes: int = DEFAULT_SUCCESSES,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> int:
    """Call ``convert`` until it succeeds ``successes`` times in a row.

    Every error counts as "not yet": the Service may have no ready endpoint, the API server's
    routing to it may lag, the CRD may not be served yet, the hook's RoleBinding may not be
    seen by the authorizer yet. A failure after a success starts the count again.

    Args:
        convert: One request that the API server can answer only through the webhook.
        within: Seconds before giving up.
        interval: Seconds between attempts.
        successes: Consecutive successes needed.
        clock: Monotonic clock (tests).
        sleep: Sleep (tests).

    Returns:
        The number of attempts made.

    Raises:
        ConversionCheckTimeout: not enough consecutive successes ``within`` seconds.
    """
    deadline = clock() + within
    attempts = streak = 0
    last_error = ""
    while True:
        attempts += 1
        try:
            await convert()
        except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as err:
            streak = 0
            message = str(err)
            if message != last_error:
                logger.info("conversion not working yet: %s", message)
            last_error = message
        else:
            streak += 1
            if streak >= successes:
                return attempts
        if clock() >= deadline:
            raise ConversionCheckTimeout(
                f"the API server did not convert {PROBE_RESOURCE.plural}.{PROBE_RESOURCE.group} "
                f"{PROBE_RESOURCE.version} {successes} times in a row within {within:g}s "
                f"({attempts} attempts); last error: {last_error or 'none'}"
            )
        await sleep(interval)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python3 -m kube_agent_sandbox.controller.webhook.check",
        description="Wait until the API server converts Sandboxes through the conversion "
        "webhook (a dry-run create of a v1alpha1 Sandbox).",
    )
    parser.add_argument(
        "--namespace",
        default="",
        help="namespace of the dry-run create (default: the Pod's own namespace)",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds (default 300)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between attempts")
    parser.add_argument(
        "--successes",
        type=int,
        default=DEFAULT_SUCCESSES,
        help=f"consecutive successes needed (default {DEFAULT_SUCCESSES})",
    )
    parser.add_argument("--kubeconfig", default="", help="default: $KUBECONFIG, else in-cluster")
    return parser.parse_args(argv)


def _namespace(flag: str) -> str:
    if flag:
        return flag
    try:
        return Path(SERVICE_ACCOUNT_NAMESPACE_FILE).read_text(encoding="utf-8").strip()
    except OSError:
        return "default"


async def _run(args: argparse.Namespace) -> int:
    config = load_config(args.kubeconfig or None)
    namespace = _namespace(args.namespace)
    path = resource_path(PROBE_RESOURCE, namespace)
    async with ApiClient(config, max_connections=2, request_timeout=35.0) as client:

        async def convert() -> object:
            return await client.request("POST", path, params=dry_run_params(), body=probe_sandbox())

        started = time.monotonic()
        try:
            attempts = await wait_for_conversion(
                convert, within=args.timeout, interval=args.interval, successes=args.successes
            )
        except ConversionCheckTimeout as err:
            logger.error("%s", err)
            return 1
    logger.info(
        "the API server converts through the webhook (%d attempts, %.1fs)",
        attempts,
        time.monotonic() - started,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the check; exit status 0 once conversion works, 1 on timeout."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    return asyncio.run(_run(_parse(argv)))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
