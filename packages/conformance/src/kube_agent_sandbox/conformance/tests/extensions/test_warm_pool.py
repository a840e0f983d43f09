"""The SandboxWarmPool controller keeps `spec.replicas` warm Sandboxes.

Observable contract: members are Sandboxes named `<pool>-xxxxx`, shaped by the blueprint of
buildSandboxCR (labels, annotations, controller ref, secure pod defaults); the status counts
members and Ready members and carries the selector and observedGeneration; the scale subresource
reads and writes `spec.replicas`, and scaling down picks members that are not Ready, then the
newest. How template changes and strays reach the members is in ``test_warm_pool_members.py``.
Function names are those of upstream v0.5.6 extensions/controllers/sandboxwarmpool_controller.go;
see docs/concepts/warm-pools.md.
"""

from __future__ import annotations

import re
import time

import pytest

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import Kube, Obj
from kube_agent_sandbox.conformance.plugin import Settings
from kube_agent_sandbox.conformance.tests.extensions import support as s


@pytest.mark.spec("4.2.2", "4", "2.1", "2.2", "2.6")
def test_members_are_built_from_the_blueprint(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """Names, labels, annotations, controller ref and pod template of warm members."""
    s.create_template(kube, namespace, "tpl", image=settings.image, labels={"app": "warm"})
    pool = s.create_pool(kube, namespace, "pool", "tpl", replicas=2)
    found = s.wait_members(kube, namespace, "pool", 2)
    for sandbox in found:
        meta = sandbox["metadata"]
        assert re.fullmatch(r"pool-[a-z0-9]{5}", meta["name"]), meta["name"]
        # upstream names members through generateName; a controller may draw the same shape
        # of name itself (then there is no generateName to keep)
        assert meta.get("generateName", "pool-") == "pool-"
        pod_name = m.annotations_of(sandbox).get(s.POD_NAME_ANNOTATION)
        assert pod_name in (None, meta["name"]), pod_name
        labels = m.labels_of(sandbox)
        assert s.system_keys(labels) == {
            s.WARM_POOL_LABEL,
            s.TEMPLATE_REF_HASH_LABEL,
            s.LAUNCH_TYPE_LABEL,
            s.POD_TEMPLATE_HASH_LABEL,
            s.TEMPLATE_HASH_LABEL,
            s.CREATED_BY_LABEL,
        }
        assert labels[s.WARM_POOL_LABEL] == m.name_hash("pool")
        assert labels[s.TEMPLATE_REF_HASH_LABEL] == m.name_hash("tpl")
        assert labels[s.LAUNCH_TYPE_LABEL] == "warm"
        assert labels[s.CREATED_BY_LABEL] == "controller"
        assert labels[s.POD_TEMPLATE_HASH_LABEL]
        assert labels[s.TEMPLATE_HASH_LABEL]
        assert m.annotations_of(sandbox)[s.TEMPLATE_REF_ANNOTATION] == "tpl"
        assert meta["ownerReferences"] == [s.owner("SandboxWarmPool", pool)]

        pod_labels = s.pod_metadata(sandbox)["labels"]
        assert pod_labels["app"] == "warm"
        for key in (
            s.WARM_POOL_LABEL,
            s.TEMPLATE_REF_HASH_LABEL,
            s.POD_TEMPLATE_HASH_LABEL,
            s.TEMPLATE_HASH_LABEL,
        ):
            assert pod_labels[key] == labels[key], key
        assert s.pod_metadata(sandbox)["annotations"] == {s.SAFE_TO_EVICT: "true"}
        spec = s.pod_spec(sandbox)
        assert spec["automountServiceAccountToken"] is False
        assert spec["dnsPolicy"] == "None"
        assert spec["dnsConfig"] == {"nameservers": ["8.8.8.8", "1.1.1.1"]}
        assert sandbox["spec"]["operatingMode"] == "Running"
        assert sandbox["spec"]["shutdownPolicy"] == "Retain"

        pod = kube.get("v1", "Pod", meta["name"], namespace)
        assert m.labels_of(pod) == {
            "app": "warm",
            s.NAME_HASH_LABEL: m.name_hash(meta["name"]),
            s.WARM_POOL_LABEL: m.name_hash("pool"),
            s.TEMPLATE_REF_HASH_LABEL: m.name_hash("tpl"),
            s.CREATED_BY_LABEL: "controller",
        }
        assert m.annotations_of(pod)[s.SAFE_TO_EVICT] == "true"


@pytest.mark.spec("4.2.1", "delta-4.1", "1.4")
def test_status_counts_members_and_follows_the_generation(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """replicas/readyReplicas/selector/observedGeneration through scale up and down to zero."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    pool = s.create_pool(kube, namespace, "pool", "tpl", replicas=1)
    s.wait_status(
        kube,
        namespace,
        "pool",
        replicas=1,
        readyReplicas=1,
        selector=s.selector_of("pool"),
        observedGeneration=pool["metadata"]["generation"],
    )
    scaled = kube.patch(s.EXT_API, "SandboxWarmPool", "pool", namespace, {"spec": {"replicas": 3}})
    assert scaled["metadata"]["generation"] > pool["metadata"]["generation"]
    s.wait_members(kube, namespace, "pool", 3)
    s.wait_status(
        kube,
        namespace,
        "pool",
        replicas=3,
        readyReplicas=3,
        observedGeneration=scaled["metadata"]["generation"],
    )
    kube.patch(s.EXT_API, "SandboxWarmPool", "pool", namespace, {"spec": {"replicas": 0}})
    s.wait_members(kube, namespace, "pool", 0)
    status = s.wait_status(kube, namespace, "pool", replicas=0, readyReplicas=0)
    assert status["selector"] == s.selector_of("pool")


@pytest.mark.spec("1.4")
def test_replicas_defaults_to_one(kube: Kube, namespace: str, settings: Settings) -> None:
    """A pool without `replicas` is defaulted to 1 and keeps one member."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    pool = s.create_pool(kube, namespace, "pool", "tpl", replicas=None)
    assert pool["spec"]["replicas"] == 1
    s.wait_members(kube, namespace, "pool", 1)


@pytest.mark.spec("4.2.6", "1")
def test_scale_subresource_reads_and_writes_replicas(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """`/scale` reports spec/status replicas and the selector; a PATCH of it resizes the pool."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=1)
    s.wait_status(kube, namespace, "pool", replicas=1, readyReplicas=1)
    scale = kube.get(s.EXT_API, "SandboxWarmPool", "pool", namespace, subresource="scale")
    assert scale["apiVersion"] == "autoscaling/v1"
    assert scale["kind"] == "Scale"
    assert scale["spec"]["replicas"] == 1
    assert scale["status"]["replicas"] == 1
    assert scale["status"]["selector"] == s.selector_of("pool")

    kube.patch(
        s.EXT_API,
        "SandboxWarmPool",
        "pool",
        namespace,
        {"spec": {"replicas": 3}},
        subresource="scale",
    )
    assert kube.get(s.EXT_API, "SandboxWarmPool", "pool", namespace)["spec"]["replicas"] == 3
    s.wait_members(kube, namespace, "pool", 3)
    s.wait_status(kube, namespace, "pool", replicas=3, readyReplicas=3)
    scale = kube.get(s.EXT_API, "SandboxWarmPool", "pool", namespace, subresource="scale")
    assert scale["spec"]["replicas"] == 3
    assert scale["status"]["replicas"] == 3


@pytest.mark.spec("4.2.1", "delta-4.1")
def test_a_missing_template_creates_nothing_until_it_appears(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """Without its template a pool has no members but a status; the template's arrival fills it."""
    pool = s.create_pool(kube, namespace, "pool", "later", replicas=2)
    status = s.wait_status(
        kube,
        namespace,
        "pool",
        selector=s.selector_of("pool"),
        observedGeneration=pool["metadata"]["generation"],
    )
    assert not status.get("replicas")
    kube.consistently(
        lambda: not s.members(kube, namespace, "pool"),
        seconds=2,
        what="no members without a template",
    )
    s.create_template(kube, namespace, "later", image=settings.image)
    s.wait_members(kube, namespace, "pool", 2)
    s.wait_status(kube, namespace, "pool", replicas=2, readyReplicas=2)


@pytest.mark.spec("4.2.1")
def test_deleting_the_pool_deletes_its_members(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """Members go with their pool (ownerReference garbage collection)."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=2)
    found = s.wait_members(kube, namespace, "pool", 2, ready=False)
    kube.delete(s.EXT_API, "SandboxWarmPool", "pool", namespace)
    for sandbox in found:
        kube.wait_gone(s.SANDBOX_API, "Sandbox", sandbox["metadata"]["name"], namespace)


@pytest.mark.spec("1")
def test_printer_columns(kube: Kube, namespace: str, settings: Settings) -> None:
    """`kubectl get swp` shows Ready (readyReplicas), Desired (spec.replicas) and Age."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=2)
    s.wait_status(kube, namespace, "pool", readyReplicas=2)
    table = kube.table(s.EXT_API, "SandboxWarmPool", namespace, "pool")
    columns = [c["name"] for c in table["columnDefinitions"]]
    assert columns == ["Name", "Ready", "Desired", "Age"]
    (row,) = table["rows"]
    assert row["cells"][:3] == ["pool", 2, 2]


@pytest.mark.spec("4.2.1")
def test_scale_down_deletes_the_newest_member_first(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """Excess Ready members are deleted newest creationTimestamp first."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=1)
    (oldest,) = s.wait_members(kube, namespace, "pool", 1)
    # creationTimestamp has one-second resolution: make the next member strictly newer.
    kube.consistently(lambda: True, seconds=1.5, what="a second passes")
    kube.patch(s.EXT_API, "SandboxWarmPool", "pool", namespace, {"spec": {"replicas": 2}})
    s.wait_members(kube, namespace, "pool", 2)
    kube.patch(s.EXT_API, "SandboxWarmPool", "pool", namespace, {"spec": {"replicas": 1}})
    (kept,) = s.wait_members(kube, namespace, "pool", 1)
    assert kept["metadata"]["uid"] == oldest["metadata"]["uid"]


@pytest.mark.spec("4")
@pytest.mark.parametrize(
    ("template_spec", "pod_extra", "expected"),
    [
        pytest.param(
            {"networkPolicy": {"egress": []}},
            {},
            {"automountServiceAccountToken": False},
            id="custom-network-policy",
        ),
        pytest.param(
            {"networkPolicyManagement": "Unmanaged"},
            {},
            {"automountServiceAccountToken": False},
            id="unmanaged",
        ),
        pytest.param(
            {},
            {"automountServiceAccountToken": True, "dnsPolicy": "ClusterFirst"},
            {"automountServiceAccountToken": True, "dnsPolicy": "ClusterFirst"},
            id="explicit-values-kept",
        ),
    ],
)
def test_secure_defaults_leave_dns_alone_unless_the_default_policy_applies(
    kube: Kube,
    namespace: str,
    settings: Settings,
    template_spec: Obj,
    pod_extra: Obj,
    expected: Obj,
) -> None:
    """Token automount off unless set; DNS rewritten only under the default NetworkPolicy."""
    template = m.pod_template(image=settings.image, **pod_extra)
    kube.create(
        m.extension_object("SandboxTemplate", "tpl", podTemplate=template, **template_spec),
        namespace=namespace,
    )
    s.create_pool(kube, namespace, "pool", "tpl", replicas=1)
    (member,) = s.wait_members(kube, namespace, "pool", 1, ready=False)
    spec = s.pod_spec(member)
    for key in ("automountServiceAccountToken", "dnsPolicy", "dnsConfig"):
        assert spec.get(key) == expected.get(key), key


@pytest.mark.spec("4.2.1", "4.2.6")
def test_members_that_are_not_ready_count_as_replicas_only(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """Unschedulable members are members (replicas) but not ready ones (readyReplicas)."""
    kube.create(
        m.extension_object(
            "SandboxTemplate",
            "tpl",
            podTemplate=m.pod_template(
                image=settings.image, nodeSelector={"conformance.agents.x-k8s.io/node": "none"}
            ),
        ),
        namespace=namespace,
    )
    s.create_pool(kube, namespace, "pool", "tpl", replicas=2)
    s.wait_members(kube, namespace, "pool", 2, ready=False)
    s.wait_status(kube, namespace, "pool", replicas=2, readyReplicas=0)
    kube.consistently(
        lambda: (
            len(s.members(kube, namespace, "pool")) == 2
            and not s.pool_status(kube, namespace, "pool").get("readyReplicas")
        ),
        seconds=2,
        what="two members, none ready",
    )


TEMPLATE_PROPAGATION_SECONDS = 3.0


@pytest.mark.spec("4.2.1")
def test_scale_down_deletes_members_that_are_not_ready_first(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """An older member that is not Ready goes before a newer Ready one."""
    stuck = m.pod_template(
        image=settings.image, nodeSelector={"conformance.agents.x-k8s.io/node": "none"}
    )
    kube.create(
        m.extension_object("SandboxTemplate", "tpl", podTemplate=stuck), namespace=namespace
    )
    s.create_pool(kube, namespace, "pool", "tpl", replicas=1)
    (old,) = s.wait_members(kube, namespace, "pool", 1, ready=False)
    # Fix the template: OnReplenish keeps the old (unschedulable) member as it is.
    kube.patch(
        s.EXT_API,
        "SandboxTemplate",
        "tpl",
        namespace,
        {"spec": {"podTemplate": {"spec": {"nodeSelector": None}}}},
    )
    # A controller reads templates from its watch cache: scaling in the same instant may build
    # the new member from the template as it was. Give the change time to arrive, as a user
    # scaling later would; the API offers no way to see that a controller's cache has it.
    time.sleep(TEMPLATE_PROPAGATION_SECONDS)
    kube.patch(s.EXT_API, "SandboxWarmPool", "pool", namespace, {"spec": {"replicas": 2}})
    s.wait_members(
        kube,
        namespace,
        "pool",
        2,
        ready=False,
        check=lambda sb: sb["metadata"]["uid"] == old["metadata"]["uid"] or s.is_ready(sb),
    )
    kube.patch(s.EXT_API, "SandboxWarmPool", "pool", namespace, {"spec": {"replicas": 1}})
    (kept,) = s.wait_members(kube, namespace, "pool", 1)
    assert kept["metadata"]["uid"] != old["metadata"]["uid"]
