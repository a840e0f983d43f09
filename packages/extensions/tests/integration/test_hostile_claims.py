"""Hostile templates, pools and claims through the real apiserver, and objects that vanish.

hypothesis draws scenarios of a SandboxTemplate (deep pod spec, huge or unicode metadata, or
none at all), a SandboxWarmPool referring to it (or to a template that does not exist) and a
SandboxClaim referring to the pool (or to a missing one), with names at every length limit
and ``additionalPodMetadata`` of any kind; then, mid-reconcile, the template, the pool or the
claim's Sandbox may be deleted after a drawn delay. For every accepted claim the controllers
must report a ``Ready`` condition or an Event, nothing may crash, and no object may be
reconciled faster than its backoff allows over a quiet window; a plain claim is served after.

A second test draws claims whose ``additionalPodMetadata`` names restricted labels or
annotations (Kubernetes and agent-sandbox domains): each must end ``InvalidMetadata`` with no
Sandbox created for it, so a claim can never put such metadata on a pod.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

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

VANISH = ("nothing", "template", "pool", "sandbox")
_RESTRICTED_DOMAINS = ("kubernetes.io", "k8s.io", "agents.x-k8s.io", "node.k8s.io")


class Api:
    """Sync dynamic-client handles of the extension kinds in one namespace."""

    def __init__(self, cluster: ClusterAccess, namespace: str) -> None:
        """Look the kinds up once."""
        dyn = cluster.dynamic()
        self.namespace = namespace
        self.kinds = {
            kind: dyn.resources.get(api_version=version, kind=kind)
            for kind, version in (
                (c.KIND_SANDBOX_TEMPLATE, c.EXTENSIONS_API_VERSION),
                (c.KIND_SANDBOX_WARM_POOL, c.EXTENSIONS_API_VERSION),
                (c.KIND_SANDBOX_CLAIM, c.EXTENSIONS_API_VERSION),
                (c.KIND_SANDBOX, c.SANDBOX_API_VERSION),
            )
        }

    def create(self, kind: str, name: str, spec: Obj, **meta: Any) -> Obj | None:
        """Create; None when the apiserver rejects the object."""
        resource = self.kinds[kind]
        body = {
            "apiVersion": resource.group_version,
            "kind": kind,
            "metadata": {"name": name, **meta},
            "spec": spec,
        }
        return create_or_rejected(
            lambda: resource.create(body=body, namespace=self.namespace).to_dict()
        )

    def get(self, kind: str, name: str) -> Obj | None:
        """The object, or None when it does not exist."""
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            found: Obj = self.kinds[kind].get(name=name, namespace=self.namespace).to_dict()
        except NotFoundError:
            return None
        return found

    def delete(self, kind: str, name: str) -> None:
        """Delete, ignoring an object already gone."""
        from kubernetes.dynamic.exceptions import NotFoundError

        with contextlib.suppress(NotFoundError):
            self.kinds[kind].delete(name=name, namespace=self.namespace)


def poll(probe: Callable[[], Any], *, timeout: float, step: float = 0.2) -> Any:
    """The first truthy result of ``probe`` within ``timeout`` seconds, else None."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(step)


def claim_sandbox(api: Api, claim: str) -> str | None:
    """The name of the Sandbox a claim reports, if any."""
    obj = api.get(c.KIND_SANDBOX_CLAIM, claim) or {}
    return ((obj.get("status") or {}).get("sandbox") or {}).get("name")


def wait_claim_ready(api: Api, name: str) -> Obj:
    """Wait until the claim is Ready=True; fail with its last state otherwise."""
    found = poll(
        lambda: (
            (obj := api.get(c.KIND_SANDBOX_CLAIM, name))
            and conditions(obj).get("Ready", {}).get("status") == "True"
            and obj
        ),
        timeout=REPORT_WAIT,
    )
    assert found, f"claim {name} not Ready: {api.get(c.KIND_SANDBOX_CLAIM, name)}"
    return dict(found)


class TestHostileClaims:
    def test_scenarios_are_reported_without_crash_or_hot_loop(
        self,
        cluster: ClusterAccess,
        namespace: str,
        probes: tuple[ReconcileLog, ErrorLog],
    ) -> None:
        reconciles, errors = probes
        api = Api(cluster, namespace)
        index = itertools.count()
        claims: set[str] = set()
        watched: set[str] = set()
        outcomes: list[str] = []

        @fuzz_settings(scale=0.75)
        @given(
            template=st.one_of(st.none(), pod_template()),
            template_meta=st.fixed_dictionaries({}, optional={"annotations": annotations()}),
            pool_replicas=st.integers(0, 1),
            pool_refers_missing=st.booleans(),
            claim_name=dns_subdomain(),
            pod_metadata=st.fixed_dictionaries(
                {}, optional={"labels": labels(), "annotations": annotations()}
            ),
            vanish=st.sampled_from(VANISH),
            delay=st.sampled_from([0.0, 0.05, 0.3, 1.0]),
        )
        def scenario(
            template: Obj | None,
            template_meta: Obj,
            pool_replicas: int,
            pool_refers_missing: bool,
            claim_name: str,
            pod_metadata: Obj,
            vanish: str,
            delay: float,
        ) -> None:
            i = next(index)
            tpl, pool = f"tpl-{i}", f"pool-{i}"
            claim = unique_name(claim_name, i)
            if template is not None:
                api.create(c.KIND_SANDBOX_TEMPLATE, tpl, {"podTemplate": template}, **template_meta)
                watched.add(tpl)
            pool_spec = {
                "replicas": pool_replicas,
                "sandboxTemplateRef": {"name": f"missing-{i}" if pool_refers_missing else tpl},
            }
            if api.create(c.KIND_SANDBOX_WARM_POOL, pool, pool_spec) is not None:
                watched.add(pool)
            spec: Obj = {"warmPoolRef": {"name": pool}}
            if pod_metadata:
                spec["additionalPodMetadata"] = pod_metadata
            if api.create(c.KIND_SANDBOX_CLAIM, claim, spec) is None:
                outcomes.append("claim rejected")
                return
            claims.add(claim)
            watched.add(claim)
            time.sleep(delay)
            if vanish == "template":
                api.delete(c.KIND_SANDBOX_TEMPLATE, tpl)
            elif vanish == "pool":
                api.delete(c.KIND_SANDBOX_WARM_POOL, pool)
            elif vanish == "sandbox":
                sandbox = poll(lambda: claim_sandbox(api, claim), timeout=2.0)
                if sandbox:
                    api.delete(c.KIND_SANDBOX, sandbox)
            outcomes.append(f"vanish={vanish}")

        scenario()
        _log.info("hostile claim scenarios: %s", sorted(outcomes))
        assert claims, "the strategy drew no claim the apiserver accepts"
        wait_reported(
            cluster,
            namespace,
            claims,
            kind=c.KIND_SANDBOX_CLAIM,
            api_version=c.EXTENSIONS_API_VERSION,
        )
        seen = {name for _, name in reconciles.counts(since=0.0, until=time.monotonic())}
        assert seen >= claims, "the reconcile log missed claims"
        counts = assert_no_hot_loop(reconciles, names=watched)
        assert not errors.crashes, errors.describe()
        for claim in sorted(claims):
            ready = conditions(api.get(c.KIND_SANDBOX_CLAIM, claim) or {}).get("Ready", {})
            _log.info(
                "claim len=%d %s/%s reconciles=%d: %.100s",
                len(claim),
                ready.get("status"),
                ready.get("reason"),
                counts.get(f"sandboxclaim/{claim}", 0),
                ready.get("message", ""),
            )

        # still serving: a plain template, pool and claim
        api.create(
            c.KIND_SANDBOX_TEMPLATE,
            "plain",
            {"podTemplate": {"spec": {"containers": [{"name": "p", "image": PAUSE}]}}},
        )
        api.create(
            c.KIND_SANDBOX_WARM_POOL,
            "plain",
            {"replicas": 1, "sandboxTemplateRef": {"name": "plain"}},
        )
        api.create(c.KIND_SANDBOX_CLAIM, "plain-after-fuzz", {"warmPoolRef": {"name": "plain"}})
        wait_claim_ready(api, "plain-after-fuzz")

    def test_claims_cannot_set_restricted_pod_metadata(
        self,
        cluster: ClusterAccess,
        namespace: str,
        probes: tuple[ReconcileLog, ErrorLog],
    ) -> None:
        _, errors = probes
        api = Api(cluster, namespace)
        api.create(
            c.KIND_SANDBOX_TEMPLATE,
            "tpl",
            {"podTemplate": {"spec": {"containers": [{"name": "p", "image": PAUSE}]}}},
        )
        api.create(
            c.KIND_SANDBOX_WARM_POOL, "pool", {"replicas": 0, "sandboxTemplateRef": {"name": "tpl"}}
        )
        index = itertools.count()
        drawn: dict[str, Obj] = {}

        restricted_key = st.builds(
            lambda sub, domain, name: f"{sub}{domain}/{name}",
            st.sampled_from(["", "sub.", "a.b."]),
            st.sampled_from(_RESTRICTED_DOMAINS),
            st.from_regex(r"\A[a-z]([-a-z0-9]{0,10}[a-z0-9])?\Z"),
        )

        @fuzz_settings(scale=0.5)
        @given(
            where=st.sampled_from(["labels", "annotations"]),
            key=restricted_key,
            value=st.from_regex(r"\A[a-z0-9]{0,10}\Z"),
        )
        def claim(where: str, key: str, value: str) -> None:
            if key == c.ANNOTATION_SAFE_TO_EVICT:
                return  # the one allowed key of a restricted domain
            name = f"restricted-{next(index)}"
            metadata = {where: {key: value}}
            spec = {"warmPoolRef": {"name": "pool"}, "additionalPodMetadata": metadata}
            assert api.create(c.KIND_SANDBOX_CLAIM, name, spec) is not None, metadata
            drawn[name] = metadata

        claim()
        for name, metadata in drawn.items():
            ready = poll(
                lambda name=name: conditions(api.get(c.KIND_SANDBOX_CLAIM, name) or {}).get(
                    "Ready"
                ),
                timeout=REPORT_WAIT,
            )
            assert ready, f"claim {name} with {metadata} got no Ready condition"
            assert (ready["status"], ready["reason"]) == ("False", c.REASON_INVALID_METADATA), (
                metadata,
                ready,
            )
            assert claim_sandbox(api, name) is None, f"{name} got a Sandbox despite {metadata}"
            assert api.get(c.KIND_SANDBOX, name) is None
        assert not errors.crashes, errors.describe()
