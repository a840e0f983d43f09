"""Hostile Sandbox manifests through the real apiserver: reported, never a crash or a hot loop.

hypothesis draws Sandboxes with names at every length limit (1..253: a name longer than 63
characters, with a dot or starting with a digit cannot name the Service or be a pod hostname),
annotations up to and just past the 256 KiB limit, unicode label and annotation values (on the
Sandbox and on its pod template, where the apiserver's CRD schema does not check them but the
pod's validation does) and pod specs with many containers, env entries and volumes. What the
apiserver refuses ends there. For every Sandbox it accepts, the controller must:

- report it: a ``Ready`` condition (of any status) or an Event about it;
- not crash: no reconcile fails with anything but an API or connection error, and a plain
  Sandbox created afterwards still becomes Ready;
- not outrun its backoff: over a quiet window, no Sandbox is reconciled more often than
  per-key exponential backoff allows (see ``hostile.backoff_bound``).

``AGENT_SANDBOX_FUZZ_PROFILE=deep`` (or ``AGENT_SANDBOX_FUZZ_EXAMPLES=N``) draws more.
"""

from __future__ import annotations

import itertools
import logging
import time

import pytest
from hostile import (
    PAUSE,
    REPORT_WAIT,
    ErrorLog,
    ReconcileLog,
    annotations,
    assert_no_hot_loop,
    conditions,
    create_or_rejected,
    dns_subdomain,
    fuzz_settings,
    labels,
    pod_template,
    probes,
    unique_name,
    wait_reported,
)
from hypothesis import given
from hypothesis import strategies as st

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import Obj
from kube_agent_sandbox.testing.access import ClusterAccess

pytestmark = [
    pytest.mark.integration,
    # The API calls of each example (kubernetes client) touch the global `random`; hypothesis
    # reports that as if a strategy used it. No strategy here does.
    pytest.mark.filterwarnings(
        "ignore:Do not use the:hypothesis.errors.HypothesisDeprecationWarning"
    ),
]
_log = logging.getLogger(__name__)
__all__ = ["probes"]  # the fixture, imported so the tests here can use it


def summarize(cluster: ClusterAccess, namespace: str, counts: dict[str, int]) -> None:
    """Log how each accepted Sandbox was reported and how often it was reconciled."""
    items = (
        cluster.dynamic()
        .resources.get(api_version=c.SANDBOX_API_VERSION, kind=c.KIND_SANDBOX)
        .get(namespace=namespace)
        .to_dict()["items"]
    )
    for item in items:
        name = item["metadata"]["name"]
        ready = conditions(item).get("Ready", {})
        _log.info(
            "len=%d ready=%s/%s reconciles=%s: %.120s",
            len(name),
            ready.get("status"),
            ready.get("reason"),
            counts.get(f"sandbox/{name}", 0),
            ready.get("message", ""),
        )


class TestHostileSandboxes:
    extensions = ()

    def test_accepted_sandboxes_are_reported_without_crash_or_hot_loop(
        self,
        cluster: ClusterAccess,
        namespace: str,
        probes: tuple[ReconcileLog, ErrorLog],
    ) -> None:
        reconciles, errors = probes
        sandboxes = cluster.dynamic().resources.get(
            api_version=c.SANDBOX_API_VERSION, kind=c.KIND_SANDBOX
        )
        index = itertools.count()
        accepted: set[str] = set()
        rejected: list[str] = []

        @fuzz_settings()
        @given(
            name=dns_subdomain(),
            sandbox_labels=labels(valid=True),  # invalid ones: see the pod template
            sandbox_annotations=annotations(),
            template=pod_template(),
            service=st.booleans(),
        )
        def create(
            name: str,
            sandbox_labels: dict[str, str],
            sandbox_annotations: dict[str, str],
            template: Obj,
            service: bool,
        ) -> None:
            name = unique_name(name, next(index))
            body = {
                "apiVersion": c.SANDBOX_API_VERSION,
                "kind": c.KIND_SANDBOX,
                "metadata": {
                    "name": name,
                    "labels": sandbox_labels,
                    "annotations": sandbox_annotations,
                },
                "spec": {"podTemplate": template, "service": service},
            }
            created = create_or_rejected(
                lambda: sandboxes.create(body=body, namespace=namespace).to_dict()
            )
            (accepted.add(name) if created else rejected.append(name))

        create()
        _log.info("hostile sandboxes: %d accepted, %d rejected", len(accepted), len(rejected))
        assert accepted, "the strategy drew nothing the apiserver accepts"
        wait_reported(
            cluster, namespace, accepted, kind=c.KIND_SANDBOX, api_version=c.SANDBOX_API_VERSION
        )
        seen = reconciles.counts(since=0.0, until=time.monotonic())
        assert {name for _, name in seen} >= accepted, "the reconcile log missed Sandboxes"
        counts = assert_no_hot_loop(reconciles, names=accepted)
        assert not errors.crashes, errors.describe()
        summarize(cluster, namespace, counts)

        # still serving: a plain Sandbox becomes Ready
        sandboxes.create(
            body={
                "apiVersion": c.SANDBOX_API_VERSION,
                "kind": c.KIND_SANDBOX,
                "metadata": {"name": "plain-after-fuzz"},
                "spec": {"podTemplate": {"spec": {"containers": [{"name": "p", "image": PAUSE}]}}},
            },
            namespace=namespace,
        )
        deadline = time.monotonic() + REPORT_WAIT
        while time.monotonic() < deadline:
            ready = conditions(
                sandboxes.get(name="plain-after-fuzz", namespace=namespace).to_dict()
            )
            if ready.get("Ready", {}).get("status") == "True":
                break
            time.sleep(0.5)
        else:
            pytest.fail("a plain Sandbox did not become Ready after the hostile ones")
