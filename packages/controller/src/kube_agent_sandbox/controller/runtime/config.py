"""Where the API server is and how to authenticate to it.

The controller reads kubeconfig files and the in-cluster service account itself instead of
importing the ``kubernetes`` package for it (that package and its generated models cost about
23 MiB of resident memory for a few hundred lines of parsing). The result is what an aiohttp
session needs: a base URL, an SSL context and the headers of every request. Credentials that
change (rotated token files, exec plugins) come from a
:mod:`~kube_agent_sandbox.controller.runtime.credentials` source consulted asynchronously before
each request; kubeconfig parsing itself is in
:mod:`~kube_agent_sandbox.controller.runtime.kubeconfig`, and the connection settings both
build (:class:`ClusterConfig`) in :mod:`~kube_agent_sandbox.controller.runtime.clusterconfig`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from kube_agent_sandbox.controller.runtime.clusterconfig import (
    ClusterConfig,
    ConfigError,
    decode_base64,
    load_cert_chain_pem,
    ssl_context_for,
)
from kube_agent_sandbox.controller.runtime.credentials import (
    CredentialError,
    TokenFileSource,
)
from kube_agent_sandbox.controller.runtime.kubeconfig import config_from_kubeconfig

__all__ = [
    "SERVICE_ACCOUNT_DIR",
    "ClusterConfig",
    "ConfigError",
    "decode_base64",
    "load_cert_chain_pem",
    "load_config",
    "load_incluster",
    "load_kubeconfig",
    "ssl_context_for",
]

logger = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def load_kubeconfig(path: str | None = None, *, context: str | None = None) -> ClusterConfig:
    """Load a kubeconfig file (``$KUBECONFIG`` or ``~/.kube/config`` when ``path`` is None).

    ``$KUBECONFIG`` may list several files (``:``-separated); they are merged as kubectl does.

    Raises:
        ConfigError: if the file is missing or invalid.
    """
    if path is None:
        path = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    paths = [p for p in path.split(os.pathsep) if p]
    return config_from_kubeconfig(paths, context=context)


def load_incluster(
    *,
    service_account_dir: str = SERVICE_ACCOUNT_DIR,
    environ: Mapping[str, str] | None = None,
) -> ClusterConfig:
    """Load the in-cluster service account configuration (the token is re-read as it rotates).

    Raises:
        ConfigError: when not running in a Pod (no service host, token or CA).
    """
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError(
            "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
            "must be set"
        )
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    token_source = TokenFileSource(os.path.join(service_account_dir, "token"))
    try:
        token_source.load()
    except CredentialError as exc:
        raise ConfigError(f"not running in a cluster: {exc}") from exc
    ca_file = os.path.join(service_account_dir, "ca.crt")
    if not os.path.exists(ca_file):
        raise ConfigError(f"not running in a cluster: no {ca_file}")
    namespace = "default"
    try:
        with open(os.path.join(service_account_dir, "namespace"), encoding="utf-8") as fh:
            namespace = fh.read().strip() or "default"
    except OSError:
        logger.debug("no service account namespace file")
    return ClusterConfig(
        host=f"https://{host}:{port}",
        ssl_context=ssl_context_for(ca_file=ca_file),
        namespace=namespace,
        credentials=token_source,
    )


def load_config(kubeconfig: str | None = None, *, context: str | None = None) -> ClusterConfig:
    """Load configuration the way controller-runtime does.

    ``kubeconfig`` (the ``--kubeconfig`` flag) wins; else ``$KUBECONFIG``; else in-cluster; else
    ``~/.kube/config``.

    Raises:
        ConfigError: if none of them works.
    """
    if kubeconfig:
        return load_kubeconfig(kubeconfig, context=context)
    if os.environ.get("KUBECONFIG"):
        return load_kubeconfig(None, context=context)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return load_incluster()
    return load_kubeconfig(None, context=context)
