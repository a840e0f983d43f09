"""The state keeper's names and its snapshot-to-Sandbox mapping (the rest runs against a real
kube-apiserver in tests/integration/test_snapshot_keepstate.py)."""

from __future__ import annotations

import re

from kube_agent_sandbox.controller.runtime import Request
from kube_agent_sandbox.extensions.snapshot.keepstate import (
    ANNOTATION_SAVED_ON_SUSPEND,
    snapshot_name,
    snapshot_to_sandbox,
)

# An OCI tag (the snapshot's default tag is its name) and a DNS subdomain.
TAG = re.compile(r"^[a-z0-9][a-z0-9.-]{0,127}$")


def test_the_name_is_the_sandbox_and_the_generation() -> None:
    assert snapshot_name("box", 7) == "box-suspend-7"
    assert snapshot_name("box", 7) == snapshot_name("box", 7)
    assert snapshot_name("box", 8) != snapshot_name("box", 7)


def test_a_long_sandbox_name_is_cut_and_hashed_and_stays_a_valid_tag() -> None:
    long_a = "a" * 200
    long_b = "a" * 199 + "b"
    name_a, name_b = snapshot_name(long_a, 3), snapshot_name(long_b, 3)
    assert name_a != name_b
    for name in (name_a, name_b):
        assert len(name) <= 100
        assert TAG.match(name)
        assert name.endswith("-suspend-3")


def test_only_the_keepers_snapshots_wake_their_sandbox() -> None:
    mine = {
        "metadata": {
            "namespace": "ns",
            "name": "box-suspend-2",
            "annotations": {ANNOTATION_SAVED_ON_SUSPEND: "uid"},
        },
        "spec": {"sandboxName": "box"},
    }
    assert snapshot_to_sandbox(mine) == [Request("ns", "box")]
    explicit = {"metadata": {"namespace": "ns", "name": "fork"}, "spec": {"sandboxName": "box"}}
    assert snapshot_to_sandbox(explicit) == []
