"""The conversion webhook server over real TLS on a loopback port (no cluster needed)."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kube_agent_sandbox.controller.webhook import (
    ConversionWebhookServer,
    WebhookCertificates,
    generate_certificates,
    write_serving_files,
)
from kube_agent_sandbox.controller.webhook.server import OFFLOAD_BODY_BYTES

SERVICE_HOST = "agent-sandbox-webhook-service.agent-sandbox-system.svc"


def new_certs() -> WebhookCertificates:
    return generate_certificates(
        service_name="agent-sandbox-webhook-service",
        namespace="agent-sandbox-system",
        cluster_domain="cluster.local",
    )


def trusting(certs: WebhookCertificates) -> ssl.SSLContext:
    return ssl.create_default_context(cadata=certs.ca_pem.decode())


@pytest.fixture
def certs() -> WebhookCertificates:
    return new_certs()


@pytest.fixture
async def server(
    tmp_path: Path, certs: WebhookCertificates
) -> AsyncIterator[ConversionWebhookServer]:
    cert_file, key_file = write_serving_files(tmp_path, certs)
    webhook = ConversionWebhookServer(cert_file, key_file, host="127.0.0.1", port=0)
    await webhook.start()
    try:
        yield webhook
    finally:
        await webhook.stop()


async def post(
    server: ConversionWebhookServer,
    certs: WebhookCertificates,
    body: Any,
    *,
    path: str = "/convert",
    raw: bytes | None = None,
) -> tuple[int, Any]:
    url = f"https://127.0.0.1:{server.port}{path}"
    async with aiohttp.ClientSession() as session:
        kwargs: dict[str, Any] = {"ssl": trusting(certs), "server_hostname": SERVICE_HOST}
        if raw is not None:
            kwargs["data"] = raw
        else:
            kwargs["json"] = body
        async with session.post(url, **kwargs) as response:
            if response.content_type == "application/json":
                return response.status, await response.json()
            return response.status, await response.text()


def review(objects: list[Any], desired: str, version: str = "v1") -> dict[str, Any]:
    return {
        "apiVersion": f"apiextensions.k8s.io/{version}",
        "kind": "ConversionReview",
        "request": {"uid": "abc", "desiredAPIVersion": desired, "objects": objects},
    }


ALPHA_POOL = {
    "apiVersion": "extensions.agents.x-k8s.io/v1alpha1",
    "kind": "SandboxWarmPool",
    "metadata": {"name": "p", "namespace": "default"},
    "spec": {"replicas": 3, "sandboxTemplateRef": {"name": "t"}},
}


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
async def test_convert_over_tls(
    server: ConversionWebhookServer, certs: WebhookCertificates, version: str
) -> None:
    status, body = await post(
        server, certs, review([ALPHA_POOL], "extensions.agents.x-k8s.io/v1beta1", version)
    )
    assert status == 200
    assert body["apiVersion"] == f"apiextensions.k8s.io/{version}"
    assert body["response"]["uid"] == "abc"
    assert body["response"]["result"]["status"] == "Success"
    [converted] = body["response"]["convertedObjects"]
    assert converted["apiVersion"] == "extensions.agents.x-k8s.io/v1beta1"
    assert converted["spec"]["replicas"] == 3


async def test_conversion_failure_is_200_with_failure_result(
    server: ConversionWebhookServer, certs: WebhookCertificates
) -> None:
    bad = {**ALPHA_POOL, "spec": {"replicas": "three"}}
    status, body = await post(server, certs, review([bad], "extensions.agents.x-k8s.io/v1beta1"))
    assert status == 200
    assert body["response"]["result"]["status"] == "Failure"
    assert body["response"]["result"]["message"] == "spec.replicas: expected integer, got string"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{not json", "invalid JSON"),
        (b"", "invalid JSON"),
        (b"\xff\xfe", "invalid JSON"),
        (b'{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview"}', "conversion"),
        (b"[]", "body must be a JSON object"),
    ],
)
async def test_malformed_requests_get_400(
    server: ConversionWebhookServer, certs: WebhookCertificates, raw: bytes, message: str
) -> None:
    status, text = await post(server, certs, None, raw=raw)
    assert status == 400
    assert text.startswith(message)


async def test_only_post_convert_is_served(
    server: ConversionWebhookServer, certs: WebhookCertificates
) -> None:
    status, _ = await post(server, certs, review([], "agents.x-k8s.io/v1beta1"), path="/other")
    assert status == 404
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            f"https://127.0.0.1:{server.port}/convert",
            ssl=trusting(certs),
            server_hostname=SERVICE_HOST,
        ) as response,
    ):
        assert response.status == 405


async def test_certificate_is_checked_against_the_service_name(
    server: ConversionWebhookServer, certs: WebhookCertificates
) -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await session.post(
                f"https://127.0.0.1:{server.port}/convert",
                json={},
                ssl=trusting(certs),
                server_hostname="other.example",
            )
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await session.post(
                f"https://127.0.0.1:{server.port}/convert",
                json={},
                ssl=trusting(new_certs()),
                server_hostname=SERVICE_HOST,
            )


async def test_reload_certificates_serves_the_new_ones(
    tmp_path: Path, server: ConversionWebhookServer, certs: WebhookCertificates
) -> None:
    rotated = new_certs()
    write_serving_files(tmp_path, rotated)

    server.reload_certificates()

    status, _ = await post(server, rotated, review([], "agents.x-k8s.io/v1beta1"))
    assert status == 200
    with pytest.raises(aiohttp.ClientConnectorCertificateError):
        await post(server, certs, review([], "agents.x-k8s.io/v1beta1"))


async def test_combined_pem_file(tmp_path: Path, certs: WebhookCertificates) -> None:
    combined = tmp_path / "cert.pem"
    combined.write_bytes(certs.cert_pem + certs.key_pem)
    webhook = ConversionWebhookServer(combined, combined, host="127.0.0.1", port=0)
    await webhook.start()
    try:
        status, _ = await post(webhook, certs, review([], "agents.x-k8s.io/v1beta1"))
        assert status == 200
    finally:
        await webhook.stop()


async def test_lifecycle(tmp_path: Path, certs: WebhookCertificates) -> None:
    cert_file, key_file = write_serving_files(tmp_path, certs)
    webhook = ConversionWebhookServer(cert_file, key_file, host="127.0.0.1", port=0)
    assert not webhook.started
    with pytest.raises(RuntimeError, match="not started"):
        _ = webhook.port
    with pytest.raises(RuntimeError, match="not started"):
        webhook.reload_certificates()

    await webhook.start()
    port = webhook.port
    await webhook.start()  # idempotent
    assert webhook.port == port
    assert webhook.started

    await webhook.stop()
    await webhook.stop()  # idempotent
    assert not webhook.started
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectorError):
            await session.post(f"https://127.0.0.1:{port}/convert", ssl=trusting(certs))

    # The port is free again: a new server can bind it.
    again = ConversionWebhookServer(cert_file, key_file, host="127.0.0.1", port=port)
    await again.start()
    assert again.port == port
    await again.stop()


async def test_start_fails_on_a_bad_certificate(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_text("nope")
    (tmp_path / "tls.key").write_text("nope")
    webhook = ConversionWebhookServer(tmp_path / "tls.crt", tmp_path / "tls.key", port=0)
    with pytest.raises(ssl.SSLError):
        await webhook.start()
    assert not webhook.started


async def test_default_host_binds_all_interfaces(
    tmp_path: Path, certs: WebhookCertificates
) -> None:
    cert_file, key_file = write_serving_files(tmp_path, certs)
    webhook = ConversionWebhookServer(cert_file, key_file, port=0)
    await webhook.start()
    try:
        status, _ = await post(webhook, certs, review([], "agents.x-k8s.io/v1beta1"))
        assert status == 200
    finally:
        await webhook.stop()


async def test_large_review_is_converted_off_the_event_loop(
    server: ConversionWebhookServer, certs: WebhookCertificates
) -> None:
    pools = [
        {**ALPHA_POOL, "metadata": {"name": f"p-{i}", "namespace": "default"}, "pad": "x" * 300}
        for i in range(1000)
    ]
    body = review(pools, "extensions.agents.x-k8s.io/v1beta1")
    assert len(json.dumps(body)) > OFFLOAD_BODY_BYTES

    status, answer = await post(server, certs, body)

    assert status == 200
    converted = answer["response"]["convertedObjects"]
    assert [o["metadata"]["name"] for o in converted] == [f"p-{i}" for i in range(1000)]
    assert {o["apiVersion"] for o in converted} == {"extensions.agents.x-k8s.io/v1beta1"}
