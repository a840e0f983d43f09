"""Injection of a claim's ``spec.env`` into the pod spec of its cold-started Sandbox.

Mirrors upstream v0.5.6 extensions/controllers/sandboxclaim_controller.go, injectEnvs.

The template decides whether claims may add variables (``Allowed``), also replace the
template's (``Overrides``) or neither (``Disallowed`` / unset). Two failure kinds exist because
upstream treats them differently: a policy refusal is a user error that is written to the
claim's Ready condition and not retried; a missing target container or a forbidden override
is returned as a reconcile error (retried with backoff).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from kube_agent_sandbox.api.conversion._common import go_quote

POLICY_ALLOWED: Final = "Allowed"
POLICY_OVERRIDES: Final = "Overrides"
POLICY_DISALLOWED: Final = "Disallowed"

_REJECTED: Final = "environment variable injection rejected"


class EnvInjectionRejectedError(ValueError):
    """The template's policy refuses the claim's variables (Ready ``EnvVarsInjectionRejected``)."""


class EnvInjectionError(ValueError):
    """A variable targets a missing container or overrides one under ``Allowed`` (retried)."""


def _env_var(entry: Mapping[str, Any]) -> dict[str, Any]:
    # Go's corev1.EnvVar drops an empty value (omitempty).
    name = str(entry.get("name") or "")
    value = str(entry.get("value") or "")
    return {"name": name, "value": value} if value else {"name": name}


def _inject(container: dict[str, Any], envs: Sequence[Mapping[str, Any]], *, policy: str) -> None:
    if policy == POLICY_ALLOWED and container.get("envFrom"):
        raise EnvInjectionRejectedError(
            f"{_REJECTED}: container {go_quote(str(container.get('name') or ''))} uses EnvFrom "
            "sources; Allowed policy cannot safely prevent overriding EnvFrom-provided variables"
        )
    current = container.get("env")
    if not isinstance(current, list):
        current = []
        container["env"] = current
    for env in envs:
        new = _env_var(env)
        index = next(
            (i for i, existing in enumerate(current) if existing.get("name") == new["name"]), -1
        )
        if index < 0:
            current.append(new)
        elif policy == POLICY_OVERRIDES:
            current[index] = new
        else:
            raise EnvInjectionError(
                "environment variable override is not allowed by the template policy for "
                f"variable {go_quote(new['name'])}"
            )


def inject_env(pod_spec: dict[str, Any], env: Sequence[Mapping[str, Any]], *, policy: str) -> None:
    """Add the claim's variables to ``pod_spec``'s containers, in place.

    Variables with a ``containerName`` go to the init containers and containers of that name;
    the others go to the first container. Under ``Overrides`` a variable already present is
    replaced in place by ``{name, value}``; new names are appended. Nothing happens when
    ``env`` is empty. On error ``pod_spec`` may be partly modified: callers build a fresh
    Sandbox for every attempt, as upstream does.

    Args:
        pod_spec: The Sandbox's ``spec.podTemplate.spec`` (a private copy).
        env: The claim's ``spec.env`` entries (``name``, ``value``, optional ``containerName``).
        policy: The template's ``envVarsInjectionPolicy`` (``Allowed``, ``Overrides``,
            ``Disallowed`` or ``""``).

    Raises:
        EnvInjectionRejectedError: the policy is neither ``Allowed`` nor ``Overrides``, or a
            target container uses ``envFrom`` under ``Allowed``.
        EnvInjectionError: a ``containerName`` matches no container, or a variable already
            exists in its container and the policy is ``Allowed``.
    """
    if not env:
        return
    if policy not in (POLICY_ALLOWED, POLICY_OVERRIDES):
        raise EnvInjectionRejectedError(
            f"{_REJECTED}: environment variable injection is not allowed by the template policy"
        )
    by_container: dict[str, list[Mapping[str, Any]]] = {}
    defaults: list[Mapping[str, Any]] = []
    for entry in env:
        target = str(entry.get("containerName") or "")
        if target:
            by_container.setdefault(target, []).append(entry)
        else:
            defaults.append(entry)

    init_containers: list[dict[str, Any]] = pod_spec.get("initContainers") or []
    containers: list[dict[str, Any]] = pod_spec.get("containers") or []
    known = {str(c.get("name") or "") for c in (*init_containers, *containers)}
    for target, entries in by_container.items():
        if target not in known:
            raise EnvInjectionError(
                f"target container {go_quote(target)} not found in template for environment "
                f"variable {go_quote(str(entries[0].get('name') or ''))}"
            )

    for container in init_containers:
        targeted = by_container.get(str(container.get("name") or ""))
        if targeted:
            _inject(container, targeted, policy=policy)
    for index, container in enumerate(containers):
        envs = list(by_container.get(str(container.get("name") or ""), ()))
        if index == 0:
            envs.extend(defaults)
        if envs:
            _inject(container, envs, policy=policy)
