"""Reading the controller's Prometheus ``/metrics`` page.

Only what the benchmarks need: sums of counters/gauges filtered by labels, and quantiles of a
histogram estimated from its buckets by linear interpolation (as Prometheus'
``histogram_quantile`` does).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp
from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Sample:
    """One sample line: metric name (with suffix), labels and value."""

    name: str
    labels: Mapping[str, str]
    value: float


class Scrape:
    """The parsed samples of one ``/metrics`` page."""

    def __init__(self, text: str) -> None:
        """Parse Prometheus text format.

        Args:
            text: The page body.
        """
        self.samples: list[Sample] = [
            Sample(s.name, dict(s.labels), float(s.value))
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]

    def total(self, metric: str, /, **labels: str) -> float | None:
        """Sum of every sample called ``metric`` whose labels include ``labels``; None if none."""
        found = [s.value for s in self.samples if s.name == metric and _match(s.labels, labels)]
        return sum(found) if found else None

    def by_label(self, metric: str, label: str, /, **labels: str) -> dict[str, float]:
        """Values of ``metric`` summed per value of ``label``."""
        out: dict[str, float] = {}
        for s in self.samples:
            if s.name == metric and _match(s.labels, labels):
                key = s.labels.get(label, "")
                out[key] = out.get(key, 0.0) + s.value
        return out

    def quantile(self, histogram: str, q: float, /, **labels: str) -> float | None:
        """Estimate the ``q`` quantile of a histogram from its cumulative buckets.

        Args:
            histogram: Histogram name without the ``_bucket`` suffix.
            q: Quantile in [0, 1].
            **labels: Label filter (buckets matching it are summed per ``le``).

        Returns:
            The estimate, or None when the histogram has no observations.
        """
        buckets: dict[float, float] = {}
        for s in self.samples:
            if s.name == f"{histogram}_bucket" and _match(s.labels, labels):
                le = float(s.labels["le"])
                buckets[le] = buckets.get(le, 0.0) + s.value
        return histogram_quantile(q, buckets)


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """Prometheus-style quantile from cumulative bucket counts keyed by upper bound.

    Args:
        q: Quantile in [0, 1].
        buckets: ``le`` -> cumulative count (must include ``+Inf`` to be meaningful).

    Returns:
        The estimate, or None when there are no observations.
    """
    if not buckets:
        return None
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower_bound  # the highest finite bound, as Prometheus answers
            if count == lower_count:
                return bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (
                count - lower_count
            )
        lower_bound, lower_count = bound, count
    return lower_bound


def _match(have: Mapping[str, str], want: Mapping[str, str]) -> bool:
    return all(have.get(k) == v for k, v in want.items())


async def scrape(url: str, *, within: float = 10.0) -> Scrape:
    """Fetch and parse a ``/metrics`` page.

    Args:
        url: Full URL of the page.
        within: Seconds for the request.

    Returns:
        The parsed samples.
    """
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=within)) as session,
        session.get(url) as response,
    ):
        response.raise_for_status()
        return Scrape(await response.text())


WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY"})
"""kube-apiserver verbs that change state (``APPLY`` is server-side apply)."""

RequestKey = tuple[str, str]
"""``(verb, resource[/subresource])`` as kube-apiserver labels its requests."""


def apiserver_requests(page: Scrape) -> dict[RequestKey, float]:
    """kube-apiserver's ``apiserver_request_total`` summed per verb and resource.

    Codes, scopes, groups and versions are summed together; a subresource is appended to its
    resource (``sandboxes/status``). Requests without a resource (``/healthz``, discovery) are
    keyed by an empty resource.

    Args:
        page: A scrape of kube-apiserver's ``/metrics``.

    Returns:
        ``(verb, resource)`` -> request count.
    """
    out: dict[RequestKey, float] = {}
    for sample in page.samples:
        if sample.name != "apiserver_request_total":
            continue
        labels = sample.labels
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        key = (labels.get("verb", ""), resource)
        out[key] = out.get(key, 0.0) + sample.value
    return out


def request_delta(
    after: Mapping[RequestKey, float], before: Mapping[RequestKey, float]
) -> dict[RequestKey, float]:
    """Requests served between two readings (keys with no new request left out).

    A counter lower than before means the server restarted in between; its whole value after
    the restart is taken as the delta.
    """
    out: dict[RequestKey, float] = {}
    for key, value in after.items():
        grown = value - before.get(key, 0.0)
        if grown < 0:
            grown = value
        if grown > 0:
            out[key] = grown
    return out


def writes(requests: Mapping[RequestKey, float]) -> float:
    """Total of the mutating requests among ``requests``."""
    return sum(v for (verb, _), v in requests.items() if verb in WRITE_VERBS)


def per_unit(requests: Mapping[RequestKey, float], units: int) -> dict[str, float]:
    """Requests per unit of work, keyed ``"VERB resource"``, largest first.

    Args:
        requests: A delta from :func:`request_delta`.
        units: Claims or Sandboxes the delta was spent on.

    Returns:
        ``"VERB resource"`` -> requests per unit (empty when ``units`` is not positive).
    """
    if units <= 0:
        return {}
    rows = sorted(requests.items(), key=lambda item: (-item[1], item[0]))
    return {f"{verb} {resource}".rstrip(): value / units for (verb, resource), value in rows}
