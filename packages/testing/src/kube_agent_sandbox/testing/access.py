"""What a test gets to talk to a cluster, whichever provider made it.

A :class:`ClusterAccess` wraps one kubeconfig: a Python client for it, kubectl for it, ``apply``
for manifests, CRD installation that waits until the apiserver serves them, and the log files
of the components when the provider runs them itself.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config, dynamic

from kube_agent_sandbox.testing import versions
from kube_agent_sandbox.testing.waiting import (
    ObjectRef,
    dynamic_client,
    wait_for_condition,
    wait_for_deletion,
)

_log = logging.getLogger(__name__)

Manifest = Mapping[str, Any]
ManifestSource = Manifest | Sequence[Manifest] | str | Path


class ToolError(RuntimeError):
    """A command-line tool of the harness (kubectl, helm) exited with an error."""

    tool = "tool"

    def __init__(self, args: Sequence[str], returncode: int, stderr: str) -> None:
        """Record the failed command.

        Args:
            args: The tool's arguments.
            returncode: Exit status.
            stderr: What the tool printed on stderr.
        """
        super().__init__(f"{self.tool} {' '.join(args)} exited {returncode}: {stderr.strip()}")
        self.returncode = returncode
        self.stderr = stderr


class KubectlError(ToolError):
    """kubectl exited with an error."""

    tool = "kubectl"


def find_tool(name: str, bin_dir: Path | None = None) -> Path | None:
    """The pinned ``name`` from the build cache, else the first ``name`` on PATH.

    Args:
        name: Executable name (``kubectl``, ``helm``).
        bin_dir: Build cache directory to look in first (the pinned one when None).

    Returns:
        The path, or None when the tool is nowhere.
    """
    candidate = (bin_dir or versions.bin_dir()) / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate
    found = shutil.which(name)
    return Path(found) if found else None


def find_kubectl(bin_dir: Path | None = None) -> Path | None:
    """The pinned kubectl from the build cache, else the first kubectl on PATH."""
    return find_tool("kubectl", bin_dir)


def load_manifests(source: ManifestSource) -> list[dict[str, Any]]:
    """Turn a manifest source into a list of objects.

    Args:
        source: One object, a list of objects, YAML text, or a path to a YAML file or a
            directory of ``*.yaml`` files (sorted by name).

    Returns:
        The non-empty documents, in order.

    Raises:
        FileNotFoundError: If a path does not exist.
        ValueError: If a document is not a mapping.
    """
    documents: list[Any]
    if isinstance(source, Path):
        if source.is_dir():
            files = sorted([*source.glob("*.yaml"), *source.glob("*.yml")])
            return [doc for f in files for doc in load_manifests(f)]
        documents = list(yaml.safe_load_all(source.read_text()))
    elif isinstance(source, str):
        documents = list(yaml.safe_load_all(source))
    elif isinstance(source, Mapping):
        documents = [source]
    else:
        documents = list(source)
    result: list[dict[str, Any]] = []
    for document in documents:
        if document is None:
            continue
        if not isinstance(document, Mapping):
            raise ValueError(f"a manifest must be a mapping, got {type(document).__name__}")
        result.append(dict(document))
    return result


def load_crds(source: ManifestSource) -> list[dict[str, Any]]:
    """The CustomResourceDefinitions of a manifest source, skipping anything else.

    A CRD directory may hold a ``kustomization.yaml`` next to the CRDs; it is ignored.

    Args:
        source: See :func:`load_manifests`.

    Returns:
        The CRD documents, in order.
    """
    return [d for d in load_manifests(source) if d.get("kind") == "CustomResourceDefinition"]


class ClusterAccess:
    """Client side of a test cluster: kubeconfig, Python client, kubectl, logs."""

    def __init__(
        self,
        kubeconfig: Path,
        *,
        provider: str,
        kubectl: Path | None = None,
        bin_dir: Path | None = None,
        log_files: Mapping[str, Path] | None = None,
    ) -> None:
        """Describe a reachable cluster.

        Args:
            kubeconfig: Admin kubeconfig of the cluster.
            provider: Name of the provider that made the cluster (``local``, ``kind``, ...).
            kubectl: kubectl binary; :func:`find_kubectl` when None.
            bin_dir: Directory of the cluster binaries, when the provider built them.
            log_files: Component name to log file, when the provider runs the components.
        """
        self.kubeconfig = kubeconfig
        self.provider = provider
        self.bin_dir = bin_dir
        self.log_files = dict(log_files or {})
        self._kubectl = kubectl or find_kubectl(bin_dir)
        self._api_client: client.ApiClient | None = None

    def api_client(self) -> client.ApiClient:
        """A Kubernetes Python client configured from the admin kubeconfig (cached)."""
        if self._api_client is None:
            self._api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=str(self.kubeconfig)
            )
        return self._api_client

    def dynamic(self) -> dynamic.DynamicClient:
        """A DynamicClient for any kind, CRDs included (discovery cached per client)."""
        return dynamic_client(self.api_client())

    def client_configuration(self) -> client.Configuration:
        """A fresh client Configuration for the admin kubeconfig."""
        configuration = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig), client_configuration=configuration
        )
        return configuration

    def close(self) -> None:
        """Release the cached Python client's connections."""
        if self._api_client is not None:
            self._api_client.close()  # type: ignore[no-untyped-call]
            self._api_client = None

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster.

        Args:
            *args: kubectl arguments.
            input: Text for kubectl's stdin.
            check: Raise :class:`KubectlError` on a non-zero exit.
            timeout: Seconds before kubectl is killed.

        Returns:
            The finished process with text stdout and stderr.

        Raises:
            KubectlError: If kubectl fails and ``check`` is set.
            FileNotFoundError: If there is no kubectl.
        """
        if self._kubectl is None:
            raise FileNotFoundError("kubectl not found: run `nox -s testenv` or put it on PATH")
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        result = subprocess.run(
            [str(self._kubectl), *args],
            input=input,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise KubectlError(args, result.returncode, result.stderr)
        return result

    def apply(
        self,
        source: ManifestSource,
        *,
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> list[dict[str, Any]]:
        """Server-side apply manifests and return the objects as the server stored them.

        Args:
            source: Objects, YAML text, a file or a directory (see :func:`load_manifests`).
            namespace: Namespace for namespaced objects that do not name one.
            dry_run: Validate and default on the server without persisting.

        Returns:
            The applied objects.

        Raises:
            KubectlError: If the server rejects an object.
            ValueError: If the source holds no object.
        """
        objects = load_manifests(source)
        if not objects:
            raise ValueError("nothing to apply")
        args = [
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=agent-sandbox-tests",
        ]
        if namespace:
            args += ["--namespace", namespace]
        if dry_run:
            args.append("--dry-run=server")
        args += ["-o", "json", "-f", "-"]
        text = "\n---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objects)
        output = json.loads(self.kubectl(*args, input=text).stdout)
        items: list[dict[str, Any]] = output.get("items", [output]) if output else []
        return items

    def install_crds(self, source: ManifestSource, *, timeout: float = 60.0) -> list[str]:
        """Apply CustomResourceDefinitions and wait until each is Established.

        Args:
            source: CRD manifests (see :func:`load_manifests`).
            timeout: Seconds to wait for all of them.

        Returns:
            The CRD names.

        Raises:
            ValueError: If the source holds something other than CRDs, or nothing.
            KubectlError: If the apiserver rejects a CRD.
            TimeoutError: If a CRD does not become Established in time.
        """
        crds = load_manifests(source)
        if not crds:
            raise ValueError("no CustomResourceDefinition to install")
        for crd in crds:
            if crd.get("kind") != "CustomResourceDefinition":
                raise ValueError(f"not a CustomResourceDefinition: {crd.get('kind')}")
        self.apply(crds)
        names = [str(crd["metadata"]["name"]) for crd in crds]
        for name in names:
            ref = ObjectRef("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
            self.wait_for_condition(ref, "Established", timeout=timeout)
        _log.info("CRDs established: %s", ", ".join(names))
        return names

    def wait_for_condition(
        self,
        obj: ObjectRef | Mapping[str, Any],
        condition_type: str,
        *,
        status: str = "True",
        timeout: float = 60.0,
    ) -> dict[str, Any]:
        """Watch ``obj`` until its condition ``condition_type`` has ``status``.

        See :func:`kube_agent_sandbox.testing.waiting.wait_for_condition`.

        Args:
            obj: Object reference or manifest.
            condition_type: Condition type, e.g. ``Ready``.
            status: ``"True"``, ``"False"`` or ``"Unknown"``.
            timeout: Seconds before :class:`~.waiting.WaitTimeoutError`.

        Returns:
            The object when the condition matched.
        """
        return wait_for_condition(
            self.api_client(), obj, condition_type, status=status, timeout=timeout
        )

    def wait_for_deletion(
        self, obj: ObjectRef | Mapping[str, Any], *, timeout: float = 60.0
    ) -> None:
        """Watch ``obj`` until it is gone.

        Args:
            obj: Object reference or manifest.
            timeout: Seconds before :class:`~.waiting.WaitTimeoutError`.
        """
        wait_for_deletion(self.api_client(), obj, timeout=timeout)

    def log_tails(self, lines: int = 40) -> dict[str, str]:
        """The last lines of each component's log file (empty for providers without logs)."""
        tails: dict[str, str] = {}
        for name, path in self.log_files.items():
            try:
                text = path.read_text(errors="replace")
            except OSError as err:
                tails[name] = f"<cannot read {path}: {err}>"
                continue
            tails[name] = "\n".join(text.splitlines()[-lines:])
        return tails
