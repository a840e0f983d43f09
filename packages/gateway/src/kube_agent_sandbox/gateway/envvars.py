"""A sandbox's ``envVars``, kept for the ``/init`` of every new pod.

Documented in ``docs/reference/gateway-controlplane.md`` ("Create", step 3).

A create's environment never goes into ``claim.spec.env`` (that forces a cold start) and a
resumed sandbox gets a new pod whose daemon needs the variables again. They may hold
secrets, so they go into a Secret ``<sandbox id>-env`` owned by the claim (garbage-collected
with it), never into annotations; the gateway reads it back when it re-initialises a pod.
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
from kube_agent_sandbox.gateway.annotations import LABEL_ENV_SECRET
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


async def store_env(api: Client, claim: Obj, env_vars: Mapping[str, str]) -> bool:
    """Keep ``env_vars`` for later re-inits (nothing to do when empty); False on failure.

    A Secret of that name owned by this claim counts (a joined create); one left by an earlier
    sandbox of the same id (owned by its gone claim) is replaced.
    """
    if not env_vars:
        return True
    try:
        await create_owned(
            api, SECRETS, claim["metadata"]["namespace"], env_secret(claim, env_vars)
        )
    except ApiError as exc:
        logger.warning(
            "sandbox %s: environment not kept for resumes: %s", claim["metadata"]["name"], exc
        )
        return False
    return True


async def load_env(api: Client, namespace: str, sandbox_id: str) -> dict[str, str]:
    """The kept environment of a sandbox (``{}`` when none was kept or it is unreadable)."""
    try:
        secret = await api.get(SECRETS, namespace, env_secret_name(sandbox_id))
    except ApiError as exc:
        if not exc.not_found:
            logger.warning("sandbox %s: environment not readable: %s", sandbox_id, exc)
        return {}
    return decode_env(secret) or {}
