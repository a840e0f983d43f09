"""Which sandbox and port a data-plane request is for, from its headers or its Host.

The E2B SDK names the target with ``E2b-Sandbox-Id`` + ``E2b-Sandbox-Port`` when it is pointed
at one URL (``E2B_SANDBOX_URL``), and with a host name ``<port>-<id>.<domain>`` otherwise (the
form browsers can use; the SDK sends the two headers there too). Both arrive from untrusted
clients, so parsing is strict: an id is a lowercase DNS label without ``-`` (the gateway's
sandbox ids are 20 lowercase alphanumerics), a port is a decimal number in 1..65535, and
anything else is a :class:`TargetError` that the router answers with a plain 400 before any
lookup happens.

Precedence: a Host ``<port>-<id>.<domain>`` under the gateway's configured domain names the
target and the headers are ignored, as E2B's own proxy does. The name is what the client
connected to and what its certificate check and a browser's same-origin policy are about, so
a page served from one sandbox's host cannot reach another sandbox by adding a header. Any
other Host (the gateway's Service name, an IP, ``api.<domain>``) leaves the headers in charge.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

HEADER_SANDBOX_ID = "e2b-sandbox-id"
HEADER_SANDBOX_PORT = "e2b-sandbox-port"

_ID = re.compile(r"[a-z0-9]{1,63}")
_PORT = re.compile(r"[1-9][0-9]{0,4}")
_HOST = re.compile(r"[a-z0-9.-]{1,253}")
_SANDBOX_LABEL = re.compile(r"[0-9]+-.*")


class TargetError(ValueError):
    """The request names its sandbox or port in a malformed or ambiguous way."""


@dataclass(frozen=True)
class Target:
    """A sandbox and one of its ports.

    Attributes:
        sandbox_id: the sandbox (claim) name.
        port: the port inside the sandbox (49983 is envd).
    """

    sandbox_id: str
    port: int


def parse_sandbox_id(value: str) -> str:
    """``value`` if it is a well-formed sandbox id.

    Raises:
        TargetError: for anything but 1-63 lowercase letters and digits.
    """
    if not _ID.fullmatch(value):
        raise TargetError("invalid sandbox id")
    return value


def parse_port(value: str) -> int:
    """``value`` as a port number.

    Raises:
        TargetError: for anything but a decimal number in 1..65535 without sign or padding.
    """
    if not _PORT.fullmatch(value) or int(value) > 65535:
        raise TargetError("invalid sandbox port")
    return int(value)


def host_name(host: str) -> str:
    """The lowercase host name of a ``Host`` header value, without its port.

    Raises:
        TargetError: if the value is not a plain DNS name (userinfo, IPv6 brackets, spaces,
            control characters or a malformed port all count as hostile).
    """
    name, sep, port = host.strip().lower().rpartition(":")
    if not sep:
        name, port = port, ""
    elif not port.isdigit() or not port.isascii():
        raise TargetError("invalid Host header")
    name = name.rstrip(".")
    if not _HOST.fullmatch(name) or ".." in name:
        raise TargetError("invalid Host header")
    return name


def from_host(host: str, domain: str | None) -> Target | None:
    """The target named by a host ``<port>-<id>.<domain>``, or None if the host has no such form.

    Args:
        host: the ``Host`` header value.
        domain: the gateway's wildcard domain; None accepts any domain (only the first label
            is read).

    Raises:
        TargetError: if the host has the form but a malformed port or id.
    """
    name = host_name(host)
    label, dot, rest = name.partition(".")
    if not dot or not rest:
        return None
    if domain is not None and rest != domain.strip().lower().rstrip("."):
        return None
    port, dash, sandbox_id = label.partition("-")
    if not dash:
        return None
    return Target(sandbox_id=parse_sandbox_id(sandbox_id), port=parse_port(port))


def _single(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> str | None:
    found: str | None = None
    for key, value in headers:
        if key.lower() != name:
            continue
        if found is not None:
            raise TargetError(f"more than one {name.decode()} header")
        try:
            found = value.decode("ascii")
        except UnicodeDecodeError as err:
            raise TargetError(f"invalid {name.decode()} header") from err
    return found


def _authoritative_host(items: list[tuple[bytes, bytes]], domain: str | None) -> Target | None:
    """The target of a Host under the configured ``domain``; None if it names none.

    Only a well-formed host name ``<digits>-….<domain>`` counts; any other, malformed or
    repeated Host falls through to the headers (and is refused there when they name nothing).

    Raises:
        TargetError: if the host has the ``<port>-<id>`` form under the domain but a
            malformed port or id.
    """
    if domain is None:
        return None
    try:
        host = _single(items, b"host")
        name = host_name(host) if host is not None else ""
    except TargetError:
        return None
    if host is None or not names_a_sandbox(name, domain):
        return None
    return from_host(host, domain)


def names_a_sandbox(name: str, domain: str) -> bool:
    """Whether host ``name`` (lowercase, no port) has the form ``<digits>-….<domain>``.

    Such a name addresses a sandbox even when its port or id turns out malformed (the
    request is then refused as malformed, never served by the control plane); other names
    under the domain (``api.<domain>``, ``my-gateway.<domain>``) do not.
    """
    label, dot, rest = name.partition(".")
    return (
        bool(dot)
        and rest == domain.strip().lower().rstrip(".")
        and bool(_SANDBOX_LABEL.fullmatch(label))
    )


def resolve(headers: Iterable[tuple[bytes, bytes]], *, domain: str | None) -> Target:
    """The target of a request from its raw ASGI headers.

    A Host ``<port>-<id>.<domain>`` under the configured ``domain`` wins over the headers;
    otherwise ``E2b-Sandbox-Id``/``E2b-Sandbox-Port``, then a Host of that form under any
    domain when no domain is configured.

    Raises:
        TargetError: if the headers are malformed, repeated or incomplete, or no target is
            named at all.
    """
    items = list(headers)
    by_host = _authoritative_host(items, domain)
    if by_host is not None:
        return by_host
    sandbox_id = _single(items, HEADER_SANDBOX_ID.encode())
    port = _single(items, HEADER_SANDBOX_PORT.encode())
    if sandbox_id is not None:
        if port is None:
            raise TargetError("missing E2b-Sandbox-Port header")
        return Target(sandbox_id=parse_sandbox_id(sandbox_id), port=parse_port(port))
    if port is not None:
        raise TargetError("missing E2b-Sandbox-Id header")
    host = _single(items, b"host")
    if host is None:
        raise TargetError("no sandbox named: send E2b-Sandbox-Id and E2b-Sandbox-Port")
    target = from_host(host, domain)
    if target is None:
        raise TargetError("no sandbox named: send E2b-Sandbox-Id and E2b-Sandbox-Port")
    return target
