"""The conversion webhook: HTTPS server, ConversionReview handling, certificates, CRD patching.

The controller process assembles these parts in one place,
:func:`kube_agent_sandbox.controller.app.prepare_webhook`: with ``--manage-webhook-certs`` it
ensures the serving certificates (:func:`ensure_webhook_certificates`), patches the CRDs'
conversion ``caBundle`` (:func:`patch_conversion_webhooks`), then builds the
:class:`ConversionWebhookServer` that the manager runs on every replica.
"""

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
    "patch_conversion_webhooks",
    "resolve_cert_files",
    "write_serving_files",
]
