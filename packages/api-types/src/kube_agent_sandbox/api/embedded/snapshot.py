"""Refresh the snapshot of Kubernetes' own OpenAPI schemas that the CRDs embed.

The CRDs embed Kubernetes types (PodSpec, PersistentVolumeClaimSpec, NetworkPolicy rules). Their
schemas must be exactly what Kubernetes publishes, with the formats, defaults, list types and map
types the Python client models do not carry. This tool copies the needed definitions (and every
definition they reference) out of Kubernetes' published OpenAPI v3 documents
(``api/openapi-spec/v3`` in the Kubernetes source tree, or ``/openapi/v3/...`` of a live
apiserver) into ``k8s_openapi.json`` beside this module. Descriptions are left out: the CRDs do
not carry them.

Usage::

    python -m kube_agent_sandbox.api.embedded.snapshot \
        --kubernetes-version v1.36.3 \
        path/to/api__v1_openapi.json path/to/apis__networking.k8s.io__v1_openapi.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from kube_agent_sandbox.api.embedded.definitions import ROOT_DEFINITIONS, SNAPSHOT_PATH

_REF_PREFIX = "#/components/schemas/"
_DROPPED_KEYS = frozenset({"description"})


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, Mapping):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
            yield ref.removeprefix(_REF_PREFIX)
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _strip(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {k: _strip(v) for k, v in node.items() if k not in _DROPPED_KEYS}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def build_snapshot(
    documents: Sequence[Mapping[str, Any]], *, kubernetes_version: str
) -> dict[str, Any]:
    """Collect the closure of :data:`ROOT_DEFINITIONS` from OpenAPI v3 documents.

    Args:
        documents: parsed Kubernetes OpenAPI v3 documents (``components.schemas`` is read).
        kubernetes_version: recorded in the snapshot for provenance.

    Returns:
        The snapshot document (``kubernetesVersion`` and ``schemas``).

    Raises:
        KeyError: a needed definition is in none of the documents.
    """
    available: dict[str, Any] = {}
    for document in documents:
        available.update(document["components"]["schemas"])
    wanted = list(ROOT_DEFINITIONS)
    collected: dict[str, Any] = {}
    while wanted:
        name = wanted.pop()
        if name in collected:
            continue
        if name not in available:
            raise KeyError(f"definition {name} not found in the given OpenAPI documents")
        collected[name] = _strip(available[name])
        wanted.extend(_refs(available[name]))
    return {
        "kubernetesVersion": kubernetes_version,
        "schemas": dict(sorted(collected.items())),
    }


def main(argv: list[str] | None = None) -> int:
    """Command line entry point: write the snapshot file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("documents", nargs="+", type=Path, help="OpenAPI v3 JSON documents")
    parser.add_argument("--kubernetes-version", required=True)
    parser.add_argument("--output", type=Path, default=SNAPSHOT_PATH)
    args = parser.parse_args(argv)
    documents = [json.loads(path.read_text()) for path in args.documents]
    snapshot = build_snapshot(documents, kubernetes_version=args.kubernetes_version)
    args.output.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n")
    sys.stderr.write(f"wrote {len(snapshot['schemas'])} definitions to {args.output}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
