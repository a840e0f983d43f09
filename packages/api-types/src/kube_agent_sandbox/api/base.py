"""Base classes of every Agent Sandbox model: wire naming, dumping and CRD markers.

All models speak camelCase on the wire (aliases), accept snake_case in Python, reject unknown
fields (like ``kubectl --validate=strict``: a typo such as ``operatingMod`` is an error, not a
silently dropped field) and dump to JSON-ready dicts. Top-level kinds derive from
:class:`KubeObject`, which carries ``apiVersion``/``kind``/``metadata`` and the per-version CRD
facts (served/storage/deprecated, printer columns, subresources) declared as class keywords.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Self

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    PlainSerializer,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from kube_agent_sandbox.api.embedded.types import ObjectMeta
from kube_agent_sandbox.api.markers import CELRule, PrinterColumn, Subresources
from kube_agent_sandbox.api.resources import ResourceNames


def _reject_numbers(value: Any) -> Any:
    if isinstance(value, int | float):
        raise PydanticCustomError("date_time_type", "must be an RFC 3339 date-time string")
    return value


def format_time(value: datetime.datetime) -> str:
    """Render a time the way Kubernetes does (``metav1.Time``): UTC, seconds, ``Z``."""
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


KubeTime = Annotated[
    AwareDatetime,
    BeforeValidator(_reject_numbers),
    PlainSerializer(format_time, return_type=str),
]
"""A ``metav1.Time``: RFC 3339 on the wire, a timezone-aware ``datetime`` in Python."""


class KubeModel(BaseModel):
    """Base of every API struct: camelCase aliases, unknown fields rejected, enum values stored.

    Class keyword ``validations`` attaches CEL rules (``x-kubernetes-validations``) to the
    struct's schema, like ``+kubebuilder:validation:XValidation`` on a Go type.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
        use_enum_values=True,
        validate_default=True,
    )

    __kube_validations__: ClassVar[tuple[CELRule, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Accept the marker keywords; they are handled in ``__pydantic_init_subclass__``."""
        super().__init_subclass__()

    @classmethod
    def __pydantic_init_subclass__(
        cls, *, validations: Sequence[CELRule] = (), **kwargs: Any
    ) -> None:
        """Record the class keywords."""
        if kwargs:
            raise TypeError(f"{cls.__name__}: unknown class keywords {sorted(kwargs)}")
        super().__pydantic_init_subclass__()
        cls.__kube_validations__ = tuple(validations)

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema_: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """Add this class's CEL rules to its schema."""
        json_schema = handler(core_schema_)
        rules = cls.__dict__.get("__kube_validations__", ())
        if rules:
            target = handler.resolve_ref_schema(json_schema)
            target["x-kubernetes-validations"] = [rule.to_schema() for rule in rules]
        return json_schema

    def to_dict(self, *, include_defaults: bool = False) -> dict[str, Any]:
        """Dump to a JSON-ready dict with wire (camelCase) names and no ``None`` values.

        Args:
            include_defaults: also write fields that were not given and hold their default
                (by default only what was set is written, so a parsed manifest dumps back
                unchanged; the apiserver applies the same defaults).

        Returns:
            The document.
        """
        return self.model_dump(
            mode="json", by_alias=True, exclude_none=True, exclude_unset=not include_defaults
        )


class KubeObject(KubeModel):
    """Base of a top-level kind (one class per kind and version).

    Subclasses declare their identity and CRD facts as class keywords::

        class Sandbox(KubeObject, resource=SANDBOX, version="v1beta1", storage=True,
                      subresources=Subresources(status=True), printer_columns=(...)):
            spec: SandboxSpec
            status: SandboxStatus | None = None

    ``apiVersion`` and ``kind`` default to the class's own and must match it when given.
    """

    __kube_resource__: ClassVar[ResourceNames]
    __kube_version__: ClassVar[str]
    __kube_storage__: ClassVar[bool] = False
    __kube_served__: ClassVar[bool] = True
    __kube_deprecated__: ClassVar[bool] = False
    __kube_printer_columns__: ClassVar[tuple[PrinterColumn, ...]] = ()
    __kube_subresources__: ClassVar[Subresources] = Subresources()

    api_version: Annotated[str | None, Field(alias="apiVersion")] = None
    kind: str | None = None
    metadata: ObjectMeta = Field(default_factory=dict)

    @classmethod
    def __pydantic_init_subclass__(
        cls,
        *,
        resource: ResourceNames | None = None,
        version: str | None = None,
        storage: bool = False,
        served: bool = True,
        deprecated: bool = False,
        printer_columns: Sequence[PrinterColumn] = (),
        subresources: Subresources | None = None,
        **kwargs: Any,
    ) -> None:
        """Record the kind's identity and CRD facts."""
        super().__pydantic_init_subclass__(**kwargs)
        if resource is None or version is None:
            return
        cls.__kube_resource__ = resource
        cls.__kube_version__ = version
        cls.__kube_storage__ = storage
        cls.__kube_served__ = served
        cls.__kube_deprecated__ = deprecated
        cls.__kube_printer_columns__ = tuple(printer_columns)
        cls.__kube_subresources__ = subresources or Subresources()

    @classmethod
    def api_version_string(cls) -> str:
        """This class's ``apiVersion``, e.g. ``agents.x-k8s.io/v1beta1``."""
        return cls.__kube_resource__.api_version(cls.__kube_version__)

    @model_validator(mode="after")
    def _identity(self) -> Self:
        expected_version = self.api_version_string()
        expected_kind = self.__kube_resource__.kind
        if self.api_version is not None and self.api_version != expected_version:
            raise PydanticCustomError(
                "api_version",
                "apiVersion must be {expected}, not {actual}",
                {"expected": expected_version, "actual": self.api_version},
            )
        if self.kind is not None and self.kind != expected_kind:
            raise PydanticCustomError(
                "kind",
                "kind must be {expected}, not {actual}",
                {"expected": expected_kind, "actual": self.kind},
            )
        self.api_version = expected_version
        self.kind = expected_kind
        self.__pydantic_fields_set__.update({"api_version", "kind"})
        return self

    @property
    def name(self) -> str | None:
        """``metadata.name``."""
        value = self.metadata.get("name")
        return value if isinstance(value, str) else None

    @property
    def namespace(self) -> str | None:
        """``metadata.namespace``."""
        value = self.metadata.get("namespace")
        return value if isinstance(value, str) else None
