"""The Sandbox CRD as served — versions, subresources, printer
columns (from the CRD and as a server-side Table) and schema validation of bad input."""

from __future__ import annotations

from typing import Any

import pytest

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import ApiError, Kube
from kube_agent_sandbox.conformance.tests.core.support import (
    SANDBOX_API,
    create_sandbox,
    wait_ready,
)

CRD_API = "apiextensions.k8s.io/v1"
READY_COLUMNS = [
    {
        "name": "Ready",
        "type": "string",
        "jsonPath": ".status.conditions[?(@.type=='Ready')].status",
    },
    {
        "name": "Reason",
        "type": "string",
        "jsonPath": ".status.conditions[?(@.type=='Ready')].reason",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def _crd(kube: Kube) -> dict[str, Any]:
    return kube.get(CRD_API, "CustomResourceDefinition", "sandboxes.agents.x-k8s.io")


def _version(crd: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in crd["spec"]["versions"] if v["name"] == name)


@pytest.mark.spec("1")
def test_crd_names_versions_and_subresources(kube: Kube) -> None:
    """Namespaced, plural ``sandboxes``, short name ``sandbox``; v1beta1 storage, v1alpha1
    served and deprecated with a scale subresource."""
    crd = _crd(kube)
    spec = crd["spec"]
    assert spec["group"] == "agents.x-k8s.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["plural"] == "sandboxes"
    assert spec["names"]["kind"] == "Sandbox"
    assert spec["names"].get("shortNames") == ["sandbox"]
    beta = _version(crd, "v1beta1")
    alpha = _version(crd, "v1alpha1")
    assert (beta["served"], beta["storage"]) == (True, True)
    assert not beta.get("deprecated")
    assert beta["subresources"] == {"status": {}}
    assert (alpha["served"], alpha["storage"], alpha.get("deprecated")) == (True, False, True)
    assert alpha["deprecationWarning"] == (
        "agents.x-k8s.io/v1alpha1 Sandbox is deprecated; use agents.x-k8s.io/v1beta1 Sandbox "
        "instead"
    )
    assert alpha["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    assert spec["conversion"]["strategy"] == "Webhook"
    assert spec["conversion"]["webhook"]["conversionReviewVersions"] == ["v1", "v1beta1"]


@pytest.mark.spec("1")
def test_printer_columns_in_the_crd(kube: Kube) -> None:
    """v1beta1 prints Ready, Reason and Age; v1alpha1 has no printer columns."""
    crd = _crd(kube)
    columns = [
        {k: c[k] for k in ("name", "type", "jsonPath")}
        for c in _version(crd, "v1beta1").get("additionalPrinterColumns", [])
    ]
    assert columns == READY_COLUMNS
    assert not _version(crd, "v1alpha1").get("additionalPrinterColumns")


@pytest.mark.spec("1")
def test_server_side_table_shows_ready_and_reason(
    kube: Kube, namespace: str, workload_image: str
) -> None:
    """``kubectl get sandbox`` (a server-side Table) shows Ready=True, DependenciesReady."""
    create_sandbox(kube, namespace, "table", image=workload_image)
    wait_ready(kube, namespace, "table")
    table = kube.table(SANDBOX_API, "Sandbox", namespace)
    assert table["kind"] == "Table"
    names = [c["name"] for c in table["columnDefinitions"]]
    assert names == ["Name", "Ready", "Reason", "Age"]
    rows = {r["cells"][0]: r["cells"] for r in table["rows"]}
    assert rows["table"][1:3] == ["True", "DependenciesReady"]
    assert rows["table"][3]  # an age such as "5s"


@pytest.mark.spec("1.2")
@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("operatingMode", "Paused", id="operatingMode"),
        pytest.param("shutdownPolicy", "Archive", id="shutdownPolicy"),
        pytest.param("shutdownTime", "tomorrow", id="shutdownTime"),
    ],
)
def test_invalid_spec_values_are_rejected(
    kube: Kube, namespace: str, workload_image: str, field: str, value: str
) -> None:
    """Enum and date-time validation refuse bad values at admission (422, field named)."""
    body = m.sandbox("bad", template=m.pod_template(image=workload_image))
    body["spec"][field] = value
    with pytest.raises(ApiError) as err:
        kube.create(body, namespace=namespace)
    assert err.value.status == 422
    assert field in err.value.message
    assert kube.get_or_none(SANDBOX_API, "Sandbox", "bad", namespace) is None


@pytest.mark.spec("1.2")
def test_spec_and_pod_template_are_required(kube: Kube, namespace: str) -> None:
    """A Sandbox without ``spec`` or without ``spec.podTemplate`` is refused."""
    for body in (
        {"apiVersion": SANDBOX_API, "kind": "Sandbox", "metadata": {"name": "nospec"}},
        {"apiVersion": SANDBOX_API, "kind": "Sandbox", "metadata": {"name": "nopt"}, "spec": {}},
    ):
        with pytest.raises(ApiError) as err:
            kube.create(body, namespace=namespace)
        assert err.value.status == 422, body
