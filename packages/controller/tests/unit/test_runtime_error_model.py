"""The controller's error model: which failures are retried soon, slowly, or never.

A reconciler writes through a :class:`FakeApi` that fails as scripted; a recording rate limiter
on a fake clock logs every backoff the queue asks for, and the reconciler counts its attempts.
Transient failures must be retried with the per-key backoff until they heal; programming
errors and permanent API errors must not be hot-retried (one attempt per ``slow_retry``), and
a programming error must reach the log with its traceback and the panics counter.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable

import aiohttp
import pytest

from kube_agent_sandbox.api import constants as c
from kube_agent_sandbox.controller.runtime import (
    RECONCILER_ERROR_REASON,
    TRANSIENT_STATUSES,
    ApiError,
    Controller,
    ErrorClass,
    FakeApi,
    ItemExponentialBackoff,
    ReconcileError,
    Request,
    Resource,
    Result,
    RuntimeMetrics,
    TerminalError,
    TransientError,
    classify,
    default_controller_rate_limiter,
    error_from_status,
    is_transient,
    wrap,
)

CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
REQ = Request("ns", "cm")


class FakeClock:
    """A monotonic clock that only moves when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class RecordingLimiter:
    """controller-runtime's default limiter on a fake clock, recording every delay it gives."""

    def __init__(self, *, base: float = 0.001, cap: float = 0.004) -> None:
        self.clock = FakeClock()
        self.inner = default_controller_rate_limiter(clock=self.clock)
        # a fast per-item backoff, so a test sees many retries in a fraction of a second
        self.inner.limiters = (ItemExponentialBackoff(base, cap), *self.inner.limiters[1:])
        self.delays: list[float] = []

    def when(self, item: Hashable) -> float:
        self.clock.now += 1.0  # the overall token bucket refills: it never throttles here
        delay = self.inner.when(item)
        self.delays.append(delay)
        return delay

    def forget(self, item: Hashable) -> None:
        self.inner.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return self.inner.num_requeues(item)


class PatchingReconciler:
    """Patches one ConfigMap per reconcile; a failing patch (or ``bug``) fails the reconcile."""

    def __init__(self, api: FakeApi, *, bug: Callable[[], None] | None = None) -> None:
        self.api = api
        self.bug = bug
        self.attempts = 0

    async def reconcile(self, request: Request) -> Result:
        self.attempts += 1
        if self.bug is not None:
            self.bug()
        await self.api.patch(
            CONFIGMAPS,
            request.namespace,
            request.name,
            {"data": {"attempt": str(self.attempts)}},
        )
        return Result()


def sample(metrics: RuntimeMetrics, name: str) -> float:
    value = metrics.registry.get_sample_value(name, {"controller": "cm"})
    return 0.0 if value is None else value


def fixture() -> tuple[FakeApi, RuntimeMetrics, RecordingLimiter]:
    api = FakeApi(default_namespace="ns")
    api.add(CONFIGMAPS, {"metadata": {"name": "cm", "namespace": "ns"}, "data": {}})
    return api, RuntimeMetrics(), RecordingLimiter()


def controller(
    rec: PatchingReconciler,
    metrics: RuntimeMetrics,
    limiter: RecordingLimiter,
    *,
    slow_retry: float = 60.0,
) -> Controller:
    return Controller(
        "cm",
        for_resource=CONFIGMAPS,
        reconciler=rec,
        metrics=metrics,
        rate_limiter=limiter,
        slow_retry=slow_retry,
    )


async def run_for(ctrl: Controller, seconds: float) -> None:
    ctrl.start()
    try:
        ctrl.queue.add(REQ)
        await asyncio.sleep(seconds)
    finally:
        await ctrl.stop(1)


async def run_until(ctrl: Controller, done: Callable[[], bool]) -> None:
    """Run until ``done()`` holds; a loaded machine gets time, a broken retry still fails."""
    ctrl.start()
    try:
        ctrl.queue.add(REQ)
        async with asyncio.timeout(10.0):
            while True:  # polled: the reconciler under test has no event to wait on
                if done():
                    break
                await asyncio.sleep(0.005)
        await asyncio.sleep(0.05)  # room for an extra, unwanted attempt to show up
    finally:
        await ctrl.stop(1)


def conflict() -> ApiError:
    return error_from_status(409, {"kind": "Status", "code": 409, "reason": "Conflict"})


TRANSIENT: list[tuple[str, Callable[[], BaseException]]] = [
    ("409 conflict", conflict),
    (
        "409 already exists",
        lambda: error_from_status(409, {"code": 409, "reason": "AlreadyExists"}),
    ),
    ("403 authorizer not synced", lambda: error_from_status(403, {"code": 403})),
    ("429 throttled", lambda: error_from_status(429, {"code": 429, "reason": "TooManyRequests"})),
    ("500 internal", lambda: error_from_status(500, {"code": 500, "reason": "InternalError"})),
    ("503 unavailable", lambda: error_from_status(503, {"code": 503})),
    ("504 timeout", lambda: error_from_status(504, {"code": 504, "reason": "Timeout"})),
    ("timeout", lambda: TimeoutError("read timed out")),
    ("connection reset", lambda: ConnectionResetError(104, "Connection reset by peer")),
    ("aiohttp disconnect", lambda: aiohttp.ServerDisconnectedError()),
    ("reconciler transient", lambda: TransientError("cache not caught up")),
]


@pytest.mark.parametrize(("label", "make_error"), TRANSIENT, ids=[t[0] for t in TRANSIENT])
async def test_transient_failures_are_retried_with_backoff_until_they_heal(
    label: str, make_error: Callable[[], BaseException]
) -> None:
    api, metrics, limiter = fixture()
    failures = 5
    api.fail("patch", "configmaps", *(make_error() for _ in range(failures)))
    rec = PatchingReconciler(api)
    ctrl = controller(rec, metrics, limiter)
    await run_until(ctrl, lambda: rec.attempts >= failures + 1)
    assert rec.attempts == failures + 1, label
    assert api.obj(CONFIGMAPS, "cm")["data"] == {"attempt": str(failures + 1)}
    # exponential per-key backoff: 1 ms, 2 ms, 4 ms, then the 4 ms cap
    assert limiter.delays == [0.001, 0.002, 0.004, 0.004, 0.004]
    assert ctrl.queue.num_requeues(REQ) == 0  # forgotten after the success
    assert sample(metrics, "controller_runtime_reconcile_errors_total") == failures
    assert sample(metrics, "controller_runtime_reconcile_panics_total") == 0


PROGRAMMING: list[tuple[str, Callable[[], None]]] = [
    ("KeyError", lambda: {}["spec"]),
    ("TypeError", lambda: len(None)),  # type: ignore[arg-type]
    ("AttributeError", lambda: None.items()),  # type: ignore[attr-defined]
    ("ValueError", lambda: int("not a number")),
]


@pytest.mark.parametrize(("label", "bug"), PROGRAMMING, ids=[p[0] for p in PROGRAMMING])
async def test_programming_error_is_logged_counted_and_not_hot_retried(
    label: str, bug: Callable[[], None], caplog: pytest.LogCaptureFixture
) -> None:
    api, metrics, limiter = fixture()
    rec = PatchingReconciler(api, bug=bug)
    ctrl = controller(rec, metrics, limiter, slow_retry=60.0)
    with caplog.at_level(logging.ERROR, logger="kube_agent_sandbox.controller.runtime"):
        await run_for(ctrl, 0.3)
    # a transient error retried in this window would have run dozens of times
    assert rec.attempts == 1, label
    assert api.writes(CONFIGMAPS) == []
    assert sample(metrics, "controller_runtime_reconcile_panics_total") == 1
    assert sample(metrics, "controller_runtime_reconcile_errors_total") == 1
    records = [r for r in caplog.records if "Reconciler bug" in r.getMessage()]
    assert len(records) == 1
    exc_info = records[0].exc_info
    assert exc_info is not None
    assert exc_info[0] is not None
    assert exc_info[0].__name__ == label
    assert getattr(records[0], "errorClass", None) == "programming"


async def test_programming_error_is_retried_slowly_not_dropped() -> None:
    api, metrics, limiter = fixture()
    rec = PatchingReconciler(api, bug=lambda: {}["spec"])
    ctrl = controller(rec, metrics, limiter, slow_retry=0.1)
    started = time.monotonic()
    await run_until(ctrl, lambda: rec.attempts >= 3)
    # retried, but no sooner than every 0.1 s: three attempts take at least two waits
    assert time.monotonic() - started >= 0.2
    assert rec.attempts <= 4  # a hot retry would have run dozens of times by now
    assert sample(metrics, "controller_runtime_reconcile_panics_total") == rec.attempts


async def test_slow_retry_grows_with_the_keys_backoff() -> None:
    api, metrics, limiter = fixture()
    rec = PatchingReconciler(api, bug=lambda: {}["spec"])
    ctrl = controller(rec, metrics, limiter, slow_retry=60.0)
    limiter.inner.limiters = (ItemExponentialBackoff(30.0, 1000.0),)
    for _ in range(4):
        await ctrl.reconcile_one(REQ)
    # max(60 s, 30 s * 2**n): 60, 60, 120, 240
    assert limiter.delays == [30.0, 60.0, 120.0, 240.0]
    assert ctrl.queue.delayed() == {REQ}
    ctrl.queue.shutdown()


async def test_transient_retries_stop_growing_at_the_cap() -> None:
    """An API server outage fails every attempt: the next one is never more than the cap away.

    With controller-runtime's 1000 s cap a key that failed 16 times in a 20 s outage would wait
    5 minutes more after the server is back; the cap keeps that at ``transient_retry_cap``.
    """
    api, metrics, limiter = fixture()
    refused = [aiohttp.ClientConnectionError("Connect call failed")] * 20
    api.fail("patch", "configmaps", *refused)
    rec = PatchingReconciler(api)
    ctrl = Controller(
        "cm",
        for_resource=CONFIGMAPS,
        reconciler=rec,
        metrics=metrics,
        rate_limiter=limiter,
        transient_retry_cap=30.0,
    )
    limiter.inner.limiters = (ItemExponentialBackoff(0.005, 1000.0),)
    waits: list[float] = []
    ctrl.queue.add_after = lambda _item, delay: waits.append(delay)  # type: ignore[method-assign]
    for _ in range(16):
        await ctrl.reconcile_one(REQ)
    # the limiter still counts every failure (5 ms * 2**15 = 164 s) ...
    assert limiter.delays[-1] == pytest.approx(163.84)
    assert ctrl.queue.num_requeues(REQ) == 16
    # ... but no retry is scheduled further out than the cap
    assert waits[:13] == limiter.delays[:13]  # 5 ms .. 20.48 s: the backoff as is
    assert waits[13:] == [30.0, 30.0, 30.0]  # 40.96, 81.92, 163.84 s capped
    assert sample(metrics, "controller_runtime_reconcile_panics_total") == 0


async def test_permanent_errors_are_not_capped_by_the_transient_cap() -> None:
    api, metrics, limiter = fixture()
    rec = PatchingReconciler(api, bug=lambda: {}["spec"])
    ctrl = Controller(
        "cm",
        for_resource=CONFIGMAPS,
        reconciler=rec,
        metrics=metrics,
        rate_limiter=limiter,
        slow_retry=60.0,
        transient_retry_cap=1.0,
    )
    waits: list[float] = []
    ctrl.queue.add_after = lambda _item, delay: waits.append(delay)  # type: ignore[method-assign]
    await ctrl.reconcile_one(REQ)
    assert waits == [60.0]


def test_transient_retry_cap_must_be_positive() -> None:
    api, metrics, limiter = fixture()
    with pytest.raises(ValueError, match="transient_retry_cap must be positive"):
        Controller(
            "cm",
            for_resource=CONFIGMAPS,
            reconciler=PatchingReconciler(api),
            metrics=metrics,
            rate_limiter=limiter,
            transient_retry_cap=0.0,
        )


PERMANENT = [400, 404, 405, 413, 422]


@pytest.mark.parametrize("status", PERMANENT)
async def test_permanent_api_errors_are_retried_slowly_without_a_panic(status: int) -> None:
    api, metrics, limiter = fixture()
    api.fail("patch", "configmaps", *[error_from_status(status, {"code": status})] * 50)
    rec = PatchingReconciler(api)
    ctrl = controller(rec, metrics, limiter, slow_retry=60.0)
    await run_for(ctrl, 0.3)
    assert rec.attempts == 1
    assert sample(metrics, "controller_runtime_reconcile_errors_total") == 1
    assert sample(metrics, "controller_runtime_reconcile_panics_total") == 0


async def test_terminal_error_is_never_retried() -> None:
    api, metrics, limiter = fixture()

    def refuse() -> None:
        raise TerminalError("spec can never work")

    rec = PatchingReconciler(api, bug=refuse)
    ctrl = controller(rec, metrics, limiter, slow_retry=0.01)
    await run_for(ctrl, 0.2)
    assert rec.attempts == 1
    assert limiter.delays == []
    assert sample(metrics, "controller_runtime_terminal_reconcile_errors_total") == 1
    assert sample(metrics, "controller_runtime_reconcile_panics_total") == 0


def test_wrapped_transient_cause_is_transient_but_implicit_context_is_not() -> None:
    class WrapperError(Exception):
        pass

    def wrap_conflict() -> None:
        try:
            raise conflict()
        except ApiError as exc:
            raise WrapperError("update failed") from exc

    def buggy_handler() -> None:
        try:
            raise conflict()
        except ApiError:
            {}["missing"]  # a bug in an error handler

    with pytest.raises(WrapperError) as wrapped:
        wrap_conflict()
    assert classify(wrapped.value) is ErrorClass.TRANSIENT
    with pytest.raises(KeyError) as bug:
        buggy_handler()
    assert isinstance(bug.value.__context__, ApiError)
    assert classify(bug.value) is ErrorClass.PROGRAMMING


def test_slow_retry_must_be_positive() -> None:
    api, metrics, limiter = fixture()
    with pytest.raises(ValueError, match="slow_retry"):
        controller(PatchingReconciler(api), metrics, limiter, slow_retry=0)


# One error model: the status table a reconciler's ReconcileError follows (is_transient) and
# the one the work queue follows (classify) are the same table.


@pytest.mark.parametrize("status", range(400, 600))
def test_reconcile_errors_and_the_queue_read_one_status_table(status: int) -> None:
    exc = ApiError(status, "Reason", "message")
    if exc.already_exists:  # pragma: no cover - needs reason AlreadyExists
        return
    assert is_transient(exc) is (classify(exc) is ErrorClass.TRANSIENT)
    assert wrap(exc, "prefix").transient is is_transient(exc)
    assert classify(wrap(exc)) is classify(exc)


def test_forbidden_is_transient_everywhere() -> None:
    """403 is retried with backoff, as controller-runtime does: RBAC being applied (or a
    restarted API server whose authorizer has not synced) heals within the transient cap."""
    forbidden = ApiError(403, "Forbidden", 'pods is forbidden: User "x" cannot create')
    assert 403 in TRANSIENT_STATUSES
    assert is_transient(forbidden)
    assert classify(forbidden) is ErrorClass.TRANSIENT
    assert wrap(forbidden, "failed to create pod").transient


def test_a_create_in_a_terminating_namespace_never_heals() -> None:
    terminating = ApiError(
        403,
        "Forbidden",
        "unable to create new content in namespace x because it is being terminated",
        {"details": {"causes": [{"reason": "NamespaceTerminating"}]}},
    )
    assert not is_transient(terminating)
    assert not wrap(terminating).transient
    assert classify(terminating) is ErrorClass.PERMANENT


@pytest.mark.parametrize("transient", [True, False])
def test_a_reconcile_error_carries_its_own_retry_rule(transient: bool) -> None:
    error = ReconcileError("boom", transient=transient)
    assert str(error) == "boom"
    assert error.reason == RECONCILER_ERROR_REASON == c.REASON_RECONCILER_ERROR
    expected = ErrorClass.TRANSIENT if transient else ErrorClass.PERMANENT
    assert classify(error) is expected
