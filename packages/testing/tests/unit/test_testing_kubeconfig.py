"""Kubeconfig files: one credential each, readable by the Kubernetes client and by us."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from kube_agent_sandbox.testing.kubeconfig import read_server_and_ca, write_kubeconfig
from kube_agent_sandbox.testing.pki import CertificateAuthority

SERVER = "https://127.0.0.1:6443"


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority()


def test_certificate_kubeconfig_loads_in_the_kubernetes_client(
    ca: CertificateAuthority, tmp_path: Path
) -> None:
    pair = ca.issue_client("admin", groups=["system:masters"])
    path = write_kubeconfig(
        tmp_path / "k",
        server=SERVER,
        ca_pem=ca.key_pair.cert_pem,
        user="admin",
        client_cert_pem=pair.cert_pem,
        client_key_pem=pair.key_pem,
    )
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(path), client_configuration=configuration)
    assert configuration.host == SERVER
    assert Path(configuration.cert_file).read_bytes() == pair.cert_pem
    assert Path(configuration.ssl_ca_cert).read_bytes() == ca.key_pair.cert_pem
    assert path.stat().st_mode & 0o077 == 0


def test_token_kubeconfig_has_token_and_namespace(ca: CertificateAuthority, tmp_path: Path) -> None:
    path = write_kubeconfig(
        tmp_path / "k",
        server=SERVER,
        ca_pem=ca.key_pair.cert_pem,
        user="sa",
        token="tok",
        namespace="ns1",
    )
    document = yaml.safe_load(path.read_text())
    assert document["users"][0]["user"] == {"token": "tok"}
    assert document["contexts"][0]["context"]["namespace"] == "ns1"
    assert read_server_and_ca(path) == (SERVER, ca.key_pair.cert_pem)


@pytest.mark.parametrize(
    "credentials",
    [
        {},
        {"token": "t", "client_cert_pem": b"c", "client_key_pem": b"k"},
        {"client_cert_pem": b"c"},
        {"client_key_pem": b"k"},
    ],
    ids=["none", "both", "cert-without-key", "key-without-cert"],
)
def test_exactly_one_credential_is_required(tmp_path: Path, credentials: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"credential|go together"):
        write_kubeconfig(tmp_path / "k", server=SERVER, ca_pem=b"", user="u", **credentials)  # type: ignore[arg-type]


def test_read_server_and_ca_from_a_ca_file(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_bytes(b"CA")
    document = {
        "clusters": [
            {"name": "c", "cluster": {"server": SERVER, "certificate-authority": "ca.crt"}}
        ],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    (tmp_path / "k").write_text(yaml.safe_dump(document))
    assert read_server_and_ca(tmp_path / "k") == (SERVER, b"CA")


def test_read_server_and_ca_rejects_a_missing_context(tmp_path: Path) -> None:
    (tmp_path / "k").write_text(yaml.safe_dump({"current-context": "nope", "contexts": []}))
    with pytest.raises(ValueError, match="current context 'nope' not found"):
        read_server_and_ca(tmp_path / "k")


def test_read_server_and_ca_rejects_a_missing_cluster(tmp_path: Path) -> None:
    document = {
        "contexts": [{"name": "x", "context": {"cluster": "gone", "user": "u"}}],
        "current-context": "x",
    }
    (tmp_path / "k").write_text(yaml.safe_dump(document))
    with pytest.raises(ValueError, match="cluster of context 'x' not found"):
        read_server_and_ca(tmp_path / "k")
