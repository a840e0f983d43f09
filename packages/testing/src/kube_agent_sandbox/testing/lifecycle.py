"""The context-manager lifecycle every test cluster shares (:class:`ClusterLifecycle`).

The local cluster and the real-node cluster both implement it; kept apart so neither depends on
the other for it.
"""

from __future__ import annotations

import abc
from types import TracebackType

from kube_agent_sandbox.testing.access import ClusterAccess


class ClusterLifecycle(abc.ABC):
    """A cluster as a context manager: ``with`` starts it, returns its access, then stops it."""

    def __enter__(self) -> ClusterAccess:
        """Start the cluster and return its access object."""
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the cluster."""
        self.stop()

    @abc.abstractmethod
    def start(self) -> ClusterAccess:
        """Start the cluster and return its access."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop the cluster and release what it holds."""
