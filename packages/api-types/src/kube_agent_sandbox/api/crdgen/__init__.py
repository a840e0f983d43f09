"""CRD generator: the models in :mod:`kube_agent_sandbox.api` → ``manifests/crds/*.yaml``.

Run ``python -m kube_agent_sandbox.api.crdgen`` to (re)write the files and
``python -m kube_agent_sandbox.api.crdgen --check`` to fail when they are stale.
"""

from kube_agent_sandbox.api.crdgen.crd import build_crd, conversion_stanza, crd_file_name
from kube_agent_sandbox.api.crdgen.render import render_all, render_crd
from kube_agent_sandbox.api.crdgen.schema import model_schema
from kube_agent_sandbox.api.crdgen.structural import NonStructuralSchemaError, check_structural

__all__ = [
    "NonStructuralSchemaError",
    "build_crd",
    "check_structural",
    "conversion_stanza",
    "crd_file_name",
    "model_schema",
    "render_all",
    "render_crd",
]
