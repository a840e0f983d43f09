"""The Sandbox reconcile's own errors on top of the runtime's error model.

Upstream returns every error to controller-runtime, which retries with exponential backoff
forever. Some errors cannot heal by retrying the same request (an invalid pod template, a
name taken by another owner, a namespace being deleted), so each
:class:`~kube_agent_sandbox.controller.runtime.ReconcileError` says whether it is *transient*
(retry soon with backoff) or not (report it in status, retry slowly). The message text is what
ends up in the Ready condition, so it matches upstream's wording.

Only the MultiplePods error is the Sandbox's own: it has its own Ready reason and is kept apart
by :class:`SandboxErrorCollector`.
"""

from __future__ import annotations

from kube_agent_sandbox.controller.runtime import ErrorCollector, ReconcileError, TransientError


class MultiplePodsError(ReconcileError):
    """Several pods are controlled by one Sandbox: refuse to pick one or create another."""

    def __init__(self, count: int) -> None:
        super().__init__(
            f"multiple Pods ({count}) are controlled by this Sandbox; "
            "refusing to choose or create a Pod",
            transient=False,
        )
        self.count = count


class SandboxReconcileError(TransientError):
    """Raised from ``reconcile`` when a transient error asks for a backoff retry."""


class SandboxErrorCollector(ErrorCollector):
    """The errors of one Sandbox pass; a MultiplePods error is kept apart.

    Attributes:
        multiple_pods: The MultiplePods error: it has its own Ready reason and is not retried
            (the owned-Pod watch brings the next pass).
    """

    def __init__(self) -> None:
        super().__init__()
        self.multiple_pods: MultiplePodsError | None = None

    def record(self, error: ReconcileError) -> None:
        """Keep a MultiplePods error apart, every other error in :attr:`errors`."""
        if isinstance(error, MultiplePodsError):
            self.multiple_pods = error
        else:
            super().record(error)
