"""Point the four CRDs' conversion webhook at this controller (caBundle + service or URL).

Upstream patches, at startup and for each of its CRDs that exists and uses ``strategy:
Webhook``, ``spec.conversion.webhook.clientConfig`` (``service`` name/namespace/path
``/convert`` and ``caBundle``) and fills ``conversionReviewVersions`` when empty, with a JSON
merge patch (as upstream v0.5.6 cmd/agent-sandbox-controller/main.go does). A URL
``clientConfig`` (``https://127.0.0.1:<port>/convert``) is offered in addition for local
clusters whose API server runs on the host and cannot reach a Service; ``service`` and ``url``
are mutually exclusive, so the other one is removed.
"""

from __future__ import annotations

import base64
import logging
from typing import Any, Final

from kube_agent_sandbox.api.constants import CONVERSION_PATH
from kube_agent_sandbox.api.rest import CUSTOM_RESOURCE_DEFINITIONS as CRDS
from kube_agent_sandbox.controller.runtime import ApiError, Client, Obj

logger = logging.getLogger(__name__)

CONVERSION_CRD_NAMES: Final = (
    "sandboxes.agents.x-k8s.io",
    "sandboxclaims.extensions.agents.x-k8s.io",
    "sandboxtemplates.extensions.agents.x-k8s.io",
    "sandboxwarmpools.extensions.agents.x-k8s.io",
    "sandboxsnapshots.extensions.agents.x-k8s.io",
)
CONVERSION_REVIEW_VERSIONS: Final = ("v1", "v1beta1")


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def uses_webhook_conversion(crd: Obj) -> bool:
    """True when the CRD converts through a webhook (``spec.conversion.strategy: Webhook``)."""
    return bool(_get(crd, "spec", "conversion", "strategy") == "Webhook")


def conversion_patch(
    crd: Obj,
    ca_pem: bytes,
    *,
    service_name: str,
    namespace: str,
    url: str | None = None,
    path: str = CONVERSION_PATH,
) -> Obj:
    """The merge patch that points ``crd``'s conversion webhook at us; ``{}`` if it already does.

    Args:
        crd: The CRD as read from the API server (must use webhook conversion).
        ca_pem: PEM CA bundle that signs the serving certificate.
        service_name: Webhook Service name (service mode).
        namespace: Webhook Service namespace (service mode).
        url: When set, use this URL instead of the Service (local clusters).
        path: Path on the Service.
    """
    webhook = _get(crd, "spec", "conversion", "webhook") or {}
    client_config = webhook.get("clientConfig") or {}
    config_patch: Obj = {}
    if url is None:
        service = client_config.get("service") or {}
        wanted = {"name": service_name, "namespace": namespace, "path": path}
        service_patch = {k: v for k, v in wanted.items() if service.get(k) != v}
        if service_patch:
            config_patch["service"] = service_patch
        if client_config.get("url") is not None:
            config_patch["url"] = None
    else:
        if client_config.get("url") != url:
            config_patch["url"] = url
        if client_config.get("service") is not None:
            config_patch["service"] = None
    ca_bundle = base64.b64encode(ca_pem).decode()
    if client_config.get("caBundle") != ca_bundle:
        config_patch["caBundle"] = ca_bundle

    webhook_patch: Obj = {}
    if config_patch:
        webhook_patch["clientConfig"] = config_patch
    if not webhook.get("conversionReviewVersions"):
        webhook_patch["conversionReviewVersions"] = list(CONVERSION_REVIEW_VERSIONS)
    return {"spec": {"conversion": {"webhook": webhook_patch}}} if webhook_patch else {}


async def patch_conversion_webhooks(
    client: Client,
    ca_pem: bytes,
    *,
    service_name: str,
    namespace: str,
    url: str | None = None,
    crd_names: tuple[str, ...] = CONVERSION_CRD_NAMES,
) -> list[str]:
    """Patch every listed CRD that exists and uses webhook conversion.

    Returns:
        The names of the CRDs that were changed.

    Raises:
        ApiError: reading or patching a CRD failed (other than it being absent).
    """
    patched: list[str] = []
    for name in crd_names:
        try:
            crd = await client.get(CRDS, "", name)
        except ApiError as exc:
            if exc.not_found:
                logger.info("CRD not found, skipping patch", extra={"crd": name})
                continue
            raise
        if not uses_webhook_conversion(crd):
            logger.info("CRD does not use webhook conversion, skipping patch", extra={"crd": name})
            continue
        patch = conversion_patch(
            crd, ca_pem, service_name=service_name, namespace=namespace, url=url
        )
        if not patch:
            logger.info("CRD conversion webhook already up to date", extra={"crd": name})
            continue
        await client.patch(CRDS, "", name, patch, patch_type="merge")
        logger.info("patched CRD with conversion webhook configuration", extra={"crd": name})
        patched.append(name)
    return patched
