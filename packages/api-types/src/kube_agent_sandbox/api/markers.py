"""Schema markers declared next to the fields and classes they describe.

These play the role of kubebuilder's ``// +kubebuilder:...`` comments: each marker is a small
frozen dataclass that either sits in an ``Annotated[...]`` field type (formats, list types) or is
passed as a class keyword of a model (CEL rules; printer columns and subresources on top-level
kinds, see :class:`kube_agent_sandbox.api.base.KubeObject`). Field markers write themselves into
the model's JSON schema, from which :mod:`kube_agent_sandbox.api.crdgen` builds the CRDs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler, Strict
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema


def _resolved(schema: JsonSchemaValue, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
    resolved: JsonSchemaValue = handler.resolve_ref_schema(schema)
    return resolved


@dataclass(frozen=True)
class Format:
    """OpenAPI ``format`` of a field (``int32``, ``int64``, ``date-time`` ...)."""

    format: str

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """Add ``format`` to the field's schema."""
        json_schema = handler(schema)
        _resolved(json_schema, handler)["format"] = self.format
        return json_schema


@dataclass(frozen=True)
class ListType:
    """``x-kubernetes-list-type`` (and list-map keys) of a list field.

    Attributes:
        type: ``atomic`` (replaced as a whole by server-side apply), ``set`` or ``map``.
        map_keys: the keys identifying an item, for ``map``.
    """

    type: Literal["atomic", "set", "map"]
    map_keys: tuple[str, ...] = ()

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """Add the list-type extensions to the field's schema."""
        json_schema = handler(schema)
        target = _resolved(json_schema, handler)
        target["x-kubernetes-list-type"] = self.type
        if self.map_keys:
            target["x-kubernetes-list-map-keys"] = list(self.map_keys)
        return json_schema


@dataclass(frozen=True)
class CELRule:
    """A CEL validation rule (``x-kubernetes-validations`` entry).

    Attributes:
        rule: the CEL expression; ``self`` is the value, ``oldSelf`` the previous one on update.
        message: the error the apiserver returns when the rule is false.
    """

    rule: str
    message: str | None = None

    def to_schema(self) -> dict[str, Any]:
        """The ``x-kubernetes-validations`` item."""
        item: dict[str, Any] = {"rule": self.rule}
        if self.message is not None:
            item["message"] = self.message
        return item


@dataclass(frozen=True)
class PrinterColumn:
    """An ``additionalPrinterColumns`` entry (what ``kubectl get`` shows).

    Attributes:
        name: column header.
        type: OpenAPI type of the value (``string``, ``integer``, ``date`` ...).
        json_path: JSONPath into the object, e.g. ``.status.replicas``.
    """

    name: str
    type: str
    json_path: str

    def to_crd(self) -> dict[str, Any]:
        """The CRD representation."""
        return {"jsonPath": self.json_path, "name": self.name, "type": self.type}


@dataclass(frozen=True)
class ScaleSubresource:
    """The ``scale`` subresource (lets ``kubectl scale``, HPA and KEDA drive replicas)."""

    spec_replicas_path: str
    status_replicas_path: str
    label_selector_path: str | None = None

    def to_crd(self) -> dict[str, Any]:
        """The CRD representation."""
        scale = {
            "specReplicasPath": self.spec_replicas_path,
            "statusReplicasPath": self.status_replicas_path,
        }
        if self.label_selector_path is not None:
            scale["labelSelectorPath"] = self.label_selector_path
        return scale


@dataclass(frozen=True)
class Subresources:
    """Which subresources a version serves."""

    status: bool = False
    scale: ScaleSubresource | None = None

    def to_crd(self) -> dict[str, Any]:
        """The CRD representation (empty when there are none)."""
        out: dict[str, Any] = {}
        if self.scale is not None:
            out["scale"] = self.scale.to_crd()
        if self.status:
            out["status"] = {}
        return out


@dataclass(frozen=True)
class IntFormat:
    """An integer width: checks the range and writes ``format: int32``/``int64``.

    Put it last in ``Annotated[int, Strict(), Ge(0), INT32]`` so range constraints before it
    land in the schema as ``minimum``/``maximum``.
    """

    bits: Literal[32, 64]

    def _check(self, value: int) -> int:
        low, high = -(2 ** (self.bits - 1)), 2 ** (self.bits - 1) - 1
        if not low <= value <= high:
            raise PydanticCustomError(
                "int_range",
                "{value} does not fit in int{bits}",
                {"value": value, "bits": self.bits},
            )
        return value

    def __get_pydantic_core_schema__(
        self, source_type: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        """Validate as the inner type, then check the range."""
        return core_schema.no_info_after_validator_function(self._check, handler(source_type))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """Add ``format``."""
        json_schema = handler(schema)
        _resolved(json_schema, handler)["format"] = f"int{self.bits}"
        return json_schema


INT32 = IntFormat(32)
"""Marker: 32-bit signed integer."""
INT64 = IntFormat(64)
"""Marker: 64-bit signed integer."""

Int32 = Annotated[int, Strict(), INT32]
"""A 32-bit signed integer (``format: int32``)."""

Int64 = Annotated[int, Strict(), INT64]
"""A 64-bit signed integer (``format: int64``)."""

ATOMIC_LIST = ListType("atomic")
"""``x-kubernetes-list-type: atomic``."""
