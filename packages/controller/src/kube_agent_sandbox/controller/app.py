"""Assembles the running controller process from validated options.

The steps follow upstream's ``main.go`` after flag validation: tracing, cluster configuration,
API client, webhook certificates and CRD ``caBundle``\\ s, the manager (leader election,
metrics, probes), the Sandbox controller, the conversion webhook server, the extension
plugins, then run until SIGTERM/SIGINT. Each step is a small function that raises
:class:`StartupError` with upstream's message on failure, which ``cli.main`` logs and turns into
exit status 1.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller import tracing
from kube_agent_sandbox.controller.config import (
    DEFAULT_WEBHOOK_CERT_NAME,
    DEFAULT_WEBHOOK_KEY_NAME,
    ConfigError,
    ControllerOptions,
    read_allowed_label_domains,
)
from kube_agent_sandbox.controller.plugins import (
    ControllerPlugin,
    PluginError,
    install_plugin,
    load_plugins,
)
from kube_agent_sandbox.controller.profiling import profiling_handlers
from kube_agent_sandbox.controller.runtime import (
    ApiClient,
    Client,
    ClusterConfig,
    LeaderElectionConfig,
    Manager,
    RuntimeMetrics,
    default_metrics,
    load_config,
)
from kube_agent_sandbox.controller.runtime import ConfigError as ClusterConfigError
from kube_agent_sandbox.controller.sandbox import plugin as sandbox_plugin
from kube_agent_sandbox.controller.version import register_build_info
from kube_agent_sandbox.controller.webhook.crds import patch_conversion_webhooks

if TYPE_CHECKING:
    # aiohttp.web (2 MiB) is loaded only when the webhook is enabled (prepare_webhook).
    from kube_agent_sandbox.controller.webhook.server import ConversionWebhookServer

__all__ = [
    "SERVICE_ACCOUNT_NAMESPACE_FILE",
    "StartupError",
    "build_client",
    "build_manager",
    "install",
    "load_cluster_config",
    "prepare_webhook",
    "resolve_leader_election_namespace",
    "run",
    "setup_extensions",
    "setup_sandbox_controller",
    "setup_tracing",
]

logger = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE_FILE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
CONNECTIONS_PER_API_CONNECTION: Final = 32
"""Sockets of each of our ``--api-connections`` HTTP/1.1 pools. Upstream multiplexes up to 100
streams over one HTTP/2 connection; an HTTP/1.1 socket here costs a TLS handshake and about
100 KiB of buffers, and beyond 32 concurrent requests the API server on a small control plane
only queues them. Measured side by side (300 claims at 100/s, pool 400): 32 sockets sustained
78.8 claims/s with peak RSS 69 MiB, 100 sockets 39.4 claims/s with 88 MiB
(docs/guides/benchmarks.md)."""


class StartupError(Exception):
    """The controller cannot start; ``message`` is what upstream logs before ``os.Exit(1)``."""

    def __init__(
        self, message: str, *, exit_code: int = 1, fields: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
        self.fields = fields or {}


# --- steps -----------------------------------------------------------------------------------


def setup_tracing(options: ControllerOptions) -> Callable[[], None]:
    """Install an OpenTelemetry tracer provider exporting over OTLP when ``--enable-tracing``.

    See :func:`kube_agent_sandbox.controller.tracing.setup`.

    Returns:
        A function that flushes and shuts the provider down (a no-op when tracing is off).

    Raises:
        StartupError: ``unable to initialize tracing`` (the OpenTelemetry packages are missing,
            or the provider did not start within 10 s).
    """
    try:
        return tracing.setup(enabled=options.enable_tracing)
    except tracing.TracingError as err:
        fields = {"error": err.reason}
        if err.hint:
            fields["hint"] = err.hint
        raise StartupError(err.message, fields=fields) from err


def load_cluster_config(options: ControllerOptions) -> ClusterConfig:
    """``--kubeconfig``, else ``$KUBECONFIG``, else in-cluster, else ``~/.kube/config``.

    Raises:
        StartupError: no usable configuration.
    """
    try:
        return load_config(options.kubeconfig or None)
    except ClusterConfigError as err:
        raise StartupError("unable to get kubeconfig", fields={"error": str(err)}) from err


def resolve_leader_election_namespace(
    options: ControllerOptions, *, namespace_file: str = SERVICE_ACCOUNT_NAMESPACE_FILE
) -> str:
    """The Lease namespace: the flag, else the Pod's service account namespace.

    Raises:
        StartupError: leader election is on, the flag is empty and this is not a Pod (the
            message is controller-runtime's).
    """
    if options.leader_election_namespace:
        return options.leader_election_namespace
    try:
        namespace = Path(namespace_file).read_text(encoding="utf-8").strip()
    except OSError:
        namespace = ""
    if not namespace:
        raise StartupError(
            "unable to start manager",
            fields={
                "error": "unable to find leader election namespace: not running in-cluster, "
                "please specify --leader-election-namespace"
            },
        )
    return namespace


def build_client(
    options: ControllerOptions, cluster: ClusterConfig, *, metrics: RuntimeMetrics
) -> ApiClient:
    """The API client with ``--kube-api-qps``/``--kube-api-burst``, ``--api-connections``
    (that many independent connection pools, used round-robin) and
    ``--separate-watch-connection`` (watches in a pool of their own)."""
    if options.api_connections > 1:
        logger.info(
            "API transport sharding enabled: non-watch API traffic may use more connections",
            extra={"connections": options.api_connections},
        )
    return ApiClient(
        cluster,
        qps=options.kube_api_qps,
        burst=options.kube_api_burst,
        metrics=metrics,
        max_connections=CONNECTIONS_PER_API_CONNECTION,
        pools=options.api_connections,
        separate_watch_pool=options.separate_watch_connection,
    )


async def prepare_webhook(
    options: ControllerOptions, client: Client
) -> ConversionWebhookServer | None:
    """Certificates, CRD caBundles and the conversion webhook server (``--enable-webhook``).

    With ``--manage-webhook-certs`` (the default) the certificates come first, from the shared
    Secret or newly generated, then the CRDs' conversion webhooks are pointed at the Service
    with the CA bundle; this runs before the manager starts, on every replica, so the server
    finds its files and the API server trusts it by the time conversions arrive. Otherwise
    the files must already be in ``--webhook-cert-dir``.

    Returns:
        The (not yet started) server, or ``None`` when the webhook is disabled.

    Raises:
        StartupError: upstream's messages for certificate or CRD patch failures.
    """
    if not options.enable_webhook:
        return None
    from kube_agent_sandbox.controller.webhook import certs  # cryptography: ~8 MiB, webhook only

    cert_dir = Path(options.webhook_cert_dir)
    if options.manage_webhook_certs:
        logger.info("Preparing webhook certificates", extra={"certDir": str(cert_dir)})
        try:
            bundle = await certs.ensure_webhook_certificates(
                client,
                cert_dir=cert_dir,
                namespace=options.webhook_namespace,
                service_name=options.webhook_service_name,
                cluster_domain=options.cluster_domain,
            )
        except Exception as err:
            raise StartupError("unable to prepare webhook certificates") from err
        logger.info("Patching CRDs with generated CA bundle")
        try:
            await _patch_crds(client, bundle.ca_pem, options)
        except Exception as err:
            raise StartupError("failed to patch CRDs with CA bundle") from err
        if (options.webhook_cert_name, options.webhook_key_name) != (
            DEFAULT_WEBHOOK_CERT_NAME,
            DEFAULT_WEBHOOK_KEY_NAME,
        ):
            logger.warning(
                "--webhook-cert-name and --webhook-key-name are ignored when "
                "--manage-webhook-certs=true; using generated tls.crt/tls.key",
                extra={
                    "certName": options.webhook_cert_name,
                    "keyName": options.webhook_key_name,
                },
            )
        cert_file = cert_dir / DEFAULT_WEBHOOK_CERT_NAME
        key_file = cert_dir / DEFAULT_WEBHOOK_KEY_NAME
    else:
        logger.info(
            "Webhook cert management and CRD conversion caBundle patching disabled; expecting "
            "existing cert files in certDir and CRDs patched externally",
            extra={
                "certDir": str(cert_dir),
                "certName": options.webhook_cert_name,
                "keyName": options.webhook_key_name,
                "serviceName": options.webhook_service_name,
                "namespace": options.webhook_namespace,
            },
        )
        try:
            cert_file, key_file = certs.resolve_cert_files(
                cert_dir, options.webhook_cert_name, options.webhook_key_name
            )
        except certs.CertificateError as err:
            raise StartupError(
                "required webhook cert/key file missing",
                fields={
                    "error": str(err),
                    "hint": "with --manage-webhook-certs=false the serving certificate and key "
                    "(tls.crt/tls.key or a combined cert.pem) must be pre-provisioned in "
                    "certDir by a certificate provisioner",
                },
            ) from err
    # controller-runtime's webhook server treats port 0 as "unset" and uses 9443.
    port = options.webhook_port or 9443
    from kube_agent_sandbox.controller.webhook.server import ConversionWebhookServer

    return ConversionWebhookServer(cert_file, key_file, port=port)


async def _patch_crds(client: Client, ca_pem: bytes, options: ControllerOptions) -> None:
    await patch_conversion_webhooks(
        client,
        ca_pem,
        service_name=options.webhook_service_name,
        namespace=options.webhook_namespace,
    )


def build_manager(
    options: ControllerOptions,
    client: ApiClient,
    *,
    metrics: RuntimeMetrics,
    lease_namespace: str | None,
    lease_client_factory: Callable[[], ApiClient] | None = None,
) -> Manager:
    """The manager: leader election on upstream's Lease, metrics and probe servers.

    Raises:
        StartupError: ``unable to start manager`` for invalid settings.
    """
    leader_election = None
    if options.leader_elect:
        assert lease_namespace is not None
        leader_election = LeaderElectionConfig(
            lease_name=c.LEADER_ELECTION_ID,
            lease_namespace=lease_namespace,
            lease_duration=options.leader_elect_lease_duration,
            renew_deadline=options.leader_elect_renew_deadline,
            retry_period=options.leader_elect_retry_period,
        )
    try:
        manager = Manager(
            client,
            leader_election=leader_election,
            metrics_bind_address=options.metrics_bind_address,
            health_bind_address=options.health_probe_bind_address,
            metrics=metrics,
            sync_period=options.sync_period,
            leader_election_client_factory=lease_client_factory,
        )
    except ValueError as err:
        raise StartupError("unable to start manager", fields={"error": str(err)}) from err
    register_build_info(manager.registry)
    if options.pprof_enabled:
        logger.info("pprof enabled", extra={"debug": options.enable_pprof_debug})
        manager.metrics_extra_handlers.update(profiling_handlers(debug=options.enable_pprof_debug))
    return manager


def install(manager: Manager, options: ControllerOptions, plugin: ControllerPlugin) -> None:
    """Install one plugin on ``manager``.

    Raises:
        StartupError: ``unable to create controller`` (``controller=<plugin name>``).
    """
    try:
        install_plugin(plugin, manager, options)
    except Exception as err:
        raise StartupError(
            "unable to create controller", fields={"controller": plugin.name}
        ) from err


def setup_sandbox_controller(manager: Manager, options: ControllerOptions) -> None:
    """Register the core Sandbox controller (always on) through its plugin.

    Raises:
        StartupError: ``unable to create controller`` (controller=Sandbox).
    """
    install(manager, options, sandbox_plugin)


def setup_extensions(manager: Manager, options: ControllerOptions) -> None:
    """Load the extension plugins and let each register its controllers (``--extensions``).

    Raises:
        StartupError: no plugin installed, a plugin fails to load or to set up, or the allowed
            label domains file cannot be read.
    """
    try:
        domains = read_allowed_label_domains()
    except ConfigError as err:
        raise StartupError(err.message) from err
    options = dataclasses.replace(options, allowed_label_domains=domains)
    try:
        plugins = load_plugins()
    except PluginError as err:
        raise StartupError("unable to load extensions", fields={"error": str(err)}) from err
    if not plugins:
        raise StartupError(
            "--extensions is set but no extension plugin is installed",
            fields={"hint": "install kube-agent-sandbox-extensions"},
        )
    for plugin in plugins:
        install(manager, options, plugin)


# --- the whole process -----------------------------------------------------------------------


async def run(options: ControllerOptions) -> None:
    """Build everything and run until SIGTERM/SIGINT.

    Raises:
        StartupError: a startup step failed (exit 1).
    """
    stop_tracing = setup_tracing(options)
    try:
        cluster = load_cluster_config(options)
        lease_namespace = (
            resolve_leader_election_namespace(options) if options.leader_elect else None
        )
        metrics = default_metrics()
        async with build_client(options, cluster, metrics=metrics) as client:
            webhook = await prepare_webhook(options, client)
            manager = build_manager(
                options,
                client,
                metrics=metrics,
                lease_namespace=lease_namespace,
                # the Lease is renewed on a thread, loop and client of its own: behind the
                # reconcile work of a busy event loop, a leader misses its renew deadline
                lease_client_factory=lambda: ApiClient(cluster, metrics=metrics, max_connections=2),
            )
            setup_sandbox_controller(manager, options)
            if webhook is not None:
                manager.add_runnable(webhook)
                manager.readyz_checks["webhook"] = lambda: webhook.started
            if options.extensions:
                setup_extensions(manager, options)
            logger.info("starting manager")
            try:
                await manager.run_until_signal()
            except Exception as err:
                raise StartupError("problem running manager") from err
    finally:
        stop_tracing()
