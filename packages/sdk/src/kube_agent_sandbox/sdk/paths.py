"""REST paths and query parameters of the calls the SDK makes (pure)."""

from __future__ import annotations

from kube_agent_sandbox.api import rest
from kube_agent_sandbox.api.rest import Resource


def resource_path(
    resource: Resource,
    namespace: str | None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """``/apis/<group>/<version>/namespaces/<ns>/<plural>[/<name>[/<sub>]]``.

    The SDK never lists across namespaces: a namespaced resource always needs a namespace.

    Raises:
        ValueError: a namespaced object without namespace, or a subresource without name.
    """
    if resource.namespaced and not namespace:
        raise ValueError(f"{resource.plural} are namespaced: a namespace is required")
    return rest.resource_path(resource, namespace, name, subresource)


def resource_label(resource: Resource, subresource: str | None = None) -> str:
    """``<plural>.<group>`` (or ``pods/exec``) as RBAC names it, for error messages."""
    name = resource.plural if not subresource else f"{resource.plural}/{subresource}"
    return f"{name}.{resource.group}" if resource.group else name


def exec_params(
    command: list[str],
    *,
    container: str | None,
    stdin: bool,
    tty: bool,
) -> list[tuple[str, str]]:
    """Query parameters of ``pods/exec`` (one ``command`` per argv element).

    Raises:
        ValueError: on an empty command.
    """
    if not command or not all(isinstance(part, str) for part in command):
        raise ValueError("command must be a non-empty list of strings")
    params = [("command", part) for part in command]
    params += [
        ("stdout", "true"),
        ("stderr", "false" if tty else "true"),
        ("stdin", "true" if stdin else "false"),
        ("tty", "true" if tty else "false"),
    ]
    if container:
        params.append(("container", container))
    return params
