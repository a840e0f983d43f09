"""The CPU veto: is an idle-looking sandbox still busy computing?

CPU use alone cannot tell idle from busy (an agent waiting on a model is idle on CPU and very
much alive), so it only ever keeps a sandbox, never suspends one. It needs metrics.k8s.io
(metrics-server); a cluster without it skips the veto, and the reconciler says so.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Final

from kube_agent_sandbox.api.rest import POD_METRICS
from kube_agent_sandbox.controller.runtime import ApiError, Client, Obj

__all__ = ["CpuReading", "cpu_millicores", "parse_cpu_quantity", "read_pod_cpu"]

log = logging.getLogger(__name__)

_QUANTITY: Final = re.compile(r"^([0-9.]+)(n|u|m|k|M|G)?$")
_SCALE: Final = {
    None: Decimal(1000),
    "n": Decimal("0.000001"),
    "u": Decimal("0.001"),
    "m": Decimal(1),
    "k": Decimal(1000000),
    "M": Decimal(1000000000),
    "G": Decimal(1000000000000),
}


def parse_cpu_quantity(text: str) -> float:
    """A CPU quantity (``250m``, ``1``, ``123456789n``) in millicores.

    Raises:
        ValueError: not a CPU quantity.
    """
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise ValueError(f"not a CPU quantity: {text!r}")
    try:
        number = Decimal(match.group(1))
    except InvalidOperation:
        raise ValueError(f"not a CPU quantity: {text!r}") from None
    return float(number * _SCALE[match.group(2)])


def cpu_millicores(pod_metrics: Obj) -> float:
    """Total CPU usage of a PodMetrics object's containers, in millicores."""
    total = 0.0
    for container in pod_metrics.get("containers") or ():
        usage = (container.get("usage") or {}).get("cpu")
        if usage:
            total += parse_cpu_quantity(str(usage))
    return total


@dataclass(frozen=True, slots=True)
class CpuReading:
    """The outcome of one metrics read.

    Attributes:
        millicores: The pod's usage; None when no reading could be made.
        unavailable: Why there is no reading (empty when there is one).
    """

    millicores: float | None
    unavailable: str = ""


async def read_pod_cpu(client: Client, namespace: str, pod: str) -> CpuReading:
    """Read a pod's CPU usage from metrics.k8s.io; never raises for a missing API.

    Args:
        client: The API client.
        namespace: The pod's namespace.
        pod: The pod's name.
    """
    try:
        metrics = await client.get(POD_METRICS, namespace, pod)
    except ApiError as err:
        return CpuReading(None, f"metrics.k8s.io unavailable ({err.status} {err.reason})")
    try:
        return CpuReading(cpu_millicores(metrics))
    except ValueError as err:
        log.warning("unreadable PodMetrics", extra={"pod": f"{namespace}/{pod}", "error": str(err)})
        return CpuReading(None, f"unreadable PodMetrics: {err}")
