"""R contexts: one persistent ``Rscript driver.R`` process per context.

``driver.R`` (next to this module) speaks the Python driver's protocol, so streaming, ordering,
time limits, interrupts and restarts work as for Python; only the command line and the sync
markers differ (base R cannot write a NUL byte, so its markers use other control bytes). Nothing
here runs until an R context is created, so a server without R never looks for it.
"""

from __future__ import annotations

from pathlib import Path

from kube_agent_sandbox.sandboxd.interpreter.worker import (
    PythonWorker,
    RuntimeMissingError,
    installed,
)

DRIVER = Path(__file__).with_name("driver.R")
SYNC_START = b"\x1e\x1fE2B-SYNC-"
SYNC_END = b"\x1f\x1e"


class RMissingError(RuntimeMissingError):
    """The sandbox has no ``Rscript`` executable, so R contexts cannot run."""


class RWorker(PythonWorker):
    """A persistent R session for one context.

    Args:
        cwd: The working directory of the worker.
        settings: How to start worker processes (``settings.rscript`` is the executable).
    """

    runtime = "R"
    markers = (SYNC_START, SYNC_END)

    def missing_runtime(self) -> RMissingError | None:
        """The error of a sandbox without ``Rscript``; None when R is installed."""
        if installed(self.settings.rscript):
            return None
        return RMissingError(
            f"R contexts need R, and {self.settings.rscript!r} was not found in the sandbox "
            "(install R in the image, e.g. the Debian package r-base-core, or pass "
            "--rscript to sandboxd-interpreter)"
        )

    def argv(self, event_fd: int, token: str) -> list[str]:
        """Returns ``Rscript --no-save --no-restore driver.R EVENT_FD TOKEN``.

        Args:
            event_fd: The descriptor the driver writes events to.
            token: The random token of the driver's sync markers.

        Returns:
            The command line.
        """
        # Profiles are read as in any R session (site libraries, options); a saved workspace is
        # neither restored nor written, so every context starts empty.
        return [
            self.settings.rscript,
            "--no-save",
            "--no-restore",
            str(DRIVER),
            str(event_fd),
            token,
        ]
