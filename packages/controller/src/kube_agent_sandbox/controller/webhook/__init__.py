"""The conversion webhook: HTTPS server, ConversionReview handling, certificates, CRD patching.

The controller process assembles these parts in one place,
:func:`kube_agent_sandbox.controller.app.prepare_webhook`: with ``--manage-webhook-certs`` it
ensures the serving certificates (:func:`ensure_webhook_certificates`), patches the CRDs'
conversion ``caBundle`` (:func:`patch_conversion_webhooks`), then builds the
:class:`ConversionWebhookServer` that the manager runs on every replica.

The names below load on first use (PEP 562): the certificate code needs ``cryptography``
(about 8 MiB of resident memory), which a controller without the webhook never loads.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_LAZY: dict[str, str] = {
    "CertificateError": "kube_agent_sandbox.controller.webhook.certs",
    "WebhookCertificates": "kube_agent_sandbox.controller.webhook.certs",
    "ensure_webhook_certificates": "kube_agent_sandbox.controller.webhook.certs",
    "generate_certificates": "kube_agent_sandbox.controller.webhook.certs",
    "resolve_cert_files": "kube_agent_sandbox.controller.webhook.certs",
    "write_serving_files": "kube_agent_sandbox.controller.webhook.certs",
    "CONVERSION_CRD_NAMES": "kube_agent_sandbox.controller.webhook.crds",
    "conversion_patch": "kube_agent_sandbox.controller.webhook.crds",
    "patch_conversion_webhooks": "kube_agent_sandbox.controller.webhook.crds",
    "MalformedReviewError": "kube_agent_sandbox.controller.webhook.review",
    "handle_review": "kube_agent_sandbox.controller.webhook.review",
    "ConversionWebhookServer": "kube_agent_sandbox.controller.webhook.server",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


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
