"""The SandboxTemplate reconciler over the runtime's in-memory API server.

Every branch of the reconcile: the label, the default and custom policies, drift repaired by
Update, Unmanaged deleting only what the template controls, a foreign or uncontrolled policy
never written, a template being deleted, error handling, and idempotence (a second reconcile
writes nothing).
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from typing import Any

import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.namehash import name_hash
from kube_agent_sandbox.api.resources import SANDBOX_TEMPLATES
from kube_agent_sandbox.api.rest import NETWORK_POLICIES
from kube_agent_sandbox.controller.runtime import ApiError, FakeApi, Obj, Request, Result
from kube_agent_sandbox.extensions.template.policy import desired_spec
from kube_agent_sandbox.extensions.template.reconciler import (
    TemplateReconcileError,
    TemplateReconciler,
)

NS = "default"
NP = "tpl-network-policy"
FOREIGN_MESSAGE = (
    'refusing to update NetworkPolicy "tpl-network-policy" as it is not controlled by '
    'SandboxTemplate "tpl"'
)


class FakeRecorder:
    """Collects events."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def event(self, obj: Obj, *, type_: str, reason: str, action: str, note: str) -> None:
        self.events.append(
            {
                "object": obj.get("metadata", {}).get("name"),
                "kind": obj.get("kind"),
                "type": type_,
                "reason": reason,
                "action": action,
                "note": note,
            }
        )


@dataclass
class Env:
    api: FakeApi = field(default_factory=lambda: FakeApi(default_namespace=NS))
    recorder: FakeRecorder = field(default_factory=FakeRecorder)

    def __post_init__(self) -> None:
        self.reconciler = TemplateReconciler(
            self.api,
            templates=self.api.reader(SANDBOX_TEMPLATES),
            network_policies=self.api.reader(NETWORK_POLICIES),
            recorder=self.recorder,
        )

    def add_template(self, name: str = "tpl", **spec: Any) -> Obj:
        body: dict[str, Any] = {
            "podTemplate": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        }
        body.update(spec)
        return self.api.add(SANDBOX_TEMPLATES, {"metadata": {"name": name}, "spec": body})

    def template(self, name: str = "tpl") -> Obj:
        found = self.api.obj(SANDBOX_TEMPLATES, name)
        assert found is not None
        return found

    def policy(self, name: str = NP) -> Obj | None:
        return self.api.obj(NETWORK_POLICIES, name)

    async def reconcile(self, name: str = "tpl") -> Result:
        return await self.reconciler.reconcile(Request(NS, name))

    def add_policy(self, *, owner_refs: list[Obj] | None = None, spec: Obj | None = None) -> Obj:
        meta: Obj = {"name": NP}
        if owner_refs is not None:
            meta["ownerReferences"] = owner_refs
        return self.api.add(
            NETWORK_POLICIES,
            {"metadata": meta, "spec": spec or {"podSelector": {}, "policyTypes": ["Ingress"]}},
        )


def owner_ref(template: Obj, **extra: Any) -> Obj:
    ref = {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "name": template["metadata"]["name"],
        "uid": template["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    ref.update(extra)
    return ref


@pytest.fixture
def env() -> Env:
    return Env()


async def test_missing_template_is_done_without_requests(env: Env) -> None:
    assert await env.reconcile("nope") == Result()
    assert env.api.calls == []


async def test_label_is_added_with_a_merge_patch(env: Env) -> None:
    env.add_template("test-template", networkPolicyManagement="Unmanaged")
    env.api.mutate(
        SANDBOX_TEMPLATES, "test-template", lambda t: t["metadata"].update(labels={"a": "b"})
    )
    await env.reconcile("test-template")
    [write] = env.api.writes()
    assert (write.verb, write.plural, write.name) == ("patch", "sandboxtemplates", "test-template")
    # NameHash("test-template") = 69155462 (a test vector of the spec)
    assert write.body == {"metadata": {"labels": {c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "69155462"}}}
    assert env.template("test-template")["metadata"]["labels"] == {
        "a": "b",
        c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "69155462",
    }


async def test_wrong_label_value_is_corrected(env: Env) -> None:
    env.add_template(networkPolicyManagement="Unmanaged")
    env.api.mutate(
        SANDBOX_TEMPLATES,
        "tpl",
        lambda t: t["metadata"].update(labels={c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "00000000"}),
    )
    await env.reconcile()
    labels = env.template()["metadata"]["labels"]
    assert labels[c.LABEL_SANDBOX_TEMPLATE_REF_HASH] == name_hash("tpl")


async def test_default_policy_is_created_controlled_by_the_template(env: Env) -> None:
    template = env.add_template()
    assert await env.reconcile() == Result()
    policy = env.policy()
    assert policy is not None
    assert policy["metadata"]["ownerReferences"] == [owner_ref(template)]
    assert policy["spec"]["podSelector"] == {
        "matchLabels": {c.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("tpl")}
    }
    assert policy["spec"] == desired_spec(template)
    assert [(w.verb, w.plural) for w in env.api.writes()] == [
        ("patch", "sandboxtemplates"),
        ("create", "networkpolicies"),
    ]
    assert env.recorder.events == []


async def test_second_reconcile_writes_nothing(env: Env) -> None:
    env.add_template()
    await env.reconcile()
    env.api.clear_calls()
    assert await env.reconcile() == Result()
    assert env.api.writes() == []


async def test_custom_rules_are_used(env: Env) -> None:
    custom = {
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}]}],
        "egress": [],
    }
    env.add_template(networkPolicy=custom)
    await env.reconcile()
    policy = env.policy()
    assert policy is not None
    assert policy["spec"]["ingress"] == custom["ingress"]
    assert policy["spec"]["egress"] == []
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]


async def test_spec_as_the_server_stores_it_is_not_drift(env: Env) -> None:
    """A port without protocol comes back as TCP and an empty list comes back absent."""
    custom = {"ingress": [], "egress": [{"ports": [{"port": 443}]}]}
    template = env.add_template(networkPolicy=custom)
    stored = {
        "podSelector": {"matchLabels": {c.LABEL_SANDBOX_TEMPLATE_REF_HASH: name_hash("tpl")}},
        "policyTypes": ["Ingress", "Egress"],
        "egress": [{"ports": [{"port": 443, "protocol": "TCP"}]}],
    }
    env.add_policy(owner_refs=[owner_ref(template)], spec=stored)
    await env.reconcile()
    assert [w.plural for w in env.api.writes()] == ["sandboxtemplates"]  # the label only


async def test_drift_is_repaired_by_update(env: Env) -> None:
    template = env.add_template()
    await env.reconcile()

    def hand_edit(policy: Obj) -> None:
        policy["spec"]["egress"] = [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]
        policy["metadata"]["labels"] = {"edited": "by-hand"}

    edited = env.api.mutate(NETWORK_POLICIES, NP, hand_edit)
    env.api.clear_calls()
    await env.reconcile()
    [write] = env.api.writes()
    assert (write.verb, write.name) == ("update", NP)
    assert write.body is not None
    assert write.body["metadata"]["resourceVersion"] == edited["metadata"]["resourceVersion"]
    policy = env.policy()
    assert policy is not None
    assert policy["spec"] == desired_spec(template)
    assert policy["metadata"]["labels"] == {"edited": "by-hand"}  # only the spec is ours
    env.api.clear_calls()
    await env.reconcile()
    assert env.api.writes() == []


async def test_template_change_updates_the_policy(env: Env) -> None:
    env.add_template()
    await env.reconcile()
    custom = {"egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]}
    env.api.mutate(SANDBOX_TEMPLATES, "tpl", lambda t: t["spec"].update(networkPolicy=custom))
    await env.reconcile()
    policy = env.policy()
    assert policy is not None
    assert policy["spec"]["egress"] == custom["egress"]
    assert "ingress" not in policy["spec"]


async def test_unmanaged_creates_nothing(env: Env) -> None:
    env.add_template(networkPolicyManagement="Unmanaged")
    await env.reconcile()
    assert env.policy() is None
    assert [w.plural for w in env.api.writes()] == ["sandboxtemplates"]


async def test_switch_to_unmanaged_deletes_the_owned_policy(env: Env) -> None:
    env.add_template()
    await env.reconcile()
    policy = env.policy()
    assert policy is not None
    env.api.mutate(
        SANDBOX_TEMPLATES, "tpl", lambda t: t["spec"].update(networkPolicyManagement="Unmanaged")
    )
    env.api.clear_calls()
    assert await env.reconcile() == Result()
    [write] = env.api.writes()
    assert (write.verb, write.plural, write.name) == ("delete", "networkpolicies", NP)
    assert write.preconditions == {"uid": policy["metadata"]["uid"]}
    assert env.policy() is None
    env.api.clear_calls()
    await env.reconcile()
    assert env.api.writes() == []


@pytest.mark.parametrize(
    "refs",
    [
        pytest.param(None, id="no-owner"),
        pytest.param(
            [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": "x",
                    "uid": "u",
                    "controller": False,
                }
            ],
            id="owner-not-controller",
        ),
        pytest.param(
            [
                {
                    "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
                    "kind": "SandboxTemplate",
                    "name": "tpl",
                    "uid": "uid-of-an-earlier-tpl",
                    "controller": True,
                }
            ],
            id="other-template-uid",
        ),
        pytest.param(
            [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "d",
                    "uid": "u",
                    "controller": True,
                }
            ],
            id="foreign-controller",
        ),
    ],
)
async def test_unmanaged_leaves_a_policy_it_does_not_control(
    env: Env, refs: list[Obj] | None
) -> None:
    env.add_template(networkPolicyManagement="Unmanaged")
    before = env.add_policy(owner_refs=refs)
    assert await env.reconcile() == Result()
    assert env.api.writes(NETWORK_POLICIES) == []
    assert env.policy() == before
    assert env.recorder.events == []


@pytest.mark.parametrize(
    "refs",
    [
        pytest.param(None, id="no-owner"),
        pytest.param(
            [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": "d",
                    "uid": "u",
                    "controller": True,
                }
            ],
            id="foreign-controller",
        ),
        pytest.param(
            [
                {
                    "apiVersion": "extensions.agents.x-k8s.io/v1alpha1",
                    "kind": "SandboxTemplate",
                    "name": "tpl",
                    "uid": "uid-of-an-earlier-tpl",
                    "controller": True,
                }
            ],
            id="other-template-uid",
        ),
    ],
)
async def test_managed_never_modifies_a_policy_it_does_not_control(
    env: Env, refs: list[Obj] | None, caplog: pytest.LogCaptureFixture
) -> None:
    env.add_template()
    before = env.add_policy(owner_refs=refs)
    result = await env.reconcile()
    assert result == Result(requeue_after=60.0)
    assert env.api.writes(NETWORK_POLICIES) == []
    assert env.policy() == before
    assert FOREIGN_MESSAGE in caplog.text
    assert env.recorder.events == [
        {
            "object": "tpl",
            "kind": "SandboxTemplate",
            "type": "Warning",
            "reason": "ReconcilerError",
            "action": "Reconciling",
            "note": FOREIGN_MESSAGE,
        }
    ]
    # Still blocked: checked again, reported once.
    assert await env.reconcile() == Result(requeue_after=60.0)
    assert len(env.recorder.events) == 1
    assert env.policy() == before


async def test_foreign_policy_removed_then_the_template_gets_its_own(env: Env) -> None:
    template = env.add_template()
    env.add_policy()
    await env.reconcile()
    await env.api.delete(NETWORK_POLICIES, NS, NP)
    assert await env.reconcile() == Result()
    policy = env.policy()
    assert policy is not None
    assert policy["metadata"]["ownerReferences"] == [owner_ref(template)]
    # the error is over; a new one is reported again
    env.api.mutate(NETWORK_POLICIES, NP, lambda p: p["metadata"].pop("ownerReferences"))
    await env.reconcile()
    assert [e["note"] for e in env.recorder.events] == [FOREIGN_MESSAGE, FOREIGN_MESSAGE]


async def test_policy_owned_through_an_alpha_reference_is_updated(env: Env) -> None:
    """Ownership is by UID: a reference written with v1alpha1 still counts."""
    template = env.add_template()
    env.add_policy(
        owner_refs=[owner_ref(template, apiVersion="extensions.agents.x-k8s.io/v1alpha1")]
    )
    await env.reconcile()
    policy = env.policy()
    assert policy is not None
    assert policy["spec"] == desired_spec(template)


async def test_template_being_deleted_is_left_alone(env: Env) -> None:
    template = env.add_template()
    env.api.mutate(
        SANDBOX_TEMPLATES,
        "tpl",
        lambda t: t["metadata"].update(
            deletionTimestamp="2026-01-01T00:00:00Z", finalizers=["example.com/hold"]
        ),
    )
    assert await env.reconcile() == Result()
    assert env.api.writes() == []
    # an owned policy is left to the garbage collector
    env.add_policy(owner_refs=[owner_ref(template)])
    env.api.mutate(
        SANDBOX_TEMPLATES, "tpl", lambda t: t["spec"].update(networkPolicyManagement="Unmanaged")
    )
    assert await env.reconcile() == Result()
    assert env.api.writes() == []


async def test_owned_policy_being_deleted_is_not_updated(env: Env) -> None:
    template = env.add_template()
    env.api.add(
        NETWORK_POLICIES,
        {
            "metadata": {
                "name": NP,
                "ownerReferences": [owner_ref(template)],
                "deletionTimestamp": "2026-01-01T00:00:00Z",
                "finalizers": ["example.com/hold"],
            },
            "spec": {"podSelector": {}},
        },
    )
    assert await env.reconcile() == Result()
    assert env.api.writes(NETWORK_POLICIES) == []


async def test_template_deleted_before_the_label_patch(env: Env) -> None:
    env.add_template()
    env.api.fail("patch", "sandboxtemplates", ApiError(404, "NotFound", "gone"))
    assert await env.reconcile() == Result()
    assert env.api.writes(NETWORK_POLICIES) == []


@pytest.mark.parametrize(
    ("verb", "error"),
    [
        ("create", ApiError(500, "InternalError", "etcd timeout")),
        ("create", ConnectionResetError("reset")),
        ("patch", ApiError(429, "TooManyRequests", "slow down")),
    ],
)
async def test_transient_errors_raise_for_a_backoff_retry(
    env: Env, verb: str, error: BaseException
) -> None:
    env.add_template()
    plural = "sandboxtemplates" if verb == "patch" else "networkpolicies"
    env.api.fail(verb, plural, error)
    with pytest.raises(TemplateReconcileError):
        await env.reconcile()
    assert env.recorder.events == []
    assert await env.reconcile() == Result()  # the retry succeeds
    assert env.policy() is not None


async def test_update_conflict_raises_and_the_retry_repairs(env: Env) -> None:
    template = env.add_template()
    await env.reconcile()
    env.api.mutate(NETWORK_POLICIES, NP, lambda p: p["spec"].update(egress=[]))
    env.api.fail(
        "update", "networkpolicies", ApiError(409, "Conflict", "the object has been modified")
    )
    with pytest.raises(TemplateReconcileError, match="failed to update NetworkPolicy"):
        await env.reconcile()
    await env.reconcile()
    policy = env.policy()
    assert policy is not None
    assert policy["spec"] == desired_spec(template)


async def test_policy_rejected_by_the_server_is_reported_and_retried_slowly(env: Env) -> None:
    env.add_template(networkPolicy={"egress": [{"to": [{"ipBlock": {"cidr": "not-a-cidr"}}]}]})
    message = (
        'NetworkPolicy.networking.k8s.io "tpl-network-policy" is invalid: '
        'spec.egress[0].to[0].ipBlock.cidr: Invalid value: "not-a-cidr"'
    )
    env.api.fail("create", "networkpolicies", ApiError(422, "Invalid", message))
    assert await env.reconcile() == Result(requeue_after=60.0)
    [event] = env.recorder.events
    assert event["note"] == f'failed to create NetworkPolicy "tpl-network-policy": {message}'


async def test_policy_name_too_long_is_reported_without_a_request(env: Env) -> None:
    name = "t" * 239
    env.add_template(name)
    assert await env.reconcile(name) == Result(requeue_after=60.0)
    assert env.api.writes(NETWORK_POLICIES) == []
    [event] = env.recorder.events
    assert event["note"].startswith(f'cannot create NetworkPolicy "{name}-network-policy": ')
    assert "no more than 253 characters" in event["note"]


async def test_update_and_delete_of_a_vanished_policy_are_not_errors(env: Env) -> None:
    env.add_template()
    await env.reconcile()
    env.api.mutate(NETWORK_POLICIES, NP, lambda p: p["spec"].update(egress=[]))
    env.api.fail("update", "networkpolicies", ApiError(404, "NotFound", "gone"))
    assert await env.reconcile() == Result()
    env.api.mutate(
        SANDBOX_TEMPLATES, "tpl", lambda t: t["spec"].update(networkPolicyManagement="Unmanaged")
    )
    env.api.fail("delete", "networkpolicies", ApiError(404, "NotFound", "gone"))
    assert await env.reconcile() == Result()


async def test_cached_objects_are_not_mutated(env: Env) -> None:
    """The reconciler writes from copies: what the cache handed out stays as it was read."""
    env.add_template(networkPolicy={"egress": [{"ports": [{"port": 80}]}]})
    await env.reconcile()
    env.api.mutate(NETWORK_POLICIES, NP, lambda p: p["spec"].update(egress=[]))
    store = env.api.contents  # readers that hand out the stored objects themselves

    class SharedReader:
        def __init__(self, resource: Any) -> None:
            self.resource = resource

        def get(self, namespace: str, name: str) -> Obj | None:
            return store(self.resource).get((namespace, name))

    before = (
        copy.deepcopy(store(SANDBOX_TEMPLATES)),
        copy.deepcopy(store(NETWORK_POLICIES)),
    )
    reconciler = TemplateReconciler(
        env.api,
        templates=SharedReader(SANDBOX_TEMPLATES),  # type: ignore[arg-type]
        network_policies=SharedReader(NETWORK_POLICIES),  # type: ignore[arg-type]
    )
    env.api.fail("update", "networkpolicies", ApiError(409, "Conflict", "modified"))
    with pytest.raises(TemplateReconcileError):
        await reconciler.reconcile(Request(NS, "tpl"))
    assert (store(SANDBOX_TEMPLATES), store(NETWORK_POLICIES)) == before


async def test_reconcile_runs_in_a_reconcile_sandbox_template_span(env: Env) -> None:
    spans: list[tuple[str, dict[str, str]]] = []

    class RecordingTracer:
        def object_span(self, name: str, obj: Obj, attributes: Any) -> Any:
            spans.append((name, dict(attributes(obj))))
            return contextlib.nullcontext()

        def span(self, name: str) -> Any:
            return contextlib.nullcontext()

        def add_event(self, name: str, obj: Obj, attributes: Any) -> None:
            return None

        def trace_context(self) -> str:
            return ""

    env.add_template()
    reconciler = TemplateReconciler(
        env.api,
        templates=env.api.reader(SANDBOX_TEMPLATES),
        network_policies=env.api.reader(NETWORK_POLICIES),
        tracer=RecordingTracer(),
    )
    await reconciler.reconcile(Request(NS, "tpl"))
    await reconciler.reconcile(Request(NS, "missing"))  # no template: no span
    assert spans == [
        (
            "ReconcileSandboxTemplate",
            {"sandboxtemplate.name": "tpl", "sandboxtemplate.namespace": NS},
        )
    ]


async def test_already_exists_on_create_waits_for_the_cache(env: Env) -> None:
    """The cache lags behind a policy that exists: its ADDED event brings the template back."""
    env.add_template()
    env.api.fail(
        "create", "networkpolicies", ApiError(409, "AlreadyExists", 'networkpolicies "x" exists')
    )
    assert await env.reconcile() == Result()
    assert env.recorder.events == []
    assert await env.reconcile() == Result()
    assert env.policy() is not None
