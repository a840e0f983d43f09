"""The name hash that upstream puts into tracking labels.

``name_hash(s)`` is 32-bit FNV-1a over the UTF-8 bytes of ``s``, rendered as exactly eight
lowercase hex digits. Label values written by the Go controller and by this one must match,
so the function is bit-for-bit the upstream one (checked against its test vectors).
"""

from __future__ import annotations

_FNV32_OFFSET_BASIS = 0x811C9DC5
_FNV32_PRIME = 0x01000193


def name_hash(value: str) -> str:
    """Return the FNV-1a 32-bit hash of ``value`` as eight lowercase hex digits."""
    h = _FNV32_OFFSET_BASIS
    for byte in value.encode("utf-8"):
        h ^= byte
        h = (h * _FNV32_PRIME) & 0xFFFFFFFF
    return f"{h:08x}"
