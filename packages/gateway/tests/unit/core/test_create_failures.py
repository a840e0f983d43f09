"""Each way a create fails gets its E2B answer from one table (create_failure_response)."""

from __future__ import annotations

import json

import pytest

from kube_agent_sandbox.controller.runtime import ApiError
from kube_agent_sandbox.gateway.controlplane.create import (
    ClusterRefused,
    CreateFailed,
    DeletedWhileStarting,
    IdempotencyKeyReused,
    JoinedCreateFailed,
    NoFreeId,
    NotReadyInTime,
    StillDeleting,
    StillStarting,
    TemplateFailed,
    TemplateNotFound,
    create_failure_response,
)


@pytest.mark.parametrize(
    ("failure", "status", "message", "should_retry", "retry_after"),
    [
        (TemplateNotFound("base"), 404, "template 'base' not found", "false", None),
        (
            TemplateFailed("no such template"),
            400,
            "cannot start the template: no such template",
            None,
            None,
        ),
        (StillStarting("sb1"), 503, "sandbox sb1 is still starting, retry", "true", "1"),
        (
            JoinedCreateFailed(),
            503,
            "a create with this Idempotency-Key failed, retry",
            "true",
            "1",
        ),
        (
            NotReadyInTime("sb1", seconds=2, deleted=True),
            503,
            "sandbox sb1 did not become ready within 2 s",
            "true",
            "1",
        ),
        (
            NotReadyInTime("sb1", seconds=2.5, deleted=False),
            503,
            "sandbox sb1 did not become ready within 2.5 s",
            "false",
            None,
        ),
        (
            IdempotencyKeyReused("sb1"),
            422,
            "this Idempotency-Key was used by a create with another request body (sandbox sb1);"
            " a key can only be retried with the same body",
            "false",
            None,
        ),
        (
            StillDeleting("sb1"),
            503,
            "sandbox sb1 of this Idempotency-Key is still being deleted, retry",
            "true",
            "1",
        ),
        (DeletedWhileStarting("sb1"), 500, "sandbox sb1 was deleted while starting", "false", None),
        (NoFreeId(), 500, "could not pick a free sandbox id", "true", None),
        (
            ClusterRefused(ApiError(429, "TooManyRequests", "slow down"), may_exist=False),
            503,
            "the cluster is busy: slow down",
            "true",
            "1",
        ),
        (
            ClusterRefused(ApiError(503, "ServiceUnavailable", "down"), may_exist=True),
            503,
            "the cluster is busy: down",
            "false",
            "1",
        ),
        (
            ClusterRefused(ApiError(403, "Forbidden", "no"), may_exist=False),
            500,
            "the gateway may not do this: no",
            "false",
            None,
        ),
        (
            ClusterRefused(ApiError(422, "Invalid", "bad name"), may_exist=False),
            400,
            "the cluster refused the sandbox: bad name",
            "false",
            None,
        ),
        (
            ClusterRefused(ApiError(409, "Conflict", "taken"), may_exist=False),
            500,
            "cluster error: taken",
            "false",
            None,
        ),
    ],
)
def test_each_failure_has_its_status_message_and_retry_headers(
    failure: CreateFailed,
    status: int,
    message: str,
    should_retry: str | None,
    retry_after: str | None,
) -> None:
    response = create_failure_response(failure)
    assert response.status_code == status
    assert json.loads(bytes(response.body)) == {"code": status, "message": message}
    assert response.headers.get("should-retry") == should_retry
    assert response.headers.get("retry-after") == retry_after
