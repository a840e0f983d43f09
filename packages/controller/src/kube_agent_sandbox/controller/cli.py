"""The ``agent-sandbox-controller`` command: upstream's flags, then the controller process.

``main`` mirrors upstream's ``cmd/agent-sandbox-controller/main.go`` step by step: parse Go-style
flags (exit 2 on malformed ones), ``--version`` (exit 0), logging, validation (exit 1 with
upstream's messages), then build and run the manager. Each startup step is a small function so
tests can drive them one at a time; :mod:`kube_agent_sandbox.controller.app` assembles the
running process.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence
from typing import TextIO

from kube_agent_sandbox.controller.config import (
    ConfigError,
    ControllerOptions,
    parse_args,
    validate,
)
from kube_agent_sandbox.controller.goflag import EXIT_USAGE, FlagError, HelpRequested
from kube_agent_sandbox.controller.logsetup import configure_logging
from kube_agent_sandbox.controller.version import PROGRAM, version_text

__all__ = ["EXIT_OK", "log_startup_settings", "main", "parse_command_line"]

logger = logging.getLogger(__name__)

EXIT_OK = 0


class _Exit(Exception):
    """Stop ``main`` with this status (after the message was written)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def parse_command_line(
    argv: Sequence[str], *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> ControllerOptions:
    """Parse flags the way upstream's binary does; handle ``-h`` and ``--version``.

    Args:
        argv: arguments without the program name.
        stdout: where ``--version`` is printed (standard output by default).
        stderr: where usage and flag errors go (standard error by default, as in Go).

    Returns:
        The parsed options.

    Raises:
        _Exit: with 0 after ``-h`` or ``--version``, 2 after a malformed flag.
    """
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    try:
        options = parse_args(argv, program=PROGRAM)
    except HelpRequested:
        err.write(_usage())
        raise _Exit(EXIT_OK) from None
    except FlagError as error:
        err.write(f"{error}\n{_usage()}")
        raise _Exit(EXIT_USAGE) from None
    if options.version:
        out.write(version_text() + "\n")
        out.flush()
        raise _Exit(EXIT_OK)
    return options


def _usage() -> str:
    from kube_agent_sandbox.controller.config import build_flagset

    return build_flagset(PROGRAM).usage()


def log_startup_settings(options: ControllerOptions, warnings: Sequence[str]) -> None:
    """Log what upstream logs after validation: concurrency, warnings, webhook notes."""
    logger.info(
        "Concurrency settings",
        extra={
            "sandbox": options.sandbox_concurrent_workers,
            "sandboxClaim": options.sandbox_claim_concurrent_workers,
            "sandboxWarmPool": options.sandbox_warm_pool_concurrent_workers,
            "sandboxTemplate": options.sandbox_template_concurrent_workers,
            "sandboxWarmPoolMaxBatchSize": options.sandbox_warm_pool_max_batch_size,
        },
    )
    for warning in warnings:
        logger.warning(warning)
    if options.args:
        logger.warning(
            "ignoring arguments after the flags (Go's flag package stops at the first "
            "non-flag argument)",
            extra={"ignored": list(options.args)},
        )
    if options.leader_elect and not options.leader_election_namespace:
        logger.debug(
            "leader election is enabled (--leader-elect=true), but "
            "--leader-election-namespace is empty; attempting auto-detection"
        )
    if not options.enable_webhook:
        logger.info(
            "webhook subsystem disabled (--enable-webhook=false); installed CRDs must use "
            "conversion.strategy=None - the stock CRDs use Webhook conversion and API version "
            "conversion will fail without the webhook server"
        )
        if options.manage_webhook_certs:
            logger.info("--manage-webhook-certs has no effect when --enable-webhook=false")
    if options.pprof_enabled and (
        "pprof-block-profile-rate" in options.explicit
        or "pprof-mutex-profile-fraction" in options.explicit
    ):
        logger.info(
            "--pprof-block-profile-rate and --pprof-mutex-profile-fraction have no effect: "
            "Python has no block or mutex profiles"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the controller; returns the process exit status.

    Args:
        argv: arguments without the program name (``sys.argv[1:]`` when omitted).

    Returns:
        0 after ``--version``/``-h`` or a clean shutdown, 1 for refused options or a failed
        start, 2 for malformed flags.
    """
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        options = parse_command_line(args)
    except _Exit as stop:
        return stop.code
    configure_logging(options.logging)
    try:
        warnings = validate(options)
    except ConfigError as error:
        logger.error(error.message)
        return error.exit_code
    log_startup_settings(options, warnings)

    from kube_agent_sandbox.controller.app import StartupError, run

    try:
        asyncio.run(run(options))
    except StartupError as error:
        logger.error(error.message, exc_info=error.__cause__, extra=error.fields)
        return error.exit_code
    except KeyboardInterrupt:  # pragma: no cover - signal handlers normally take SIGINT
        return EXIT_OK
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
