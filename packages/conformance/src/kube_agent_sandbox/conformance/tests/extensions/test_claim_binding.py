"""How a SandboxClaim gets its Sandbox, and the status that reports it.

Observable contract: without a warm member a claim gets a cold Sandbox named like itself
(createSandbox); with one it adopts the member (adoptSandboxFromCandidates), which leaves the
pool; every claim owns exactly one Sandbox and every Sandbox at most one claim; the claim's
Ready condition is the Sandbox's, with the claim's generation; errors are reported with the
reasons and messages of computeReadyCondition; a template or pool created later is picked up at
once (SetupWithManager's watches). Function names are those of upstream v0.5.6
extensions/controllers/sandboxclaim_controller.go; see docs/concepts/claims.md.
"""

from __future__ import annotations

import datetime as dt

import pytest

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import Kube, Obj
from kube_agent_sandbox.conformance.plugin import Settings
from kube_agent_sandbox.conformance.tests.extensions import support as s

PICK_UP = 30.0
"""Seconds within which a watch-driven pick-up must happen (the fallback retry is 1 minute)."""


def assert_forwarded_ready(claim: Obj, sandbox: Obj) -> None:
    """The claim's Ready copies the Sandbox's Ready, with the claim's generation."""
    ready, source = m.condition(claim, "Ready"), m.condition(sandbox, "Ready")
    assert ready is not None
    assert source is not None
    for key in ("status", "reason", "message", "lastTransitionTime"):
        assert ready[key] == source[key], key
    assert ready["observedGeneration"] == claim["metadata"]["generation"]


def bound_name(claim: Obj) -> str:
    """``status.sandbox.name`` of a claim."""
    return str(((claim.get("status") or {}).get("sandbox") or {}).get("name") or "")


@pytest.mark.spec("4.3.3", "4.3.6", "4", "2.1", "2.2", "2.4")
def test_cold_start_without_warm_members(kube: Kube, namespace: str, settings: Settings) -> None:
    """A claim on an empty pool gets a Sandbox named like itself, built from the template."""
    s.create_template(kube, namespace, "tpl", image=settings.image, labels={"app": "cold"})
    s.create_pool(kube, namespace, "pool", "tpl", replicas=0)
    created = s.create_claim(
        kube,
        namespace,
        "cold-claim",
        "pool",
        labels={s.CREATED_BY_LABEL: "python-client"},
    )
    uid = created["metadata"]["uid"]
    claim = s.wait_claim(kube, namespace, "cold-claim", status="True")
    sandbox = s.get_sandbox(kube, namespace, "cold-claim")

    assert m.labels_of(sandbox) == {
        s.CLAIM_UID_LABEL: uid,
        s.CREATED_BY_LABEL: "python-client",
        s.LAUNCH_TYPE_LABEL: "cold",
        s.TEMPLATE_REF_HASH_LABEL: m.name_hash("tpl"),
    }
    assert m.annotations_of(sandbox)[s.TEMPLATE_REF_ANNOTATION] == "tpl"
    assert sandbox["metadata"]["ownerReferences"] == [s.owner("SandboxClaim", created)]
    assert s.pod_metadata(sandbox)["labels"] == {
        "app": "cold",
        s.CLAIM_UID_LABEL: uid,
        s.CREATED_BY_LABEL: "python-client",
        s.TEMPLATE_REF_HASH_LABEL: m.name_hash("tpl"),
    }
    spec = s.pod_spec(sandbox)
    assert spec["automountServiceAccountToken"] is False
    assert spec["dnsPolicy"] == "None"
    assert spec["dnsConfig"] == {"nameservers": ["8.8.8.8", "1.1.1.1"]}
    assert "shutdownTime" not in sandbox["spec"]

    assert_forwarded_ready(claim, sandbox)
    assert claim["status"]["sandbox"]["name"] == "cold-claim"
    assert claim["status"]["sandbox"].get("podIPs") == sandbox["status"].get("podIPs")
    observed = m.annotations_of(claim)[s.FIRST_OBSERVED_ANNOTATION]
    assert dt.datetime.fromisoformat(observed.replace("Z", "+00:00")) <= dt.datetime.now(dt.UTC)

    event = s.wait_event(kube, claim, "SandboxProvisioned")
    assert event["type"] == "Normal"
    assert event["action"] == "Provisioning"
    assert event["note"] == 'Created Sandbox "cold-claim"'
    assert event["reportingController"] == "sandboxclaim-controller"

    # The pod gets the template-ref-hash label but never the claim-uid (system prefix).
    pod = kube.wait_for(
        "v1",
        "Pod",
        "cold-claim",
        namespace,
        lambda p: p is not None and "app" in m.labels_of(p),
    )
    assert pod is not None
    pod_labels = m.labels_of(pod)
    assert s.CLAIM_UID_LABEL not in pod_labels
    assert pod_labels[s.TEMPLATE_REF_HASH_LABEL] == m.name_hash("tpl")
    assert pod_labels[s.CREATED_BY_LABEL] == "python-client"


@pytest.mark.spec("4.3.5", "4.3.6", "2.1", "2.2", "2.4")
def test_warm_adoption_takes_a_member_out_of_the_pool(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """A claim adopts a Ready member; the member becomes the claim's; the pool refills."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=1)
    (member,) = s.wait_members(kube, namespace, "pool", 1)
    name = member["metadata"]["name"]
    pod_before = kube.wait_for("v1", "Pod", name, namespace, lambda p: p is not None)
    assert pod_before is not None
    created = s.create_claim(
        kube, namespace, "warm-claim", "pool", labels={s.CREATED_BY_LABEL: "go-client"}
    )
    claim = s.wait_claim(kube, namespace, "warm-claim", status="True")
    assert bound_name(claim) == name
    assert m.annotations_of(claim)[s.SANDBOX_NAME_ANNOTATION] == name

    sandbox = s.get_sandbox(kube, namespace, name)
    assert_forwarded_ready(claim, sandbox)
    assert claim["status"]["sandbox"].get("podIPs") == sandbox["status"].get("podIPs")
    assert sandbox["metadata"]["ownerReferences"] == [s.owner("SandboxClaim", created)]
    labels = m.labels_of(sandbox)
    for gone in (s.WARM_POOL_LABEL, s.POD_TEMPLATE_HASH_LABEL, s.TEMPLATE_HASH_LABEL):
        assert gone not in labels, gone
    assert labels[s.LAUNCH_TYPE_LABEL] == "warm"
    assert labels[s.CLAIM_UID_LABEL] == created["metadata"]["uid"]
    assert labels[s.CREATED_BY_LABEL] == "go-client"
    assert labels[s.TEMPLATE_REF_HASH_LABEL] == m.name_hash("tpl")
    assert m.annotations_of(sandbox)[s.POD_NAME_ANNOTATION] == name
    pod_meta = s.pod_metadata(sandbox)
    assert s.SAFE_TO_EVICT not in (pod_meta.get("annotations") or {})
    assert s.WARM_POOL_LABEL not in (pod_meta.get("labels") or {})

    event = s.wait_event(kube, claim, "SandboxAdopted")
    assert (event["type"], event["action"], event["note"]) == (
        "Normal",
        "Adoption",
        f'Adopted warm pool Sandbox "{name}"',
    )
    # The pod is updated in place, not restarted, and leaves the pool.
    pod = kube.wait_for(
        "v1",
        "Pod",
        name,
        namespace,
        lambda p: p is not None and s.WARM_POOL_LABEL not in m.labels_of(p),
        what="the adopted pod to lose the pool label",
    )
    assert pod is not None
    assert pod["metadata"]["uid"] == pod_before["metadata"]["uid"]
    # The pool replaces the adopted member.
    (replacement,) = s.wait_members(kube, namespace, "pool", 1)
    assert replacement["metadata"]["name"] != name


@pytest.mark.spec("4.3.5")
def test_each_sandbox_is_bound_to_at_most_one_claim(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """Five claims racing for a pool of two: five distinct Sandboxes, one owner each."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=2)
    warm = s.names(s.wait_members(kube, namespace, "pool", 2))
    claims = [s.create_claim(kube, namespace, f"claim-{i}", "pool") for i in range(5)]
    ready = [s.wait_claim(kube, namespace, c["metadata"]["name"], status="True") for c in claims]
    bound = [bound_name(c) for c in ready]
    assert len(set(bound)) == len(claims), bound
    assert set(bound) & warm, f"no warm member was adopted: {bound} vs {warm}"
    for claim in claims:
        owned = s.sandboxes_controlled_by(kube, namespace, claim["metadata"]["uid"])
        assert len(owned) == 1, (claim["metadata"]["name"], s.names(owned))
        (sandbox,) = owned
        assert sandbox["metadata"]["ownerReferences"] == [s.owner("SandboxClaim", claim)]
        launch = m.labels_of(sandbox)[s.LAUNCH_TYPE_LABEL]
        cold = sandbox["metadata"]["name"] == claim["metadata"]["name"]
        assert launch == ("cold" if cold else "warm"), sandbox["metadata"]["name"]


@pytest.mark.spec("4.3.5")
def test_members_of_another_pool_are_never_adopted(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """A claim on an empty pool starts cold even when another pool has Ready members."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "full", "tpl", replicas=1)
    s.create_pool(kube, namespace, "empty", "tpl", replicas=0)
    (member,) = s.wait_members(kube, namespace, "full", 1)
    claim = s.create_claim(kube, namespace, "claim", "empty")
    ready = s.wait_claim(kube, namespace, "claim", status="True")
    assert bound_name(ready) == "claim"
    assert s.names(s.members(kube, namespace, "full")) == {member["metadata"]["name"]}
    assert m.controller_ref(s.get_sandbox(kube, namespace, "claim")) == s.owner(
        "SandboxClaim", claim
    )


@pytest.mark.spec("delta-5.2", "4.3.6")
def test_forwarded_ready_follows_the_claim_generation(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """A claim spec change rewrites the forwarded Ready with the new claim generation."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=0)
    s.create_claim(kube, namespace, "claim", "pool")
    first = s.wait_claim(kube, namespace, "claim", status="True")
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    patched = kube.patch(
        s.EXT_API,
        "SandboxClaim",
        "claim",
        namespace,
        {"spec": {"lifecycle": {"shutdownTime": later}}},
    )
    generation = patched["metadata"]["generation"]
    assert generation > first["metadata"]["generation"]
    claim = kube.wait_for(
        s.EXT_API,
        "SandboxClaim",
        "claim",
        namespace,
        lambda c: (m.condition(c, "Ready") or {}).get("observedGeneration") == generation,
        what=f"the claim's Ready to carry generation {generation}",
    )
    assert claim is not None
    assert_forwarded_ready(claim, s.get_sandbox(kube, namespace, "claim"))


@pytest.mark.spec("delta-5.1", "4.3.6")
def test_claim_waiting_for_its_template_is_served_when_it_is_created(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """TemplateNotFound, then Ready soon after the template appears (not the 1 min retry)."""
    s.create_pool(kube, namespace, "pool", "later", replicas=0)
    s.create_claim(kube, namespace, "claim", "pool")
    claim = s.wait_claim(kube, namespace, "claim", status="False", reason="TemplateNotFound")
    ready = m.condition(claim, "Ready")
    assert ready is not None
    assert ready["message"] == 'SandboxTemplate "later" not found'
    assert ready["observedGeneration"] == claim["metadata"]["generation"]
    assert not bound_name(claim)
    s.create_template(kube, namespace, "later", image=settings.image)
    s.wait_claim(kube, namespace, "claim", status="True", timeout=PICK_UP)


@pytest.mark.spec("4.3", "4.3.6")
def test_claim_waiting_for_its_pool_is_served_when_it_is_created(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """WarmPoolNotFound, then Ready soon after the pool appears."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_claim(kube, namespace, "claim", "no-pool-yet")
    claim = s.wait_claim(kube, namespace, "claim", status="False", reason="WarmPoolNotFound")
    ready = m.condition(claim, "Ready")
    assert ready is not None
    assert ready["message"] == 'SandboxWarmPool "no-pool-yet" not found'
    s.create_pool(kube, namespace, "no-pool-yet", "tpl", replicas=0)
    s.wait_claim(kube, namespace, "claim", status="True", timeout=PICK_UP)


@pytest.mark.spec("4.3.3", "4.3.6")
def test_a_foreign_sandbox_with_the_claim_name_is_reported_and_left_alone(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """A same-name Sandbox the claim does not control is an error; the controller keeps going."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=0)
    foreign = kube.create(
        m.sandbox("taken", template=m.pod_template(image=settings.image)), namespace=namespace
    )
    s.create_claim(kube, namespace, "taken", "pool")
    claim = s.wait_claim(kube, namespace, "taken", status="False", reason="ReconcilerError")
    ready = m.condition(claim, "Ready")
    assert ready is not None
    assert ready["message"] == (
        'Error seen: sandbox "taken" is not controlled by claim "taken". Please use a '
        "different claim name or delete the sandbox manually"
    )
    sandbox = s.get_sandbox(kube, namespace, "taken")
    assert not sandbox["metadata"].get("ownerReferences")
    assert sandbox["metadata"]["uid"] == foreign["metadata"]["uid"]
    s.create_claim(kube, namespace, "good", "pool")
    s.wait_claim(kube, namespace, "good", status="True")


@pytest.mark.spec("4.3", "2.5")
def test_deleting_the_claim_deletes_its_sandbox(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """The Sandbox goes with its claim (controller ownerReference, no finalizers)."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=0)
    s.create_claim(kube, namespace, "claim", "pool")
    claim = s.wait_claim(kube, namespace, "claim", status="True")
    assert not claim["metadata"].get("finalizers")
    assert not s.get_sandbox(kube, namespace, "claim")["metadata"].get("finalizers")
    kube.delete(s.EXT_API, "SandboxClaim", "claim", namespace)
    kube.wait_gone(s.SANDBOX_API, "Sandbox", "claim", namespace)


@pytest.mark.spec("1")
def test_printer_columns(kube: Kube, namespace: str, settings: Settings) -> None:
    """`kubectl get sandboxclaim` shows Ready, Sandbox, Reason and Age."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=0)
    s.create_claim(kube, namespace, "claim", "pool")
    s.wait_claim(kube, namespace, "claim", status="True")
    table = kube.table(s.EXT_API, "SandboxClaim", namespace, "claim")
    columns = [c["name"] for c in table["columnDefinitions"]]
    assert columns == ["Name", "Ready", "Sandbox", "Reason", "Age"]
    (row,) = table["rows"]
    assert row["cells"][:4] == ["claim", "True", "claim", "DependenciesReady"]


@pytest.mark.spec("delta-5.4", "4.3.5")
def test_members_without_pod_ips_are_not_adopted(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """Members whose pods have no IPs (unschedulable) are skipped: the claim starts cold."""
    nowhere = m.pod_template(
        image=settings.image, nodeSelector={"conformance.agents.x-k8s.io/node": "none"}
    )
    kube.create(
        m.extension_object("SandboxTemplate", "tpl", podTemplate=nowhere), namespace=namespace
    )
    s.create_pool(kube, namespace, "pool", "tpl", replicas=1)
    (member,) = s.wait_members(kube, namespace, "pool", 1, ready=False)
    s.create_claim(kube, namespace, "claim", "pool")
    claim = kube.wait_for(
        s.EXT_API,
        "SandboxClaim",
        "claim",
        namespace,
        lambda c: bool(bound_name(c or {})),
        what="the claim to be bound",
    )
    assert claim is not None
    assert bound_name(claim) == "claim"
    sandbox = s.get_sandbox(kube, namespace, "claim")
    assert m.labels_of(sandbox)[s.LAUNCH_TYPE_LABEL] == "cold"
    assert s.names(s.members(kube, namespace, "pool")) == {member["metadata"]["name"]}
    assert m.has_condition(claim, "Ready", "False")
