"""Claim expiry and its shutdown policies.

Observable contract: `spec.lifecycle.shutdownPolicy` defaults to `Retain` when a lifecycle is
given; the claim's lifecycle is not copied to its Sandbox; at `shutdownTime` the claim's Ready
becomes False/`ClaimExpired` with an event, then `Retain` deletes the Sandbox and keeps the
claim, `Delete`/`DeleteForeground` delete the claim (and with it the Sandbox).
See docs/concepts/claims.md, Lifecycle.
"""

from __future__ import annotations

import datetime as dt

import pytest

from kube_agent_sandbox.conformance import manifests as m
from kube_agent_sandbox.conformance.client import Kube
from kube_agent_sandbox.conformance.plugin import Settings
from kube_agent_sandbox.conformance.tests.extensions import support as s

EXPIRED_MESSAGE = "Claim expired. Sandbox cleanup initiated."


def rfc3339(offset: dt.timedelta) -> str:
    """Now plus ``offset``, as an RFC 3339 UTC timestamp."""
    return (dt.datetime.now(dt.UTC) + offset).strftime("%Y-%m-%dT%H:%M:%SZ")


def setup_claim(kube: Kube, namespace: str, settings: Settings, **lifecycle: str) -> None:
    """Template, empty pool and a Ready claim ``claim`` with ``lifecycle`` (may be empty)."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=0)
    spec = {"lifecycle": dict(lifecycle)} if lifecycle else {}
    s.create_claim(kube, namespace, "claim", "pool", **spec)
    s.wait_claim(kube, namespace, "claim", status="True")


def expire(kube: Kube, namespace: str, policy: str | None = None) -> None:
    """Move the claim's shutdownTime into the past (and set ``policy`` when given)."""
    lifecycle = {"shutdownTime": rfc3339(-dt.timedelta(seconds=5))}
    if policy:
        lifecycle["shutdownPolicy"] = policy
    kube.patch(s.EXT_API, "SandboxClaim", "claim", namespace, {"spec": {"lifecycle": lifecycle}})


@pytest.mark.spec("1.5", "4.3.3")
def test_lifecycle_defaults_to_retain_and_stays_on_the_claim(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """shutdownPolicy defaults to Retain; the Sandbox gets no shutdownTime from the claim."""
    setup_claim(kube, namespace, settings, shutdownTime=rfc3339(dt.timedelta(hours=1)))
    claim = kube.get(s.EXT_API, "SandboxClaim", "claim", namespace)
    assert claim["spec"]["lifecycle"]["shutdownPolicy"] == "Retain"
    sandbox = s.get_sandbox(kube, namespace, "claim")
    assert "shutdownTime" not in sandbox["spec"]
    assert sandbox["spec"]["shutdownPolicy"] == "Retain"


@pytest.mark.spec("4.3.7", "4.3.1", "2.4")
def test_retain_deletes_the_sandbox_and_keeps_the_claim(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """At shutdownTime: Ready ClaimExpired, a ClaimExpired event, Sandbox gone, claim kept."""
    setup_claim(kube, namespace, settings)
    expire(kube, namespace)
    claim = s.wait_claim(kube, namespace, "claim", status="False", reason="ClaimExpired")
    ready = m.condition(claim, "Ready")
    assert ready is not None
    assert ready["message"] == EXPIRED_MESSAGE
    kube.wait_gone(s.SANDBOX_API, "Sandbox", "claim", namespace)
    event = s.wait_event(kube, claim, "ClaimExpired")
    assert (event["type"], event["action"], event["note"]) == (
        "Normal",
        "Claim Expired",
        "Claim expired",
    )
    kube.consistently(
        lambda: m.has_condition(
            kube.get(s.EXT_API, "SandboxClaim", "claim", namespace),
            "Ready",
            "False",
            "ClaimExpired",
        ),
        seconds=2,
        what="the retained claim stays, expired",
    )
    assert kube.get_or_none(s.SANDBOX_API, "Sandbox", "claim", namespace) is None


@pytest.mark.spec("4.3.7", "4.3.1", "2.4")
@pytest.mark.parametrize("policy", ["Delete", "DeleteForeground"])
def test_delete_policies_delete_the_claim(
    kube: Kube, namespace: str, settings: Settings, policy: str
) -> None:
    """At shutdownTime the claim is deleted (after its expiry was recorded), then its Sandbox."""
    setup_claim(kube, namespace, settings)
    claim = kube.get(s.EXT_API, "SandboxClaim", "claim", namespace)
    expire(kube, namespace, policy)
    kube.wait_gone(s.EXT_API, "SandboxClaim", "claim", namespace)
    kube.wait_gone(s.SANDBOX_API, "Sandbox", "claim", namespace)
    deleting = s.wait_event(
        kube, claim, "ClaimExpired", note=f"Deleting Claim (ShutdownPolicy={policy})"
    )
    assert deleting.get("action") == "Deleting", deleting


@pytest.mark.spec("4.3.1", "4.3.7")
def test_a_claim_created_expired_never_gets_a_sandbox(
    kube: Kube, namespace: str, settings: Settings
) -> None:
    """A claim whose shutdownTime has passed is marked expired and nothing is provisioned."""
    s.create_template(kube, namespace, "tpl", image=settings.image)
    s.create_pool(kube, namespace, "pool", "tpl", replicas=0)
    s.create_claim(
        kube,
        namespace,
        "late",
        "pool",
        lifecycle={"shutdownTime": rfc3339(-dt.timedelta(minutes=1))},
    )
    claim = s.wait_claim(kube, namespace, "late", status="False", reason="ClaimExpired")
    assert not (claim.get("status") or {}).get("sandbox", {}).get("name")
    kube.consistently(
        lambda: kube.get_or_none(s.SANDBOX_API, "Sandbox", "late", namespace) is None,
        seconds=2,
        what="no Sandbox for an expired claim",
    )


HOLD = "conformance.agents.x-k8s.io/hold"
"""A finalizer of the test's own that keeps the Sandbox visible while it is being deleted."""


@pytest.mark.spec("4.3.7", "4.3.1")
@pytest.mark.parametrize(("policy", "claim_waits"), [("Delete", False), ("DeleteForeground", True)])
def test_foreground_deletion_keeps_the_claim_until_the_sandbox_is_gone(
    kube: Kube, namespace: str, settings: Settings, policy: str, claim_waits: bool
) -> None:
    """DeleteForeground: the claim stays (deletionTimestamp set) while its Sandbox lives on;
    Delete: the claim goes at once."""
    setup_claim(kube, namespace, settings)
    kube.patch(s.SANDBOX_API, "Sandbox", "claim", namespace, {"metadata": {"finalizers": [HOLD]}})
    try:
        expire(kube, namespace, policy)
        kube.wait_for(
            s.SANDBOX_API,
            "Sandbox",
            "claim",
            namespace,
            lambda o: o is not None and s.deleting(o),
            what="the Sandbox to be deleting",
        )
        if claim_waits:
            claim = kube.get(s.EXT_API, "SandboxClaim", "claim", namespace)
            assert s.deleting(claim)
            kube.consistently(
                lambda: kube.get_or_none(s.EXT_API, "SandboxClaim", "claim", namespace) is not None,
                seconds=2,
                what="the claim waits for its Sandbox",
            )
        else:
            kube.wait_gone(s.EXT_API, "SandboxClaim", "claim", namespace)
    finally:
        kube.patch(s.SANDBOX_API, "Sandbox", "claim", namespace, {"metadata": {"finalizers": None}})
    kube.wait_gone(s.SANDBOX_API, "Sandbox", "claim", namespace)
    kube.wait_gone(s.EXT_API, "SandboxClaim", "claim", namespace)
