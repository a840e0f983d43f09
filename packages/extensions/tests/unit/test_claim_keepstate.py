"""A claim or its template passes the keep-state annotations to its Sandbox, cold and warm; the
claim's value wins over the template's, key by key."""

from __future__ import annotations

from typing import Any

import pytest
from claim_test_support import World

from kube_agent_sandbox.api import keepstate as k
from kube_agent_sandbox.api.resources import SANDBOX_CLAIMS, SANDBOX_TEMPLATES, SANDBOXES
from kube_agent_sandbox.extensions.claim.fromsnapshot import kept_state_annotations

ON = k.ANNOTATION_SNAPSHOT_ON_SUSPEND
PULL = k.ANNOTATION_SNAPSHOT_PULL_SECRET
FALLBACK = k.ANNOTATION_SNAPSHOT_ON_SUSPEND_FALLBACK


def _annotate(w: World, resource: Any, name: str, annotations: dict[str, str]) -> None:
    w.api.mutate(
        resource, name, lambda o: o["metadata"].setdefault("annotations", {}).update(annotations)
    )


@pytest.mark.parametrize("warm", [False, True])
async def test_the_claims_opt_in_reaches_its_sandbox(warm: bool) -> None:
    w = World()
    if warm:
        w.member("pool-aaaaa")
    w.claim()
    _annotate(w, SANDBOX_CLAIMS, "claim", {ON: k.MODE_MEMORY, FALLBACK: k.MODE_FILESYSTEM})
    await w.reconcile()
    annotations = w.get(SANDBOXES, "pool-aaaaa" if warm else "claim")["metadata"]["annotations"]
    assert (annotations[ON], annotations[FALLBACK]) == (k.MODE_MEMORY, k.MODE_FILESYSTEM)


@pytest.mark.parametrize("warm", [False, True])
async def test_the_templates_opt_in_reaches_its_sandbox_and_the_claim_wins(warm: bool) -> None:
    w = World()
    _annotate(w, SANDBOX_TEMPLATES, "tmpl", {ON: k.MODE_MEMORY, PULL: "tmpl-secret"})
    if warm:
        w.member("pool-aaaaa")
    w.claim()
    _annotate(w, SANDBOX_CLAIMS, "claim", {ON: k.MODE_FILESYSTEM})
    await w.reconcile()
    annotations = w.get(SANDBOXES, "pool-aaaaa" if warm else "claim")["metadata"]["annotations"]
    assert (annotations[ON], annotations[PULL]) == (k.MODE_FILESYSTEM, "tmpl-secret")


async def test_without_an_opt_in_nothing_is_added() -> None:
    w = World()
    w.claim()
    await w.reconcile()
    assert ON not in w.get(SANDBOXES, "claim")["metadata"]["annotations"]


def test_empty_values_do_not_override() -> None:
    template = {"metadata": {"annotations": {ON: k.MODE_FILESYSTEM}}}
    claim = {"metadata": {"annotations": {ON: ""}}}
    assert kept_state_annotations(claim, template) == {ON: k.MODE_FILESYSTEM}
    assert kept_state_annotations(claim, None) == {}
