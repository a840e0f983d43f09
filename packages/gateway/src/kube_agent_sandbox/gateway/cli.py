"""The ``agent-sandbox-gateway`` command: ``serve`` the gateway, manage API ``keys``.

``serve`` runs the ASGI app under uvicorn with the flags of :class:`GatewayOptions`, over
HTTPS when ``--tls-cert-file`` and ``--tls-key-file`` are given (checked before serving, and
reloaded when the files change: :class:`~.tls.CertificateReloader`). With ``--http2`` it runs
under hypercorn instead, which speaks HTTP/2 as well as HTTP/1.1: h2 over TLS (ALPN) and h2c
with prior knowledge (or an ``Upgrade: h2c`` without a body) over plain HTTP.
``keys create|list|revoke`` manages the tenants' API keys, Secrets of the gateway's own
namespace (``--gateway-namespace``) each naming the tenant namespace it grants: a new key is
written to standard output once (only its SHA-256 is stored) and never logged. ``keys create``
also binds the gateway's tenant role in the tenant namespace (:mod:`.tenant_rbac`), which
``keys bind`` does alone (namespaces whose keys predate it). ``keys migrate`` copies keys of
the old layout (stored in the tenant namespaces) into the gateway's namespace
(:mod:`.key_migration`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import ssl
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from kube_agent_sandbox.controller.runtime import ApiClient, ApiError, load_config
from kube_agent_sandbox.gateway import key_migration, tenant_rbac, tenants, tracing
from kube_agent_sandbox.gateway.config import (
    DEFAULT_CREATE_TIMEOUT_SECONDS,
    DEFAULT_LISTEN,
    DEFAULT_SANDBOX_TIMEOUT_SECONDS,
    DEFAULT_SNAPSHOT_TIMEOUT_SECONDS,
    GatewayOptions,
    parse_listen,
    parse_port_map,
)
from kube_agent_sandbox.gateway.tls import CertificateReloader, check_tls_files

if TYPE_CHECKING:
    import hypercorn.config
    import uvicorn
    from starlette.types import ASGIApp

logger = logging.getLogger(__name__)


def _listen(text: str) -> str:
    try:
        parse_listen(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _port_map(text: str) -> dict[int, int]:
    try:
        return parse_port_map(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _namespace(text: str) -> str:
    if not tenants.is_namespace_name(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid namespace name")
    return text


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


TRACING_ENV = "AGENT_SANDBOX_GATEWAY_ENABLE_TRACING"
"""Environment variable that turns ``--enable-tracing`` on (``true``/``1``/``yes``)."""


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser (``serve`` and ``keys``)."""
    parser = argparse.ArgumentParser(
        prog="agent-sandbox-gateway", description="E2B-compatible gateway for Agent Sandbox"
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the E2B control plane and data plane")
    serve.add_argument("--listen", type=_listen, default=DEFAULT_LISTEN, help="host:port")
    serve.add_argument("--kubeconfig", default=None)
    serve.add_argument("--namespace", default=None, help="serve only this tenant namespace")
    serve.add_argument(
        "--gateway-namespace",
        type=_namespace,
        default=None,
        help="the gateway's own namespace, where its API keys are (default: its pod's, else "
        f"{tenant_rbac.DEFAULT_GATEWAY_NAMESPACE})",
    )
    serve.add_argument("--domain", default=None, help="wildcard domain of <port>-<id>.<domain>")
    serve.add_argument("--public-url", default=None, help="URL sandboxes reach the gateway at")
    serve.add_argument("--hmac-secret-file", default=None, help="file with the token secret")
    serve.add_argument(
        "--tls-cert-file",
        default=None,
        help="PEM certificate (chain) to serve HTTPS with (e.g. for *.<domain>)",
    )
    serve.add_argument(
        "--tls-key-file", default=None, help="PEM private key of --tls-cert-file (unencrypted)"
    )
    serve.add_argument(
        "--http2",
        action="store_true",
        help="serve HTTP/2 too (h2 over TLS by ALPN, h2c on plain HTTP), under hypercorn",
    )
    serve.add_argument(
        "--create-timeout", type=_positive, default=DEFAULT_CREATE_TIMEOUT_SECONDS, metavar="S"
    )
    serve.add_argument(
        "--default-timeout", type=int, default=DEFAULT_SANDBOX_TIMEOUT_SECONDS, metavar="S"
    )
    serve.add_argument("--init-timeout", type=_positive, default=5.0, metavar="S")
    serve.add_argument(
        "--snapshot-timeout",
        type=_positive,
        default=DEFAULT_SNAPSHOT_TIMEOUT_SECONDS,
        metavar="S",
        help="how long create_snapshot waits for the SandboxSnapshot to be Ready",
    )
    serve.add_argument(
        "--pause-keeps-filesystem",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="pause (and auto-pause) keeps the sandbox's files, where the controller runs the "
        "snapshot state keeper (default: on)",
    )
    serve.add_argument(
        "--pause-keeps-memory",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="pause (unless memory: false) and auto-pause also keep the processes' memory where "
        "the node can checkpoint (CRIU), the files alone where it cannot; needs "
        "--pause-keeps-filesystem (default: off)",
    )
    serve.add_argument("--kube-api-qps", type=float, default=50.0)
    serve.add_argument("--kube-api-burst", type=int, default=100)
    serve.add_argument(
        "--mcp-file-root", default="/", help="MCP file tools refuse paths outside this folder"
    )
    serve.add_argument(
        "--enable-tracing",
        action="store_true",
        default=_env_flag(TRACING_ENV),
        help=f"trace creates with OpenTelemetry, exported over OTLP/gRPC to "
        f"$OTEL_EXPORTER_OTLP_ENDPOINT (default: ${TRACING_ENV})",
    )
    serve.add_argument(
        "--pod-address-override",
        default=None,
        help="testing only: HOST for every pod, or 'loopback': 127.x.y.z from each pod's UID",
    )
    serve.add_argument(
        "--pod-port-map", type=_port_map, default={}, help="testing only: 49983=PORT,..."
    )

    keys = sub.add_parser("keys", help="manage a tenant's API keys")
    keys_sub = keys.add_subparsers(dest="keys_command", required=True)
    for name, text in (
        ("create", "create a key (printed once)"),
        ("list", "list key ids"),
        ("revoke", "revoke a key"),
        ("bind", "bind the gateway's tenant role in the namespace (create does it too)"),
        ("migrate", "copy keys stored in tenant namespaces (older versions) to the gateway's"),
    ):
        cmd = keys_sub.add_parser(name, help=text)
        if name in ("create", "bind"):
            cmd.add_argument(
                "--namespace", type=_namespace, required=True, help="the tenant namespace"
            )
        elif name != "migrate":
            cmd.add_argument(
                "--namespace", type=_namespace, default=None, help="only this tenant's keys"
            )
        cmd.add_argument("--kubeconfig", default=None)
        cmd.add_argument(
            "--gateway-namespace",
            type=_namespace,
            default=tenant_rbac.DEFAULT_GATEWAY_NAMESPACE,
            help="the gateway's namespace (its ServiceAccount and API keys)",
        )
        if name == "migrate":
            cmd.add_argument(
                "--delete-old",
                action="store_true",
                help="also delete the old Secrets (once every gateway runs this version)",
            )
        if name == "create":
            cmd.add_argument("--name", default="", help="a human-readable name")
            cmd.add_argument(
                "--no-bind",
                action="store_true",
                help="do not bind the tenant role (you bind the gateway's rights yourself)",
            )
        if name in ("create", "bind"):
            cmd.add_argument(
                "--gateway-service-account",
                default=tenant_rbac.DEFAULT_SERVICE_ACCOUNT,
                help="the gateway's ServiceAccount",
            )
        if name == "revoke":
            cmd.add_argument("key", help="the key itself or its 12-hex-digit id")
    return parser


def options_from_args(args: argparse.Namespace) -> GatewayOptions:
    """:class:`GatewayOptions` from parsed ``serve`` arguments.

    Raises:
        ValueError: if the values are inconsistent (e.g. a non-positive default timeout, only
            one of the TLS files) or the TLS certificate and key cannot be loaded.
    """
    options = GatewayOptions(
        listen=args.listen,
        kubeconfig=args.kubeconfig,
        namespace=args.namespace,
        gateway_namespace=args.gateway_namespace,
        domain=args.domain,
        public_url=args.public_url,
        pod_address_override=args.pod_address_override,
        pod_port_map=dict(args.pod_port_map),
        hmac_secret_file=args.hmac_secret_file,
        create_timeout_seconds=args.create_timeout,
        default_timeout_seconds=args.default_timeout,
        init_timeout_seconds=args.init_timeout,
        snapshot_timeout_seconds=args.snapshot_timeout,
        pause_keeps_filesystem=args.pause_keeps_filesystem,
        pause_keeps_memory=args.pause_keeps_memory,
        kube_api_qps=args.kube_api_qps,
        kube_api_burst=args.kube_api_burst,
        tls_cert_file=args.tls_cert_file,
        tls_key_file=args.tls_key_file,
        mcp_file_root=args.mcp_file_root,
        http2=args.http2,
        enable_tracing=args.enable_tracing,
    )
    check_tls_files(options)
    return options


def serve(options: GatewayOptions) -> None:
    """Run the gateway until interrupted (spans flushed at the end with tracing on)."""
    host, port = options.bind
    stop_tracing = tracing.setup(enabled=options.enable_tracing)
    try:
        _serve(options, host, port)
    finally:
        stop_tracing()


def _serve(options: GatewayOptions, host: str, port: int) -> None:
    import uvicorn

    from kube_agent_sandbox.gateway.app import build_app
    from kube_agent_sandbox.gateway.state import GatewayState

    state = GatewayState(options)
    app = build_app(state)
    logger.info(
        "serving %s on %s:%d%s",
        ("HTTPS" if options.tls else "HTTP") + (" (HTTP/1.1 and HTTP/2)" if options.http2 else ""),
        host,
        port,
        f" for *.{options.domain}" if options.domain else "",
    )
    reloader = (
        CertificateReloader(options.tls_cert_file, options.tls_key_file, metrics=state.metrics)
        if options.tls_cert_file is not None and options.tls_key_file is not None
        else None
    )
    if options.http2:
        asyncio.run(serve_hypercorn(app, hypercorn_config(options, reloader), reloader))
        return
    config = uvicorn_config(app, options, reloader)
    with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
        runner.run(serve_uvicorn(uvicorn.Server(config), reloader))


def uvicorn_config(
    app: ASGIApp, options: GatewayOptions, reloader: CertificateReloader | None
) -> uvicorn.Config:
    """uvicorn's settings for ``app``: TLS from the options' files, watched by ``reloader``."""
    import uvicorn

    host, port = options.bind
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        ssl_certfile=options.tls_cert_file,
        ssl_keyfile=options.tls_key_file,
        ssl_context_factory=reloader.context_factory if reloader is not None else None,
    )


async def serve_uvicorn(server: uvicorn.Server, reloader: CertificateReloader | None) -> None:
    """Serve until interrupted, reloading a renewed TLS certificate meanwhile."""
    if reloader is not None:
        await reloader.start()
    try:
        await server.serve()
    finally:
        if reloader is not None:
            await reloader.stop()


def hypercorn_config(
    options: GatewayOptions, reloader: CertificateReloader | None
) -> hypercorn.config.Config:
    """hypercorn's settings: HTTP/1.1 and HTTP/2, TLS from the options' files (``reloader``)."""
    from hypercorn.config import Config

    class _Config(Config):
        def create_ssl_context(self) -> ssl.SSLContext | None:
            if reloader is None:
                return super().create_ssl_context()
            return reloader.context_factory(self, _checked(super().create_ssl_context))

    host, port = options.bind
    config = _Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.certfile = options.tls_cert_file
    config.keyfile = options.tls_key_file
    config.alpn_protocols = ["h2", "http/1.1"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    return config


def _checked(
    factory: Callable[[], ssl.SSLContext | None],
) -> Callable[[], ssl.SSLContext]:
    def context() -> ssl.SSLContext:
        made = factory()
        if made is None:  # pragma: no cover - only called with TLS files set
            raise RuntimeError("no TLS context without certificate and key files")
        return made

    return context


async def serve_hypercorn(
    app: ASGIApp,
    config: hypercorn.config.Config,
    reloader: CertificateReloader | None,
    *,
    shutdown_trigger: Callable[[], Awaitable[object]] | None = None,
) -> None:
    """Serve under hypercorn until SIGTERM/SIGINT (or ``shutdown_trigger`` returns)."""
    from hypercorn.asyncio import serve as hypercorn_serve

    if reloader is not None:
        await reloader.start()
    try:
        await hypercorn_serve(app, config, shutdown_trigger=shutdown_trigger, mode="asgi")  # type: ignore[arg-type]
    finally:
        if reloader is not None:
            await reloader.stop()


async def _bind(api: ApiClient, args: argparse.Namespace) -> None:
    bound = await tenant_rbac.bind_tenant(
        api,
        args.namespace,
        gateway_namespace=args.gateway_namespace,
        service_account=args.gateway_service_account,
    )
    logger.info(
        "tenant role %s to %s/%s in namespace %s",
        "bound" if bound else "already bound",
        args.gateway_namespace,
        args.gateway_service_account,
        args.namespace,
    )


async def _keys(args: argparse.Namespace) -> int:
    gateway_ns = args.gateway_namespace
    async with ApiClient(load_config(args.kubeconfig)) as api:
        if args.keys_command == "bind":
            await _bind(api, args)
            return 0
        if args.keys_command == "migrate":
            return await _migrate(api, gateway_ns, delete_old=args.delete_old)
        if args.keys_command == "create":
            # bound first: a key is never handed out for a namespace the gateway cannot serve
            if not args.no_bind:
                await _bind(api, args)
            key, info = await tenants.create_key(
                api, args.namespace, gateway_namespace=gateway_ns, name=args.name
            )
            logger.info(
                "created API key %s for namespace %s (Secret in %s)",
                info.key_id,
                info.namespace,
                gateway_ns,
            )
            sys.stdout.write(f"{key}\n")
            return 0
        if args.keys_command == "list":
            for info in await tenants.list_keys(
                api, gateway_namespace=gateway_ns, tenant=args.namespace
            ):
                sys.stdout.write(
                    f"{info.key_id}\t{info.namespace}\t{info.created_at}\t{info.name}\n"
                )
            return 0
        if await tenants.revoke_key(
            api, args.key, gateway_namespace=gateway_ns, tenant=args.namespace
        ):
            sys.stdout.write("revoked\n")
            return 0
        sys.stderr.write("no such key\n")
        return 1


async def _migrate(api: ApiClient, gateway_namespace: str, *, delete_old: bool) -> int:
    done = await key_migration.migrate_keys(
        api, gateway_namespace=gateway_namespace, delete_old=delete_old
    )
    for moved in done.moved:
        line = f"{moved.source}\t{moved.key_id or '-'}\t{moved.outcome}"
        if moved.deleted:
            line += "\told Secret deleted"
        sys.stdout.write(line + (f"\t{moved.detail}" if moved.detail else "") + "\n")
    if not done.moved:
        sys.stdout.write("no API keys stored the old way\n")
    return 0 if done.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``agent-sandbox-gateway``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    if args.command == "serve":
        try:
            options = options_from_args(args)
        except ValueError as exc:
            parser.error(str(exc))
        serve(options)
        return 0
    try:
        return asyncio.run(_keys(args))
    except (ApiError, ValueError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
