"""Startup step of ``--manage-webhook-certs``: certificates first, then the CRDs.

Runs before the manager starts (on every replica), so the webhook server finds its files and
the API server trusts it by the time conversions arrive.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kube_agent_sandbox.api.constants import WEBHOOK_SECRET_NAME
from kube_agent_sandbox.controller.runtime.types import Client
from kube_agent_sandbox.controller.webhook.certs import (
    WebhookCertificates,
    ensure_webhook_certificates,
)
from kube_agent_sandbox.controller.webhook.crds import (
    CONVERSION_CRD_NAMES,
    patch_conversion_webhooks,
)


async def manage_webhook_certificates(
    client: Client,
    *,
    cert_dir: str | Path,
    namespace: str,
    service_name: str,
    cluster_domain: str,
    url: str | None = None,
    extra_sans: Sequence[str] = (),
    secret_name: str = WEBHOOK_SECRET_NAME,
    crd_names: tuple[str, ...] = CONVERSION_CRD_NAMES,
) -> WebhookCertificates:
    """Ensure serving certificates in ``cert_dir`` and point the CRDs' webhooks at them.

    Args:
        client: API client (Secret get/create, CRD get/patch).
        cert_dir: ``--webhook-cert-dir``.
        namespace: ``--webhook-namespace``.
        service_name: ``--webhook-service-name``.
        cluster_domain: ``--cluster-domain``.
        url: Use a URL clientConfig instead of the Service (local clusters only).
        extra_sans: Extra SANs for newly generated certificates (e.g. ``127.0.0.1``).
        secret_name: Shared Secret holding the certificates.
        crd_names: CRDs to patch.

    Returns:
        The certificates in use.
    """
    certs = await ensure_webhook_certificates(
        client,
        cert_dir=cert_dir,
        namespace=namespace,
        service_name=service_name,
        cluster_domain=cluster_domain,
        secret_name=secret_name,
        extra_sans=extra_sans,
    )
    await patch_conversion_webhooks(
        client,
        certs.ca_pem,
        service_name=service_name,
        namespace=namespace,
        url=url,
        crd_names=crd_names,
    )
    return certs
