"""Bad claims get a clear Ready condition, and the controller keeps serving the next good claim.

Each case creates one bad claim, waits for its Ready=False reason and message, then creates a
good claim and waits for it to become Ready, proving the bad one neither blocked nor crashed
the controller.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from claim_env import ClaimEnv

from kube_agent_sandbox.api.resources import SANDBOXES

pytestmark = pytest.mark.integration


@pytest.fixture
async def env(
    cluster: Any, namespace: str, extensions_controller: list[Any]
) -> AsyncIterator[ClaimEnv]:
    async with ClaimEnv.connect(cluster.kubeconfig, namespace) as e:
        await e.template("good")
        await e.pool("good-pool", "good")
        yield e


Case = Callable[[ClaimEnv], Awaitable[None]]


async def _missing_template(env: ClaimEnv) -> None:
    await env.pool("orphan-pool", "no-such-template")
    await env.claim("bad", "orphan-pool")


async def _missing_pool(env: ClaimEnv) -> None:
    await env.claim("bad", "no-such-pool")


async def _restricted_label(env: ClaimEnv) -> None:
    await env.claim(
        "bad", "good-pool", additionalPodMetadata={"labels": {"agents.x-k8s.io/x": "y"}}
    )


async def _forbidden_env(env: ClaimEnv) -> None:
    await env.claim("bad", "good-pool", env=[{"name": "FOO", "value": "bar"}])


async def _disallowed_vcts(env: ClaimEnv) -> None:
    vct = {
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    await env.claim("bad", "good-pool", volumeClaimTemplates=[vct])


async def _foreign_sandbox(env: ClaimEnv) -> None:
    await env.create(
        SANDBOXES,
        {
            "metadata": {"name": "bad"},
            "spec": {
                "podTemplate": {
                    "spec": {
                        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]
                    }
                }
            },
        },
    )
    await env.claim("bad", "good-pool")


CASES: list[tuple[str, Case, str, str]] = [
    (
        "template",
        _missing_template,
        "TemplateNotFound",
        'SandboxTemplate "no-such-template" not found',
    ),
    ("pool", _missing_pool, "WarmPoolNotFound", 'SandboxWarmPool "no-such-pool" not found'),
    ("metadata", _restricted_label, "InvalidMetadata", "invalid additionalPodMetadata: "),
    ("env", _forbidden_env, "EnvVarsInjectionRejected", "environment variable injection"),
    (
        "vcts",
        _disallowed_vcts,
        "VolumeClaimTemplatesError",
        "volume claim templates are disallowed",
    ),
    (
        "foreign",
        _foreign_sandbox,
        "ReconcilerError",
        'Error seen: sandbox "bad" is not controlled by claim "bad". Please use a different '
        "claim name or delete the sandbox manually",
    ),
]


class TestBadInput:
    extensions = ("claim",)

    @pytest.mark.parametrize(
        ("case", "reason", "message"),
        [pytest.param(fn, reason, msg, id=cid) for cid, fn, reason, msg in CASES],
    )
    async def test_reported_and_controller_keeps_serving(
        self, env: ClaimEnv, case: Case, reason: str, message: str
    ) -> None:
        await case(env)
        claim = await env.until_claim("bad", status="False", reason=reason)
        ready = {c["type"]: c for c in claim["status"]["conditions"]}["Ready"]
        assert message in ready["message"]
        assert ready["observedGeneration"] == claim["metadata"]["generation"]
        await env.claim("good", "good-pool")
        await env.until_claim("good", status="True")
        # the bad claim still reports the same problem (nothing half-created for it)
        again = await env.until_claim("bad", status="False", reason=reason)
        assert not (again.get("status") or {}).get("sandbox")
