"""Event recorder: events.k8s.io/v1 shape, series aggregation, best effort."""

from __future__ import annotations

import pytest

from kube_agent_sandbox.api.rest import EVENTS
from kube_agent_sandbox.controller.runtime import ApiError, EventSink, FakeApi, Obj, truncate_note
from kube_agent_sandbox.controller.runtime.events import NOTE_LIMIT

SANDBOX: Obj = {
    "apiVersion": "example.com/v1",
    "kind": "Thing",
    "metadata": {"name": "t1", "namespace": "ns", "uid": "u-1", "resourceVersion": "7"},
}


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_event_has_events_v1_shape() -> None:
    api = FakeApi()
    sink = EventSink(api, hostname="host-1")
    rec = sink.recorder("thing-controller")
    rec.event(SANDBOX, type_="Normal", reason="Created", action="Create", note="made it")
    await sink.flush()
    [event] = api.objects(EVENTS)
    assert event["metadata"]["namespace"] == "ns"
    assert event["metadata"]["name"].startswith("t1.")
    assert event["reportingController"] == "thing-controller"
    assert event["reportingInstance"] == "thing-controller-host-1"
    assert event["action"] == "Create"
    assert event["reason"] == "Created"
    assert event["type"] == "Normal"
    assert event["note"] == "made it"
    assert event["eventTime"].endswith("Z")
    assert event["regarding"] == {
        "apiVersion": "example.com/v1",
        "kind": "Thing",
        "name": "t1",
        "namespace": "ns",
        "uid": "u-1",
        "resourceVersion": "7",
    }


async def test_repeats_become_a_series_not_new_events() -> None:
    api = FakeApi()
    clock = Clock()
    sink = EventSink(api, clock=clock)
    rec = sink.recorder("c")
    rec.event(SANDBOX, type_="Warning", reason="Failed", action="Sync", note="x")
    await sink.flush()
    for _ in range(4):
        rec.event(SANDBOX, type_="Warning", reason="Failed", action="Sync", note="x")
    await sink.flush()
    events = api.objects(EVENTS)
    assert len(events) == 1
    assert events[0]["series"]["count"] == 5
    # a different note is a different event
    rec.event(SANDBOX, type_="Warning", reason="Failed", action="Sync", note="y")
    # after the 6 minute window the same event is new again
    clock.now += 361
    rec.event(SANDBOX, type_="Warning", reason="Failed", action="Sync", note="x")
    await sink.flush()
    assert len(api.objects(EVENTS)) == 3


async def test_cluster_scoped_object_events_go_to_default_namespace() -> None:
    api = FakeApi()
    sink = EventSink(api)
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "u"}}
    sink.recorder("c").event(node, type_="Normal", reason="R", action="A", note="n")
    await sink.flush()
    [event] = api.objects(EVENTS)
    assert event["metadata"]["namespace"] == "default"
    assert "namespace" not in event["regarding"]


async def test_long_fields_truncated_and_write_errors_swallowed() -> None:
    api = FakeApi()
    sink = EventSink(api)
    rec = sink.recorder("c")
    api.errors[("create", "events")] = ApiError(403, "Forbidden", "no")
    rec.event(SANDBOX, type_="Normal", reason="A", action="A", note="lost")
    await sink.flush()
    assert api.objects(EVENTS) == []
    rec.event(SANDBOX, type_="Normal", reason="B", action="A" * 500, note="n" * 5000)
    await sink.flush()
    [event] = api.objects(EVENTS)
    assert len(event["note"]) == 1024
    assert len(event["action"]) == 128


async def test_full_queue_drops_events() -> None:
    api = FakeApi()
    sink = EventSink(api, max_queue=2)
    rec = sink.recorder("c")
    for i in range(5):
        rec.event(SANDBOX, type_="Normal", reason=f"R{i}", action="A", note="n")
    assert sink.dropped == 3
    await sink.flush()
    assert len(api.objects(EVENTS)) == 2


async def test_background_writer_writes_and_stop_flushes() -> None:
    api = FakeApi()
    sink = EventSink(api, flush_interval=3600)
    sink.start()
    rec = sink.recorder("c")
    rec.event(SANDBOX, type_="Normal", reason="R", action="A", note="n")
    rec.event(SANDBOX, type_="Normal", reason="Q", action="A", note="n")
    await sink.stop()
    assert len(api.objects(EVENTS)) == 2


def test_malformed_object_never_raises() -> None:
    sink = EventSink(FakeApi())
    sink.recorder("c").event({"metadata": None}, type_="Normal", reason="R", action="A", note="n")


@pytest.mark.parametrize(
    ("length", "expected_tail"),
    [(0, ""), (1024, "x"), (1025, "..."), (5000, "...")],
)
def test_notes_are_cut_to_the_api_limit_with_an_ellipsis(length: int, expected_tail: str) -> None:
    note = truncate_note("x" * length)
    assert len(note) == min(length, NOTE_LIMIT)
    assert note.endswith(expected_tail)
