"""Where the SDK connects and as whom: kubeconfig, in-cluster service account, or explicit.

Parsing kubeconfig (contexts, client certificates, exec credential plugins, OIDC) is delegated
to the ``kubernetes`` package's loaders, which are maintained with kubectl's semantics. What the
SDK keeps is a :class:`ClusterConfig`: the server URL, the TLS settings for httpx, the default
namespace and an :meth:`ClusterConfig.authorization` call that returns a fresh ``Authorization``
header. That call may run an exec plugin when a token expired, so it blocks: the async client
runs it in a worker thread, never on the event loop.
"""

from __future__ import annotations

import os
import ssl
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


def _from_configuration(configuration: Any, namespace: str) -> ClusterConfig:
    verify: ssl.SSLContext | bool = False
    if configuration.verify_ssl:
        client_cert = None
        if configuration.cert_file and configuration.key_file:
            client_cert = (configuration.cert_file, configuration.key_file)
        verify = _ssl_context(configuration.ssl_ca_cert, client_cert)
        if getattr(configuration, "tls_server_name", None):
            verify.check_hostname = False
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
