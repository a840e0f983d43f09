"""Where the SDK connects and as whom: kubeconfig, in-cluster service account, or explicit.

A plain kubeconfig (one file; a server with a CA, or ``insecure-skip-tls-verify``; a user with a
static token or a client certificate) is read here directly, because importing the
``kubernetes`` package takes about a second, far more than the CLI's whole start should. Every
other kubeconfig (exec credential plugins, auth providers, OIDC, a ``KUBECONFIG`` list to merge,
any key this reader does not know) goes to the ``kubernetes`` package's loaders, which are
maintained with kubectl's semantics.

What the SDK keeps is a :class:`ClusterConfig`: the server URL, the TLS settings for httpx, the
default namespace and an :meth:`ClusterConfig.authorization` call that returns a fresh
``Authorization`` header. That call may run an exec plugin when a token expired, so it blocks:
the async client runs it in a worker thread, never on the event loop.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kube_agent_sandbox.sdk.errors import ConfigError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_NAMESPACE = "default"


@dataclass
class ClusterConfig:
    """A resolved connection.

    Attributes:
        host: API server URL (``https://host:port``).
        verify: an ``ssl.SSLContext`` (CA bundle, client certificate) or ``False`` to skip TLS
            verification (only when the kubeconfig says ``insecure-skip-tls-verify``).
        namespace: default namespace of calls that take none.
        token: a static ``Authorization`` header value (explicit configs).
        token_source: returns a fresh ``Authorization`` header value (may block).
        refreshable: ``token_source`` may do I/O (exec plugin, token file), so async callers
            must run it off the event loop.
    """

    host: str
    verify: ssl.SSLContext | bool = True
    namespace: str = DEFAULT_NAMESPACE
    token: str | None = None
    token_source: Callable[[], str | None] | None = None
    refreshable: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def explicit(
        cls,
        host: str,
        *,
        token: str | None = None,
        ca_file: str | None = None,
        client_cert: tuple[str, str] | None = None,
        insecure_skip_tls_verify: bool = False,
        namespace: str = DEFAULT_NAMESPACE,
    ) -> ClusterConfig:
        """A config built from values (no files read except the given certificates).

        Args:
            host: API server URL.
            token: bearer token (without the ``Bearer`` prefix).
            ca_file: CA bundle to trust.
            client_cert: ``(cert_file, key_file)`` for mTLS.
            insecure_skip_tls_verify: do not verify the server certificate.
            namespace: default namespace.
        """
        verify: ssl.SSLContext | bool = False
        if not insecure_skip_tls_verify:
            verify = _ssl_context(ca_file, client_cert)
        return cls(
            host=host.rstrip("/"),
            verify=verify,
            namespace=namespace,
            token=f"Bearer {token}" if token else None,
        )

    def authorization(self) -> str | None:
        """The ``Authorization`` header value, refreshed if the credential expired (may block)."""
        if self.token_source is None:
            return self.token
        with self._lock:
            return self.token_source()


def _ssl_context(ca_file: str | None, client_cert: tuple[str, str] | None) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=ca_file)
        if client_cert is not None:
            context.load_cert_chain(client_cert[0], client_cert[1])
    except (OSError, ssl.SSLError) as err:
        raise ConfigError(f"cannot load TLS files: {err}") from err
    return context


def _verify(
    verify_ssl: bool,
    ca_file: str | None,
    client_cert: tuple[str, str] | None,
    tls_server_name: str | None,
) -> ssl.SSLContext | bool:
    """httpx's ``verify`` for a kubeconfig's TLS settings (client certificates need ``verify``)."""
    if not verify_ssl:
        return False
    context = _ssl_context(ca_file, client_cert)
    if tls_server_name:
        context.check_hostname = False
    return context


def _from_configuration(configuration: Any, namespace: str) -> ClusterConfig:
    client_cert = None
    if configuration.cert_file and configuration.key_file:
        client_cert = (configuration.cert_file, configuration.key_file)
    verify = _verify(
        configuration.verify_ssl,
        configuration.ssl_ca_cert,
        client_cert,
        getattr(configuration, "tls_server_name", None),
    )
    hook = configuration.refresh_api_key_hook

    def token_source() -> str | None:
        value: str | None = configuration.get_api_key_with_prefix("BearerToken")
        return value

    return ClusterConfig(
        host=str(configuration.host).rstrip("/"),
        verify=verify,
        namespace=namespace,
        token=configuration.api_key.get("BearerToken"),
        token_source=token_source,
        refreshable=hook is not None,
    )


def load_kubeconfig(
    path: str | os.PathLike[str] | None = None, *, context: str | None = None
) -> ClusterConfig:
    """Load a kubeconfig file (``$KUBECONFIG`` or ``~/.kube/config`` by default).

    Args:
        path: the file.
        context: a context other than the current one.

    Raises:
        ConfigError: when the file is missing or unusable.
    """
    plain = _load_plain_kubeconfig(path, context)
    if plain is not None:
        return plain
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.config.config_exception import ConfigException

    config_file = str(path) if path is not None else None
    try:
        configuration = k8s_client.Configuration()
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=config_file,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
        contexts, active = k8s_config.list_kube_config_contexts(config_file)  # type: ignore[no-untyped-call]
        if context is not None:
            active = next((c for c in contexts if c.get("name") == context), active)
    except (ConfigException, OSError, TypeError, ValueError, KeyError) as err:
        raise ConfigError(f"cannot load kubeconfig: {err}") from err
    namespace = str((active or {}).get("context", {}).get("namespace") or DEFAULT_NAMESPACE)
    return _from_configuration(configuration, namespace)


class _NotPlain(Exception):
    """The kubeconfig needs the ``kubernetes`` package's loader (or its error message)."""


PLAIN_CONTEXT_KEYS = frozenset({"cluster", "user", "namespace", "extensions"})
PLAIN_CLUSTER_KEYS = frozenset(
    {
        "server",
        "certificate-authority",
        "certificate-authority-data",
        "insecure-skip-tls-verify",
        "tls-server-name",
        "extensions",
    }
)
PLAIN_USER_KEYS = frozenset(
    {
        "token",
        "client-certificate",
        "client-certificate-data",
        "client-key",
        "client-key-data",
        "extensions",
    }
)
"""The kubeconfig keys :func:`_load_plain_kubeconfig` reads; any other defers to ``kubernetes``."""


def _kubeconfig_file(path: str | os.PathLike[str] | None) -> Path:
    """The one file to read: ``path``, else ``$KUBECONFIG``, else ``~/.kube/config``."""
    if path is not None:
        return Path(path)
    env = os.environ.get("KUBECONFIG")
    if env is None:
        return Path("~/.kube/config").expanduser()
    if not env or os.pathsep in env:
        raise _NotPlain("KUBECONFIG lists files to merge")
    return Path(env).expanduser()


def _named(doc: dict[str, Any], section: str, name: Any, keys: frozenset[str]) -> dict[str, Any]:
    """The entry ``name`` of a kubeconfig section (``contexts``, ``clusters``, ``users``)."""
    for item in doc.get(section) or ():
        if isinstance(item, dict) and item.get("name") == name:
            body = item.get(section[:-1])
            if isinstance(body, dict) and set(body) <= keys:
                return body
            break
    raise _NotPlain(f"{section} {name!r}")


def _material(entry: dict[str, Any], key: str, base: Path, scratch: Path) -> str | None:
    """A certificate or key as a file: the file named (relative to the kubeconfig) or the data."""
    data = entry.get(f"{key}-data")
    if data is not None:
        try:
            raw = base64.b64decode(str(data), validate=True)
        except (binascii.Error, ValueError) as err:
            raise _NotPlain(key) from err
        target = scratch / key
        target.write_bytes(raw)
        return str(target)
    name = entry.get(key)
    if name is None:
        return None
    return str(base / os.path.expanduser(str(name)))


def _load_plain_kubeconfig(
    path: str | os.PathLike[str] | None, context: str | None
) -> ClusterConfig | None:
    """A plain kubeconfig read without the ``kubernetes`` package; None when it is not one.

    None (anything not plain, unreadable or wrong) sends the caller to the ``kubernetes``
    loader, which then also words the error. Certificate data is written to a private
    temporary directory only while the TLS context loads it.
    """
    import yaml

    try:
        file = _kubeconfig_file(path)
        # libyaml's loader when PyYAML has it: several times faster than the pure-Python one.
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        doc = yaml.load(file.read_text(encoding="utf-8"), Loader=loader)
        if not isinstance(doc, dict):
            raise _NotPlain("not a mapping")
        name = context if context is not None else doc.get("current-context")
        ctx = _named(doc, "contexts", name, PLAIN_CONTEXT_KEYS)
        cluster = _named(doc, "clusters", ctx.get("cluster"), PLAIN_CLUSTER_KEYS)
        user = _named(doc, "users", ctx["user"], PLAIN_USER_KEYS) if "user" in ctx else {}
        server, token = cluster.get("server"), user.get("token")
        insecure = cluster.get("insecure-skip-tls-verify", False)
        if not (isinstance(server, str) and server.startswith("https://")):
            raise _NotPlain("server")
        if not isinstance(insecure, bool) or not (
            token is None or (token and isinstance(token, str))
        ):
            raise _NotPlain("insecure-skip-tls-verify or token")
        with tempfile.TemporaryDirectory(prefix="kubeconfig-") as scratch:
            # Relative paths are relative to the file's folder, symlinks not followed (as the
            # kubernetes loader does it).
            base, tmp = Path(os.path.abspath(file)).parent, Path(scratch)
            ca = _material(cluster, "certificate-authority", base, tmp)
            cert = _material(user, "client-certificate", base, tmp)
            key = _material(user, "client-key", base, tmp)
            if (cert is None) != (key is None):
                raise _NotPlain("client certificate without key")
            client_cert = (cert, key) if cert is not None and key is not None else None
            verify = _verify(not insecure, ca, client_cert, cluster.get("tls-server-name"))
    except (_NotPlain, OSError, yaml.YAMLError):
        return None
    namespace = str(ctx.get("namespace") or DEFAULT_NAMESPACE)
    bearer = f"Bearer {token}" if token else None
    return ClusterConfig(host=server.rstrip("/"), verify=verify, namespace=namespace, token=bearer)


def load_incluster() -> ClusterConfig:
    """The Pod's service account config (``KUBERNETES_SERVICE_HOST``; token file re-read).

    Raises:
        ConfigError: outside a Pod.
    """
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.config.config_exception import ConfigException

    configuration = k8s_client.Configuration()
    try:
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except ConfigException as err:
        raise ConfigError(f"not running in a cluster: {err}") from err
    namespace_file = SERVICE_ACCOUNT_DIR / "namespace"
    namespace = DEFAULT_NAMESPACE
    if namespace_file.is_file():
        namespace = namespace_file.read_text(encoding="utf-8").strip() or DEFAULT_NAMESPACE
    return _from_configuration(configuration, namespace)


def load_default(*, context: str | None = None) -> ClusterConfig:
    """In-cluster config inside a Pod, else the kubeconfig (upstream's order).

    Raises:
        ConfigError: when neither is usable.
    """
    if context is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            return load_incluster()
        except ConfigError:
            pass
    return load_kubeconfig(context=context)
