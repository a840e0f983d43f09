"""Controller: event mapping (primary, owned by group+kind, mapped) and reconcile outcomes."""

from __future__ import annotations

import asyncio

import pytest

from kube_agent_sandbox.controller.runtime import (
    ApiError,
    Controller,
    FakeApi,
    Informer,
    ItemExponentialBackoff,
    Obj,
    ReconcileError,
    Request,
    Resource,
    Result,
    RuntimeMetrics,
    TerminalError,
    error_from_status,
)
from kube_agent_sandbox.testing.waiting import eventually

PARENTS = Resource("example.com", "v2", "parents", "Parent")
CHILDREN = Resource("", "v1", "configmaps", "ConfigMap")
OTHERS = Resource("", "v1", "secrets", "Secret")


class ScriptedReconciler:
    """Returns/raises what the test queues per request, records calls and overlap."""

    def __init__(self) -> None:
        self.calls: list[Request] = []
        self.outcomes: dict[Request, list[Result | BaseException]] = {}
        self.running: set[Request] = set()
        self.overlap = False
        self.gate: asyncio.Event | None = None

    async def reconcile(self, request: Request) -> Result:
        if request in self.running:
            self.overlap = True
        self.running.add(request)
        try:
            self.calls.append(request)
            if self.gate is not None:
                await self.gate.wait()
            queued = self.outcomes.get(request)
            outcome = queued.pop(0) if queued else Result()
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome
        finally:
            self.running.discard(request)


def owned(
    name: str, *, owner_api: str, owner_kind: str, owner: str, controller: bool = True
) -> Obj:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "ownerReferences": [
                {
                    "apiVersion": owner_api,
                    "kind": owner_kind,
                    "name": owner,
                    "uid": "uid-" + owner,
                    "controller": controller,
                }
            ],
        }
    }


def sample(metrics: RuntimeMetrics, metric: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(metric, labels)
    return 0.0 if value is None else value


def make(reconciler: ScriptedReconciler, metrics: RuntimeMetrics, **kwargs: object) -> Controller:
    return Controller(
        "parent",
        for_resource=PARENTS,
        reconciler=reconciler,
        metrics=metrics,
        rate_limiter=ItemExponentialBackoff(0.001, 0.01),
        **kwargs,  # type: ignore[arg-type]
    )


def test_owner_request_matches_group_and_kind_ignoring_version() -> None:
    ctrl = make(ScriptedReconciler(), RuntimeMetrics())
    same_group_other_version = owned(
        "c", owner_api="example.com/v1alpha1", owner_kind="Parent", owner="p1"
    )
    assert ctrl.owner_request(same_group_other_version) == Request("ns", "p1")
    other_group = owned("c", owner_api="other.com/v2", owner_kind="Parent", owner="p1")
    assert ctrl.owner_request(other_group) is None
    other_kind = owned("c", owner_api="example.com/v2", owner_kind="Uncle", owner="p1")
    assert ctrl.owner_request(other_kind) is None
    not_controller = owned(
        "c", owner_api="example.com/v2", owner_kind="Parent", owner="p1", controller=False
    )
    assert ctrl.owner_request(not_controller) is None
    assert ctrl.owner_request({"metadata": {"name": "x", "namespace": "ns"}}) is None


def test_owner_request_of_cluster_scoped_primary_has_no_namespace() -> None:
    cluster = Resource("example.com", "v2", "parents", "Parent", namespaced=False)
    ctrl = Controller("c", for_resource=cluster, reconciler=ScriptedReconciler())
    child = owned("c", owner_api="example.com/v2", owner_kind="Parent", owner="p1")
    assert ctrl.owner_request(child) == Request("", "p1")


def test_workers_must_be_positive() -> None:
    with pytest.raises(ValueError, match="workers"):
        Controller("c", for_resource=PARENTS, reconciler=ScriptedReconciler(), workers=0)


def test_handlers_map_events_to_requests() -> None:
    metrics = RuntimeMetrics()
    calls: list[tuple[Obj | None, Obj | None]] = []

    def only_labelled(old: Obj | None, new: Obj | None) -> bool:
        calls.append((old, new))
        obj = new or old or {}
        return bool(obj["metadata"].get("labels"))

    ctrl = make(ScriptedReconciler(), metrics, owns=[(CHILDREN, only_labelled)])
    child = owned("c", owner_api="example.com/v2", owner_kind="Parent", owner="p1")
    h = ctrl.owned_handler(only_labelled)
    assert h.on_add is not None
    assert h.on_update is not None
    assert h.on_delete is not None
    h.on_add(child)
    assert len(ctrl.queue) == 0  # filtered out
    labelled = {**child, "metadata": {**child["metadata"], "labels": {"a": "b"}}}
    moved = owned("c", owner_api="example.com/v2", owner_kind="Parent", owner="p2")
    moved["metadata"]["labels"] = {"a": "b"}
    h.on_update(labelled, moved)  # owner changed: both old and new owners are enqueued
    assert len(ctrl.queue) == 2
    assert calls[-1] == (labelled, moved)

    mapped = ctrl.mapped_handler(lambda o: [Request("ns", "m1"), Request("ns", "m2")])
    assert mapped.on_delete is not None
    mapped.on_delete({"metadata": {"name": "s"}})
    assert len(ctrl.queue) == 4

    prim = ctrl.primary_handler()
    assert prim.on_add is not None
    prim.on_add({"metadata": {"name": "p1", "namespace": "ns"}})
    assert len(ctrl.queue) == 4  # p1 already queued: dedup


async def test_end_to_end_with_informers_and_fake_api() -> None:
    api = FakeApi()
    metrics = RuntimeMetrics()
    rec = ScriptedReconciler()
    ctrl = make(
        rec,
        metrics,
        owns=[CHILDREN],
        watches=[(OTHERS, lambda o: [Request("ns", o["metadata"]["labels"]["parent"])])],
    )
    informers: dict[Resource, Informer] = {}

    def informer(resource: Resource) -> Informer:
        if resource not in informers:
            informers[resource] = Informer(api, resource)
        return informers[resource]

    ctrl.register(informer)
    assert set(informers) == {PARENTS, CHILDREN, OTHERS}
    for inf in informers.values():
        inf.start()
    ctrl.start()
    try:
        await api.create(PARENTS, "ns", {"metadata": {"name": "p1"}})
        await eventually(lambda: Request("ns", "p1") in rec.calls)
        rec.calls.clear()
        await api.create(
            CHILDREN, "ns", owned("c1", owner_api="example.com/v1", owner_kind="Parent", owner="p9")
        )
        await eventually(lambda: Request("ns", "p9") in rec.calls)
        await api.create(OTHERS, "ns", {"metadata": {"name": "s", "labels": {"parent": "p7"}}})
        await eventually(lambda: Request("ns", "p7") in rec.calls)
        assert (
            sample(
                metrics, "controller_runtime_reconcile_total", controller="parent", result="success"
            )
            >= 3
        )
        assert (
            sample(metrics, "controller_runtime_max_concurrent_reconciles", controller="parent")
            == 1
        )
    finally:
        await ctrl.stop(1)
        for inf in informers.values():
            await inf.stop()


async def run_one(ctrl: Controller, rec: ScriptedReconciler, req: Request) -> None:
    ctrl.queue.add(req)
    item = await ctrl.queue.get()
    try:
        await ctrl.reconcile_one(item)
    finally:
        ctrl.queue.done(item)


async def test_error_is_retried_with_backoff_and_counted() -> None:
    metrics = RuntimeMetrics()
    rec = ScriptedReconciler()
    ctrl = make(rec, metrics)
    req = Request("ns", "p")
    rec.outcomes[req] = [TimeoutError("boom"), ConnectionResetError("boom"), Result()]
    ctrl.start()
    try:
        ctrl.queue.add(req)
        await eventually(lambda: len(rec.calls) == 3)
        await eventually(lambda: ctrl.queue.num_requeues(req) == 0)  # forgotten after success
    finally:
        await ctrl.stop(1)
    assert sample(metrics, "controller_runtime_reconcile_errors_total", controller="parent") == 2
    assert (
        sample(metrics, "controller_runtime_reconcile_total", controller="parent", result="error")
        == 2
    )
    assert (
        sample(metrics, "controller_runtime_reconcile_total", controller="parent", result="success")
        == 1
    )
    assert sample(metrics, "workqueue_retries_total", name="parent") == 2
    assert (
        sample(metrics, "controller_runtime_reconcile_time_seconds_count", controller="parent") == 3
    )


async def test_terminal_error_is_not_requeued() -> None:
    metrics = RuntimeMetrics()
    rec = ScriptedReconciler()
    ctrl = make(rec, metrics)
    req = Request("ns", "p")
    rec.outcomes[req] = [TerminalError("bad spec")]
    await run_one(ctrl, rec, req)
    assert ctrl.queue.delayed() == frozenset()
    assert len(ctrl.queue) == 0
    assert (
        sample(metrics, "controller_runtime_terminal_reconcile_errors_total", controller="parent")
        == 1
    )
    assert sample(metrics, "controller_runtime_reconcile_errors_total", controller="parent") == 1


def _namespace_terminating() -> ApiError:
    status = {
        "kind": "Status",
        "code": 403,
        "reason": "Forbidden",
        "message": 'sandboxes "p-x" is forbidden: unable to create new content in namespace ns '
        "because it is being terminated",
        "details": {"causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}]},
    }
    return error_from_status(403, status)


async def test_namespace_terminating_ends_the_work_without_an_error() -> None:
    metrics = RuntimeMetrics()
    rec = ScriptedReconciler()
    ctrl = make(rec, metrics)
    req = Request("ns", "p")
    rec.outcomes[req] = [_namespace_terminating()]
    await run_one(ctrl, rec, req)
    assert ctrl.queue.delayed() == frozenset()
    assert len(ctrl.queue) == 0
    assert ctrl.queue.num_requeues(req) == 0
    assert sample(metrics, "controller_runtime_reconcile_errors_total", controller="parent") == 0


async def test_other_forbidden_errors_are_still_retried() -> None:
    metrics = RuntimeMetrics()
    rec = ScriptedReconciler()
    ctrl = make(rec, metrics)
    req = Request("ns", "p")
    rec.outcomes[req] = [error_from_status(403, {"kind": "Status", "code": 403})]
    await run_one(ctrl, rec, req)
    assert ctrl.queue.num_requeues(req) == 1
    assert sample(metrics, "controller_runtime_reconcile_errors_total", controller="parent") == 1


def _not_found(group: str, plural: str, name: str) -> ApiError:
    status = {
        "kind": "Status",
        "code": 404,
        "reason": "NotFound",
        "message": f'{plural}.{group} "{name}" not found',
        "details": {"name": name, "group": group, "kind": plural},
    }
    return error_from_status(404, status)


async def test_the_object_deleted_during_its_reconcile_ends_the_work_without_an_error() -> None:
    metrics = RuntimeMetrics()
    rec = ScriptedReconciler()
    ctrl = make(rec, metrics)
    req = Request("ns", "p")
    rec.outcomes[req] = [_not_found("example.com", "parents", "p")]
    await run_one(ctrl, rec, req)
    assert ctrl.queue.delayed() == frozenset()
    assert len(ctrl.queue) == 0
    assert ctrl.queue.num_requeues(req) == 0
    assert sample(metrics, "controller_runtime_reconcile_errors_total", controller="parent") == 0


def _wrapped(cause: ApiError, *, implicit: bool = False) -> Exception:
    """A reconciler's own error carrying ``cause`` (as its cause, or only as its context)."""
    wrapper = ReconcileError(f"failed to patch: {cause}")
    if implicit:
        wrapper.__context__ = cause
    else:
        wrapper.__cause__ = cause
    return wrapper


async def test_a_wrapped_not_found_of_the_object_itself_ends_the_work() -> None:
    metrics = RuntimeMetrics()
    rec = ScriptedReconciler()
    ctrl = make(rec, metrics)
    req = Request("ns", "p")
    rec.outcomes[req] = [_wrapped(_not_found("example.com", "parents", "p"))]
    await run_one(ctrl, rec, req)
    assert ctrl.queue.num_requeues(req) == 0
    assert len(ctrl.queue) == 0
    assert sample(metrics, "controller_runtime_reconcile_errors_total", controller="parent") == 0


async def test_a_wrapped_namespace_terminating_ends_the_work() -> None:
    metrics = RuntimeMetrics()
    rec = ScriptedReconciler()
    ctrl = make(rec, metrics)
    req = Request("ns", "p")
    rec.outcomes[req] = [_wrapped(_namespace_terminating())]
    await run_one(ctrl, rec, req)
    assert ctrl.queue.num_requeues(req) == 0
    assert sample(metrics, "controller_runtime_reconcile_errors_total", controller="parent") == 0


@pytest.mark.parametrize(
    "error",
    [
        _wrapped(_not_found("", "configmaps", "p")),  # a dependent's 404, wrapped
        _wrapped(_not_found("example.com", "parents", "p"), implicit=True),  # context, not cause
    ],
)
async def test_wrapped_errors_that_do_not_end_the_work_are_retried(error: Exception) -> None:
    metrics = RuntimeMetrics()
    rec = ScriptedReconciler()
    ctrl = make(rec, metrics)
    req = Request("ns", "p")
    rec.outcomes[req] = [error]
    await run_one(ctrl, rec, req)
    assert ctrl.queue.num_requeues(req) == 1
    assert sample(metrics, "controller_runtime_reconcile_errors_total", controller="parent") == 1


@pytest.mark.parametrize(
    "error",
    [
        _not_found("", "configmaps", "p"),  # a dependent of the same name
        _not_found("example.com", "parents", "other"),  # another object of the kind
        _not_found("other.example.com", "parents", "p"),  # same plural, other group
        error_from_status(404, b"404 page not found"),  # no Status at all
    ],
)
async def test_other_not_found_errors_are_still_retried(error: ApiError) -> None:
    metrics = RuntimeMetrics()
    rec = ScriptedReconciler()
    ctrl = make(rec, metrics)
    req = Request("ns", "p")
    rec.outcomes[req] = [error]
    await run_one(ctrl, rec, req)
    assert ctrl.queue.num_requeues(req) == 1
    assert sample(metrics, "controller_runtime_reconcile_errors_total", controller="parent") == 1


async def test_requeue_after_schedules_delayed_add() -> None:
    metrics = RuntimeMetrics()
    rec = ScriptedReconciler()
    ctrl = make(rec, metrics)
    req = Request("ns", "p")
    rec.outcomes[req] = [Result(requeue_after=30)]
    await run_one(ctrl, rec, req)
    assert ctrl.queue.delayed() == {req}
    assert len(ctrl.queue) == 0
    assert (
        sample(
            metrics,
            "controller_runtime_reconcile_total",
            controller="parent",
            result="requeue_after",
        )
        == 1
    )
    ctrl.queue.shutdown()


async def test_requeue_flag_uses_rate_limiter() -> None:
    metrics = RuntimeMetrics()
    rec = ScriptedReconciler()
    ctrl = make(rec, metrics)
    req = Request("ns", "p")
    rec.outcomes[req] = [Result(requeue=True)]
    await run_one(ctrl, rec, req)
    assert ctrl.queue.num_requeues(req) == 1
    assert (
        sample(metrics, "controller_runtime_reconcile_total", controller="parent", result="requeue")
        == 1
    )
    ctrl.queue.shutdown()


async def test_same_key_never_reconciled_concurrently_with_many_workers() -> None:
    metrics = RuntimeMetrics()
    rec = ScriptedReconciler()
    rec.gate = asyncio.Event()
    ctrl = make(rec, metrics, workers=4)
    ctrl.start()
    try:
        req = Request("ns", "p")
        ctrl.queue.add(req)
        await eventually(lambda: len(rec.calls) == 1)
        for _ in range(10):
            ctrl.queue.add(req)
        await asyncio.sleep(0.01)
        assert len(rec.calls) == 1
        assert sample(metrics, "controller_runtime_active_workers", controller="parent") == 1
        rec.gate.set()
        await eventually(lambda: len(rec.calls) == 2)
        assert not rec.overlap
    finally:
        await ctrl.stop(1)


async def test_stop_waits_for_in_flight_then_cancels_after_grace() -> None:
    rec = ScriptedReconciler()
    rec.gate = asyncio.Event()
    ctrl = make(rec, RuntimeMetrics(), workers=2)
    ctrl.start()
    ctrl.queue.add(Request("ns", "a"))
    await eventually(lambda: len(rec.calls) == 1)
    assert await ctrl.stop(0.05) is False  # gate never opens: cancelled after grace

    rec2 = ScriptedReconciler()
    rec2.gate = asyncio.Event()
    ctrl2 = make(rec2, RuntimeMetrics())
    ctrl2.start()
    ctrl2.queue.add(Request("ns", "a"))
    await eventually(lambda: len(rec2.calls) == 1)
    stopping = asyncio.create_task(ctrl2.stop(5))
    await asyncio.sleep(0.01)
    ctrl2.queue.add(Request("ns", "b"))  # refused: stopping
    rec2.gate.set()
    assert await stopping is True
    assert rec2.calls == [Request("ns", "a")]
