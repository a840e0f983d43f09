"""Start-up cost: what importing the SDK loads, and the plain kubeconfig reader.

``import kube_agent_sandbox.sdk`` must not load httpx, httpx-ws, pydantic, ``kubernetes`` and
the other heavy modules (each test runs a fresh interpreter, since this one has them all). A
plain kubeconfig is read without ``kubernetes``, with the same result as its loader.
"""

from __future__ import annotations

import base64
import datetime
import ssl
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kube_agent_sandbox.sdk import ClusterConfig, config

HEAVY = (
    "httpx",
    "httpx_ws",
    "httpcore",
    "anyio",
    "h2",
    "pydantic",
    "kube_agent_sandbox.api.v1beta1",
    "kubernetes",
    "prometheus_client",
    "yaml",
    "rich",
    "typer",
    "opentelemetry",
)
"""Modules (and their submodules) that ``import kube_agent_sandbox.sdk`` must not load."""


def loaded_after(code: str, watched: tuple[str, ...] = HEAVY) -> list[str]:
    """The ``watched`` modules a fresh interpreter has loaded after running ``code``."""
    probe = (
        f"{code}\nimport sys\n"
        f"watched = {watched!r}\n"
        "print(sorted({w for w in watched for m in sys.modules "
        "if sys.modules[m] is not None and (m == w or m.startswith(w + '.'))}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return list(eval(done.stdout))  # a list literal printed by the probe


def test_importing_the_sdk_loads_no_heavy_module() -> None:
    assert loaded_after("import kube_agent_sandbox.sdk") == []


def test_the_public_names_still_resolve_and_load_only_what_they_need() -> None:
    code = "from kube_agent_sandbox.sdk import ConfigError, ExecutionResult, Readiness, __all__"
    assert loaded_after(code) == []
    # A client brings httpx; a websocket, the models or metrics are still not loaded.
    code = "from kube_agent_sandbox.sdk import AsyncSandboxClient, SandboxClient"
    loaded = loaded_after(code)
    assert [m for m in loaded if m != "rich"] == ["httpx"]  # rich: httpx's CLI, when installed


def test_every_name_in_all_resolves() -> None:
    import kube_agent_sandbox.sdk as sdk

    missing = [name for name in sdk.__all__ if getattr(sdk, name, None) is None]
    assert missing == []
    assert sdk.ExecutionResult is sdk.ExecResult
    assert set(sdk.__all__) <= set(dir(sdk))
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = sdk.no_such_name  # type: ignore[attr-defined]


def test_a_client_without_tracing_loads_no_opentelemetry() -> None:
    code = (
        "from kube_agent_sandbox.sdk import ClusterConfig, SandboxClient, AsyncSandboxClient\n"
        "SandboxClient(ClusterConfig('https://127.0.0.1:1', verify=False))\n"
        "AsyncSandboxClient(ClusterConfig('https://127.0.0.1:1', verify=False))\n"
        "import kube_agent_sandbox.sdk.cli.app\n"
    )
    assert loaded_after(code, ("opentelemetry", "grpc", "kube_agent_sandbox.sdk._otel")) == []


def test_the_cli_loads_rich_only_to_print_a_message() -> None:
    # data output is plain text; rich (about 60 ms of a start) is for errors and spinners
    assert loaded_after("import kube_agent_sandbox.sdk.cli.app", ("rich",)) == []
    code = "from kube_agent_sandbox.sdk.cli import app\napp.err.print('x')"
    assert loaded_after(code, ("rich",)) == ["rich"]


def test_the_cli_keeps_httpx_cli_and_http2_out() -> None:
    code = (
        "from kube_agent_sandbox.sdk.cli.app import skip_unused_imports\n"
        "skip_unused_imports()\n"
        "from kube_agent_sandbox.sdk import ClusterConfig\n"
        "from kube_agent_sandbox.sdk._sync.api import KubeApi\n"
        "KubeApi(ClusterConfig('https://127.0.0.1:1', verify=False)).close()\n"
    )
    watched = ("httpcore", "h2", "pygments", "httpx._main", "kubernetes", "httpx_ws")
    assert loaded_after(code, watched) == ["httpcore"]


def test_the_cli_loads_the_mcp_server_only_for_its_command() -> None:
    """``agent-sandbox`` registers ``mcp`` but imports the MCP SDK only when it runs."""
    code = (
        "import sys\n"
        "from kube_agent_sandbox.sdk.cli.app import app\n"
        "from typer.main import get_command\n"
        "assert 'mcp' in get_command(app).commands\n"
    )
    watched = ("mcp", "kube_agent_sandbox.sdk.mcp", "pydantic", "anyio", "httpx")
    assert loaded_after(code, watched) == []


# --- the plain kubeconfig reader --------------------------------------------------------------


@pytest.fixture(scope="module")
def pem(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """A self-signed certificate and its key (serves as CA and as client certificate)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubeconfig-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return {
        "cert": cert.public_bytes(serialization.Encoding.PEM),
        "key": key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    }


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(cluster: dict[str, Any], user: dict[str, Any] | None, **context: Any) -> Any:
    ctx: dict[str, Any] = {"cluster": "c", **context}
    users = []
    if user is not None:
        ctx["user"] = "u"
        users = [{"name": "u", "user": user}]
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://10.0.0.1:6443/", **cluster}}],
        "users": users,
        "contexts": [{"name": "ctx", "context": ctx}],
        "current-context": "ctx",
    }


def write(tmp_path: Path, doc: Any, pem: dict[str, bytes]) -> Path:
    (tmp_path / "certs").mkdir(exist_ok=True)
    (tmp_path / "certs" / "ca.crt").write_bytes(pem["cert"])
    (tmp_path / "certs" / "client.key").write_bytes(pem["key"])
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(doc))
    return path


def summary(loaded: ClusterConfig) -> tuple[Any, ...]:
    verify = loaded.verify
    tls: Any = verify
    if isinstance(verify, ssl.SSLContext):
        tls = (verify.check_hostname, verify.verify_mode, verify.get_ca_certs())
    return loaded.host, loaded.namespace, loaded.authorization(), tls


PLAIN = {
    "token, insecure": lambda pem: kubeconfig(
        {"insecure-skip-tls-verify": True}, {"token": "abc"}, namespace="team"
    ),
    "CA and client certificate as data": lambda pem: kubeconfig(
        {"certificate-authority-data": b64(pem["cert"])},
        {"client-certificate-data": b64(pem["cert"]), "client-key-data": b64(pem["key"])},
    ),
    "files relative to the kubeconfig, tls-server-name": lambda pem: kubeconfig(
        {"certificate-authority": "certs/ca.crt", "tls-server-name": "api.internal"},
        {"client-certificate": "certs/ca.crt", "client-key": "certs/client.key"},
    ),
    "no user, extensions": lambda pem: kubeconfig(
        {"certificate-authority-data": b64(pem["cert"]), "extensions": []}, None
    ),
}


@pytest.mark.parametrize("case", PLAIN)
def test_a_plain_kubeconfig_reads_like_the_kubernetes_loader(
    case: str, pem: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, PLAIN[case](pem), pem)
    plain = config._load_plain_kubeconfig(path, None)
    assert plain is not None, "the plain reader gave up on a plain kubeconfig"
    monkeypatch.setattr(config, "_load_plain_kubeconfig", lambda path, context: None)
    assert summary(plain) == summary(config.load_kubeconfig(path))


def test_the_plain_reader_follows_kubeconfig_and_the_context(
    pem: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = PLAIN["token, insecure"](pem)
    doc["contexts"].append({"name": "other", "context": {"cluster": "c", "user": "u"}})
    path = write(tmp_path, doc, pem)
    monkeypatch.setenv("KUBECONFIG", str(path))
    assert config._load_plain_kubeconfig(None, None) is not None
    assert config.load_kubeconfig().namespace == "team"
    assert config.load_kubeconfig(context="other").namespace == "default"


NOT_PLAIN = {
    "exec plugin": lambda doc: doc["users"][0]["user"].update(
        {"exec": {"command": "x", "apiVersion": "client.authentication.k8s.io/v1"}}
    ),
    "auth provider": lambda doc: doc["users"][0]["user"].update({"auth-provider": {"name": "o"}}),
    "basic auth": lambda doc: doc["users"][0]["user"].update({"username": "a", "password": "b"}),
    "plain http": lambda doc: doc["clusters"][0]["cluster"].update({"server": "http://h:80"}),
    "proxy": lambda doc: doc["clusters"][0]["cluster"].update({"proxy-url": "http://p:3128"}),
    "unknown context": lambda doc: doc.update({"current-context": "nope"}),
    "missing user": lambda doc: doc.update({"users": []}),
    "bad base64": lambda doc: doc["users"][0]["user"].update({"client-key-data": "%%%"}),
    "certificate without key": lambda doc: doc["users"][0]["user"].update(
        {"client-certificate": "certs/ca.crt"}
    ),
    "not a mapping": lambda doc: doc.clear(),
}


@pytest.mark.parametrize("case", NOT_PLAIN)
def test_other_kubeconfigs_go_to_the_kubernetes_loader(
    case: str, pem: dict[str, bytes], tmp_path: Path
) -> None:
    doc = PLAIN["token, insecure"](pem)
    NOT_PLAIN[case](doc)
    path = write(tmp_path, doc or ["a list"], pem)
    assert config._load_plain_kubeconfig(path, None) is None


def test_a_kubeconfig_list_and_a_missing_file_go_to_the_kubernetes_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert config._load_plain_kubeconfig(tmp_path / "missing", None) is None
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    assert config._load_plain_kubeconfig(None, None) is None


def test_loading_a_plain_kubeconfig_does_not_import_kubernetes(
    pem: dict[str, bytes], tmp_path: Path
) -> None:
    path = write(tmp_path, PLAIN["CA and client certificate as data"](pem), pem)
    code = f"from kube_agent_sandbox.sdk import load_kubeconfig\nload_kubeconfig({str(path)!r})"
    assert "kubernetes" not in loaded_after(code)
    exec_doc = PLAIN["token, insecure"](pem)
    NOT_PLAIN["exec plugin"](exec_doc)
    exec_path = write(tmp_path, exec_doc, pem)
    code = (
        "from kube_agent_sandbox.sdk import ConfigError, load_kubeconfig\n"
        f"try:\n    load_kubeconfig({str(exec_path)!r})\nexcept ConfigError:\n    pass"
    )
    assert "kubernetes" in loaded_after(code)  # the probe sees the loader when it is used


def test_relative_paths_are_read_from_the_folder_of_the_path_given(
    pem: dict[str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a symlink, relative files are read beside the link, as the kubernetes loader does."""
    target = tmp_path / "elsewhere"
    target.mkdir()
    doc = PLAIN["files relative to the kubeconfig, tls-server-name"](pem)
    (target / "config").write_text(yaml.safe_dump(doc))
    link = write(tmp_path, {}, pem)  # the certificates live beside the link only
    link.unlink()
    link.symlink_to(target / "config")
    plain = config._load_plain_kubeconfig(link, None)
    assert plain is not None
    monkeypatch.setattr(config, "_load_plain_kubeconfig", lambda path, context: None)
    assert summary(plain) == summary(config.load_kubeconfig(link))
