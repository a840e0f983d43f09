"""Optional OpenTelemetry tracing of SDK calls (upstream's ``SandboxTracerConfig``).

Off by default, and then free: no OpenTelemetry module is imported (the CLI's start-up time is
measured) and every span is one shared null context. With
``SandboxTracerConfig(enable_tracing=True)`` the client opens spans named
``<trace_service_name>.<operation>`` (``create_claim``, ``wait_for_claim_ready``,
``create_sandbox``, ``wait_for_sandbox_ready``, inside one ``claim_sandbox`` or
``create_sandbox`` call span) and writes the W3C context of the create span into the
``opentelemetry.io/trace-context`` annotation (JSON ``{"traceparent": …}``) of the object it
creates, where the claim and Sandbox controllers continue the trace, exactly as upstream's
Python client does. The calls on a sandbox are traced as upstream's are: ``run``, the file
calls ``read``, ``write``, ``list``, ``exists`` and ``delete``, and ``delete_claim``.

Spans are exported by a process-wide tracer provider that the first enabled client installs
(batching, OTLP/gRPC exporter configured by the standard ``OTEL_EXPORTER_OTLP_*`` variables,
``service.name`` = ``trace_service_name``), unless the program installed its own provider
first. OpenTelemetry comes with the ``tracing`` extra:
``pip install 'kube-agent-sandbox-sdk[tracing]'``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Final, Protocol

__all__ = [
    "DEFAULT_SERVICE_NAME",
    "INSTALL_HINT",
    "NOOP_TRACER",
    "ClientTracer",
    "NoopClientTracer",
    "SandboxTracerConfig",
    "command_executable",
    "tracer_for",
]

DEFAULT_SERVICE_NAME: Final = "sandbox-client"
"""Upstream's default ``trace_service_name``."""

INSTALL_HINT: Final = "pip install 'kube-agent-sandbox-sdk[tracing]'"

Attributes = Mapping[str, str | int | float | bool]


@dataclasses.dataclass(frozen=True)
class SandboxTracerConfig:
    """Tracing options of a client (upstream's ``SandboxTracerConfig``).

    Attributes:
        enable_tracing: open spans and write the trace context onto created objects.
        trace_service_name: ``service.name`` of the exported spans and prefix of span names.
    """

    enable_tracing: bool = False
    trace_service_name: str = DEFAULT_SERVICE_NAME


class ClientTracer(Protocol):
    """What the client asks of tracing; every call is safe (and free) when tracing is off."""

    def span(
        self, operation: str, attributes: Attributes | None = None
    ) -> AbstractContextManager[None]:
        """A span ``<service>.<operation>``, child of the current one."""
        ...

    def set_attributes(self, attributes: Attributes) -> None:
        """Set attributes on the current span (when it records)."""
        ...

    def trace_context(self) -> str:
        """The current W3C context as the annotation's JSON; empty when there is none."""
        ...


_NULL_CONTEXT: Final[AbstractContextManager[None]] = contextlib.nullcontext()


class NoopClientTracer:
    """Tracing off: nothing recorded, nothing allocated."""

    def span(
        self, operation: str, attributes: Attributes | None = None
    ) -> AbstractContextManager[None]:
        """Nothing to trace."""
        return _NULL_CONTEXT

    def set_attributes(self, attributes: Attributes) -> None:
        """Nothing to record."""

    def trace_context(self) -> str:
        """No context: created objects carry no annotation."""
        return ""


NOOP_TRACER: Final = NoopClientTracer()


def tracer_for(config: SandboxTracerConfig | None) -> ClientTracer:
    """The tracer of a client: OpenTelemetry-backed when ``config.enable_tracing``.

    Raises:
        ImportError: tracing is enabled but OpenTelemetry is not installed (with the hint).
    """
    if config is None or not config.enable_tracing:
        return NOOP_TRACER
    try:
        from kube_agent_sandbox.sdk import _otel
    except ImportError as err:
        raise ImportError(
            f"SandboxTracerConfig(enable_tracing=True) needs OpenTelemetry ({err}); {INSTALL_HINT}"
        ) from err
    _otel.initialize_tracer(config.trace_service_name)
    return _otel.OTelClientTracer(config.trace_service_name)


def command_executable(command: str) -> str:
    """The program a shell command line runs, for the ``sandbox.command.executable`` attribute.

    Upstream's rule: the first word that is not a ``NAME=value`` assignment, without its
    directory (``A=1 /usr/bin/python x.py`` -> ``python``); empty for an empty line. Only
    the program is recorded, never its arguments (they may hold secrets).
    """
    for word in command.split():
        if "=" not in word:
            return word.rsplit("/", 1)[-1]
    return ""
