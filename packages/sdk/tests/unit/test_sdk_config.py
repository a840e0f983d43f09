"""Configuration: explicit values, kubeconfig contexts and namespaces, clear errors."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import yaml

from kube_agent_sandbox.sdk import ClusterConfig, ConfigError, load_kubeconfig

KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "clusters": [
        {
            "name": "c",
            "cluster": {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True},
        }
    ],
    "users": [{"name": "u", "user": {"token": "abc"}}],
    "contexts": [
        {"name": "one", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}},
        {"name": "two", "context": {"cluster": "c", "user": "u"}},
    ],
    "current-context": "one",
}


def test_explicit_config() -> None:
    config = ClusterConfig.explicit("https://api:6443/", token="t", namespace="ns")
    assert config.host == "https://api:6443"
    assert config.authorization() == "Bearer t"
    assert isinstance(config.verify, ssl.SSLContext)
    insecure = ClusterConfig.explicit("https://api", insecure_skip_tls_verify=True)
    assert insecure.verify is False
    assert insecure.authorization() is None
    assert insecure.namespace == "default"


def test_bad_tls_files_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="TLS"):
        ClusterConfig.explicit("https://api", ca_file=str(tmp_path / "missing.crt"))
    bad = tmp_path / "bad.crt"
    bad.write_text("not a certificate")
    with pytest.raises(ConfigError, match="TLS"):
        ClusterConfig.explicit("https://api", client_cert=(str(bad), str(bad)))


def test_kubeconfig_contexts_and_namespace(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(KUBECONFIG))
    one = load_kubeconfig(path)
    assert one.host == "https://127.0.0.1:6443"
    assert one.namespace == "team-a"
    assert one.authorization() == "Bearer abc"
    assert one.verify is False
    two = load_kubeconfig(path, context="two")
    assert two.namespace == "default"


def test_kubeconfig_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot load kubeconfig"):
        load_kubeconfig(tmp_path / "missing")
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(KUBECONFIG))
    with pytest.raises(ConfigError):
        load_kubeconfig(path, context="nope")


PLUGIN = """\
import json, pathlib, sys
counter = pathlib.Path(sys.argv[1])
n = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(n))
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1",
    "kind": "ExecCredential",
    "status": {"token": f"tok-{n}", "expirationTimestamp": "2000-01-01T00:00:00Z"},
}))
"""


def _exec_kubeconfig(tmp_path: Path) -> tuple[Path, Path]:
    import sys

    plugin = tmp_path / "plugin.py"
    plugin.write_text(PLUGIN)
    counter = tmp_path / "count"
    doc = dict(KUBECONFIG)
    doc["users"] = [
        {
            "name": "u",
            "user": {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": sys.executable,
                    "args": [str(plugin), str(counter)],
                    "interactiveMode": "Never",
                }
            },
        }
    ]
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump(doc))
    return path, counter


def test_exec_plugin_token_is_refreshed_when_expired(tmp_path: Path) -> None:
    path, counter = _exec_kubeconfig(tmp_path)
    config = load_kubeconfig(path)
    assert config.refreshable
    first = config.authorization()
    second = config.authorization()
    assert first is not None
    assert second is not None
    assert first.startswith("Bearer tok-")
    assert first != second  # expired credential: the plugin ran again
    assert int(counter.read_text()) >= 3


async def test_async_client_refreshes_credentials_off_the_event_loop(tmp_path: Path) -> None:
    import threading

    from kube_agent_sandbox.sdk._async import _backend

    path, _ = _exec_kubeconfig(tmp_path)
    config = load_kubeconfig(path)
    seen: list[int] = []
    original = config.authorization

    def recording() -> str | None:
        seen.append(threading.get_ident())
        return original()

    config.authorization = recording  # type: ignore[method-assign]
    token = await _backend.authorization(config)
    assert token is not None
    assert token.startswith("Bearer tok-")
    assert seen
    assert seen[0] != threading.get_ident()
