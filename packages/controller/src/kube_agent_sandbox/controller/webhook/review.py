"""ConversionReview handling, separate from HTTP so it can be tested without a server.

The API server posts an ``apiextensions.k8s.io/v1`` (or ``v1beta1``) ConversionReview with the
objects to convert and the wanted ``desiredAPIVersion``; the answer echoes the review's
``apiVersion`` and the request ``uid``. As with controller-runtime, one object that cannot be
converted fails the whole review with ``result.status: Failure`` and the reason as message; only
a review that is not a review at all (the HTTP layer answers 400) raises.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from kube_agent_sandbox.api.conversion import ConversionError, convert

logger = logging.getLogger(__name__)

REVIEW_API_VERSIONS: Final = ("apiextensions.k8s.io/v1", "apiextensions.k8s.io/v1beta1")
REVIEW_KIND: Final = "ConversionReview"


class MalformedReviewError(ValueError):
    """The request body is not a ConversionReview with a request (answered with HTTP 400)."""


def _result(status: str, message: str | None = None) -> dict[str, Any]:
    # Go's metav1.Status always carries an (empty) ListMeta; kept for byte-level familiarity.
    result: dict[str, Any] = {"metadata": {}, "status": status}
    if message is not None:
        result["message"] = message
    return result


def handle_review(review: object) -> dict[str, Any]:
    """Answer one ConversionReview.

    Args:
        review: The decoded request body.

    Returns:
        The ConversionReview to send back (``response`` set, ``request`` dropped).

    Raises:
        MalformedReviewError: not a ConversionReview of a supported version, no ``request``,
            or a request field of the wrong type.
    """
    if not isinstance(review, dict):
        raise MalformedReviewError("body must be a JSON object")
    api_version = review.get("apiVersion")
    if api_version not in REVIEW_API_VERSIONS:
        raise MalformedReviewError(
            f"unsupported ConversionReview apiVersion {api_version!r}"
            f" (supported: {', '.join(REVIEW_API_VERSIONS)})"
        )
    if review.get("kind") != REVIEW_KIND:
        raise MalformedReviewError(f"kind must be {REVIEW_KIND!r}, got {review.get('kind')!r}")
    request = review.get("request")
    if request is None:
        raise MalformedReviewError("conversion request is nil")
    if not isinstance(request, dict):
        raise MalformedReviewError("request must be a JSON object")
    uid = request.get("uid", "")
    desired = request.get("desiredAPIVersion", "")
    objects = request.get("objects")
    objects = [] if objects is None else objects
    if not isinstance(uid, str):
        raise MalformedReviewError("request.uid must be a string")
    if not isinstance(desired, str):
        raise MalformedReviewError("request.desiredAPIVersion must be a string")
    if not isinstance(objects, list):
        raise MalformedReviewError("request.objects must be a list")

    response: dict[str, Any] = {"uid": uid}
    try:
        converted = [convert(obj, desired) for obj in objects]
    except ConversionError as exc:
        logger.warning("conversion failed", extra={"uid": uid, "error": str(exc)})
        response["result"] = _result("Failure", str(exc))
    except Exception as exc:  # a bug must not become an HTTP 500 the apiserver cannot explain
        logger.exception("unexpected error while converting", extra={"uid": uid})
        response["result"] = _result("Failure", f"internal error: {exc}")
    else:
        response["convertedObjects"] = converted
        response["result"] = _result("Success")
    return {"apiVersion": api_version, "kind": REVIEW_KIND, "response": response}
