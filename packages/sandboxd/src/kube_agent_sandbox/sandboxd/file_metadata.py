"""User metadata on files (envd 0.6.2): ``X-Metadata-<key>`` upload headers ↔ xattrs.

The SDK's ``files.write(..., metadata={...})`` sends each pair as an ``X-Metadata-<key>``
header; envd stores it as the extended attribute ``user.e2b.<key>`` (keys lower-cased) and
reports every ``user.e2b.*`` attribute as the entry's ``metadata``. Keys must be HTTP token
characters and values printable US-ASCII, as the SDK checks client-side.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable

HEADER_PREFIX = "x-metadata-"
XATTR_PREFIX = "user.e2b."
_KEY = re.compile(r"\A[A-Za-z0-9!#$%&'*+\-.^_`|~]+\Z")
_VALUE = re.compile(r"\A[\x20-\x7e]*\Z")


class MetadataError(ValueError):
    """A metadata key or value the daemon refuses."""


def from_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The metadata carried by ``X-Metadata-*`` request headers (keys lower-cased).

    Raises:
        MetadataError: an invalid key or value.
    """
    metadata: dict[str, str] = {}
    for name, value in headers:
        lowered = name.lower()
        if not lowered.startswith(HEADER_PREFIX):
            continue
        key = lowered[len(HEADER_PREFIX) :]
        if not _KEY.match(key):
            raise MetadataError(f"invalid metadata key {key!r}")
        if not _VALUE.match(value):
            raise MetadataError(f"invalid metadata value for key {key!r}")
        metadata[key] = value
    return metadata


def write(path: str, metadata: dict[str, str]) -> None:
    """Store the metadata on a file.

    Raises:
        OSError: the filesystem refused the attributes (``ENOTSUP`` and the like).
    """
    for key, value in metadata.items():
        os.setxattr(path, XATTR_PREFIX + key, value.encode("ascii"))


def read(path: str) -> dict[str, str]:
    """The ``user.e2b.*`` attributes of a path (empty when none or unsupported)."""
    result: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for name in os.listxattr(path):
            if name.startswith(XATTR_PREFIX):
                with contextlib.suppress(OSError):
                    raw = os.getxattr(path, name)
                    result[name[len(XATTR_PREFIX) :]] = raw.decode("utf-8", "replace")
    return result
