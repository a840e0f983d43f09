"""E2B sandbox ids: 20 lowercase alphanumerics, no ``-``.

The id is the SandboxClaim's name, and ``<port>-<id>.<domain>`` must fit one 63-character DNS
label, with E2B-style host parsers splitting the first label on its only ``-``. Ids start
with a letter so that every object named after one (Sandbox, Pod, Service) is a valid name.

A create without ``Idempotency-Key`` gets a random id (:func:`new_sandbox_id`); one with a key
gets an id derived from a keyed hash of (tenant namespace, key) (:func:`keyed_sandbox_id`),
so every gateway replica names the claim alike and the API server's ``AlreadyExists``
de-duplicates. Both kinds have the same form: clients cannot tell them apart.
"""

from __future__ import annotations

import re
import secrets
import string
from typing import Final

ID_LENGTH: Final = 20
_FIRST: Final = string.ascii_lowercase
_REST: Final = string.ascii_lowercase + string.digits
ID_PATTERN: Final = re.compile(r"^[a-z][a-z0-9]{19}$")


def new_sandbox_id() -> str:
    """A fresh random sandbox id (about 103 bits of entropy)."""
    return secrets.choice(_FIRST) + "".join(secrets.choice(_REST) for _ in range(ID_LENGTH - 1))


def keyed_sandbox_id(digest: bytes) -> str:
    """The sandbox id spelled from ``digest`` (at least 16 bytes of a keyed hash).

    Raises:
        ValueError: if the digest is too short to fill an id.
    """
    if len(digest) < 16:
        raise ValueError("a keyed sandbox id needs a digest of at least 16 bytes")
    number = int.from_bytes(digest, "big")
    number, first = divmod(number, len(_FIRST))
    rest = []
    for _ in range(ID_LENGTH - 1):
        number, digit = divmod(number, len(_REST))
        rest.append(_REST[digit])
    return _FIRST[first] + "".join(rest)


def is_sandbox_id(text: str) -> bool:
    """Whether ``text`` has the form of a gateway sandbox id."""
    return ID_PATTERN.fullmatch(text) is not None
