"""Helpers shared by the control-plane endpoint tests (``test_controlplane_*``)."""

from __future__ import annotations

from typing import Any

from gateway_fakes import Gateway


async def create_sandbox(gw: Gateway, body: dict[str, Any] | None = None, **headers: str) -> str:
    """Create a sandbox through ``POST /v2/sandboxes`` (201 expected) and return its ID."""
    response = await gw.client.post(
        "/v2/sandboxes",
        json=body or {"templateID": "base"},
        headers={**gw.headers(), **headers},
    )
    assert response.status_code == 201, response.text
    sandbox_id = response.json()["sandboxID"]
    assert isinstance(sandbox_id, str)
    return sandbox_id
