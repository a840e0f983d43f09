"""Pod reconciliation of the Sandbox controller (upstream's reconcilePod) and the ownership
check of its children."""

from __future__ import annotations

from typing import Any

import pytest
from sandbox_children_support import CLAIM_REF, POOL_REF, RS_REF, _pod, _ready, _reconcile
from sandbox_fakes import (
    FakeCluster,
    conditions_by_type,
    hash_label,
    make_pod,
    make_sandbox,
    make_service,
    owner_ref,
    request,
    sandbox_ref,
)

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.resources import SANDBOXES
from kube_agent_sandbox.api.rest import PODS
from kube_agent_sandbox.controller.runtime import Ownership, check_ownership


class TestCheckOwnership:
    @pytest.mark.parametrize("kind", ["pod", "service"])
    def test_owned_unowned_other(self, kind: str) -> None:
        sandbox = make_sandbox()
        sandbox["metadata"]["uid"] = "sb-uid"
        build = make_pod if kind == "pod" else make_service
        owned = build("x", owner=owner_ref("Sandbox", "sandbox-name", "sb-uid"))
        assert check_ownership(owned, sandbox)[0] is Ownership.OWNED
        assert check_ownership(build("x"), sandbox) == (Ownership.UNOWNED, None)
        status, ref = check_ownership(build("x", owner=RS_REF), sandbox)
        assert status is Ownership.OTHER
        assert ref is not None
        assert ref["uid"] == "rs-uid"

    def test_same_name_other_uid_is_other(self) -> None:
        sandbox = make_sandbox()
        sandbox["metadata"]["uid"] = "new-uid"
        old = make_pod("x", owner=owner_ref("Sandbox", "sandbox-name", "old-uid"))
        assert check_ownership(old, sandbox)[0] is Ownership.OTHER

    def test_non_controller_reference_is_unowned(self) -> None:
        ref = dict(RS_REF, controller=False)
        assert check_ownership(make_pod("x", owner=ref), make_sandbox())[0] is Ownership.UNOWNED


class TestReconcilePod:
    async def test_label_and_owner_added_to_existing_adoptable_pod(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox())
        cluster.add(PODS, make_pod("sandbox-name", labels={c.LABEL_ADOPTABLE: "true"}))
        await _reconcile(cluster)
        pod = _pod(cluster)
        assert (
            pod["metadata"]["labels"][c.LABEL_SANDBOX_NAME_HASH]
            == hash_label()[c.LABEL_SANDBOX_NAME_HASH]
        )
        assert pod["metadata"]["ownerReferences"] == [sandbox_ref(sandbox)]
        patch = cluster.writes(PODS)[0]
        assert patch.verb == "patch"
        assert set(patch.body) == {"metadata"}  # metadata-only

    async def test_owner_persisted_when_labels_already_right(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox())
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label()))
        await _reconcile(cluster)
        patches = [w for w in cluster.writes(PODS) if w.verb == "patch"]
        assert len(patches) == 1
        assert patches[0].body["metadata"]["ownerReferences"] == [sandbox_ref(sandbox)]

    async def test_existing_owner_references_are_kept_on_adoption(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox())
        other = dict(RS_REF, controller=False)
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label(), owner=other))
        await _reconcile(cluster)
        assert _pod(cluster)["metadata"]["ownerReferences"] == [other, sandbox_ref(sandbox)]

    async def test_unowned_pod_without_authorization_is_refused(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox())
        cluster.add(PODS, make_pod("sandbox-name", labels={"app": "x"}))
        result = await cluster.reconciler().reconcile(request())
        assert result.requeue_after == 60.0
        assert "ownerReferences" not in _pod(cluster)["metadata"]
        assert cluster.writes(PODS) == []
        ready = _ready(cluster)
        assert ready["reason"] == "ReconcilerError"
        assert ready["message"] == (
            'Error seen: cannot adopt unowned pod "sandbox-name": missing required pool '
            'authorization label ("agents.x-k8s.io/adoptable") or sandbox tracking label '
            '("agents.x-k8s.io/sandbox-name-hash")'
        )

    async def test_user_supplied_system_keys_are_dropped_on_create(self) -> None:
        cluster = FakeCluster()
        cluster.add(
            SANDBOXES,
            make_sandbox(
                template_labels={
                    c.LABEL_SANDBOX_NAME_HASH: "deadbeef",
                    f"{c.EXTENSIONS_GROUP}/x": "y",
                    c.LABEL_WARM_POOL_SANDBOX: "p",
                    "user": "u",
                },
                template_annotations={
                    c.ANNOTATION_TRACE_CONTEXT: "{}",
                    c.ANNOTATION_POD_NAME: "evil",
                    "note": "n",
                },
            ),
        )
        await _reconcile(cluster)
        meta = _pod(cluster)["metadata"]
        assert meta["labels"] == {"user": "u", **hash_label()}
        assert meta["annotations"] == {
            "note": "n",
            c.ANNOTATION_PROPAGATED_LABELS: "user",
            c.ANNOTATION_PROPAGATED_ANNOTATIONS: "note",
        }

    async def test_sandbox_metadata_system_labels_are_not_propagated(self) -> None:
        cluster = FakeCluster()
        cluster.add(
            SANDBOXES,
            make_sandbox(
                labels={c.LABEL_CLAIM_UID: "u", c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "h", "x": "y"}
            ),
        )
        await _reconcile(cluster)
        assert _pod(cluster)["metadata"]["labels"] == hash_label()

    async def test_stale_system_keys_recorded_by_older_controllers_are_scrubbed(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(template_labels={"keep": "1"}))
        labels = {
            **hash_label(),
            "keep": "1",
            c.LABEL_CLAIM_UID: "x",
            c.LABEL_WARM_POOL_SANDBOX: "p",
        }
        annotations = {
            c.ANNOTATION_PROPAGATED_LABELS: f"keep,{c.LABEL_CLAIM_UID},{c.LABEL_SANDBOX_NAME_HASH}",
            c.ANNOTATION_PROPAGATED_ANNOTATIONS: f"{c.ANNOTATION_TRACE_CONTEXT}",
            c.ANNOTATION_TRACE_CONTEXT: "{}",
        }
        cluster.add(
            PODS,
            make_pod(
                "sandbox-name", labels=labels, annotations=annotations, owner=sandbox_ref(sandbox)
            ),
        )
        await _reconcile(cluster)
        meta = _pod(cluster)["metadata"]
        assert meta["labels"] == {**hash_label(), "keep": "1"}
        assert meta["annotations"] == {
            c.ANNOTATION_PROPAGATED_LABELS: "keep",
            c.ANNOTATION_PROPAGATED_ANNOTATIONS: "",
        }

    async def test_removed_template_keys_are_deleted_from_pod(self) -> None:
        cluster = FakeCluster()
        cluster.add(
            SANDBOXES,
            make_sandbox(template_labels={"a": "1", "b": "2"}, template_annotations={"x": "1"}),
        )
        rec = cluster.reconciler()
        await rec.reconcile(request())
        cluster.mutate(
            SANDBOXES,
            "sandbox-name",
            lambda s: s["spec"]["podTemplate"].update(metadata={"labels": {"a": "9"}}),
        )
        await rec.reconcile(request())
        meta = _pod(cluster)["metadata"]
        assert meta["labels"] == {"a": "9", **hash_label()}
        assert meta["annotations"] == {
            c.ANNOTATION_PROPAGATED_LABELS: "a",
            c.ANNOTATION_PROPAGATED_ANNOTATIONS: "",
        }

    async def test_unmanaged_pod_keys_are_left_alone(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox(template_labels={"a": "1"}))
        cluster.add(
            PODS,
            make_pod(
                "sandbox-name",
                labels={**hash_label(), "a": "1", "kubelet-added": "z"},
                annotations={c.ANNOTATION_PROPAGATED_LABELS: "a", "other": "o"},
                owner=sandbox_ref(sandbox),
            ),
        )
        await _reconcile(cluster)
        assert cluster.writes(PODS) == []

    @pytest.mark.parametrize(
        ("owner", "sandbox_labels", "expected"),
        [
            (
                POOL_REF,
                {c.LABEL_WARM_POOL_SANDBOX: "pool-h"},
                {c.LABEL_WARM_POOL_SANDBOX: "pool-h"},
            ),
            (CLAIM_REF, {c.LABEL_WARM_POOL_SANDBOX: "pool-h"}, {}),
            (
                CLAIM_REF,
                {c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "t-h"},
                {c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "t-h"},
            ),
            (
                POOL_REF,
                {c.LABEL_WARM_POOL_SANDBOX: "pool-h", c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "t-h"},
                {c.LABEL_WARM_POOL_SANDBOX: "pool-h", c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "t-h"},
            ),
            (None, {c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "t-h"}, {}),
            (RS_REF, {c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "t-h"}, {}),
            (
                owner_ref(
                    "SandboxWarmPool", "pool", "p", api_version=f"{c.EXTENSIONS_GROUP}/v1alpha1"
                ),
                {c.LABEL_WARM_POOL_SANDBOX: "pool-h"},
                {c.LABEL_WARM_POOL_SANDBOX: "pool-h"},
            ),
        ],
    )
    async def test_extension_labels_on_create(
        self, owner: dict[str, Any] | None, sandbox_labels: dict[str, str], expected: dict[str, str]
    ) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(labels=sandbox_labels, owner=owner))
        await _reconcile(cluster)
        assert _pod(cluster)["metadata"]["labels"] == {**hash_label(), **expected}

    async def test_extension_labels_follow_ownership_changes_on_existing_pod(self) -> None:
        cluster = FakeCluster()
        labels = {c.LABEL_WARM_POOL_SANDBOX: "pool-h", c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "t-h"}
        cluster.add(SANDBOXES, make_sandbox(labels=labels, owner=POOL_REF))
        rec = cluster.reconciler()
        await rec.reconcile(request())
        assert _pod(cluster)["metadata"]["labels"] == {**hash_label(), **labels}

        def adopt(s: dict[str, Any]) -> None:  # what the claim controller does
            s["metadata"]["ownerReferences"] = [CLAIM_REF]
            s["metadata"]["labels"].pop(c.LABEL_WARM_POOL_SANDBOX)

        cluster.mutate(SANDBOXES, "sandbox-name", adopt)
        await rec.reconcile(request())
        assert _pod(cluster)["metadata"]["labels"] == {
            **hash_label(),
            c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "t-h",
        }
        cluster.mutate(SANDBOXES, "sandbox-name", lambda s: s["metadata"]["labels"].clear())
        await rec.reconcile(request())
        assert _pod(cluster)["metadata"]["labels"] == hash_label()

    async def test_extension_labels_added_to_existing_pod(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(
            SANDBOXES,
            make_sandbox(labels={c.LABEL_SANDBOX_TEMPLATE_REF_HASH: "t"}, owner=CLAIM_REF),
        )
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label(), owner=sandbox_ref(sandbox)))
        await _reconcile(cluster)
        assert _pod(cluster)["metadata"]["labels"][c.LABEL_SANDBOX_TEMPLATE_REF_HASH] == "t"

    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            ("go-client", "go-client"),
            ("python-client", "python-client"),
            ("controller", "controller"),
            ("bad value", "unknown"),
        ],
    )
    async def test_created_by_is_normalized(self, value: str, expected: str) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(labels={c.LABEL_CREATED_BY: value}))
        await _reconcile(cluster)
        assert _pod(cluster)["metadata"]["labels"][c.LABEL_CREATED_BY] == expected

    async def test_created_by_updated_and_removed_on_existing_pod(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(labels={c.LABEL_CREATED_BY: "go-client"}))
        rec = cluster.reconciler()
        await rec.reconcile(request())
        cluster.mutate(
            SANDBOXES,
            "sandbox-name",
            lambda s: s["metadata"]["labels"].update({c.LABEL_CREATED_BY: "python-client"}),
        )
        await rec.reconcile(request())
        assert _pod(cluster)["metadata"]["labels"][c.LABEL_CREATED_BY] == "python-client"
        cluster.mutate(SANDBOXES, "sandbox-name", lambda s: s["metadata"]["labels"].clear())
        await rec.reconcile(request())
        assert c.LABEL_CREATED_BY not in _pod(cluster)["metadata"]["labels"]

    async def test_suspended_deletes_owned_pod_which_stays_terminating(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(
            SANDBOXES,
            make_sandbox(mode="Suspended", annotations={c.ANNOTATION_POD_NAME: "sandbox-name"}),
        )
        cluster.add(
            PODS,
            make_pod(
                "sandbox-name",
                labels=hash_label(),
                owner=sandbox_ref(sandbox),
                finalizers=["x/hold"],
            ),
        )
        await _reconcile(cluster)
        pod = _pod(cluster)
        assert pod["metadata"]["deletionTimestamp"]
        delete = cluster.writes(PODS)[0]
        assert (delete.verb, delete.preconditions) == ("delete", {"uid": pod["metadata"]["uid"]})
        # The annotation stays while the pod is still there.
        assert cluster.obj(SANDBOXES, "sandbox-name")["metadata"]["annotations"] == {
            c.ANNOTATION_POD_NAME: "sandbox-name"
        }  # type: ignore[index]
        conds = conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))  # type: ignore[arg-type]
        assert conds["Suspended"]["reason"] == "PodTerminating"

    async def test_suspended_without_pod_is_noop(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(mode="Suspended"))
        await _reconcile(cluster)
        assert [w for w in cluster.writes() if w.plural != "sandboxes"] == []

    async def test_annotation_named_pod_is_adopted(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(
            SANDBOXES, make_sandbox(annotations={c.ANNOTATION_POD_NAME: "warm-abcde"})
        )
        cluster.add(PODS, make_pod("warm-abcde", labels={c.LABEL_ADOPTABLE: "true"}))
        await _reconcile(cluster)
        assert _pod(cluster, "warm-abcde")["metadata"]["ownerReferences"] == [sandbox_ref(sandbox)]
        assert cluster.obj(PODS, "sandbox-name") is None

    async def test_pod_owned_by_other_controller_never_modified(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(annotations={c.ANNOTATION_POD_NAME: "sandbox-name"}))
        original = cluster.add(PODS, make_pod("sandbox-name", labels=hash_label(), owner=RS_REF))
        result = await cluster.reconciler().reconcile(request())
        assert result.requeue_after == 60.0
        assert _pod(cluster) == original
        assert cluster.writes(PODS) == []
        assert (
            c.ANNOTATION_POD_NAME
            not in cluster.obj(SANDBOXES, "sandbox-name")["metadata"]["annotations"]
        )  # type: ignore[index]
        assert _ready(cluster)["message"] == (
            'Error seen: pod "sandbox-name" is owned by ReplicaSet/rs (UID: rs-uid), '
            'not by sandbox "sandbox-name"'
        )
        status = cluster.obj(SANDBOXES, "sandbox-name")["status"]  # type: ignore[index]
        assert "podIPs" not in status

    async def test_pod_owned_by_other_controller_not_deleted_when_suspended(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(mode="Suspended"))
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label(), owner=RS_REF))
        await _reconcile(cluster)
        assert cluster.obj(PODS, "sandbox-name") is not None
        assert cluster.writes(PODS) == []

    async def test_unowned_annotated_pod_not_deleted_on_suspend_and_annotation_removed(
        self,
    ) -> None:
        cluster = FakeCluster()
        cluster.add(
            SANDBOXES, make_sandbox(mode="Suspended", annotations={c.ANNOTATION_POD_NAME: "p"})
        )
        cluster.add(PODS, make_pod("p", labels={c.LABEL_ADOPTABLE: "true"}))
        await _reconcile(cluster)
        assert cluster.obj(PODS, "p") is not None
        assert (
            c.ANNOTATION_POD_NAME
            not in cluster.obj(SANDBOXES, "sandbox-name")["metadata"]["annotations"]
        )  # type: ignore[index]
        conds = conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))  # type: ignore[arg-type]
        assert conds["Suspended"]["reason"] == "PodNotOwned"

    async def test_suspended_foreign_pod_does_not_leak_ip_or_node(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(mode="Suspended", service=True))
        cluster.add(PODS, make_pod("sandbox-name", labels=hash_label(), owner=RS_REF))
        cluster.set_pod_status("sandbox-name", ips=("10.9.9.9",), node="n1")
        await _reconcile(cluster)
        status = cluster.obj(SANDBOXES, "sandbox-name")["status"]  # type: ignore[index]
        assert "podIPs" not in status
        assert "nodeName" not in status
        assert status["selector"].endswith(hash_label()[c.LABEL_SANDBOX_NAME_HASH])
        assert status["service"] == "sandbox-name"
        conds = conditions_by_type(cluster.obj(SANDBOXES, "sandbox-name"))  # type: ignore[arg-type]
        assert (conds["Suspended"]["reason"], conds["Ready"]["message"]) == (
            "PodNotOwned",
            "Sandbox is suspending",
        )

    async def test_an_annotation_naming_the_sandbox_itself_is_kept_while_its_pod_is_created(
        self,
    ) -> None:
        """Pools and claims create Sandboxes that already name their future Pod: no
        clear-then-set pair of Sandbox patches (upstream makes both)."""
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(annotations={c.ANNOTATION_POD_NAME: "sandbox-name"}))
        await _reconcile(cluster)
        assert cluster.obj(PODS, "sandbox-name") is not None
        assert [w for w in cluster.writes(SANDBOXES) if w.subresource != "status"] == []
        annotations = cluster.obj(SANDBOXES, "sandbox-name")["metadata"]["annotations"]  # type: ignore[index]
        assert annotations == {c.ANNOTATION_POD_NAME: "sandbox-name"}

    async def test_a_suspended_sandbox_without_a_pod_drops_an_annotation_naming_itself(
        self,
    ) -> None:
        cluster = FakeCluster()
        cluster.add(
            SANDBOXES,
            make_sandbox(mode="Suspended", annotations={c.ANNOTATION_POD_NAME: "sandbox-name"}),
        )
        await _reconcile(cluster)
        assert cluster.obj(PODS, "sandbox-name") is None
        annotations = cluster.obj(SANDBOXES, "sandbox-name")["metadata"].get("annotations") or {}  # type: ignore[index]
        assert c.ANNOTATION_POD_NAME not in annotations

    async def test_missing_annotated_pod_clears_annotation_and_recreates(self) -> None:
        cluster = FakeCluster()
        cluster.add(SANDBOXES, make_sandbox(annotations={c.ANNOTATION_POD_NAME: "vanished"}))
        await _reconcile(cluster)
        assert cluster.obj(PODS, "sandbox-name") is not None
        annotations = cluster.obj(SANDBOXES, "sandbox-name")["metadata"]["annotations"]  # type: ignore[index]
        assert annotations == {c.ANNOTATION_POD_NAME: "sandbox-name"}

    async def test_pod_annotation_naming_another_pod_is_kept(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(
            SANDBOXES, make_sandbox(annotations={c.ANNOTATION_POD_NAME: "warm-1"})
        )
        cluster.add(PODS, make_pod("warm-1", labels=hash_label(), owner=sandbox_ref(sandbox)))
        await _reconcile(cluster)
        assert [w for w in cluster.writes(SANDBOXES) if w.subresource is None] == []

    async def test_already_exists_on_create_goes_through_existing_pod(self) -> None:
        cluster = FakeCluster()
        sandbox = cluster.add(SANDBOXES, make_sandbox())
        # The cache has not seen the pod yet: hide it from the reader only.
        rec = cluster.reconciler()
        hidden = make_pod("sandbox-name", labels=hash_label(), owner=sandbox_ref(sandbox))
        rec._pods.get = lambda ns, name: None  # type: ignore[attr-defined]
        rec._pods.by_index = lambda index, value: []  # type: ignore[attr-defined]
        cluster.add(PODS, hidden)
        await rec.reconcile(request())
        verbs = [w.verb for w in cluster.writes(PODS)]
        assert verbs == ["create"]  # the failed create, then the live GET; nothing else
        assert [call.verb for call in cluster.calls if call.plural == "pods"] == ["create", "get"]
        assert _ready(cluster)["reason"] == "DependenciesNotReady"
