"""A sandbox's ``envVars``, kept for the ``/init`` of every new pod.

Documented in ``docs/reference/gateway-controlplane.md`` ("Create", step 3).

A create's environment never goes into ``claim.spec.env`` (that forces a cold start) and a
resumed sandbox gets a new pod whose daemon needs the variables again. They may hold
secrets, so they go into a Secret ``<sandbox id>-env`` owned by the claim (garbage-collected
with it), never into annotations; the gateway reads it back when it re-initialises a pod.

Neither step may lose the environment silently (issue 21: the gateway may lack the tenant
role that grants ``get``/``create`` on Secrets in a namespace). :func:`store_env` raises, so
the create fails; a claim created with ``envVars`` says so (:data:`ANNOTATION_ENV_KEPT`), and
:func:`load_env` raises :class:`EnvNotRestored` when that Secret cannot be read, so a resume
fails before it starts a pod without its environment. Both are counted
(``agent_sandbox_gateway_env_failures_total``) and logged.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Mapping
from typing import Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.api.rest import SECRETS
from kube_agent_sandbox.controller.runtime import ApiError, Client, Obj
from kube_agent_sandbox.gateway.annotations import ANNOTATION_ENV_KEPT, LABEL_ENV_SECRET
from kube_agent_sandbox.gateway.owned import create_owned

logger = logging.getLogger(__name__)

ENV_FIELD: Final = "envVars"


def env_secret_name(sandbox_id: str) -> str:
    """The name of the Secret holding a sandbox's environment."""
    return f"{sandbox_id}-env"


def env_secret(claim: Obj, env_vars: Mapping[str, str]) -> Obj:
    """The Secret manifest keeping ``env_vars`` of ``claim``'s sandbox, owned by the claim."""
    meta = claim["metadata"]
    payload = json.dumps(dict(env_vars), sort_keys=True).encode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": env_secret_name(meta["name"]),
            "namespace": meta["namespace"],
            "labels": {LABEL_ENV_SECRET: "true"},
            "ownerReferences": [
                {
                    "apiVersion": c.EXTENSIONS_API_VERSION,
                    "kind": c.KIND_SANDBOX_CLAIM,
                    "name": meta["name"],
                    "uid": meta["uid"],
                }
            ],
        },
        "data": {ENV_FIELD: base64.b64encode(payload).decode()},
    }


def decode_env(secret: Obj) -> dict[str, str] | None:
    """The environment a Secret stores, or None when it holds none (or garbage)."""
    encoded = (secret.get("data") or {}).get(ENV_FIELD)
    if not isinstance(encoded, str):
        return None
    try:
        value = json.loads(base64.b64decode(encoded, validate=True))
    except (binascii.Error, ValueError):
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        return None
    return value


class EnvNotRestored(RuntimeError):
    """A sandbox's kept environment cannot be read: it must not start without it."""

    def __init__(self, sandbox_id: str, reason: str, error: ApiError | None = None) -> None:
        super().__init__(f"sandbox {sandbox_id}: its envVars cannot be restored: {reason}")
        self.sandbox_id = sandbox_id
        self.error = error


def _forbidden_hint(namespace: str) -> str:
    return (
        f"the gateway may not read or create Secrets in namespace {namespace}; bind its tenant"
        f" role there: agent-sandbox-gateway keys bind --namespace {namespace}"
    )


def describe_failure(namespace: str, exc: ApiError) -> str:
    """Why keeping or reading an env Secret failed, with the fix when it is a missing right."""
    return _forbidden_hint(namespace) if exc.status == 403 else exc.message


async def store_env(api: Client, claim: Obj, env_vars: Mapping[str, str]) -> None:
    """Keep ``env_vars`` for later re-inits (nothing to do when empty).

    A Secret of that name owned by this claim counts (a joined create); one left by an earlier
    sandbox of the same id (owned by its gone claim) is replaced.

    Raises:
        ApiError: the API server refused (403: the tenant role is not bound there).
    """
    if not env_vars:
        return
    await create_owned(api, SECRETS, claim["metadata"]["namespace"], env_secret(claim, env_vars))


async def load_env(api: Client, namespace: str, claim: Obj) -> dict[str, str]:
    """The kept environment of ``claim``'s sandbox in ``namespace`` (``{}`` when it was
    created without one).

    Claims from before :data:`ANNOTATION_ENV_KEPT` existed do not say whether they have an
    environment: a missing Secret means none, but an unreadable one is still an error.

    Raises:
        EnvNotRestored: the claim has a kept environment (or may have one) that cannot be read.
    """
    meta = claim["metadata"]
    sandbox_id = meta["name"]
    annotations = meta.get("annotations") or {}
    kept = annotations.get(ANNOTATION_ENV_KEPT)
    if kept == "false":
        return {}
    try:
        secret = await api.get(SECRETS, namespace, env_secret_name(sandbox_id))
    except ApiError as exc:
        if exc.not_found and kept is None:
            return {}
        reason = "its Secret is gone" if exc.not_found else describe_failure(namespace, exc)
        raise EnvNotRestored(sandbox_id, reason, exc) from exc
    env = decode_env(secret)
    if env is None:
        raise EnvNotRestored(sandbox_id, f"Secret {env_secret_name(sandbox_id)} holds no envVars")
    return env
