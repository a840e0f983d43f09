"""``sandboxd-interpreter``: runs the code-interpreter server (port 49999) with uvicorn."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import pwd
import socket
import sys
from pathlib import Path

import uvicorn

from kube_agent_sandbox.sandboxd.interpreter.app import build_app
from kube_agent_sandbox.sandboxd.interpreter.config import (
    DEFAULT_ENVD_URL,
    DEFAULT_PORT,
    TOKEN_ENV,
    InterpreterOptions,
)

logger = logging.getLogger(__name__)

GRACEFUL_SHUTDOWN_SECONDS = 5


def parse_args(argv: list[str] | None = None) -> InterpreterOptions:
    """Parses the command line into options.

    Args:
        argv: The arguments (default ``sys.argv[1:]``).

    Returns:
        The options.
    """
    parser = argparse.ArgumentParser(
        prog="sandboxd-interpreter",
        description="Code-interpreter server for e2b-code-interpreter clients (POST /execute ...).",
    )
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default 49999)")
    parser.add_argument(
        "--access-token-file",
        type=Path,
        help=f"file holding the access token to require (else ${TOKEN_ENV}; else no token)",
    )
    parser.add_argument("--cwd", default="", help="working directory of new contexts")
    parser.add_argument("--python", default=sys.executable, help="interpreter for Python contexts")
    parser.add_argument(
        "--node", default="node", help="Node.js executable for JavaScript and TypeScript contexts"
    )
    parser.add_argument("--rscript", default="Rscript", help="Rscript executable for R contexts")
    parser.add_argument(
        "--envd-url",
        default=DEFAULT_ENVD_URL,
        help="envd to read the sandbox's global env vars from ('' to skip)",
    )
    parser.add_argument(
        "--user",
        default=None,
        help="account code runs as, e.g. 'user' (the server must run as root); default: its own",
    )
    parser.add_argument(
        "--max-contexts", type=int, default=64, help="contexts that may exist at once"
    )
    parser.add_argument("--log-level", default="info", help="logging level")
    args = parser.parse_args(argv)
    token: str | None
    if args.access_token_file is not None:
        try:
            token = args.access_token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            parser.error(f"cannot read --access-token-file: {exc}")
        if not token:
            parser.error("--access-token-file is empty")
    else:
        token = os.environ.get(TOKEN_ENV, "").strip() or None
    if args.cwd and not Path(args.cwd).is_dir():
        parser.error(f"--cwd {args.cwd!r} is not a directory")
    if args.envd_url and not args.envd_url.startswith(("http://", "https://")):
        parser.error("--envd-url must be an http:// or https:// URL (or empty)")
    if args.user is not None:
        try:
            pwd.getpwnam(args.user)
        except KeyError:
            parser.error(f"--user {args.user!r}: no such user")
        if os.geteuid() != 0 and pwd.getpwnam(args.user).pw_uid != os.geteuid():
            parser.error("--user needs the server to run as root")
    if args.max_contexts < 1:
        parser.error("--max-contexts must be at least 1")
    if not 0 < args.port < 65536:
        parser.error("--port must be between 1 and 65535")
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return InterpreterOptions(
        host=args.host,
        port=args.port,
        access_token=token,
        default_cwd=args.cwd,
        python=args.python,
        node=args.node,
        rscript=args.rscript,
        envd_url=args.envd_url,
        max_contexts=args.max_contexts,
        user=args.user,
    )


def bind(host: str, port: int) -> socket.socket:
    """Binds the listening socket up front, so a taken port is a clear error.

    Args:
        host: The address.
        port: The port.

    Returns:
        The bound socket.

    Raises:
        SystemExit: The port is taken (or the address is unusable).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must say TCP: asyncio sets TCP_NODELAY on accepted sockets only then (without it
    # every response waits ~40 ms for a delayed ACK between its header and body writes).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise SystemExit(
                f"sandboxd-interpreter: port {port} on {host} is already in use "
                "(another code interpreter or test server runs there)"
            ) from exc
        raise SystemExit(f"sandboxd-interpreter: cannot listen on {host}:{port}: {exc}") from exc
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def main(argv: list[str] | None = None) -> int:
    """Runs the server until interrupted.

    Args:
        argv: The arguments (default ``sys.argv[1:]``).

    Returns:
        The exit code.
    """
    options = parse_args(argv)
    sock = bind(options.host, options.port)
    logger.info(
        "code interpreter on %s:%d (access token %s)",
        options.host,
        options.port,
        "required" if options.access_token else "not required",
    )
    config = uvicorn.Config(
        build_app(options),
        log_level=logging.getLogger().level,
        access_log=False,
        timeout_keep_alive=75,
        # A running execution's stream must not hold a shutdown up for as long as it runs.
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
