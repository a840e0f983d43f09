"""Command line: ``sandboxd --port 49983 --host 0.0.0.0`` (also ``python -m ...sandboxd``).

Images start the daemon with this entry point (an init container copies the package into the
sandbox container and a ``postStart`` hook or the entrypoint runs it).
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence

from kube_agent_sandbox.sandboxd.init_state import DEFAULT_USER, DaemonState

DEFAULT_PORT = 49983


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(
        prog="sandboxd", description="envd-compatible daemon for E2B clients"
    )
    parser.add_argument("--host", default=os.environ.get("SANDBOXD_HOST", "0.0.0.0"))
    parser.add_argument(
        "--port", type=int, default=int(os.environ.get("SANDBOXD_PORT", DEFAULT_PORT))
    )
    parser.add_argument(
        "--default-user",
        default=os.environ.get("SANDBOXD_DEFAULT_USER", DEFAULT_USER),
        help="user processes and file operations act as when a request names none",
    )
    parser.add_argument(
        "--heartbeat-interval",
        type=float,
        default=float(os.environ.get("SANDBOXD_HEARTBEAT_INTERVAL", "30")),
        help="seconds between activity heartbeats while processes run",
    )
    parser.add_argument(
        "--no-forward",
        action="store_true",
        default=os.environ.get("SANDBOXD_NO_FORWARD", "") not in ("", "0", "false"),
        help="do not expose services bound to 127.0.0.1 on the pod address",
    )
    parser.add_argument("--log-level", default=os.environ.get("SANDBOXD_LOG_LEVEL", "info"))
    args = parser.parse_args(argv)
    if not 0 < args.port < 65536:
        parser.error("--port must be between 1 and 65535")
    if args.heartbeat_interval <= 0:
        parser.error("--heartbeat-interval must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Run the daemon until interrupted."""
    import uvicorn

    from kube_agent_sandbox.sandboxd.app import build_app
    from kube_agent_sandbox.sandboxd.port_forward import PortForwarder, pod_addresses

    args = parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    forwarder = None
    if not args.no_forward:
        forwarder = PortForwarder(pod_addresses(), exclude={args.port})
    app = build_app(
        DaemonState(default_user=args.default_user),
        heartbeat_interval=args.heartbeat_interval,
        forwarder=forwarder,
    )
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level.lower(),
        access_log=False,
        timeout_keep_alive=75,
        lifespan="on",
    )
