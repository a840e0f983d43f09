"""Cluster configuration from kubeconfig files (token, client certificate, insecure)."""

from __future__ import annotations

import base64
import ssl
from pathlib import Path

import pytest
import yaml

from kube_agent_sandbox.controller.runtime.config import (
    ConfigError,
    load_config,
    load_incluster,
    load_kubeconfig,
)
from kube_agent_sandbox.testing.pki import CertificateAuthority


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write(path: Path, *, user: dict[str, str], cluster: dict[str, object], ns: str = "") -> Path:
    context: dict[str, str] = {"cluster": "c", "user": "u"}
    if ns:
        context["namespace"] = ns
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443", **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": context}],
        "current-context": "ctx",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority("test-ca")


def test_token_kubeconfig(tmp_path: Path, ca: CertificateAuthority) -> None:
    path = write(
        tmp_path / "kc",
        user={"token": "s3cr3t"},
        cluster={"certificate-authority-data": b64(ca.key_pair.cert_pem)},
        ns="team-a",
    )
    cfg = load_kubeconfig(str(path))
    assert cfg.host == "https://127.0.0.1:6443"
    assert cfg.namespace == "team-a"
    assert cfg.auth_headers()["Authorization"] == "Bearer s3cr3t"
    assert cfg.ssl_context is not None
    assert cfg.ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert len(cfg.ssl_context.get_ca_certs()) == 1


def test_client_certificate_kubeconfig(tmp_path: Path, ca: CertificateAuthority) -> None:
    client = ca.issue_client("alice", groups=["devs"])
    path = write(
        tmp_path / "kc",
        user={
            "client-certificate-data": b64(client.cert_pem),
            "client-key-data": b64(client.key_pem),
        },
        cluster={"certificate-authority-data": b64(ca.key_pair.cert_pem)},
    )
    cfg = load_kubeconfig(str(path))
    assert "Authorization" not in cfg.auth_headers()
    assert cfg.namespace == "default"
    assert cfg.ssl_context is not None


def test_insecure_kubeconfig(tmp_path: Path) -> None:
    path = write(tmp_path / "kc", user={"token": "t"}, cluster={"insecure-skip-tls-verify": True})
    cfg = load_kubeconfig(str(path))
    assert cfg.ssl_context is not None
    assert cfg.ssl_context.verify_mode == ssl.CERT_NONE
    assert not cfg.ssl_context.check_hostname


def test_missing_and_invalid_kubeconfig(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_kubeconfig(str(tmp_path / "absent"))
    bad = tmp_path / "bad"
    bad.write_text("apiVersion: v1\nkind: Config\ncontexts: []\n")
    with pytest.raises(ConfigError):
        load_kubeconfig(str(bad))


def test_explicit_path_wins_over_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    explicit = write(tmp_path / "a", user={"token": "from-flag"}, cluster={})
    env = write(tmp_path / "b", user={"token": "from-env"}, cluster={})
    monkeypatch.setenv("KUBECONFIG", str(env))
    assert load_config(str(explicit)).auth_headers()["Authorization"] == "Bearer from-flag"
    assert load_config().auth_headers()["Authorization"] == "Bearer from-env"


def test_incluster_outside_a_pod_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with pytest.raises(ConfigError, match="not running in a cluster"):
        load_incluster()


def test_incluster_token_rotation_is_picked_up(tmp_path: Path, ca: CertificateAuthority) -> None:
    import datetime

    from kubernetes import client as k8s_client
    from kubernetes.config.incluster_config import InClusterConfigLoader

    from kube_agent_sandbox.controller.runtime.config import from_kubernetes_configuration

    token, cert = tmp_path / "token", tmp_path / "ca.crt"
    token.write_text("first")
    cert.write_bytes(ca.key_pair.cert_pem)
    loader = InClusterConfigLoader(  # type: ignore[no-untyped-call]
        str(token),
        str(cert),
        environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"},
    )
    configuration = k8s_client.Configuration()
    loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
    cfg = from_kubernetes_configuration(configuration, namespace="sys")
    assert cfg.host == "https://10.0.0.1:443"
    assert cfg.auth_headers()["Authorization"].lower() == "bearer first"
    token.write_text("second")
    assert cfg.auth_headers()["Authorization"].lower() == "bearer first"  # cached until it expires
    loader.token_expires_at = datetime.datetime.now()
    assert cfg.auth_headers()["Authorization"].lower() == "bearer second"
