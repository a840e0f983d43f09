"""Kubeconfig files: merge, pick the context, resolve its cluster and user.

Only what a controller needs is supported: ``clusters`` (``server``, ``certificate-authority``
or ``-data``, ``insecure-skip-tls-verify``, ``tls-server-name``), ``users`` (``token``,
``tokenFile``, ``client-certificate``/``client-key`` as files or ``-data``, ``username`` and
``password``, ``exec`` plugins) and ``contexts`` (``cluster``, ``user``, ``namespace``).
Several files merge as kubectl merges them: the first file that defines a name wins, and the
first ``current-context`` set wins. Relative paths are relative to the file that holds them.
``auth-provider`` (the removed in-tree OIDC/GCP helpers) is refused with a clear error.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kube_agent_sandbox.controller.runtime.clusterconfig import (
    ClusterConfig,
    ConfigError,
    decode_base64,
    load_cert_chain_pem,
    ssl_context_for,
)
from kube_agent_sandbox.controller.runtime.credentials import (
    CredentialError,
    ExecConfig,
    ExecSource,
    TokenFileSource,
)

__all__ = ["Kubeconfig", "config_from_kubeconfig", "read_kubeconfig"]

_PATH_FIELDS = {
    "clusters": ("certificate-authority",),
    "users": ("client-certificate", "client-key", "tokenFile"),
}


@dataclass
class Kubeconfig:
    """The merged content of one or more kubeconfig files.

    Attributes:
        clusters: cluster stanzas by name (paths already absolute).
        users: user stanzas by name (paths already absolute).
        contexts: context stanzas by name.
        current_context: the ``current-context`` (first file that sets one).
    """

    clusters: dict[str, dict[str, Any]] = field(default_factory=dict)
    users: dict[str, dict[str, Any]] = field(default_factory=dict)
    contexts: dict[str, dict[str, Any]] = field(default_factory=dict)
    current_context: str = ""


def _resolve(base: str, value: object) -> object:
    if isinstance(value, str) and value and not os.path.isabs(value):
        return os.path.join(base, os.path.expanduser(value))
    return value


def _merge_file(merged: Kubeconfig, path: str, doc: Mapping[str, Any]) -> None:
    base = os.path.dirname(os.path.abspath(path))
    for section, key in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
        entries = doc.get(section) or []
        if not isinstance(entries, list):
            raise ConfigError(f"kubeconfig {path}: {section} must be a list")
        target: dict[str, dict[str, Any]] = getattr(merged, section)
        for entry in entries:
            if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
                raise ConfigError(f"kubeconfig {path}: every entry of {section} needs a name")
            body = entry.get(key) or {}
            if not isinstance(body, Mapping):
                raise ConfigError(f"kubeconfig {path}: {section}/{entry['name']} is not a map")
            if entry["name"] in target:
                continue
            stanza = dict(body)
            for name in _PATH_FIELDS.get(section, ()):
                if name in stanza:
                    stanza[name] = _resolve(base, stanza[name])
            exec_stanza = stanza.get("exec")
            if isinstance(exec_stanza, Mapping):
                command = exec_stanza.get("command")
                if isinstance(command, str) and os.sep in command:
                    stanza["exec"] = {**exec_stanza, "command": _resolve(base, command)}
            target[entry["name"]] = stanza
    current = doc.get("current-context")
    if not merged.current_context and isinstance(current, str):
        merged.current_context = current


def read_kubeconfig(paths: Sequence[str]) -> Kubeconfig:
    """Read and merge kubeconfig files; missing files in a list of several are skipped.

    Raises:
        ConfigError: no file could be read, or one is not a valid kubeconfig.
    """
    import yaml

    merged = Kubeconfig()
    found = False
    for path in paths:
        try:
            with open(path, encoding="utf-8") as fh:
                doc = yaml.safe_load(fh)
        except FileNotFoundError:
            if len(paths) == 1:
                raise ConfigError(f"cannot load kubeconfig {path}: file not found") from None
            continue
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot load kubeconfig {path}: {exc}") from exc
        found = True
        if doc is None:
            continue
        if not isinstance(doc, Mapping):
            raise ConfigError(f"kubeconfig {path} is not a map")
        _merge_file(merged, path, doc)
    if not found:
        raise ConfigError(f"cannot load kubeconfig: none of {', '.join(paths)} exists")
    return merged


def _bytes_of(stanza: Mapping[str, Any], name: str, *, what: str) -> bytes | None:
    """``<name>-data`` (base64) wins over the file ``<name>``."""
    data = stanza.get(f"{name}-data")
    if data:
        return decode_base64(str(data), what=f"{what} {name}-data")
    path = stanza.get(name)
    if path:
        try:
            with open(str(path), "rb") as fh:
                return fh.read()
        except OSError as exc:
            raise ConfigError(f"{what}: cannot read {name} {path}: {exc}") from exc
    return None


def config_from_kubeconfig(paths: Sequence[str], *, context: str | None = None) -> ClusterConfig:
    """The :class:`ClusterConfig` of ``context`` (or the current one) in ``paths``.

    Raises:
        ConfigError: missing context, cluster or user, or an invalid stanza.
    """
    kc = read_kubeconfig(paths)
    name = context or kc.current_context
    if not name:
        raise ConfigError("kubeconfig has no current-context and no context was given")
    ctx = kc.contexts.get(name)
    if ctx is None:
        raise ConfigError(f"kubeconfig context {name!r} not found")
    cluster_name, user_name = str(ctx.get("cluster") or ""), str(ctx.get("user") or "")
    cluster = kc.clusters.get(cluster_name)
    if cluster is None:
        raise ConfigError(f"kubeconfig cluster {cluster_name!r} of context {name!r} not found")
    user = kc.users.get(user_name, {}) if user_name else {}
    if user_name and user_name not in kc.users:
        raise ConfigError(f"kubeconfig user {user_name!r} of context {name!r} not found")
    server = str(cluster.get("server") or "").rstrip("/")
    if not server.startswith(("https://", "http://")):
        raise ConfigError(f"kubeconfig cluster {cluster_name!r}: server must be an http(s) URL")
    config = ClusterConfig(
        host=server,
        tls_server_name=cluster.get("tls-server-name") or None,
        namespace=str(ctx.get("namespace") or "default"),
    )
    if server.startswith("https://"):
        config.ssl_context = ssl_context_for(
            ca_data=_bytes_of(cluster, "certificate-authority", what=f"cluster {cluster_name}"),
            insecure=bool(cluster.get("insecure-skip-tls-verify")),
        )
    _apply_user(config, user, user_name=user_name, cluster=cluster)
    return config


def _apply_user(
    config: ClusterConfig, user: Mapping[str, Any], *, user_name: str, cluster: Mapping[str, Any]
) -> None:
    what = f"user {user_name}"
    if user.get("auth-provider"):
        raise ConfigError(
            f"kubeconfig {what}: auth-provider is not supported; use an exec credential plugin"
        )
    cert = _bytes_of(user, "client-certificate", what=what)
    key = _bytes_of(user, "client-key", what=what)
    if (cert is None) != (key is None):
        raise ConfigError(f"kubeconfig {what}: client certificate and key go together")
    if cert is not None and key is not None:
        if config.ssl_context is None:
            raise ConfigError(f"kubeconfig {what}: a client certificate needs an https server")
        load_cert_chain_pem(config.ssl_context, cert, key)
    if user.get("token"):
        config.static_headers["Authorization"] = f"Bearer {user['token']}"
    elif user.get("tokenFile"):
        source = TokenFileSource(str(user["tokenFile"]))
        try:
            source.load()
        except CredentialError as exc:
            raise ConfigError(f"kubeconfig {what}: {exc}") from exc
        config.credentials = source
    elif user.get("username") or user.get("password"):
        basic = f"{user.get('username') or ''}:{user.get('password') or ''}".encode()
        config.static_headers["Authorization"] = f"Basic {base64.b64encode(basic).decode()}"
    exec_stanza = user.get("exec")
    if exec_stanza and "Authorization" not in config.static_headers and config.credentials is None:
        if not isinstance(exec_stanza, Mapping):
            raise ConfigError(f"kubeconfig {what}: exec must be a map")
        try:
            config.credentials = ExecSource(
                ExecConfig.from_kubeconfig(exec_stanza, cluster=cluster)
            )
        except CredentialError as exc:
            raise ConfigError(f"kubeconfig {what}: {exc}") from exc
