"""PVCs from ``volumeClaimTemplates``."""

from __future__ import annotations

import pytest

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import ApiError, Kube
from kube_agent_sandbox.conformance.tests.core.support import (
    NAME_HASH_LABEL,
    SANDBOX_API,
    create_sandbox,
    owner_ref,
    wait_pod,
)


@pytest.mark.spec("3.4", "2.6")
def test_pvc_per_template_named_labelled_and_owned(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """PVC ``<template>-<sandbox>`` with the template's metadata plus the tracking label."""
    vct = m.volume_claim_template(
        "data", storage="2Gi", labels={"kind": "scratch"}, annotations={"note": "keep"}
    )
    created = create_sandbox(
        kube, namespace, "vol", image=workload_image, volumeClaimTemplates=[vct]
    )
    pvc = kube.wait_for(
        "v1", "PersistentVolumeClaim", "data-vol", namespace, lambda p: p is not None
    )
    assert pvc is not None
    assert m.labels_of(pvc) == {"kind": "scratch", NAME_HASH_LABEL: m.name_hash("vol")}
    assert m.annotations_of(pvc).get("note") == "keep"
    assert pvc["metadata"]["ownerReferences"] == [owner_ref(created)]
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "2Gi"


@pytest.mark.spec("3.3")
def test_pod_mounts_the_pvcs_replacing_template_volumes_of_the_same_name(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """A template volume named like a claim template is replaced; PVC volumes come last."""
    template = m.pod_template(
        image=workload_image,
        volumes=[{"name": "data", "emptyDir": {}}, {"name": "cache", "emptyDir": {}}],
    )
    create_sandbox(
        kube,
        namespace,
        "mounts",
        image=workload_image,
        template=template,
        volumeClaimTemplates=[m.volume_claim_template("data"), m.volume_claim_template("logs")],
    )
    pod = wait_pod(kube, namespace, "mounts", lambda p: True)
    volumes = [v for v in pod["spec"]["volumes"] if v["name"] in ("data", "cache", "logs")]
    assert volumes == [
        {"name": "cache", "emptyDir": {}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-mounts"}},
        {"name": "logs", "persistentVolumeClaim": {"claimName": "logs-mounts"}},
    ]


@pytest.mark.spec("1.2")
@pytest.mark.parametrize(
    "change",
    [
        pytest.param([m.volume_claim_template("data", storage="5Gi")], id="modify"),
        pytest.param(None, id="unset"),
    ],
)
def test_volume_claim_templates_are_immutable(
    kube: Kube, namespace: str, workload_image: str, change: object
) -> None:
    """Changing or removing ``volumeClaimTemplates`` is refused with the spec's message."""
    create_sandbox(
        kube,
        namespace,
        "immutable",
        image=workload_image,
        volumeClaimTemplates=[m.volume_claim_template("data")],
    )
    with pytest.raises(ApiError) as err:
        kube.patch(
            SANDBOX_API,
            "Sandbox",
            "immutable",
            namespace,
            {"spec": {"volumeClaimTemplates": change}},
        )
    assert err.value.status == 422
    assert "volumeClaimTemplates is immutable" in err.value.message


@pytest.mark.spec("1.2")
def test_volume_claim_templates_cannot_be_added_later(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """Unset → set is refused too."""
    create_sandbox(kube, namespace, "late", image=workload_image)
    with pytest.raises(ApiError) as err:
        kube.patch(
            SANDBOX_API,
            "Sandbox",
            "late",
            namespace,
            {"spec": {"volumeClaimTemplates": [m.volume_claim_template("data")]}},
        )
    assert err.value.status == 422
    assert "volumeClaimTemplates is immutable" in err.value.message
