"""The Sandbox's pod — name, owner, labels, annotations, spec."""

from __future__ import annotations

import pytest

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import Kube
from kube_agent_sandbox.conformance.tests.core.support import (
    CREATED_BY_LABEL,
    NAME_HASH_LABEL,
    POD_NAME_ANNOTATION,
    PROPAGATED_ANNOTATIONS,
    PROPAGATED_LABELS,
    SANDBOX_API,
    create_sandbox,
    owner_ref,
    wait_pod,
    wait_ready,
    wait_sandbox,
)


@pytest.mark.spec("3.3", "2.6")
def test_pod_is_named_after_the_sandbox_and_controlled_by_it(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """The pod has the Sandbox's name and exactly one ownerReference: the controller ref."""
    created = create_sandbox(kube, namespace, "box", image=workload_image)
    pod = wait_pod(kube, namespace, "box", lambda p: True)
    assert pod["metadata"]["ownerReferences"] == [owner_ref(created)]
    sandbox = wait_sandbox(
        kube,
        namespace,
        "box",
        lambda s: POD_NAME_ANNOTATION in m.annotations_of(s),
        what="pod-name annotation",
    )
    assert m.annotations_of(sandbox)[POD_NAME_ANNOTATION] == "box"


@pytest.mark.spec("3.3")
def test_pod_spec_is_a_copy_of_the_pod_template(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """Containers, env and other pod fields come verbatim from ``spec.podTemplate.spec``."""
    main = m.container(
        "agent",
        image=workload_image,
        env=[{"name": "MODE", "value": "conformance"}],
        ports=[{"containerPort": 8080, "name": "http"}],
    )
    template = m.pod_template(
        containers=[main], terminationGracePeriodSeconds=7, restartPolicy="OnFailure"
    )
    create_sandbox(kube, namespace, "copy", image=workload_image, template=template)
    pod = wait_pod(kube, namespace, "copy", lambda p: True)
    spec = pod["spec"]
    assert [c["name"] for c in spec["containers"]] == ["agent"]
    container = spec["containers"][0]
    assert container["image"] == workload_image
    assert container["env"] == [{"name": "MODE", "value": "conformance"}]
    assert container["ports"][0]["containerPort"] == 8080
    assert container["ports"][0]["name"] == "http"
    assert spec["terminationGracePeriodSeconds"] == 7
    assert spec["restartPolicy"] == "OnFailure"


@pytest.mark.spec("3.3", "2.1", "2.2")
def test_pod_labels_and_annotations_are_propagated_without_system_keys(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """User keys reach the pod; system-reserved prefixes never do; the tracking label is set."""
    template = m.pod_template(
        image=workload_image,
        labels={
            "app": "demo",
            "tier": "backend",
            "agents.x-k8s.io/injected": "no",
            "extensions.agents.x-k8s.io/injected": "no",
        },
        annotations={
            "note": "hello",
            "example.com/owner": "team-a",
            "agents.x-k8s.io/injected": "no",
            "extensions.agents.x-k8s.io/injected": "no",
            "opentelemetry.io/trace-context": '{"traceparent":"00-0-0-01"}',
        },
    )
    create_sandbox(kube, namespace, "labels", image=workload_image, template=template)
    pod = wait_pod(kube, namespace, "labels", lambda p: True)
    assert m.labels_of(pod) == {
        "app": "demo",
        "tier": "backend",
        NAME_HASH_LABEL: m.name_hash("labels"),
    }
    assert m.annotations_of(pod) == {
        "note": "hello",
        "example.com/owner": "team-a",
        PROPAGATED_LABELS: "app,tier",
        PROPAGATED_ANNOTATIONS: "example.com/owner,note",
    }


@pytest.mark.spec("3.3", "2.1")
def test_name_hash_label_cannot_be_overridden_by_the_template(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """``agents.x-k8s.io/sandbox-name-hash`` is always ``NameHash(sandbox name)``."""
    template = m.pod_template(image=workload_image, labels={NAME_HASH_LABEL: "deadbeef"})
    create_sandbox(kube, namespace, "my-sandbox", image=workload_image, template=template)
    pod = wait_pod(kube, namespace, "my-sandbox", lambda p: True)
    assert m.labels_of(pod)[NAME_HASH_LABEL] == "374de8f5"


@pytest.mark.spec("3.3", "2.1")
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("python-client", "python-client"),
        ("go-client", "go-client"),
        ("controller", "controller"),
        ("my-own-tool", "unknown"),
    ],
)
def test_created_by_label_is_normalized_onto_the_pod(
    kube: Kube, namespace: str, workload_image: str, value: str, expected: str
) -> None:
    """The Sandbox's ``created-by`` label reaches the pod through the allow-list."""
    body = m.sandbox(
        "made",
        labels={CREATED_BY_LABEL: value},
        template=m.pod_template(image=workload_image),
    )
    kube.create(body, namespace=namespace)
    pod = wait_pod(kube, namespace, "made", lambda p: True)
    assert m.labels_of(pod)[CREATED_BY_LABEL] == expected
    sandbox = kube.get(SANDBOX_API, "Sandbox", "made", namespace)
    assert m.labels_of(sandbox)[CREATED_BY_LABEL] == value


@pytest.mark.spec("3.3.1")
def test_template_metadata_changes_reach_the_existing_pod(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """Changed, added and removed template keys are applied to the running pod in place."""
    template = m.pod_template(
        image=workload_image,
        labels={"app": "v1", "tier": "backend"},
        annotations={"note": "one", "gone": "soon"},
    )
    create_sandbox(kube, namespace, "drift", image=workload_image, template=template)
    first = wait_pod(kube, namespace, "drift", lambda p: True)
    uid = first["metadata"]["uid"]
    kube.patch(
        SANDBOX_API,
        "Sandbox",
        "drift",
        namespace,
        {
            "spec": {
                "podTemplate": {
                    "metadata": {
                        "labels": {"app": "v2", "tier": None, "extra": "yes"},
                        "annotations": {"note": "two", "gone": None},
                    }
                }
            }
        },
    )
    pod = wait_pod(
        kube,
        namespace,
        "drift",
        lambda p: m.labels_of(p).get("app") == "v2" and "tier" not in m.labels_of(p),
    )
    assert pod["metadata"]["uid"] == uid, "metadata changes must not replace the pod"
    assert m.labels_of(pod) == {
        "app": "v2",
        "extra": "yes",
        NAME_HASH_LABEL: m.name_hash("drift"),
    }
    pod = wait_pod(kube, namespace, "drift", lambda p: "gone" not in m.annotations_of(p))
    assert m.annotations_of(pod) == {
        "note": "two",
        PROPAGATED_LABELS: "app,extra",
        PROPAGATED_ANNOTATIONS: "note",
    }


@pytest.mark.spec("3.3.1")
def test_tracking_label_removed_from_the_pod_is_restored(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """A pod whose tracking label was stripped gets it back (same pod, no replacement)."""
    create_sandbox(kube, namespace, "relabel", image=workload_image)
    pod = wait_pod(kube, namespace, "relabel", lambda p: True)
    wait_ready(kube, namespace, "relabel")
    kube.patch("v1", "Pod", "relabel", namespace, {"metadata": {"labels": {NAME_HASH_LABEL: None}}})
    # The pod still points at its Sandbox through the controller ref; any later reconcile (the
    # pod update itself is an event on an owned pod) restores the label.
    kube.patch(
        SANDBOX_API, "Sandbox", "relabel", namespace, {"metadata": {"labels": {"poke": "1"}}}
    )
    restored = wait_pod(
        kube,
        namespace,
        "relabel",
        lambda p: m.labels_of(p).get(NAME_HASH_LABEL) == m.name_hash("relabel"),
    )
    assert restored["metadata"]["uid"] == pod["metadata"]["uid"]


@pytest.mark.spec("3.9")
def test_deleted_pod_is_replaced_with_the_same_name(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """A pod deleted while Running is recreated under the same name; Ready returns."""
    create_sandbox(kube, namespace, "phoenix", image=workload_image)
    first = wait_pod(kube, namespace, "phoenix", lambda p: True)
    before = m.condition(wait_ready(kube, namespace, "phoenix"), "Suspended")
    assert before is not None
    kube.delete("v1", "Pod", "phoenix", namespace, grace_period_seconds=0)
    second = wait_pod(
        kube, namespace, "phoenix", lambda p: p["metadata"]["uid"] != first["metadata"]["uid"]
    )
    assert m.controller_ref(second) == m.controller_ref(first)
    sandbox = wait_sandbox(
        kube,
        namespace,
        "phoenix",
        lambda s: (
            m.has_condition(s, "Ready", "True", "DependenciesReady")
            and m.annotations_of(s).get(POD_NAME_ANNOTATION) == "phoenix"
        ),
        what="Ready again, pod-name annotation set again",
    )
    suspended = m.condition(sandbox, "Suspended")
    assert suspended is not None
    assert (suspended["status"], suspended["reason"]) == ("False", "NotSuspended")
    # LTT moves only on a status flip; a lost pod does not flip Suspended.
    assert suspended["lastTransitionTime"] == before["lastTransitionTime"]


@pytest.mark.spec("3.3")
def test_pod_spec_changes_do_not_touch_the_running_pod(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """Changing ``podTemplate.spec`` leaves the existing pod alone (applied on the next pod)."""
    create_sandbox(kube, namespace, "stable", image=workload_image)
    pod = wait_pod(kube, namespace, "stable", lambda p: True)
    wait_ready(kube, namespace, "stable")
    kube.patch(
        SANDBOX_API,
        "Sandbox",
        "stable",
        namespace,
        {"spec": {"podTemplate": {"spec": {"terminationGracePeriodSeconds": 3}}}},
    )
    kube.consistently(
        lambda: (
            (kube.get("v1", "Pod", "stable", namespace)["metadata"]["uid"])
            == pod["metadata"]["uid"]
        ),
        seconds=3,
        what="the pod is neither replaced nor deleted",
    )
    assert kube.get("v1", "Pod", "stable", namespace)["spec"].get(
        "terminationGracePeriodSeconds"
    ) == pod["spec"].get("terminationGracePeriodSeconds")
    kube.delete("v1", "Pod", "stable", namespace, grace_period_seconds=0)
    replacement = wait_pod(
        kube, namespace, "stable", lambda p: p["metadata"]["uid"] != pod["metadata"]["uid"]
    )
    assert replacement["spec"]["terminationGracePeriodSeconds"] == 3


@pytest.mark.spec("3.3.1")
def test_created_by_label_follows_the_sandbox(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """Removing the Sandbox's ``created-by`` label removes it from the pod too."""
    body = m.sandbox(
        "origin",
        labels={CREATED_BY_LABEL: "go-client"},
        template=m.pod_template(image=workload_image),
    )
    kube.create(body, namespace=namespace)
    pod = wait_pod(kube, namespace, "origin", lambda p: CREATED_BY_LABEL in m.labels_of(p))
    kube.patch(
        SANDBOX_API,
        "Sandbox",
        "origin",
        namespace,
        {"metadata": {"labels": {CREATED_BY_LABEL: None}}},
    )
    updated = wait_pod(kube, namespace, "origin", lambda p: CREATED_BY_LABEL not in m.labels_of(p))
    assert updated["metadata"]["uid"] == pod["metadata"]["uid"]


@pytest.mark.spec("3.3")
def test_stale_pod_name_annotation_is_corrected(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """A pod-name annotation naming a missing pod is cleared and set back to the real pod."""
    create_sandbox(kube, namespace, "named", image=workload_image)
    wait_ready(kube, namespace, "named")
    kube.patch(
        SANDBOX_API,
        "Sandbox",
        "named",
        namespace,
        {"metadata": {"annotations": {POD_NAME_ANNOTATION: "no-such-pod"}}},
    )
    sandbox = wait_sandbox(
        kube,
        namespace,
        "named",
        lambda s: m.annotations_of(s).get(POD_NAME_ANNOTATION) == "named",
        what="pod-name annotation back to the owned pod",
    )
    assert m.has_condition(sandbox, "Ready", "True")
    assert kube.get_or_none("v1", "Pod", "no-such-pod", namespace) is None
