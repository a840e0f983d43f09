"""REST paths and query parameters of the calls the SDK makes (pure)."""

from __future__ import annotations

from urllib.parse import quote

from kube_agent_sandbox.sdk.constants import Resource


def resource_path(
    resource: Resource,
    namespace: str | None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """``/apis/<group>/<version>/namespaces/<ns>/<plural>[/<name>[/<sub>]]``.

    Raises:
        ValueError: a namespaced object without namespace, or a subresource without name.
    """
    base = f"/apis/{resource.group}/{resource.version}" if resource.group else "/api/v1"
    if resource.namespaced:
        if not namespace:
            raise ValueError(f"{resource.plural} are namespaced: a namespace is required")
        base += f"/namespaces/{quote(namespace, safe='')}"
    path = f"{base}/{resource.plural}"
    if name is not None:
        if not name:
            raise ValueError("name must not be empty")
        path += f"/{quote(name, safe='')}"
    if subresource:
        if name is None:
            raise ValueError("a subresource needs an object name")
        path += f"/{subresource}"
    return path


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
