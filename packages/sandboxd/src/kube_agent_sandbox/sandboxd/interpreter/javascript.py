"""JavaScript and TypeScript contexts: one persistent ``node driver.js`` process per context.

``driver.js`` (next to this module) speaks the Python driver's protocol, so everything the server
does with a Python worker (streaming, ordering, time limits, interrupts, restarts) applies
unchanged; only the command line differs. Nothing here runs until a JavaScript or TypeScript
context is created, so a server that only runs Python never looks for Node.
"""

from __future__ import annotations

from pathlib import Path

from kube_agent_sandbox.sandboxd.interpreter.worker import (
    PythonWorker,
    RuntimeMissingError,
    installed,
)

DRIVER = Path(__file__).with_name("driver.js")
LANGUAGES = ("javascript", "typescript")


class NodeMissingError(RuntimeMissingError):
    """The sandbox has no Node.js executable, so JavaScript contexts cannot run."""


class JavaScriptWorker(PythonWorker):
    """A persistent Node.js REPL for one JavaScript or TypeScript context.

    Args:
        cwd: The working directory of the worker.
        language: ``"javascript"`` or ``"typescript"`` (cells are stripped of types first).
        settings: How to start worker processes (``settings.node`` is the executable).
    """

    runtime = "Node.js"

    def __init__(self, *, cwd: str, language: str = "javascript", **kwargs: object) -> None:
        super().__init__(cwd=cwd, **kwargs)  # type: ignore[arg-type]
        if language not in LANGUAGES:
            raise ValueError(f"not a Node.js language: {language!r}")
        self.language = language

    def missing_runtime(self) -> NodeMissingError | None:
        """The error of a sandbox without Node.js; None when it is installed."""
        if installed(self.settings.node):
            return None
        return NodeMissingError(
            f"{self.language} contexts need Node.js, and {self.settings.node!r} was not "
            "found in the sandbox (install Node.js >= 20 in the image, or pass "
            "--node to sandboxd-interpreter)"
        )

    def argv(self, event_fd: int, token: str) -> list[str]:
        """Returns ``node driver.js EVENT_FD TOKEN LANGUAGE``.

        Args:
            event_fd: The descriptor the driver writes events to.
            token: The random token of the driver's sync markers.

        Returns:
            The command line.
        """
        return [self.settings.node, str(DRIVER), str(event_fd), token, self.language]
