"""Cluster configuration from kubeconfig files (token, client certificate, insecure)."""

from __future__ import annotations

import asyncio
import base64
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kube_agent_sandbox.controller.runtime import ConfigError, load_config, load_kubeconfig
from kube_agent_sandbox.controller.runtime.config import load_incluster
from kube_agent_sandbox.controller.runtime.credentials import TOKEN_FILE_REREAD, TokenFileSource
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
    (tmp_path / "token").write_text("first\n")
    (tmp_path / "ca.crt").write_bytes(ca.key_pair.cert_pem)
    (tmp_path / "namespace").write_text("sys")
    cfg = load_incluster(
        service_account_dir=str(tmp_path),
        environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"},
    )
    assert cfg.host == "https://10.0.0.1:443"
    assert cfg.namespace == "sys"
    assert cfg.ssl_context is not None
    assert len(cfg.ssl_context.get_ca_certs()) == 1
    assert asyncio.run(cfg.request_headers())["Authorization"] == "Bearer first"
    (tmp_path / "token").write_text("second")
    assert asyncio.run(cfg.request_headers())["Authorization"] == "Bearer first"  # cached 1 min
    assert cfg.unauthorized()  # a 401 makes the next request re-read the file
    assert asyncio.run(cfg.request_headers())["Authorization"] == "Bearer second"


def test_incluster_ipv6_host(tmp_path: Path, ca: CertificateAuthority) -> None:
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_bytes(ca.key_pair.cert_pem)
    cfg = load_incluster(
        service_account_dir=str(tmp_path),
        environ={"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"},
    )
    assert cfg.host == "https://[fd00::1]:443"
    assert cfg.namespace == "default"


def test_incluster_without_token_or_ca_fails(tmp_path: Path, ca: CertificateAuthority) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(ConfigError, match="token"):
        load_incluster(service_account_dir=str(tmp_path), environ=env)
    (tmp_path / "token").write_text("t")
    with pytest.raises(ConfigError, match=r"ca\.crt"):
        load_incluster(service_account_dir=str(tmp_path), environ=env)


def test_token_file_is_reread_after_a_minute(tmp_path: Path) -> None:
    now = [0.0]
    token = tmp_path / "token"
    token.write_text("one")
    source = TokenFileSource(str(token), clock=lambda: now[0])
    assert asyncio.run(source.credential()).token == "one"
    token.write_text("two")
    now[0] = TOKEN_FILE_REREAD - 1
    assert asyncio.run(source.credential()).token == "one"
    now[0] = TOKEN_FILE_REREAD
    assert asyncio.run(source.credential()).token == "two"
    token.unlink()  # a vanished file keeps the last token instead of failing every request
    now[0] = 3 * TOKEN_FILE_REREAD
    assert asyncio.run(source.credential()).token == "two"


def test_client_certificate_and_token_files_relative_to_kubeconfig(
    tmp_path: Path, ca: CertificateAuthority
) -> None:
    client = ca.issue_client("bob", groups=[])
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.pem").write_bytes(ca.key_pair.cert_pem)
    (tmp_path / "certs" / "bob.pem").write_bytes(client.cert_pem)
    (tmp_path / "certs" / "bob.key").write_bytes(client.key_pem)
    (tmp_path / "tok").write_text("from-file")
    path = write(
        tmp_path / "kc",
        user={
            "client-certificate": "certs/bob.pem",
            "client-key": "certs/bob.key",
            "tokenFile": "tok",
        },
        cluster={"certificate-authority": "certs/ca.pem", "tls-server-name": "kubernetes"},
    )
    cfg = load_kubeconfig(str(path))
    assert cfg.tls_server_name == "kubernetes"
    assert cfg.ssl_context is not None
    assert len(cfg.ssl_context.get_ca_certs()) == 1
    assert asyncio.run(cfg.request_headers())["Authorization"] == "Bearer from-file"


def test_basic_auth(tmp_path: Path) -> None:
    path = write(tmp_path / "kc", user={"username": "u", "password": "p"}, cluster={})
    assert load_kubeconfig(str(path)).auth_headers()["Authorization"] == "Basic " + b64(b"u:p")


def test_kubeconfig_list_merges_first_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = write(tmp_path / "a", user={"token": "first"}, cluster={}, ns="ns-a")
    second = tmp_path / "b"
    second.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "other", "cluster": {"server": "http://127.0.0.1:8080"}}],
                "users": [{"name": "u", "user": {"token": "second"}}],
                "contexts": [{"name": "other", "context": {"cluster": "other", "user": "u"}}],
                "current-context": "other",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'missing'}:{second}")
    cfg = load_config()
    assert cfg.host == "https://127.0.0.1:6443"  # current-context of the first file
    assert cfg.namespace == "ns-a"
    other = load_config(context="other")
    assert other.host == "http://127.0.0.1:8080"
    assert other.ssl_context is None
    assert other.auth_headers()["Authorization"] == "Bearer first"  # user "u" of the first file


@pytest.mark.parametrize(
    ("user", "cluster", "context", "message"),
    [
        ({"token": "t"}, {}, "nope", "context 'nope' not found"),
        ({"auth-provider": {"name": "oidc"}}, {}, None, "auth-provider is not supported"),
        ({"client-certificate-data": "!!"}, {}, None, "not valid base64"),
        ({"client-certificate-data": b64(b"x")}, {}, None, "certificate and key go together"),
        (
            {"client-certificate": "/absent.pem", "client-key": "/absent.key"},
            {},
            None,
            "cannot read",
        ),
        ({"exec": {"command": "x", "apiVersion": "v9"}}, {}, None, "unsupported apiVersion"),
        (
            {"exec": {"apiVersion": "client.authentication.k8s.io/v1"}},
            {},
            None,
            "command is required",
        ),
        ({"tokenFile": "/absent-token"}, {}, None, "cannot read token file"),
        ({"token": "t"}, {"server": "ftp://x"}, None, "http"),
        (
            {"token": "t"},
            {"certificate-authority-data": b64(b"not a cert")},
            None,
            "certificate authority",
        ),
    ],
)
def test_invalid_kubeconfig_stanzas(
    tmp_path: Path,
    user: dict[str, object],
    cluster: dict[str, object],
    context: str | None,
    message: str,
) -> None:
    path = write(tmp_path / "kc", user=user, cluster=cluster)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=message):
        load_kubeconfig(str(path), context=context)


def test_controller_never_imports_heavy_packages(tmp_path: Path) -> None:
    """kubernetes (~23 MiB), pydantic models (~13 MiB), cryptography without the webhook (~8)."""
    path = write(tmp_path / "kc", user={"token": "t"}, cluster={"insecure-skip-tls-verify": True})
    code = (
        "import sys\n"
        "import kube_agent_sandbox.controller.app as app\n"
        "from kube_agent_sandbox.controller.config import parse_args\n"
        f"options = parse_args(['--kubeconfig', {str(path)!r}])\n"
        "app.load_cluster_config(options)\n"
        "import kube_agent_sandbox.extensions.plugin\n"
        "heavy = {'kubernetes', 'pydantic', 'cryptography'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]", out.stdout
