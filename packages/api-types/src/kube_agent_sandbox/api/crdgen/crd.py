"""Assemble CustomResourceDefinitions from the kind registry and the models' markers."""

from __future__ import annotations

from typing import Any, Final

from kube_agent_sandbox.api import constants
from kube_agent_sandbox.api.base import KubeObject
from kube_agent_sandbox.api.crdgen.schema import model_schema
from kube_agent_sandbox.api.crdgen.structural import check_structural
from kube_agent_sandbox.api.registry import KindInfo

CONVERSION_REVIEW_VERSIONS: Final = ("v1", "v1beta1")


def _version_entry(info: KindInfo, model: type[KubeObject]) -> dict[str, Any]:
    version = model.__kube_version__
    schema = model_schema(model)
    check_structural(schema)
    entry: dict[str, Any] = {
        "name": version,
        "served": model.__kube_served__,
        "storage": model.__kube_storage__,
        "schema": {"openAPIV3Schema": schema},
    }
    if model.__kube_printer_columns__:
        entry["additionalPrinterColumns"] = [c.to_crd() for c in model.__kube_printer_columns__]
    if model.__kube_deprecated__:
        entry["deprecated"] = True
        entry["deprecationWarning"] = info.deprecation_warning(version)
    subresources = model.__kube_subresources__.to_crd()
    if subresources:
        entry["subresources"] = subresources
    return entry


def conversion_stanza() -> dict[str, Any]:
    """``spec.conversion``: webhook conversion through the controller's ``/convert``."""
    return {
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": list(CONVERSION_REVIEW_VERSIONS),
            "clientConfig": {
                "service": {
                    "name": constants.WEBHOOK_SERVICE_NAME,
                    "namespace": constants.CONTROLLER_NAMESPACE,
                    "path": constants.CONVERSION_PATH,
                }
            },
        },
    }


def build_crd(info: KindInfo) -> dict[str, Any]:
    """The CustomResourceDefinition of one kind, all versions.

    Raises:
        NonStructuralSchemaError: a version's schema is not structural.
        ValueError: not exactly one storage version.
    """
    storage = [m for m in info.versions if m.__kube_storage__]
    if len(storage) != 1:
        raise ValueError(f"{info.kind}: exactly one storage version required, got {len(storage)}")
    names = info.names
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": names.crd_name},
        "spec": {
            "group": names.group,
            "names": {
                "kind": names.kind,
                "listKind": names.list_kind,
                "plural": names.plural,
                "shortNames": list(names.short_names),
                "singular": names.singular,
            },
            "scope": "Namespaced",
            "versions": [_version_entry(info, model) for model in info.versions],
            "conversion": conversion_stanza(),
        },
    }


def crd_file_name(info: KindInfo) -> str:
    """``<group>_<plural>.yaml``, the file name kubebuilder uses."""
    return f"{info.group}_{info.plural}.yaml"
