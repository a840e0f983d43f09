"""The SandboxWarmPool controller keeps `spec.replicas` warm Sandboxes.

Observable contract: members are Sandboxes named `<pool>-xxxxx`, shaped by the blueprint of
buildSandboxCR (labels, annotations, controller ref, secure pod defaults); the status counts
members and Ready members and carries the selector and observedGeneration; the scale subresource
reads and writes `spec.replicas`; template changes replace members at once under `Recreate` and
only on replenishment under `OnReplenish` (filterActiveSandboxes). Function names are those of
upstream v0.5.6 extensions/controllers/sandboxwarmpool_controller.go; see
docs/concepts/warm-pools.md.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import Kube, Obj
from kube_agent_sandbox.conformance.plugin import Settings
from kube_agent_sandbox.conformance.tests.extensions import support as s


def selector_of(pool: str) -> str:
    """``status.selector`` of a pool."""
    return f"agents.x-k8s.io/warm-pool-sandbox={m.name_hash(pool)}"


def pool_status(kube: Kube, namespace: str, pool: str) -> Obj:
    """The pool's status (empty when absent)."""
    status: Obj = kube.get(s.EXT_API, "SandboxWarmPool", pool, namespace).get("status") or {}
    return status


def wait_status(kube: Kube, namespace: str, pool: str, **want: object) -> Obj:
    """Wait until the pool status has the given values (0 also matches an absent count)."""

    def matches(obj: Obj | None) -> bool:
        status = (obj or {}).get("status") or {}
        for key, value in want.items():
            got = status.get(key)
            if got != value and not (value == 0 and got is None):
                return False
        return True

    found = kube.wait_for(
        s.EXT_API, "SandboxWarmPool", pool, namespace, matches, what=f"pool status {want}"
    )
    assert found is not None
    status: Obj = found["status"]
    return status


def change_pod_spec(kube: Kube, namespace: str, template: str) -> None:
    """Change the template's pod spec (an env var: a spec change that runs on any image)."""
    current = kube.get(s.EXT_API, "SandboxTemplate", template, namespace)
    main = dict(s.pod_spec(current)["containers"][0])
    main["env"] = [{"name": "GENERATION", "value": "2"}]
    patch = {"spec": {"podTemplate": {"spec": {"containers": [main]}}}}
    kube.patch(s.EXT_API, "SandboxTemplate", template, namespace, patch)


def has_new_spec(sandbox: Obj) -> bool:
    """Whether a member was built from the changed template (see :func:`change_pod_spec`)."""
    env = s.pod_spec(sandbox)["containers"][0].get("env") or []
    return {"name": "GENERATION", "value": "2"} in env


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
        assert meta["generateName"] == "pool-"
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
    wait_status(
        kube,
        namespace,
        "pool",
        replicas=1,
        readyReplicas=1,
        selector=selector_of("pool"),
        observedGeneration=pool["metadata"]["generation"],
    )
    scaled = kube.patch(s.EXT_API, "SandboxWarmPool", "pool", namespace, {"spec": {"replicas": 3}})
    assert scaled["metadata"]["generation"] > pool["metadata"]["generation"]
    s.wait_members(kube, namespace, "pool", 3)
    wait_status(
        kube,
        namespace,
        "pool",
        replicas=3,
        readyReplicas=3,
        observedGeneration=scaled["metadata"]["generation"],
    )
    kube.patch(s.EXT_API, "SandboxWarmPool", "pool", namespace, {"spec": {"replicas": 0}})
    s.wait_members(kube, namespace, "pool", 0)
    status = wait_status(kube, namespace, "pool", replicas=0, readyReplicas=0)
    assert status["selector"] == selector_of("pool")


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
    wait_status(kube, namespace, "pool", replicas=1, readyReplicas=1)
    scale = kube.get(s.EXT_API, "SandboxWarmPool", "pool", namespace, subresource="scale")
    assert scale["apiVersion"] == "autoscaling/v1"
    assert scale["kind"] == "Scale"
    assert scale["spec"]["replicas"] == 1
    assert scale["status"]["replicas"] == 1
    assert scale["status"]["selector"] == selector_of("pool")

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
    wait_status(kube, namespace, "pool", replicas=3, readyReplicas=3)
    scale = kube.get(s.EXT_API, "SandboxWarmPool", "pool", namespace, subresource="scale")
    assert scale["spec"]["replicas"] == 3
    assert scale["status"]["replicas"] == 3


@pytest.mark.spec("4.2.3", "4.2.4")
def test_recreate_replaces_members_when_the_pod_spec_changes(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """Under `Recreate`, stale members are deleted and replaced from the new template."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=2, strategy="Recreate")
    old = s.names(s.wait_members(kube, namespace, "pool", 2))
    change_pod_spec(kube, namespace, "tpl")
    fresh = s.wait_members(
        kube,
        namespace,
        "pool",
        2,
        check=lambda sb: has_new_spec(sb) and sb["metadata"]["name"] not in old,
    )
    assert not s.names(fresh) & old


@pytest.mark.spec("4.2.3")
def test_recreate_ignores_pod_metadata_changes(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """A label change of the template's pod template never recreates members."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=1, strategy="Recreate")
    before = s.names(s.wait_members(kube, namespace, "pool", 1))
    kube.patch(
        s.EXT_API,
        "SandboxTemplate",
        "tpl",
        namespace,
        {"spec": {"podTemplate": {"metadata": {"labels": {"team": "blue"}}}}},
    )
    kube.consistently(
        lambda: s.names(s.members(kube, namespace, "pool")) == before,
        seconds=4,
        what="the member survives a metadata-only template change",
    )


@pytest.mark.spec("4.2.3")
def test_recreate_replaces_members_when_the_pool_switches_template(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """Pointing a `Recreate` pool at another (identical) template replaces its members."""
    s.create_template(kube, namespace, "template-a", image=settings.image)
    s.create_template(kube, namespace, "template-b", image=settings.image)
    s.create_pool(kube, namespace, "pool", "template-a", replicas=1, strategy="Recreate")
    old = s.names(s.wait_members(kube, namespace, "pool", 1))
    kube.patch(
        s.EXT_API,
        "SandboxWarmPool",
        "pool",
        namespace,
        {"spec": {"sandboxTemplateRef": {"name": "template-b"}}},
    )
    (fresh,) = s.wait_members(
        kube, namespace, "pool", 1, check=lambda sb: sb["metadata"]["name"] not in old
    )
    assert m.annotations_of(fresh)[s.TEMPLATE_REF_ANNOTATION] == "template-b"
    assert m.labels_of(fresh)[s.TEMPLATE_REF_HASH_LABEL] == m.name_hash("template-b")


@pytest.mark.spec("4.2.3", "1.4")
def test_on_replenish_keeps_stale_members_and_refills_from_the_new_template(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """The default strategy keeps stale members; a deleted one is replaced with the new spec."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=2)  # updateStrategy defaulted
    kept, victim = sorted(s.names(s.wait_members(kube, namespace, "pool", 2)))
    change_pod_spec(kube, namespace, "tpl")
    kube.consistently(
        lambda: s.names(s.members(kube, namespace, "pool")) == {kept, victim},
        seconds=3,
        what="stale members stay under OnReplenish",
    )
    kube.delete(s.SANDBOX_API, "Sandbox", victim, namespace)
    after = s.wait_members(
        kube, namespace, "pool", 2, check=lambda sb: sb["metadata"]["name"] != victim
    )
    by_name = {sb["metadata"]["name"]: sb for sb in after}
    assert kept in by_name
    assert not has_new_spec(by_name.pop(kept))
    (replacement,) = by_name.values()
    assert has_new_spec(replacement)


@pytest.mark.spec("4.2.1", "delta-4.1")
def test_a_missing_template_creates_nothing_until_it_appears(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """Without its template a pool has no members but a status; the template's arrival fills it."""
    pool = s.create_pool(kube, namespace, "pool", "later", replicas=2)
    status = wait_status(
        kube,
        namespace,
        "pool",
        selector=selector_of("pool"),
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
    wait_status(kube, namespace, "pool", replicas=2, readyReplicas=2)


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
    wait_status(kube, namespace, "pool", readyReplicas=2)
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


@pytest.mark.spec("4.2.3")
def test_a_member_without_launch_type_gets_it_back(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """A pool-owned member missing `launch-type: warm` is labelled again."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=1)
    (member,) = s.wait_members(kube, namespace, "pool", 1)
    name = member["metadata"]["name"]
    kube.patch(
        s.SANDBOX_API,
        "Sandbox",
        name,
        namespace,
        {"metadata": {"labels": {s.LAUNCH_TYPE_LABEL: None}}},
    )
    kube.wait_for(
        s.SANDBOX_API,
        "Sandbox",
        name,
        namespace,
        lambda o: m.labels_of(o).get(s.LAUNCH_TYPE_LABEL) == "warm",
        what="launch-type restored",
    )
    assert s.names(s.members(kube, namespace, "pool")) == {name}


def orphan(name: str, pool: str, template: str, image: str, **container: Any) -> Obj:
    """A Sandbox without owner that carries a pool's label and a template's secure pod spec."""
    sandbox = m.sandbox(
        name,
        labels={
            s.WARM_POOL_LABEL: m.name_hash(pool),
            s.TEMPLATE_REF_HASH_LABEL: m.name_hash(template),
        },
        template=m.pod_template(
            containers=[m.container(image=image, **container)],
            automountServiceAccountToken=False,
            dnsPolicy="None",
            dnsConfig={"nameservers": ["8.8.8.8", "1.1.1.1"]},
        ),
    )
    return sandbox


@pytest.mark.spec("4.2.3", "4.2.4")
def test_a_matching_orphan_is_adopted(kube: Kube, namespace: str, settings: Settings) -> None:
    """An unowned Sandbox with the pool's label and the template's spec joins the pool."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    kube.create(orphan("stray", "pool", "tpl", settings.image), namespace=namespace)
    pool = s.create_pool(kube, namespace, "pool", "tpl", replicas=1)
    adopted = kube.wait_for(
        s.SANDBOX_API,
        "Sandbox",
        "stray",
        namespace,
        lambda o: m.controller_ref(o) is not None,
        what="the orphan to be adopted",
    )
    assert adopted is not None
    assert adopted["metadata"]["ownerReferences"] == [s.owner("SandboxWarmPool", pool)]
    assert m.labels_of(adopted)[s.LAUNCH_TYPE_LABEL] == "warm"
    kube.consistently(
        lambda: s.names(s.members(kube, namespace, "pool")) == {"stray"},
        seconds=2,
        what="the adopted orphan fills the pool (no extra member)",
    )


@pytest.mark.spec("4.2.3", "4.2.4")
def test_a_stale_orphan_is_deleted_and_replaced(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """An unowned Sandbox with the pool's label but another pod spec is deleted, not adopted."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    stale = orphan("stray", "pool", "tpl", settings.image, env=[{"name": "OTHER", "value": "spec"}])
    kube.create(stale, namespace=namespace)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=1)
    kube.wait_gone(s.SANDBOX_API, "Sandbox", "stray", namespace)
    (member,) = s.wait_members(kube, namespace, "pool", 1)
    assert member["metadata"]["name"] != "stray"


@pytest.mark.spec("4.2.3")
def test_a_sandbox_controlled_by_another_object_is_not_a_member(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """A pool-labelled Sandbox controlled by something else is neither counted nor touched."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    holder = kube.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "holder"}},
        namespace=namespace,
    )
    foreign = orphan("foreign", "pool", "tpl", settings.image)
    foreign["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": "holder",
            "uid": holder["metadata"]["uid"],
            "controller": True,
        }
    ]
    created = kube.create(foreign, namespace=namespace)
    pool = s.create_pool(kube, namespace, "pool", "tpl", replicas=1)

    def own_members() -> list[Obj]:
        uid = pool["metadata"]["uid"]
        return [
            sb
            for sb in s.members(kube, namespace, "pool")
            if (m.controller_ref(sb) or {}).get("uid") == uid
        ]

    kube.wait_until(lambda: len(own_members()) == 1, what="the pool's own member")
    status = wait_status(kube, namespace, "pool", replicas=1)
    assert status["replicas"] == 1
    still = s.get_sandbox(kube, namespace, "foreign")
    assert still["metadata"]["ownerReferences"] == created["metadata"]["ownerReferences"]
    assert s.LAUNCH_TYPE_LABEL not in m.labels_of(still)


@pytest.mark.spec("4.2.1", "4.2.3")
def test_members_stay_when_the_template_is_deleted(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """A missing template is not an error: no staleness deletes, the status is still written."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=2, strategy="Recreate")
    before = s.names(s.wait_members(kube, namespace, "pool", 2))
    kube.delete(s.EXT_API, "SandboxTemplate", "tpl", namespace)
    kube.wait_gone(s.EXT_API, "SandboxTemplate", "tpl", namespace)
    kube.consistently(
        lambda: s.names(s.members(kube, namespace, "pool")) == before,
        seconds=3,
        what="members survive their template's deletion",
    )
    scaled = kube.patch(s.EXT_API, "SandboxWarmPool", "pool", namespace, {"spec": {"replicas": 3}})
    wait_status(
        kube, namespace, "pool", replicas=2, observedGeneration=scaled["metadata"]["generation"]
    )
    assert s.names(s.members(kube, namespace, "pool")) == before


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
    wait_status(kube, namespace, "pool", replicas=2, readyReplicas=0)
    kube.consistently(
        lambda: (
            len(s.members(kube, namespace, "pool")) == 2
            and not pool_status(kube, namespace, "pool").get("readyReplicas")
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
