"""The conversion webhook: HTTPS server, ConversionReview handling, certificates, CRD patching.

Typical startup (``--enable-webhook`` with ``--manage-webhook-certs``)::

    certs = await manage_webhook_certificates(client, cert_dir=..., namespace=...,
                                              service_name=..., cluster_domain=...)
    server = ConversionWebhookServer(Path(cert_dir) / "tls.crt", Path(cert_dir) / "tls.key")
    await server.start()
"""

from kube_agent_sandbox.controller.webhook.bootstrap import manage_webhook_certificates
from kube_agent_sandbox.controller.webhook.certs import (
    CertificateError,
    WebhookCertificates,
    ensure_webhook_certificates,
    generate_certificates,
    resolve_cert_files,
    write_serving_files,
)
from kube_agent_sandbox.controller.webhook.crds import (
    CONVERSION_CRD_NAMES,
    conversion_patch,
    patch_conversion_webhooks,
)
from kube_agent_sandbox.controller.webhook.review import MalformedReviewError, handle_review
from kube_agent_sandbox.controller.webhook.server import ConversionWebhookServer

__all__ = [
    "CONVERSION_CRD_NAMES",
    "CertificateError",
    "ConversionWebhookServer",
    "MalformedReviewError",
    "WebhookCertificates",
    "conversion_patch",
    "ensure_webhook_certificates",
    "generate_certificates",
    "handle_review",
    "manage_webhook_certificates",
    "patch_conversion_webhooks",
    "resolve_cert_files",
    "write_serving_files",
]
