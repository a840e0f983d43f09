"""Which Sandboxes are a SandboxWarmPool's members, and when they are replaced.

Observable contract: template changes replace members at once under `Recreate` (pod spec
changes and a switch of template, not pod metadata) and only on replenishment under
`OnReplenish`; a member that lost its launch-type label gets it back; an ownerless Sandbox
carrying the pool's labels is adopted when it matches the template and replaced when it does
not, while one controlled by another object is left alone; deleting the template leaves the
members. Replicas, status and scaling are in ``test_warm_pool.py``. Function names are those
of upstream v0.5.6 extensions/controllers/sandboxwarmpool_controller.go (filterActiveSandboxes);
see docs/concepts/warm-pools.md.
"""

from __future__ import annotations

from typing import Any

import pytest

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import Kube, Obj
from kube_agent_sandbox.conformance.plugin import Settings
from kube_agent_sandbox.conformance.tests.extensions import support as s


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
    status = s.wait_status(kube, namespace, "pool", replicas=1)
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
    s.wait_status(
        kube, namespace, "pool", replicas=2, observedGeneration=scaled["metadata"]["generation"]
    )
    assert s.names(s.members(kube, namespace, "pool")) == before
