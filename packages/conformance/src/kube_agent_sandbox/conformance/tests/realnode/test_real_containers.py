"""Real-node profile: Sandbox conditions driven by containers that really run.

See docs/concepts/lifecycle.md.

On simulated nodes pods become Ready by decree; here the kubelet decides. So this profile checks
what only a real node can show: readiness from an exec probe (Ready messages), `Finished` from a
container that exits, data on a PVC across suspend and resume, and the claim's mirrored
`Finished` and TTL expiry.
"""

from __future__ import annotations

import pytest

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import Kube, Obj
from kube_agent_sandbox.conformance.tests.realnode import workloads as w

EXT_API = "extensions.agents.x-k8s.io/v1beta1"
PROBE_DELAY = 15
"""Seconds the container runs before its readiness probe can pass."""


def wait_ready(
    kube: Kube, namespace: str, name: str, status: str, reason: str, message: str | None = None
) -> Obj:
    """Wait for the Sandbox's Ready condition with ``status``/``reason`` (and ``message``)."""

    def matches(obj: Obj | None) -> bool:
        cond = m.condition(obj, "Ready") or {}
        wanted = cond.get("status") == status and cond.get("reason") == reason
        return wanted and (message is None or cond.get("message") == message)

    found = kube.wait_for(
        w.SANDBOX_API, "Sandbox", name, namespace, matches, what=f"{name} Ready {reason}"
    )
    assert found is not None
    return found


@pytest.mark.spec("3.7")
def test_readiness_comes_from_the_exec_probe(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """Running but probe failing: DependenciesNotReady; once the probe passes: DependenciesReady."""
    probe = {
        "exec": {"command": ["/bin/sh", "-c", "test -f /tmp/ready"]},
        "periodSeconds": 1,
        "failureThreshold": 1,
    }
    script = f"sleep {PROBE_DELAY}; touch /tmp/ready; {w.SLEEP_FOREVER}"
    kube.create(
        w.running_sandbox("probe", workload_image, script, readinessProbe=probe),
        namespace=namespace,
    )
    waiting = wait_ready(
        kube, namespace, "probe", "False", "DependenciesNotReady", "Pod is Running but not Ready"
    )
    assert not m.has_condition(waiting, "Ready", "True")
    ready = wait_ready(kube, namespace, "probe", "True", "DependenciesReady", "Pod is Ready")
    pod = kube.get("v1", "Pod", "probe", namespace)
    assert pod["status"]["containerStatuses"][0]["ready"] is True
    assert ready["status"]["podIPs"] == [ip["ip"] for ip in pod["status"]["podIPs"]]
    cond = m.condition(ready, "Ready")
    assert cond is not None
    assert cond["observedGeneration"] == ready["metadata"]["generation"]


@pytest.mark.spec("3.7", "2.3")
@pytest.mark.parametrize(
    ("code", "reason", "message"),
    [(0, "PodSucceeded", "Pod completed successfully"), (1, "PodFailed", "Pod failed")],
    ids=["exit-0", "exit-1"],
)
def test_a_container_that_exits_finishes_the_sandbox(
    kube: Kube, namespace: str, workload_image: str, code: int, reason: str, message: str
) -> None:
    """Finished True with the pod's outcome, Ready False with the same reason and message."""
    name = f"exits-{code}"
    kube.create(
        w.running_sandbox(name, workload_image, f"echo done; exit {code}", restart_policy="Never"),
        namespace=namespace,
    )
    finished = kube.wait_for(
        w.SANDBOX_API,
        "Sandbox",
        name,
        namespace,
        lambda o: m.has_condition(o, "Finished", "True"),
        what=f"{name} Finished",
    )
    assert finished is not None
    generation = finished["metadata"]["generation"]
    done = m.condition(finished, "Finished")
    ready = m.condition(finished, "Ready")
    assert done is not None
    assert ready is not None
    assert (done["status"], done["reason"], done["message"]) == ("True", reason, message)
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", reason, message)
    assert done["observedGeneration"] == ready["observedGeneration"] == generation
    # Finished appears after the pod ran, so it is appended after Ready (SetStatusCondition).
    types = m.condition_types(finished)
    assert types.index("Finished") > types.index("Ready"), types
    pod = kube.get("v1", "Pod", name, namespace)
    assert pod["status"]["phase"] == ("Succeeded" if code == 0 else "Failed")
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == code


@pytest.mark.spec("3.4", "3.8")
def test_data_on_the_volume_survives_suspend_and_resume(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """The PVC outlives the suspended pod; the resumed pod finds what the first one wrote."""
    script = (
        'if [ -f /data/first ]; then echo "found $(cat /data/first)"; '
        'else echo "$POD_UID" > /data/first && sync && echo "wrote $POD_UID"; fi; '
        f"{w.SLEEP_FOREVER}"
    )
    manifest = w.running_sandbox(
        "keeper",
        workload_image,
        script,
        volumes=[m.volume_claim_template("data", storage="64Mi")],
        env=[{"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}],
        volumeMounts=[{"name": "data", "mountPath": "/data"}],
    )
    created = kube.create(manifest, namespace=namespace)
    wait_ready(kube, namespace, "keeper", "True", "DependenciesReady")
    first_uid = kube.get("v1", "Pod", "keeper", namespace)["metadata"]["uid"]
    w.wait_log(kube, namespace, "keeper", f"wrote {first_uid}")

    kube.patch(
        w.SANDBOX_API, "Sandbox", "keeper", namespace, {"spec": {"operatingMode": "Suspended"}}
    )
    suspended = kube.wait_for(
        w.SANDBOX_API,
        "Sandbox",
        "keeper",
        namespace,
        lambda o: m.has_condition(o, "Suspended", "True", "PodTerminated"),
        what="keeper suspended",
    )
    assert m.has_condition(suspended, "Ready", "False", "SandboxSuspended")
    kube.wait_gone("v1", "Pod", "keeper", namespace)
    pvc = kube.get("v1", "PersistentVolumeClaim", "data-keeper", namespace)
    assert pvc["status"]["phase"] == "Bound"
    owner = m.controller_ref(pvc)
    assert owner is not None
    assert owner["uid"] == created["metadata"]["uid"]

    kube.patch(
        w.SANDBOX_API, "Sandbox", "keeper", namespace, {"spec": {"operatingMode": "Running"}}
    )
    wait_ready(kube, namespace, "keeper", "True", "DependenciesReady")
    second = kube.get("v1", "Pod", "keeper", namespace)
    assert second["metadata"]["uid"] != first_uid
    w.wait_log(kube, namespace, "keeper", f"found {first_uid}")


def finishing_claim_setup(kube: Kube, namespace: str, image: str) -> None:
    """A template whose container exits 0, and an empty pool on it."""
    main = w.shell_container("echo done; exit 0", image=image)
    template = m.pod_template(containers=[main], restartPolicy="Never")
    kube.create(
        m.extension_object("SandboxTemplate", "tpl", podTemplate=template), namespace=namespace
    )
    kube.create(
        m.extension_object(
            "SandboxWarmPool", "pool", replicas=0, sandboxTemplateRef={"name": "tpl"}
        ),
        namespace=namespace,
    )


@pytest.mark.spec("4.3.6", "4.3.1")
def test_claim_mirrors_the_finished_condition(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """The claim copies the Sandbox's Finished verbatim; its conditions are sorted by type."""
    finishing_claim_setup(kube, namespace, workload_image)
    kube.create(
        m.extension_object("SandboxClaim", "job", warmPoolRef={"name": "pool"}),
        namespace=namespace,
    )
    claim = kube.wait_for(
        EXT_API,
        "SandboxClaim",
        "job",
        namespace,
        lambda o: (
            m.has_condition(o, "Finished", "True")
            and m.has_condition(o, "Ready", "False", "PodSucceeded")
        ),
        what="the claim's Finished",
    )
    assert claim is not None
    sandbox = kube.get(w.SANDBOX_API, "Sandbox", claim["status"]["sandbox"]["name"], namespace)
    assert m.condition(claim, "Finished") == m.condition(sandbox, "Finished")
    ready = m.condition(claim, "Ready")
    assert ready is not None
    assert ready["message"] == "Pod completed successfully"
    assert ready["observedGeneration"] == claim["metadata"]["generation"]
    assert m.condition_types(claim) == ["Finished", "Ready"]


@pytest.mark.spec("4.3.7", "4.3.1")
def test_ttl_after_finished_deletes_the_claim(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """ttlSecondsAfterFinished counts from Finished; with Delete the claim and Sandbox go."""
    finishing_claim_setup(kube, namespace, workload_image)
    kube.create(
        m.extension_object(
            "SandboxClaim",
            "job",
            warmPoolRef={"name": "pool"},
            lifecycle={"ttlSecondsAfterFinished": 2, "shutdownPolicy": "Delete"},
        ),
        namespace=namespace,
    )
    kube.wait_for(
        EXT_API,
        "SandboxClaim",
        "job",
        namespace,
        lambda o: o is None or m.has_condition(o, "Finished", "True"),
        what="the claim to finish",
    )
    kube.wait_gone(EXT_API, "SandboxClaim", "job", namespace)
    kube.wait_gone(w.SANDBOX_API, "Sandbox", "job", namespace)


@pytest.mark.spec("4.3.7", "4.3.6")
def test_ttl_with_retain_keeps_the_claim_and_its_finished_condition(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """Retain: after the TTL the Sandbox goes, the claim stays expired and keeps Finished."""
    finishing_claim_setup(kube, namespace, workload_image)
    kube.create(
        m.extension_object(
            "SandboxClaim",
            "job",
            warmPoolRef={"name": "pool"},
            lifecycle={"ttlSecondsAfterFinished": 1},
        ),
        namespace=namespace,
    )
    kube.wait_for(
        EXT_API,
        "SandboxClaim",
        "job",
        namespace,
        lambda o: m.has_condition(o, "Ready", "False", "ClaimExpired"),
        what="the claim to expire",
    )
    kube.wait_gone(w.SANDBOX_API, "Sandbox", "job", namespace)
    claim = kube.get(EXT_API, "SandboxClaim", "job", namespace)
    assert claim["spec"]["lifecycle"]["shutdownPolicy"] == "Retain"
    ready = m.condition(claim, "Ready")
    assert ready is not None
    assert ready["message"] == "Claim expired. Sandbox cleanup initiated."
    assert m.has_condition(claim, "Finished", "True", "PodSucceeded")
    kube.consistently(
        lambda: m.has_condition(
            kube.get_or_none(EXT_API, "SandboxClaim", "job", namespace), "Finished", "True"
        ),
        seconds=2,
        what="the retained claim keeps Finished",
    )
