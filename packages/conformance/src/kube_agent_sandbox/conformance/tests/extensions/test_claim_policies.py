"""What a claim may add to its Sandbox — env, pod metadata, volumes.

Observable contract: the template's `envVarsInjectionPolicy` decides whether `spec.env` is
refused, appended or allowed to override (and env forces a cold start);
`additionalPodMetadata` is validated against the label-domain allowlist and the restricted
annotation domains, refused with reason `InvalidMetadata` and the spec's exact messages, and
otherwise lands on the Sandbox's pod template and the pod; `volumeClaimTemplatesPolicy` governs
claim volumes. A refused claim gets no Sandbox, and the controller keeps serving other claims.
"""

from __future__ import annotations

from typing import Any

import pytest

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import Kube, Obj
from kube_agent_sandbox.conformance.plugin import Settings
from kube_agent_sandbox.conformance.tests.extensions import support as s

INVALID = "invalid additionalPodMetadata: "


def env_of(sandbox: Obj, index: int = 0) -> list[Obj]:
    """The env list of a Sandbox's container ``index``."""
    env: list[Obj] = s.pod_spec(sandbox)["containers"][index].get("env") or []
    return env


def ready_of(claim: Obj) -> Obj:
    """The claim's Ready condition (must exist)."""
    ready = m.condition(claim, "Ready")
    assert ready is not None
    return ready


def assert_refused(kube: Kube, namespace: str, claim: Obj, *, good_pool: str = "pool") -> None:
    """The refused claim has no Sandbox, and a good claim next to it is still served."""
    name = claim["metadata"]["name"]
    assert not (claim.get("status") or {}).get("sandbox", {}).get("name")
    assert kube.get_or_none(s.SANDBOX_API, "Sandbox", name, namespace) is None
    assert ready_of(claim)["observedGeneration"] == claim["metadata"]["generation"]
    s.create_claim(kube, namespace, "good", good_pool)
    s.wait_claim(kube, namespace, "good", status="True")


# -- env ---------------------------------------------------------------------------------


@pytest.mark.spec("4.3.3", "4.3.6", "1.3")
def test_env_is_refused_by_default(kube: Kube, namespace: str, settings: Settings) -> None:
    """The default policy `Disallowed` refuses env with reason EnvVarsInjectionRejected."""
    template = s.create_template(kube, namespace, "tpl", image=settings.image)
    assert template["spec"]["envVarsInjectionPolicy"] == "Disallowed"
    s.create_pool(kube, namespace, "pool", "tpl", replicas=0)
    s.create_claim(kube, namespace, "bad", "pool", env=[{"name": "FOO", "value": "bar"}])
    claim = s.wait_claim(kube, namespace, "bad", status="False", reason="EnvVarsInjectionRejected")
    assert ready_of(claim)["message"] == (
        "environment variable injection rejected: environment variable injection is not "
        "allowed by the template policy"
    )
    assert_refused(kube, namespace, claim)


@pytest.mark.spec("4.3.3")
def test_allowed_env_is_appended_and_forces_a_cold_start(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """With `Allowed`, new variables are appended to the first container; no warm adoption."""
    s.create_template(
        kube,
        namespace,
        "tpl",
        image=settings.image,
        envVarsInjectionPolicy="Allowed",
        container_extra={"env": [{"name": "BASE", "value": "1"}]},
    )
    s.create_pool(kube, namespace, "pool", "tpl", replicas=1)
    (member,) = s.wait_members(kube, namespace, "pool", 1)
    s.create_claim(kube, namespace, "claim", "pool", env=[{"name": "EXTRA", "value": "2"}])
    claim = s.wait_claim(kube, namespace, "claim", status="True")
    assert claim["status"]["sandbox"]["name"] == "claim"
    sandbox = s.get_sandbox(kube, namespace, "claim")
    assert m.labels_of(sandbox)[s.LAUNCH_TYPE_LABEL] == "cold"
    assert env_of(sandbox) == [{"name": "BASE", "value": "1"}, {"name": "EXTRA", "value": "2"}]
    assert s.names(s.members(kube, namespace, "pool")) == {member["metadata"]["name"]}


@pytest.mark.spec("4.3.3")
def test_overrides_policy_replaces_a_variable_in_place(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """With `Overrides`, a variable of the template is replaced where it stands."""
    s.create_template(
        kube,
        namespace,
        "tpl",
        image=settings.image,
        envVarsInjectionPolicy="Overrides",
        container_extra={
            "env": [{"name": "A", "value": "template"}, {"name": "B", "value": "template"}]
        },
    )
    s.create_pool(kube, namespace, "pool", "tpl", replicas=0)
    s.create_claim(kube, namespace, "claim", "pool", env=[{"name": "A", "value": "claim"}])
    s.wait_claim(kube, namespace, "claim", status="True")
    assert env_of(s.get_sandbox(kube, namespace, "claim")) == [
        {"name": "A", "value": "claim"},
        {"name": "B", "value": "template"},
    ]


@pytest.mark.spec("4.3.3", "4.3.6")
@pytest.mark.parametrize(
    ("policy", "env", "fragment"),
    [
        pytest.param(
            "Allowed",
            [{"name": "BASE", "value": "x"}],
            "environment variable override is not allowed by the template policy for "
            'variable "BASE"',
            id="allowed-override",
        ),
        pytest.param(
            "Overrides",
            [{"name": "X", "value": "1", "containerName": "sidecar"}],
            'target container "sidecar" not found in template for environment variable "X"',
            id="missing-container",
        ),
    ],
)
def test_env_errors_are_reported(
    kube: Kube,
    namespace: str,
    settings: Settings,
    policy: str,
    env: list[Obj],
    fragment: str,
) -> None:
    """An override under `Allowed`, or an unknown target container, is a ReconcilerError."""
    s.create_template(
        kube,
        namespace,
        "tpl",
        image=settings.image,
        envVarsInjectionPolicy=policy,
        container_extra={"env": [{"name": "BASE", "value": "1"}]},
    )
    s.create_pool(kube, namespace, "pool", "tpl", replicas=0)
    s.create_claim(kube, namespace, "bad", "pool", env=env)
    claim = s.wait_claim(kube, namespace, "bad", status="False", reason="ReconcilerError")
    message = ready_of(claim)["message"]
    assert message.startswith("Error seen: "), message
    assert fragment in message
    assert_refused(kube, namespace, claim)


# -- additionalPodMetadata ---------------------------------------------------------------


@pytest.mark.spec("4.3.4", "4.3.5")
def test_valid_pod_metadata_reaches_the_adopted_pod(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """Allowed-domain labels and plain annotations land on the Sandbox and its (warm) pod."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=1)
    (member,) = s.wait_members(kube, namespace, "pool", 1)
    labels = {"sandbox.users.io/team": "blue", "eu.sandbox.users.io/cost": "42"}
    annotations = {"example.com/note": "hello"}
    s.create_claim(
        kube,
        namespace,
        "claim",
        "pool",
        additionalPodMetadata={"labels": labels, "annotations": annotations},
    )
    claim = s.wait_claim(kube, namespace, "claim", status="True")
    name = claim["status"]["sandbox"]["name"]
    assert name == member["metadata"]["name"]
    meta = s.pod_metadata(s.get_sandbox(kube, namespace, name))
    assert labels.items() <= meta["labels"].items()
    assert annotations.items() <= meta["annotations"].items()
    kube.wait_for(
        "v1",
        "Pod",
        name,
        namespace,
        lambda p: (
            labels.items() <= m.labels_of(p).items()
            and annotations.items() <= m.annotations_of(p).items()
        ),
        what="the claim's pod metadata on the pod",
    )


@pytest.mark.spec("4.3.4")
def test_safe_to_evict_is_the_one_allowed_kubernetes_io_annotation(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """`cluster-autoscaler.kubernetes.io/safe-to-evict` passes the restricted-domain check."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=0)
    s.create_claim(
        kube,
        namespace,
        "claim",
        "pool",
        additionalPodMetadata={"annotations": {s.SAFE_TO_EVICT: "false"}},
    )
    s.wait_claim(kube, namespace, "claim", status="True")
    sandbox = s.get_sandbox(kube, namespace, "claim")
    assert s.pod_metadata(sandbox)["annotations"][s.SAFE_TO_EVICT] == "false"


def _invalid(
    kind: str, key: str, value: str, why: str, *, exact: bool = True
) -> Any:  # a pytest ParameterSet
    metadata = {f"{kind}s": {key: value}}
    message = f'{INVALID}failed to validate {kind} "{key}": {why}'
    return pytest.param(metadata, message, exact, id=f"{kind}-{key}")


@pytest.mark.spec("4.3.4", "4.3.6")
@pytest.mark.parametrize(
    ("metadata", "message", "exact"),
    [
        _invalid(
            "label",
            "team",
            "a",
            "label \"team\" must have a domain prefix (e.g. 'sandbox.users.io/my-label') "
            "to prevent opting into unintended policy domains",
        ),
        _invalid(
            "label", "example.com/team", "a", 'label domain "example.com" is not in the allowlist'
        ),
        _invalid(
            "label",
            "agents.x-k8s.io/claim-uid",
            "a",
            'label domain "agents.x-k8s.io" is not in the allowlist',
        ),
        _invalid(
            "label",
            "evilsandbox.users.io/x",
            "a",
            'label domain "evilsandbox.users.io" is not in the allowlist',
        ),
        _invalid("label", "app", "sandbox-router", "restricted system label value: ", exact=False),
        _invalid("label", "sandbox.users.io/bad-value", "not a value!", "", exact=False),
        _invalid(
            "annotation",
            "kubernetes.io/x",
            "y",
            'restricted system domain: "kubernetes.io/x" is not allowed in AdditionalPodMetadata',
        ),
        _invalid(
            "annotation",
            "node.k8s.io/x",
            "y",
            'restricted system domain: "node.k8s.io/x" is not allowed in AdditionalPodMetadata',
        ),
        _invalid(
            "annotation",
            "agents.x-k8s.io/pod-name",
            "y",
            'restricted system domain: "agents.x-k8s.io/pod-name" is not allowed in '
            "AdditionalPodMetadata",
        ),
    ],
)
def test_invalid_pod_metadata_is_refused(
    kube: Kube,
    namespace: str,
    settings: Settings,
    metadata: Obj,
    message: str,
    exact: bool,
) -> None:
    """Each rule of validateAdditionalPodMetadata refuses with InvalidMetadata and its message."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=0)
    s.create_claim(kube, namespace, "bad", "pool", additionalPodMetadata=metadata)
    claim = s.wait_claim(kube, namespace, "bad", status="False", reason="InvalidMetadata")
    got = ready_of(claim)["message"]
    if exact:
        assert got == message
    else:
        assert got.startswith(message), got
    assert_refused(kube, namespace, claim)


@pytest.mark.spec("4.3.4")
def test_pod_metadata_may_not_override_the_template(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """A claim label with another value than the template's is a conflict (ReconcilerError)."""
    s.create_template(
        kube, namespace, "tpl", image=settings.image, labels={"sandbox.users.io/team": "t"}
    )
    s.create_pool(kube, namespace, "pool", "tpl", replicas=0)
    s.create_claim(
        kube,
        namespace,
        "bad",
        "pool",
        additionalPodMetadata={"labels": {"sandbox.users.io/team": "c"}},
    )
    claim = s.wait_claim(kube, namespace, "bad", status="False", reason="ReconcilerError")
    assert (
        'metadata override conflict: label "sandbox.users.io/team" is defined in template with '
        'value "t", but claim requests "c"'
    ) in ready_of(claim)["message"]
    assert_refused(kube, namespace, claim)


# -- volumeClaimTemplates ----------------------------------------------------------------


def _storage(sandbox: Obj) -> dict[str, str]:
    return {
        v["metadata"]["name"]: v["spec"]["resources"]["requests"]["storage"]
        for v in sandbox["spec"].get("volumeClaimTemplates") or []
    }


@pytest.mark.spec("4.3.3", "1.3")
@pytest.mark.parametrize(
    ("policy", "claim_volumes", "fragment"),
    [
        pytest.param(
            None,
            [m.volume_claim_template("extra")],
            "volume claim templates are disallowed by the template",
            id="disallowed-by-default",
        ),
        pytest.param(
            "Allowed",
            [m.volume_claim_template("workspace", storage="2Gi")],
            "overriding volume claim templates is forbidden by the template: cannot override "
            'template volume "workspace"',
            id="allowed-no-override",
        ),
        pytest.param(
            "Overrides",
            [m.volume_claim_template("a"), m.volume_claim_template("a")],
            'duplicate name "a"',
            id="duplicate-names",
        ),
    ],
)
def test_refused_claim_volumes_are_reported(
    kube: Kube,
    namespace: str,
    settings: Settings,
    policy: str | None,
    claim_volumes: list[Obj],
    fragment: str,
) -> None:
    """Volume errors refuse the claim with reason VolumeClaimTemplatesError."""
    spec: Obj = {"volumeClaimTemplates": [m.volume_claim_template("workspace")]}
    if policy:
        spec["volumeClaimTemplatesPolicy"] = policy
    s.create_template(kube, namespace, "tpl", image=settings.image, **spec)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=0)
    s.create_claim(kube, namespace, "bad", "pool", volumeClaimTemplates=claim_volumes)
    claim = s.wait_claim(kube, namespace, "bad", status="False", reason="VolumeClaimTemplatesError")
    assert fragment in ready_of(claim)["message"]
    # The good claim needs a template without volumes: PVCs may not bind on simulated nodes.
    s.create_template(kube, namespace, "plain", image=settings.image)
    s.create_pool(kube, namespace, "plain-pool", "plain", replicas=0)
    assert_refused(kube, namespace, claim, good_pool="plain-pool")


@pytest.mark.spec("4.3.3", "3.4")
@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        pytest.param("Allowed", {"workspace": "1Gi", "extra": "3Gi"}, id="allowed-appends"),
        pytest.param("Overrides", {"workspace": "2Gi", "extra": "3Gi"}, id="overrides-replaces"),
    ],
)
def test_claim_volumes_are_merged_into_a_cold_sandbox(
    kube: Kube, namespace: str, settings: Settings, policy: str, expected: dict[str, str]
) -> None:
    """Allowed appends new volumes; Overrides also replaces same-name ones; PVCs follow."""
    s.create_template(
        kube,
        namespace,
        "tpl",
        image=settings.image,
        volumeClaimTemplates=[m.volume_claim_template("workspace")],
        volumeClaimTemplatesPolicy=policy,
    )
    s.create_pool(kube, namespace, "pool", "tpl", replicas=0)
    claim_volumes = [m.volume_claim_template("extra", storage="3Gi")]
    if policy == "Overrides":
        claim_volumes.insert(0, m.volume_claim_template("workspace", storage="2Gi"))
    s.create_claim(kube, namespace, "claim", "pool", volumeClaimTemplates=claim_volumes)
    sandbox = kube.wait_for(s.SANDBOX_API, "Sandbox", "claim", namespace, lambda o: o is not None)
    assert sandbox is not None
    assert m.labels_of(sandbox)[s.LAUNCH_TYPE_LABEL] == "cold"
    assert list(_storage(sandbox)) == ["workspace", "extra"]
    assert _storage(sandbox) == expected
    for volume, size in expected.items():
        pvc = kube.wait_for(
            "v1",
            "PersistentVolumeClaim",
            f"{volume}-claim",
            namespace,
            lambda o: o is not None,
        )
        assert pvc is not None
        assert pvc["spec"]["resources"]["requests"]["storage"] == size
