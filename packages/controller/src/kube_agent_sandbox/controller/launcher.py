"""The ``agent-sandbox-controller`` console script: prepare the process, then run the command.

What must happen before the first heavy import lives here, so :mod:`kube_agent_sandbox.
controller.cli` stays importable (and testable) without side effects.
"""

from __future__ import annotations

from kube_agent_sandbox.controller.truststore import defer_system_trust_store

__all__ = ["main"]


def main() -> int:
    """Run ``agent-sandbox-controller`` (see :func:`kube_agent_sandbox.controller.cli.main`)."""
    defer_system_trust_store()  # before cli's imports build SSL contexts
    from kube_agent_sandbox.controller.cli import main as run

    return run()
