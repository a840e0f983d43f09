"""Registry of the API's kinds: one place that knows every kind, version and model class.

The CRD generator, the conversion webhook and the controller look kinds up here instead of
importing version modules one by one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kube_agent_sandbox.api import constants, v1alpha1, v1beta1
from kube_agent_sandbox.api.base import KubeObject
from kube_agent_sandbox.api.resources import (
    SANDBOX,
    SANDBOX_CLAIM,
    SANDBOX_SNAPSHOT,
    SANDBOX_TEMPLATE,
    SANDBOX_WARM_POOL,
    ResourceNames,
)


@dataclass(frozen=True)
class KindInfo:
    """A kind with its names and its model class per served version.

    Attributes:
        names: group, kind, plural, short names.
        versions: model class per version, newest (storage) first.
    """

    names: ResourceNames
    versions: tuple[type[KubeObject], ...]

    @property
    def group(self) -> str:
        """API group."""
        return self.names.group

    @property
    def kind(self) -> str:
        """Kind."""
        return self.names.kind

    @property
    def plural(self) -> str:
        """Plural resource name."""
        return self.names.plural

    @property
    def short_names(self) -> tuple[str, ...]:
        """``kubectl`` aliases."""
        return self.names.short_names

    @property
    def storage_model(self) -> type[KubeObject]:
        """The model of the storage (hub) version."""
        return next(model for model in self.versions if model.__kube_storage__)

    def model(self, version: str) -> type[KubeObject]:
        """The model class of ``version``.

        Raises:
            KeyError: the version is not served.
        """
        for model in self.versions:
            if model.__kube_version__ == version:
                return model
        raise KeyError(f"{self.kind} has no version {version}")

    def deprecation_warning(self, version: str) -> str:
        """The warning the apiserver returns for a deprecated version."""
        old = self.names.api_version(version)
        new = self.names.api_version(self.storage_model.__kube_version__)
        return f"{old} {self.kind} is deprecated; use {new} {self.kind} instead"


KINDS: Final = (
    KindInfo(SANDBOX, (v1beta1.Sandbox, v1alpha1.Sandbox)),
    KindInfo(SANDBOX_TEMPLATE, (v1beta1.SandboxTemplate, v1alpha1.SandboxTemplate)),
    KindInfo(SANDBOX_WARM_POOL, (v1beta1.SandboxWarmPool, v1alpha1.SandboxWarmPool)),
    KindInfo(SANDBOX_CLAIM, (v1beta1.SandboxClaim, v1alpha1.SandboxClaim)),
    KindInfo(SANDBOX_SNAPSHOT, (v1beta1.SandboxSnapshot, v1alpha1.SandboxSnapshot)),
)
"""Every kind of the API."""

_BY_GROUP_KIND: Final = {(info.group, info.kind): info for info in KINDS}


def kind_info(group: str, kind: str) -> KindInfo:
    """Look a kind up by group and kind.

    Raises:
        KeyError: not a kind of this API.
    """
    try:
        return _BY_GROUP_KIND[(group, kind)]
    except KeyError:
        raise KeyError(f"unknown kind {kind} in group {group}") from None


def model_for(api_version: str, kind: str) -> type[KubeObject]:
    """The model class for an ``apiVersion``/``kind`` pair.

    Raises:
        KeyError: not a kind/version of this API.
    """
    group, _, version = api_version.rpartition("/")
    return kind_info(group, kind).model(version)


def parse_object(document: Mapping[str, Any]) -> KubeObject:
    """Validate a document of any kind and version of this API into its model.

    Raises:
        KeyError: ``apiVersion``/``kind`` missing or not of this API.
        pydantic.ValidationError: the document is invalid.
    """
    api_version = document.get("apiVersion")
    kind = document.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise KeyError("document has no apiVersion/kind")
    return model_for(api_version, kind).model_validate(document)


HUB_VERSION: Final = constants.V1BETA1
"""The storage and conversion hub version of every kind."""
