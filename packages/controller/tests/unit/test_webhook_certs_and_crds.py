"""Secret reuse/creation, CRD patching and the startup step that runs both, in memory.

``FakeApi`` serves RFC 7386 merge patches and the apiserver's 404/409 statuses, and its
request hook lets a test create the Secret between our GET and create, as another replica
would; the real API server is exercised by the integration test.
"""

from __future__ import annotations

import base64
import copy
import stat
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from kube_agent_sandbox.api.rest import CUSTOM_RESOURCE_DEFINITIONS as CRDS
from kube_agent_sandbox.api.rest import SECRETS
from kube_agent_sandbox.controller import app
from kube_agent_sandbox.controller.config import parse_args
from kube_agent_sandbox.controller.runtime import ApiError, FakeApi, Obj, Resource
from kube_agent_sandbox.controller.webhook import (
    CertificateError,
    conversion_patch,
    ensure_webhook_certificates,
    generate_certificates,
    patch_conversion_webhooks,
)
from kube_agent_sandbox.controller.webhook.crds import CONVERSION_CRD_NAMES

NS = "agent-sandbox-system"
SVC = "agent-sandbox-webhook-service"
SECRET = "agent-sandbox-webhook-certs"


def another_replica_creates_first(api: FakeApi, secret: Obj) -> None:
    """Store ``secret`` just before the next Secret create, as a faster replica would."""

    def race(verb: str, resource: Resource, namespace: str | None, name: str | None) -> None:
        if verb == "create" and resource == SECRETS:
            api.on_request = None
            api.add(SECRETS, secret)

    api.on_request = race


def requests(api: FakeApi) -> list[tuple[str, str, str | None]]:
    """``(verb, plural, name)`` of every request served."""
    return [(call.verb, call.plural, call.name) for call in api.calls]


def secret_of(ca: bytes, cert: bytes, key: bytes) -> Obj:
    data = {"ca.crt": ca, "tls.crt": cert, "tls.key": key}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NS},
        "type": "Opaque",
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def decoded(secret: Obj, key: str) -> bytes:
    return base64.b64decode(secret["data"][key])


async def ensure(client: FakeApi, cert_dir: Path) -> Any:
    return await ensure_webhook_certificates(
        client, cert_dir=cert_dir, namespace=NS, service_name=SVC, cluster_domain="cluster.local"
    )


# --- Secret handling ----------------------------------------------------------------------------


async def test_existing_secret_is_reused(tmp_path: Path) -> None:
    theirs = generate_certificates(service_name=SVC, namespace=NS, cluster_domain="cluster.local")
    client = FakeApi()
    client.add(SECRETS, secret_of(theirs.ca_pem, theirs.cert_pem, theirs.key_pem))

    certs = await ensure(client, tmp_path)

    assert certs == theirs
    assert (tmp_path / "tls.crt").read_bytes() == theirs.cert_pem
    assert (tmp_path / "tls.key").read_bytes() == theirs.key_pem
    assert stat.S_IMODE((tmp_path / "tls.key").stat().st_mode) == 0o600
    assert [c for c in client.calls if c[0] == "create"] == []


async def test_missing_secret_is_generated_and_published(tmp_path: Path) -> None:
    client = FakeApi()

    certs = await ensure(client, tmp_path)

    secret = client.obj(SECRETS, SECRET, NS)
    assert secret is not None
    assert secret["type"] == "Opaque"
    [create] = client.writes(SECRETS)
    assert create.body["metadata"] == {"name": SECRET, "namespace": NS}
    assert sorted(secret["data"]) == ["ca.crt", "tls.crt", "tls.key"]
    assert decoded(secret, "ca.crt") == certs.ca_pem
    assert decoded(secret, "tls.crt") == certs.cert_pem == (tmp_path / "tls.crt").read_bytes()
    assert decoded(secret, "tls.key") == certs.key_pem == (tmp_path / "tls.key").read_bytes()
    cert = x509.load_pem_x509_certificate(certs.cert_pem)
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(certs.ca_pem))
    assert requests(client) == [("get", "secrets", SECRET), ("create", "secrets", SECRET)]

    # A second replica (or a restart) reuses what the first published.
    again = await ensure(client, tmp_path / "replica-2")
    assert again == certs


async def test_losing_the_create_race_loads_the_winners_certificates(tmp_path: Path) -> None:
    winner = generate_certificates(service_name=SVC, namespace=NS, cluster_domain="cluster.local")
    client = FakeApi()
    another_replica_creates_first(client, secret_of(winner.ca_pem, winner.cert_pem, winner.key_pem))

    certs = await ensure(client, tmp_path)

    assert certs == winner
    assert (tmp_path / "tls.crt").read_bytes() == winner.cert_pem
    assert (tmp_path / "tls.key").read_bytes() == winner.key_pem
    assert requests(client) == [
        ("get", "secrets", SECRET),
        ("create", "secrets", SECRET),
        ("get", "secrets", SECRET),
    ]


async def test_invalid_secret_is_an_error(tmp_path: Path) -> None:
    good = generate_certificates(service_name=SVC, namespace=NS, cluster_domain="cluster.local")
    client = FakeApi()
    client.add(SECRETS, secret_of(b"nope", good.cert_pem, good.key_pem))

    with pytest.raises(CertificateError) as info:
        await ensure(client, tmp_path)

    assert str(info.value) == (
        "shared Secret agent-sandbox-webhook-certs has invalid certificate data: "
        "invalid CA certificate PEM data"
    )
    assert not (tmp_path / "tls.crt").exists()


@pytest.mark.parametrize(
    "data",
    [{}, {"ca.crt": "!!!", "tls.crt": "", "tls.key": ""}, None],
    ids=["empty", "bad-base64", "no-data"],
)
async def test_secret_without_usable_data_is_an_error(tmp_path: Path, data: Any) -> None:
    client = FakeApi()
    client.add(SECRETS, {"metadata": {"name": SECRET, "namespace": NS}, "data": data})
    with pytest.raises(CertificateError, match="missing certificate or key data"):
        await ensure(client, tmp_path)


async def test_invalid_secret_after_a_lost_race_is_an_error(tmp_path: Path) -> None:
    client = FakeApi()
    another_replica_creates_first(
        client, {"metadata": {"name": SECRET, "namespace": NS}, "data": {}}
    )
    with pytest.raises(CertificateError, match="invalid certificate data during concurrent load"):
        await ensure(client, tmp_path)


async def test_unwritable_cert_dir_is_an_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(CertificateError, match="failed to write certificate files locally"):
        await ensure(FakeApi(), blocker / "certs")


@pytest.mark.parametrize("verb", ["get", "create"])
async def test_other_api_errors_propagate(tmp_path: Path, verb: str) -> None:
    client = FakeApi()
    client.fail(verb, "secrets", ApiError(403, "Forbidden", "no"))
    with pytest.raises(ApiError) as info:
        await ensure(client, tmp_path)
    assert info.value.status == 403


# --- CRD patching -------------------------------------------------------------------------------


def crd(name: str, *, strategy: str = "Webhook", webhook: Obj | None = None) -> Obj:
    conversion: Obj = {"strategy": strategy}
    if webhook is not None:
        conversion["webhook"] = webhook
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {"group": name.split(".", 1)[1], "conversion": conversion},
    }


SHIPPED_WEBHOOK: Obj = {
    "conversionReviewVersions": ["v1", "v1beta1"],
    "clientConfig": {"service": {"name": SVC, "namespace": NS, "path": "/convert"}},
}
CA = b"-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n"
CA_B64 = base64.b64encode(CA).decode()


def test_patch_for_the_shipped_crd_sets_only_the_ca_bundle() -> None:
    patch = conversion_patch(
        crd("sandboxes.agents.x-k8s.io", webhook=copy.deepcopy(SHIPPED_WEBHOOK)),
        CA,
        service_name=SVC,
        namespace=NS,
    )
    assert patch == {"spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": CA_B64}}}}}


def test_patch_for_an_empty_webhook_sets_everything() -> None:
    patch = conversion_patch(crd("x.agents.x-k8s.io"), CA, service_name="s", namespace="n")
    assert patch == {
        "spec": {
            "conversion": {
                "webhook": {
                    "clientConfig": {
                        "service": {"name": "s", "namespace": "n", "path": "/convert"},
                        "caBundle": CA_B64,
                    },
                    "conversionReviewVersions": ["v1", "v1beta1"],
                }
            }
        }
    }


def test_patch_keeps_existing_review_versions_and_port() -> None:
    webhook: Obj = {
        "conversionReviewVersions": ["v1"],
        "clientConfig": {
            "service": {"name": "old", "namespace": NS, "path": "/convert", "port": 8443},
            "caBundle": "b2xk",
        },
    }
    patch = conversion_patch(crd("x.y.z", webhook=webhook), CA, service_name=SVC, namespace=NS)
    assert patch == {
        "spec": {
            "conversion": {
                "webhook": {"clientConfig": {"service": {"name": SVC}, "caBundle": CA_B64}}
            }
        }
    }


def test_patch_in_url_mode_replaces_the_service() -> None:
    patch = conversion_patch(
        crd("x.y.z", webhook=copy.deepcopy(SHIPPED_WEBHOOK)),
        CA,
        service_name=SVC,
        namespace=NS,
        url="https://127.0.0.1:9443/convert",
    )
    assert patch == {
        "spec": {
            "conversion": {
                "webhook": {
                    "clientConfig": {
                        "url": "https://127.0.0.1:9443/convert",
                        "service": None,
                        "caBundle": CA_B64,
                    }
                }
            }
        }
    }


def test_patch_back_to_service_mode_removes_the_url() -> None:
    webhook: Obj = {
        "conversionReviewVersions": ["v1"],
        "clientConfig": {"url": "https://127.0.0.1:1/convert", "caBundle": CA_B64},
    }
    patch = conversion_patch(crd("x.y.z", webhook=webhook), CA, service_name=SVC, namespace=NS)
    assert patch["spec"]["conversion"]["webhook"]["clientConfig"] == {
        "service": {"name": SVC, "namespace": NS, "path": "/convert"},
        "url": None,
    }


def test_patch_is_empty_when_up_to_date() -> None:
    webhook = copy.deepcopy(SHIPPED_WEBHOOK)
    webhook["clientConfig"]["caBundle"] = CA_B64
    assert conversion_patch(crd("x.y.z", webhook=webhook), CA, service_name=SVC, namespace=NS) == {}


async def test_patch_conversion_webhooks_skips_missing_and_non_webhook_crds() -> None:
    client = FakeApi()
    core, claims, templates, pools, _snapshots = CONVERSION_CRD_NAMES
    client.add(CRDS, crd(core, webhook=copy.deepcopy(SHIPPED_WEBHOOK)))
    stored_claims = client.add(CRDS, crd(claims, strategy="None"))
    client.add(CRDS, crd(pools))
    # templates CRD is not installed

    patched = await patch_conversion_webhooks(client, CA, service_name=SVC, namespace=NS)

    assert patched == [core, pools]
    for name in (core, pools):
        stored = client.obj(CRDS, name)
        assert stored is not None
        webhook = stored["spec"]["conversion"]["webhook"]
        assert webhook == {
            "conversionReviewVersions": ["v1", "v1beta1"],
            "clientConfig": {
                "service": {"name": SVC, "namespace": NS, "path": "/convert"},
                "caBundle": CA_B64,
            },
        }
    assert client.obj(CRDS, claims) == stored_claims
    assert ("get", "customresourcedefinitions", templates) in requests(client)

    # Idempotent: nothing left to change, so nothing is written.
    assert await patch_conversion_webhooks(client, CA, service_name=SVC, namespace=NS) == []


async def test_patch_conversion_webhooks_propagates_other_errors() -> None:
    client = FakeApi()
    name = CONVERSION_CRD_NAMES[0]
    client.add(CRDS, crd(name))
    client.fail("patch", "customresourcedefinitions", ApiError(403, "Forbidden", "denied"))
    with pytest.raises(ApiError, match="403"):
        await patch_conversion_webhooks(client, CA, service_name=SVC, namespace=NS)

    client.fail("get", "customresourcedefinitions", ApiError(500, "InternalError", "etcd"))
    with pytest.raises(ApiError, match="500"):
        await patch_conversion_webhooks(client, CA, service_name=SVC, namespace=NS)


# --- the startup step (--manage-webhook-certs) ---------------------------------------------------


async def test_startup_certificates_then_crds_then_server(tmp_path: Path) -> None:
    client = FakeApi()
    for name in CONVERSION_CRD_NAMES:
        client.add(CRDS, crd(name, webhook=copy.deepcopy(SHIPPED_WEBHOOK)))
    options = parse_args([f"--webhook-cert-dir={tmp_path}", "--webhook-port=9555"])

    server = await app.prepare_webhook(options, client)

    secret = client.obj(SECRETS, SECRET, NS)
    assert secret is not None
    ca_b64 = secret["data"]["ca.crt"]
    for name in CONVERSION_CRD_NAMES:
        stored = client.obj(CRDS, name)
        assert stored is not None
        config = stored["spec"]["conversion"]["webhook"]["clientConfig"]
        assert config == {
            "service": {"name": SVC, "namespace": NS, "path": "/convert"},
            "caBundle": ca_b64,
        }
    # the Secret is settled before any CRD is touched
    verbs = [(call.verb, call.plural) for call in client.calls]
    assert verbs.index(("create", "secrets")) < verbs.index(("patch", "customresourcedefinitions"))
    assert (tmp_path / "tls.crt").read_bytes() == decoded(secret, "tls.crt")
    assert server is not None
    assert server._cert_file == tmp_path / "tls.crt"
    assert server._key_file == tmp_path / "tls.key"
    assert server._requested_port == 9555


@pytest.mark.parametrize(
    ("verb", "plural", "message"),
    [
        ("get", "secrets", "unable to prepare webhook certificates"),
        ("patch", "customresourcedefinitions", "failed to patch CRDs with CA bundle"),
    ],
)
async def test_startup_names_the_step_that_failed(
    tmp_path: Path, verb: str, plural: str, message: str
) -> None:
    client = FakeApi()
    client.add(CRDS, crd(CONVERSION_CRD_NAMES[0]))
    client.fail(verb, plural, ApiError(403, "Forbidden", "denied"))
    options = parse_args([f"--webhook-cert-dir={tmp_path}"])
    with pytest.raises(app.StartupError) as caught:
        await app.prepare_webhook(options, client)
    assert caught.value.message == message
    assert isinstance(caught.value.__cause__, ApiError)
