"""Our generated CRDs against a real apiserver: examples accepted, invalid objects judged alike.

1. Every upstream example manifest is accepted (server-side dry run, then create) by the
   session cluster, which runs with the project's generated CRDs.
2. A set of invalid objects (at least one per enum, minimum, maximum, required field, format
   and CEL rule of the upstream schema, on both served versions, on create, update and the
   status subresource) gets the same verdict, with the same causes, from an apiserver running
   the upstream reference CRDs as from one running ours. Each set is installed in turn into its
   own bare control plane (etcd + kube-apiserver).
"""

from __future__ import annotations

import copy
import json
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import dynamic
from kubernetes.dynamic.exceptions import DynamicApiError

from kube_agent_sandbox.testing.access import ClusterAccess, load_manifests
from kube_agent_sandbox.testing.cluster import LocalCluster
from kube_agent_sandbox.testing.clusteroptions import LocalClusterOptions
from kube_agent_sandbox.testing.plugin import provider_options, unavailable
from kube_agent_sandbox.testing.prerequisites import PrerequisiteError
from kube_agent_sandbox.testing.reference import missing_reason, reference_dir, reference_files

pytestmark = pytest.mark.integration

REFERENCE = reference_dir()
# The sentinel keeps the parametrized test alive (and failing under CI) when data is absent.
EXAMPLES = reference_files("examples") or [REFERENCE / "examples" / "<missing>"]
CORE = "agents.x-k8s.io"
EXT = "extensions.agents.x-k8s.io"
NOW = "2026-01-01T00:00:00Z"


def _examples_or_skip() -> list[Path]:
    if not reference_files("examples"):
        unavailable(missing_reason("examples"))
    return EXAMPLES


# -- 1. upstream examples ------------------------------------------------------------------


def _example_objects(path: Path, namespace: str) -> list[dict[str, Any]]:
    text = string.Template(path.read_text()).safe_substitute(
        SANDBOX_NAMESPACE=namespace,
        SANDBOX_TEMPLATE_NAME="python-template",
        SANDBOX_WARMPOOL_NAME="python-pool",
    )
    objects = load_manifests(text)
    for obj in objects:
        obj["metadata"]["namespace"] = namespace
    return objects


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_upstream_example_is_accepted_by_our_crds(
    cluster: ClusterAccess, agent_sandbox_crds: list[str], namespace: str, example: Path
) -> None:
    """Dry-run create, then create, each object of the example; the server stores it."""
    _examples_or_skip()
    dyn = dynamic.DynamicClient(cluster.api_client())
    objects = _example_objects(example, namespace)
    assert objects, f"{example.name} holds no object"
    for obj in objects:
        resource = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        dry = resource.create(body=obj, namespace=namespace, dry_run="All").to_dict()
        assert dry["metadata"]["name"] == obj["metadata"]["name"]
        created = resource.create(body=obj, namespace=namespace).to_dict()
        assert created["metadata"]["uid"]
        stored = resource.get(name=obj["metadata"]["name"], namespace=namespace).to_dict()
        assert stored["spec"] == created["spec"]
        resource.delete(name=obj["metadata"]["name"], namespace=namespace)


# -- 2. verdicts: reference CRDs vs ours -------------------------------------------------------

POD_TEMPLATE = {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}
PVC = {
    "metadata": {"name": "data"},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
}
BASES: dict[tuple[str, str, str], dict[str, Any]] = {
    (CORE, "v1beta1", "Sandbox"): {"spec": {"podTemplate": POD_TEMPLATE}},
    (CORE, "v1alpha1", "Sandbox"): {"spec": {"podTemplate": POD_TEMPLATE, "replicas": 1}},
    (EXT, "v1beta1", "SandboxClaim"): {"spec": {"warmPoolRef": {"name": "pool"}}},
    (EXT, "v1alpha1", "SandboxClaim"): {"spec": {"sandboxTemplateRef": {"name": "tpl"}}},
    (EXT, "v1beta1", "SandboxTemplate"): {"spec": {"podTemplate": POD_TEMPLATE}},
    (EXT, "v1alpha1", "SandboxTemplate"): {"spec": {"podTemplate": POD_TEMPLATE}},
    (EXT, "v1beta1", "SandboxWarmPool"): {"spec": {"sandboxTemplateRef": {"name": "tpl"}}},
    (EXT, "v1alpha1", "SandboxWarmPool"): {
        "spec": {"sandboxTemplateRef": {"name": "tpl"}, "replicas": 1}
    },
}
_DELETE = object()


def _edit(obj: dict[str, Any], path: str, value: Any) -> None:
    """Set (or with ``_DELETE`` remove) a dotted path; ``name[0]`` indexes a list."""
    parts = path.split(".")
    node: Any = obj
    for part in parts[:-1]:
        key, _, index = part.partition("[")
        node = node.setdefault(key, {})
        if index:
            node = node[int(index.rstrip("]"))]
    last = parts[-1]
    if value is _DELETE:
        node.pop(last, None)
    else:
        node[last] = copy.deepcopy(value)


def _condition(**overrides: Any) -> dict[str, Any]:
    condition = {
        "type": "Ready",
        "status": "True",
        "reason": "Ready",
        "message": "",
        "lastTransitionTime": NOW,
        "observedGeneration": 1,
    }
    condition.update(overrides)
    return {k: v for k, v in condition.items() if v is not _DELETE}


@dataclass(frozen=True)
class Case:
    """One object (or change) to judge; ``op`` is create, update or status."""

    id: str
    group: str
    version: str
    kind: str
    edits: tuple[tuple[str, Any], ...] = ()
    op: str = "create"
    #: For update/status: edits applied to the created object before the update.
    before: tuple[tuple[str, Any], ...] = ()
    valid: bool = False
    #: Valid, but storing it needs the conversion webhook (v1alpha1 objects; storage v1beta1).
    conversion: bool = False
    tags: tuple[str, ...] = field(default=())


def _c(case_id: str, gvk: str, *edits: tuple[str, Any], **kw: Any) -> Case:
    group, version, kind = gvk.split("/")
    return Case(case_id, CORE if group == "core" else EXT, version, kind, tuple(edits), **kw)


SB1, SB0 = "core/v1beta1/Sandbox", "core/v1alpha1/Sandbox"
CL1, CL0 = "ext/v1beta1/SandboxClaim", "ext/v1alpha1/SandboxClaim"
TP1, TP0 = "ext/v1beta1/SandboxTemplate", "ext/v1alpha1/SandboxTemplate"
WP1, WP0 = "ext/v1beta1/SandboxWarmPool", "ext/v1alpha1/SandboxWarmPool"
_VCT_CHANGED = [
    {**PVC, "spec": {**PVC["spec"], "resources": {"requests": {"storage": "2Gi"}}}},
]

CASES = [
    # controls: the base objects are valid; v1alpha1 ones pass validation but then need the
    # conversion webhook (both CRD sets declare it; it is not running here): same 500 for both
    *[_c(f"valid-{g.replace('/', '-')}", g, valid=True) for g in (SB1, CL1, TP1, WP1)],
    *[_c(f"valid-{g.replace('/', '-')}", g, conversion=True) for g in (SB0, CL0, TP0, WP0)],
    # required fields
    _c("sandbox-v1beta1-no-spec", SB1, ("spec", _DELETE)),
    _c("sandbox-v1beta1-no-podTemplate", SB1, ("spec.podTemplate", _DELETE)),
    _c("sandbox-v1beta1-no-podTemplate-spec", SB1, ("spec.podTemplate.spec", _DELETE)),
    _c(
        "sandbox-v1beta1-container-without-name",
        SB1,
        ("spec.podTemplate.spec.containers", [{"image": "busybox"}]),
    ),
    _c("sandbox-v1beta1-vct-without-spec", SB1, ("spec.volumeClaimTemplates", [{"metadata": {}}])),
    _c("sandbox-v1alpha1-no-podTemplate", SB0, ("spec.podTemplate", _DELETE)),
    _c("claim-v1beta1-no-warmPoolRef", CL1, ("spec.warmPoolRef", _DELETE)),
    _c("claim-v1beta1-warmPoolRef-without-name", CL1, ("spec.warmPoolRef", {})),
    _c("claim-v1beta1-env-without-value", CL1, ("spec.env", [{"name": "A"}])),
    _c("claim-v1alpha1-no-templateRef", CL0, ("spec.sandboxTemplateRef", _DELETE)),
    _c("claim-v1alpha1-env-without-name", CL0, ("spec.env", [{"value": "x"}])),
    _c("template-v1beta1-no-podTemplate", TP1, ("spec.podTemplate", _DELETE)),
    _c("template-v1alpha1-no-spec", TP0, ("spec", _DELETE)),
    _c("warmpool-v1beta1-no-templateRef", WP1, ("spec.sandboxTemplateRef", _DELETE)),
    _c("warmpool-v1beta1-templateRef-without-name", WP1, ("spec.sandboxTemplateRef", {})),
    _c("warmpool-v1alpha1-no-replicas", WP0, ("spec.replicas", _DELETE)),
    # enums
    _c("sandbox-v1beta1-operatingMode", SB1, ("spec.operatingMode", "Paused")),
    _c("sandbox-v1beta1-shutdownPolicy", SB1, ("spec.shutdownPolicy", "Keep")),
    _c("sandbox-v1alpha1-shutdownPolicy", SB0, ("spec.shutdownPolicy", "delete")),
    _c("claim-v1beta1-shutdownPolicy", CL1, ("spec.lifecycle", {"shutdownPolicy": "Orphan"})),
    _c("claim-v1alpha1-shutdownPolicy", CL0, ("spec.lifecycle", {"shutdownPolicy": "Keep"})),
    _c("template-v1beta1-envVarsInjectionPolicy", TP1, ("spec.envVarsInjectionPolicy", "Maybe")),
    _c("template-v1beta1-networkPolicyManagement", TP1, ("spec.networkPolicyManagement", "Auto")),
    _c(
        "template-v1beta1-volumeClaimTemplatesPolicy",
        TP1,
        ("spec.volumeClaimTemplatesPolicy", "Sometimes"),
    ),
    _c("template-v1alpha1-envVarsInjectionPolicy", TP0, ("spec.envVarsInjectionPolicy", "x")),
    _c("template-v1alpha1-networkPolicyManagement", TP0, ("spec.networkPolicyManagement", "")),
    _c("warmpool-v1beta1-updateStrategy", WP1, ("spec.updateStrategy", {"type": "Rolling"})),
    _c("warmpool-v1alpha1-updateStrategy", WP0, ("spec.updateStrategy", {"type": "Never"})),
    # minimum / maximum
    _c("sandbox-v1alpha1-replicas-below-minimum", SB0, ("spec.replicas", -1)),
    _c("sandbox-v1alpha1-replicas-above-maximum", SB0, ("spec.replicas", 2)),
    _c("claim-v1beta1-ttl-below-minimum", CL1, ("spec.lifecycle", {"ttlSecondsAfterFinished": -1})),
    _c(
        "claim-v1alpha1-ttl-below-minimum", CL0, ("spec.lifecycle", {"ttlSecondsAfterFinished": -5})
    ),
    _c("warmpool-v1beta1-replicas-below-minimum", WP1, ("spec.replicas", -1)),
    _c("warmpool-v1alpha1-replicas-below-minimum", WP0, ("spec.replicas", -1)),
    # formats and types
    _c("sandbox-v1beta1-shutdownTime-format", SB1, ("spec.shutdownTime", "tomorrow")),
    _c("claim-v1beta1-shutdownTime-format", CL1, ("spec.lifecycle", {"shutdownTime": "soon"})),
    _c("warmpool-v1beta1-replicas-type", WP1, ("spec.replicas", "three")),
    # CEL: volumeClaimTemplates is immutable (update), and a control update that is allowed
    _c(
        "sandbox-v1beta1-cel-vct-changed",
        SB1,
        ("spec.volumeClaimTemplates", _VCT_CHANGED),
        op="update",
        before=(("spec.volumeClaimTemplates", [PVC]),),
    ),
    _c(
        "sandbox-v1beta1-cel-vct-removed",
        SB1,
        ("spec.volumeClaimTemplates", _DELETE),
        op="update",
        before=(("spec.volumeClaimTemplates", [PVC]),),
    ),
    _c(
        "sandbox-v1beta1-cel-vct-added",
        SB1,
        ("spec.volumeClaimTemplates", [PVC]),
        op="update",
    ),
    _c(
        "sandbox-v1beta1-cel-other-change-allowed",
        SB1,
        ("spec.operatingMode", "Suspended"),
        op="update",
        before=(("spec.volumeClaimTemplates", [PVC]),),
        valid=True,
    ),
    # status subresource: condition enum, minimum, required, pattern, maxLength
    _c(
        "sandbox-status-valid",
        SB1,
        ("status", {"conditions": [_condition()]}),
        op="status",
        valid=True,
    ),
    _c(
        "sandbox-status-condition-enum",
        SB1,
        ("status", {"conditions": [_condition(status="Maybe")]}),
        op="status",
    ),
    _c(
        "sandbox-status-observedGeneration-minimum",
        SB1,
        ("status", {"conditions": [_condition(observedGeneration=-1)]}),
        op="status",
    ),
    _c(
        "sandbox-status-condition-without-reason",
        SB1,
        ("status", {"conditions": [_condition(reason=_DELETE)]}),
        op="status",
    ),
    _c(
        "sandbox-status-reason-pattern",
        SB1,
        ("status", {"conditions": [_condition(reason="not a reason!")]}),
        op="status",
    ),
    _c(
        "sandbox-status-type-maxLength",
        SB1,
        ("status", {"conditions": [_condition(type="x" * 400)]}),
        op="status",
    ),
    _c(
        "claim-status-condition-enum",
        CL1,
        ("status", {"conditions": [_condition(status="Yes")]}),
        op="status",
    ),
    _c(
        "claim-status-without-lastTransitionTime",
        CL1,
        ("status", {"conditions": [_condition(lastTransitionTime=_DELETE)]}),
        op="status",
    ),
]

Verdict = tuple[Any, ...]


def _verdict_of(call: Callable[[], object]) -> Verdict:
    try:
        call()
    except DynamicApiError as err:
        body = err.body if isinstance(err.body, dict) else json.loads(err.body or "{}")
        causes = sorted(
            (c.get("reason", ""), c.get("field", ""), c.get("message", ""))
            for c in (body.get("details") or {}).get("causes") or []
        )
        # Without field causes (e.g. a 500), the message is all there is to compare.
        message = "" if causes else body.get("message", "")
        return ("rejected", body.get("code"), body.get("reason"), tuple(causes), message)
    return ("accepted",)


def _judge(access: ClusterAccess, case: Case, namespace: str) -> Verdict:
    dyn = dynamic.DynamicClient(access.api_client())
    resource = dyn.resources.get(api_version=f"{case.group}/{case.version}", kind=case.kind)
    name = case.id.lower()[:60].strip("-")
    obj: dict[str, Any] = copy.deepcopy(BASES[(case.group, case.version, case.kind)])
    obj.update(
        {
            "apiVersion": f"{case.group}/{case.version}",
            "kind": case.kind,
            "metadata": {"name": name, "namespace": namespace},
        }
    )
    if case.op == "create":
        for path, value in case.edits:
            _edit(obj, path, value)
        return _verdict_of(lambda: resource.create(body=obj, namespace=namespace, dry_run="All"))
    for path, value in case.before:
        _edit(obj, path, value)
    stored = resource.create(body=obj, namespace=namespace).to_dict()
    for path, value in case.edits:
        _edit(stored, path, value)
    if case.op == "update":
        return _verdict_of(lambda: resource.replace(body=stored, namespace=namespace))
    status = resource.subresources["status"]
    return _verdict_of(lambda: status.replace(body=stored, namespace=namespace))


def _judge_all(crds: list[Path], label: str) -> dict[str, Verdict]:
    cluster = LocalCluster(LocalClusterOptions(control_plane_only=True, crds=crds))
    try:
        access = cluster.start()
    except PrerequisiteError as err:
        unavailable(str(err))
    try:
        namespace = f"verdicts-{label}"
        access.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        return {case.id: _judge(access, case, namespace) for case in CASES}
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def verdicts(request: pytest.FixtureRequest) -> dict[str, tuple[Verdict, Verdict]]:
    """Verdict of every case under the reference CRDs and under ours."""
    _, options = provider_options(request.config)
    ours = list(options.crds)
    if not ours:
        unavailable("no generated CRDs (manifests/crds); run nox -s generate")
    if not reference_files("crds"):
        unavailable(missing_reason("crds"))
    reference = _judge_all([REFERENCE / "crds"], "reference")
    mine = _judge_all(ours, "ours")
    return {case_id: (reference[case_id], mine[case_id]) for case_id in reference}


def test_cases_cover_every_kind_of_constraint() -> None:
    """At least one case per enum, minimum, maximum, required, format and CEL rule."""
    ids = " ".join(c.id for c in CASES)
    for needle in ("operatingMode", "minimum", "maximum", "no-", "format", "cel-", "status-"):
        assert needle in ids
    assert {c.op for c in CASES} == {"create", "update", "status"}
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_verdict_matches_reference_crds(
    verdicts: dict[str, tuple[Verdict, Verdict]], case: Case
) -> None:
    """Our CRDs accept or reject the object as the reference CRDs do, for the same causes."""
    reference, ours = verdicts[case.id]
    expected = "accepted" if case.valid else "rejected"
    assert reference[0] == expected, f"the case itself is wrong: reference says {reference}"
    if case.conversion:
        assert reference[1] == 500
        assert "conversion webhook" in reference[-1]
    else:
        assert reference[1:2] in ((), (422,)), f"not a validation verdict: {reference}"
    assert ours == reference
