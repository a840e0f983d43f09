"""Reconcile branches of the SandboxClaim controller against the in-memory API: the Recreate
update strategy, cleanup of legacy NetworkPolicies, tracing and terminating namespaces."""

from __future__ import annotations

from typing import Any

import pytest
from claim_test_support import (
    NOW,
    NS,
    LaggingReader,
    World,
)

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import (
    SANDBOX_CLAIMS,
    SANDBOX_TEMPLATES,
    SANDBOX_WARM_POOLS,
    SANDBOXES,
)
from kube_agent_sandbox.api.rest import NETWORK_POLICIES
from kube_agent_sandbox.controller.runtime import ApiError, Obj, Request
from kube_agent_sandbox.extensions.claim.reconciler import ClaimReconciler


def _recreate(w: World) -> None:
    w.api.mutate(
        SANDBOX_WARM_POOLS, "pool", lambda o: o["spec"].update(updateStrategy={"type": "Recreate"})
    )


async def test_recreate_accepts_go_hashed_member_whose_spec_matches() -> None:
    w = World()
    _recreate(w)
    member = w.member("pool-go")
    w.api.mutate(
        SANDBOXES,
        "pool-go",
        lambda o: o["spec"]["podTemplate"]["spec"].update(
            automountServiceAccountToken=False,
            dnsPolicy="None",
            dnsConfig={"nameservers": ["8.8.8.8", "1.1.1.1"]},
        ),
    )
    assert member["metadata"]["labels"][c.LABEL_SANDBOX_TEMPLATE_HASH] == "gohash"
    w.claim()
    await w.reconcile()
    assert w.get(SANDBOX_CLAIMS, "claim")["status"]["sandbox"]["name"] == "pool-go"


async def test_recreate_refuses_stale_member() -> None:
    w = World()
    _recreate(w)
    w.member("pool-stale")  # no secure defaults: not what the template makes today
    w.claim()
    await w.reconcile()
    assert w.get(SANDBOX_CLAIMS, "claim")["status"]["sandbox"]["name"] == "claim"
    assert w.queue.size(NS, "pool") == 0  # dropped: the pool replaces it
    assert w.get(SANDBOXES, "pool-stale")["metadata"]["ownerReferences"][0]["kind"] == (
        "SandboxWarmPool"
    )


def _legacy_policy(w: World, claim: str, *, owner: Obj | None, kind: str = "SandboxClaim") -> Obj:
    """A ``<claim>-network-policy`` as old controllers made it, controlled by ``owner``."""
    metadata: Obj = {"name": f"{claim}-network-policy"}
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "extensions.agents.x-k8s.io/v1alpha1",
                "kind": kind,
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    return w.api.add(NETWORK_POLICIES, {"metadata": metadata, "spec": {}})


def _policy_calls(w: World, verb: str) -> list[Any]:
    return [call for call in w.api.calls if call.plural == "networkpolicies" and call.verb == verb]


def _with_policy_cache(w: World, policies: Any = None) -> ClaimReconciler:
    return ClaimReconciler(
        w.api,
        claims=w.api.reader(SANDBOX_CLAIMS),
        sandboxes=w.api.reader(SANDBOXES),
        pools=w.api.reader(SANDBOX_WARM_POOLS),
        templates=w.api.reader(SANDBOX_TEMPLATES),
        queue=w.queue,
        clock=lambda: NOW,
        network_policies=policies if policies is not None else w.api.reader(NETWORK_POLICIES),
    )


async def test_legacy_network_policy_appearing_after_the_first_pass_is_deleted() -> None:
    w = World()
    mine = w.claim("mine")
    reconciler = _with_policy_cache(w)
    await reconciler.reconcile(Request(NS, "mine"))
    await reconciler.drain()
    policy = _legacy_policy(w, "mine", owner=mine)
    await reconciler.reconcile(Request(NS, "mine"))
    await reconciler.drain()
    assert w.api.obj(NETWORK_POLICIES, "mine-network-policy") is None
    [delete] = _policy_calls(w, "delete")
    assert delete.name == "mine-network-policy"
    assert delete.preconditions == {"uid": policy["metadata"]["uid"]}
    assert _policy_calls(w, "get") == []  # the cache decides; no API reads
    # A policy of the same name coming back later (a new UID) goes too.
    _legacy_policy(w, "mine", owner=mine)
    await reconciler.reconcile(Request(NS, "mine"))
    await reconciler.drain()
    assert w.api.obj(NETWORK_POLICIES, "mine-network-policy") is None
    assert len(_policy_calls(w, "delete")) == 2


async def test_legacy_network_policy_of_others_is_left_alone() -> None:
    w = World()
    mine = w.claim("mine")
    other = w.claim("other")
    w.claim("bare")
    w.claim("tpl")
    _legacy_policy(w, "mine", owner=other)  # same name, controlled by another claim
    _legacy_policy(w, "tpl", owner=w.template, kind="SandboxTemplate")  # a template's policy
    _legacy_policy(w, "bare", owner=None)  # no controller at all
    # controlled by this claim's UID but not through a SandboxClaim reference
    forged = _legacy_policy(w, "other", owner=other, kind="SandboxWarmPool")
    reconciler = _with_policy_cache(w)
    for name in ("mine", "other", "bare", "tpl", "mine"):
        await reconciler.reconcile(Request(NS, name))
    await reconciler.drain()
    assert _policy_calls(w, "delete") == []
    assert w.api.obj(NETWORK_POLICIES, "mine-network-policy") is not None
    assert w.api.obj(NETWORK_POLICIES, "tpl-network-policy") is not None
    assert w.api.obj(NETWORK_POLICIES, "bare-network-policy") is not None
    assert w.api.obj(NETWORK_POLICIES, "other-network-policy") == forged
    assert mine["metadata"]["uid"] != other["metadata"]["uid"]


async def test_lagging_policy_cache_costs_one_delete() -> None:
    w = World()
    mine = w.claim("mine")
    policy = _legacy_policy(w, "mine", owner=mine)
    policy["metadata"]["namespace"] = NS
    reconciler = _with_policy_cache(w, LaggingReader([policy]))
    for _ in range(3):
        await reconciler.reconcile(Request(NS, "mine"))
        await reconciler.drain()
    assert w.api.obj(NETWORK_POLICIES, "mine-network-policy") is None
    assert len(_policy_calls(w, "delete")) == 1


async def test_failed_legacy_policy_delete_is_retried_next_pass() -> None:
    w = World()
    mine = w.claim("mine")
    _legacy_policy(w, "mine", owner=mine)
    reconciler = _with_policy_cache(w)
    w.api.fail("delete", "networkpolicies", ApiError(403, "Forbidden", "no"))
    result = await reconciler.reconcile(Request(NS, "mine"))
    await reconciler.drain()
    assert w.api.obj(NETWORK_POLICIES, "mine-network-policy") is not None
    assert w.get(SANDBOX_CLAIMS, "mine")["status"]  # the claim's own work went on
    assert result is not None
    await reconciler.reconcile(Request(NS, "mine"))
    await reconciler.drain()
    assert w.api.obj(NETWORK_POLICIES, "mine-network-policy") is None
    assert len(_policy_calls(w, "delete")) == 2


async def test_legacy_policy_cleanup_also_runs_for_a_deleting_claim() -> None:
    w = World()
    mine = w.claim("mine")
    w.api.mutate(
        SANDBOX_CLAIMS,
        "mine",
        lambda o: o["metadata"].update(deletionTimestamp="2026-08-01T12:00:00Z"),
    )
    _legacy_policy(w, "mine", owner=mine)
    reconciler = _with_policy_cache(w)
    await reconciler.reconcile(Request(NS, "mine"))
    await reconciler.drain()
    assert w.api.obj(NETWORK_POLICIES, "mine-network-policy") is None


class TraceRecorder:
    """A tracer stand-in: records spans and has a fixed current trace context."""

    def __init__(self) -> None:
        self.spans: list[str] = []

    def object_span(self, name: str, obj: Obj, attributes: Any) -> Any:
        import contextlib

        self.spans.append(name)
        return contextlib.nullcontext()

    def span(self, name: str) -> Any:
        import contextlib

        return contextlib.nullcontext()

    def add_event(self, name: str, obj: Obj, attributes: Any) -> None:
        return None

    def trace_context(self) -> str:
        return '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'


async def test_tracing_stamps_claim_and_copies_context_to_sandbox() -> None:
    w = World()
    tracer = TraceRecorder()
    w.reconciler._tracer = tracer
    w.claim()
    await w.reconcile()
    assert tracer.spans == ["ReconcileSandboxClaim"]
    claim = w.get(SANDBOX_CLAIMS, "claim")
    trace = claim["metadata"]["annotations"][c.ANNOTATION_TRACE_CONTEXT]
    assert trace == tracer.trace_context()
    # the cold Sandbox, created in the same pass, carries the context already
    sandbox = w.get(SANDBOXES, "claim")
    assert sandbox["metadata"]["annotations"][c.ANNOTATION_TRACE_CONTEXT] == trace


async def test_cold_create_in_a_terminating_namespace_ends_the_work() -> None:
    """The namespace is being deleted: the runtime's end-of-work error, no status written."""
    w = World()
    w.claim()
    terminating = ApiError(
        403,
        "Forbidden",
        "unable to create new content in namespace ns because it is being terminated",
        {"details": {"causes": [{"reason": "NamespaceTerminating"}]}},
    )
    w.api.fail("create", "sandboxes", terminating)
    with pytest.raises(ApiError) as caught:
        await w.reconcile()
    assert caught.value.namespace_terminating
    assert "status" not in w.get(SANDBOX_CLAIMS, "claim")
