"""Semantic equality of decoded Kubernetes objects, like apimachinery's ``equality.Semantic``.

Plain ``==`` on JSON dicts is too strict for no-op detection: the API server omits empty
fields that a freshly computed object carries as ``[]``/``{}``/``""``, and resource
quantities have many spellings of the same value (``1Gi`` == ``1024Mi``). Writing on every
such difference would turn each reconcile into an API call.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, Final

_BINARY_SUFFIXES: Final = {
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_DECIMAL_SUFFIXES: Final = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY_RE: Final = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$"
)

QUANTITY_MAP_KEYS: Final = frozenset(
    {"requests", "limits", "capacity", "allocatable", "hard", "used", "allocatedResources"}
)
"""Keys whose values are maps of resource name to quantity (resources, PVC status, quotas)."""

QUANTITY_KEYS: Final = frozenset({"sizeLimit", "storage"})
"""Keys whose value is itself a quantity."""


def parse_quantity(value: str) -> Decimal | None:
    """Return the numeric value of a Kubernetes quantity string, or None if it is not one."""
    match = _QUANTITY_RE.match(value.strip())
    if match is None:
        return None
    try:
        number = Decimal(match.group("num"))
    except InvalidOperation:  # pragma: no cover - the regex only admits valid decimals
        return None
    suffix = match.group("suffix") or ""
    if suffix in _BINARY_SUFFIXES:
        return number * _BINARY_SUFFIXES[suffix]
    if suffix in _DECIMAL_SUFFIXES:
        return number * _DECIMAL_SUFFIXES[suffix]
    return number * (Decimal(10) ** int(suffix[1:]))


def quantities_equal(a: object, b: object) -> bool:
    """Compare two quantities (strings or numbers) by value; fall back to ``==``."""
    qa = parse_quantity(str(a)) if isinstance(a, str | int | float) else None
    qb = parse_quantity(str(b)) if isinstance(b, str | int | float) else None
    if qa is not None and qb is not None:
        return qa == qb
    return a == b


def is_empty(value: object) -> bool:
    """True for the values Go's ``omitempty`` drops from JSON: None, "", [], {}."""
    return value is None or (isinstance(value, str | list | dict | tuple) and len(value) == 0)


def semantic_equal(a: Any, b: Any) -> bool:
    """Deep equality where absent == None == empty and quantities compare numerically.

    Quantities are recognised by position: values of :data:`QUANTITY_KEYS`, and entries of
    maps stored under :data:`QUANTITY_MAP_KEYS` (``resources.requests`` and the like).
    Booleans, numbers and other strings compare exactly; lists compare element-wise in order.

    Args:
        a: A decoded JSON value.
        b: Another decoded JSON value.

    Returns:
        Whether the two values are semantically equal.
    """
    return _equal(a, b, quantity=False, quantity_map=False)


def _equal(a: Any, b: Any, *, quantity: bool, quantity_map: bool) -> bool:
    if is_empty(a) and is_empty(b):
        return True
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in a.keys() | b.keys():
            if not _equal(
                a.get(key),
                b.get(key),
                quantity=quantity_map or key in QUANTITY_KEYS,
                quantity_map=key in QUANTITY_MAP_KEYS,
            ):
                return False
        return True
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return False
        return all(
            _equal(x, y, quantity=False, quantity_map=False) for x, y in zip(a, b, strict=True)
        )
    if quantity:
        return quantities_equal(a, b)
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b) and type(a) is type(b)
