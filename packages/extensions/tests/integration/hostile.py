"""Hostile-input machinery of the integration tests: hypothesis strategies and controller probes.

The hostile-input tests feed manifests drawn by hypothesis to the real kube-apiserver. What the
apiserver rejects is its own validation and ends there; for every object it accepts, the
controllers must stay up, report a condition or an event, and never retry faster than their
per-key backoff. This module holds what those tests share:

- hypothesis profiles: ``ci`` (few examples, the default) and ``deep`` (many), chosen with
  ``AGENT_SANDBOX_FUZZ_PROFILE``; ``AGENT_SANDBOX_FUZZ_EXAMPLES`` overrides the count;
- strategies for names at every length limit, annotations up to and past the 256 KiB limit,
  unicode metadata values and deep pod specs;
- :class:`ReconcileLog`, which counts every reconcile per object (the controllers run in this
  process, so each controller's reconciler is wrapped) to spot retries faster than backoff;
- :class:`ErrorLog`, a logging handler that keeps error records whose exception is not an API
  or connection failure (a programming error, i.e. a crash of the reconcile);
- :func:`create_or_rejected`, which creates an object and tells rejections apart.

Not a test module: the ``test_hostile_*`` modules import it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import string
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from kube_agent_sandbox.controller.runtime import ApiError, Obj, Request, Result
from kube_agent_sandbox.testing.access import ClusterAccess

PROFILE_ENV = "AGENT_SANDBOX_FUZZ_PROFILE"
EXAMPLES_ENV = "AGENT_SANDBOX_FUZZ_EXAMPLES"
PAUSE = "registry.k8s.io/pause:3.10"
ANNOTATIONS_LIMIT = 256 * 1024  # bytes of all keys and values together (apimachinery)
QUIET_WINDOW = 10.0  # seconds over which reconciles are counted once everything is reported
REPORT_WAIT = 120.0  # seconds: a generous bound for a loaded 2-core machine
BASE_BACKOFF = 0.005  # seconds: the first per-key retry delay of the default rate limiter

_common = {
    "deadline": None,
    "database": None,
    "derandomize": False,
    "suppress_health_check": [
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
        HealthCheck.large_base_example,
    ],
}
settings.register_profile("ci", max_examples=20, **_common)  # type: ignore[arg-type]
settings.register_profile("deep", max_examples=300, **_common)  # type: ignore[arg-type]


def fuzz_settings(*, scale: float = 1.0) -> settings:
    """The hypothesis settings of one hostile-input test.

    Args:
        scale: Factor on the profile's example count (a slow test draws fewer).

    Returns:
        Settings of the profile named by ``AGENT_SANDBOX_FUZZ_PROFILE`` (``ci`` by default),
        with ``AGENT_SANDBOX_FUZZ_EXAMPLES`` as the example count when set.
    """
    base = settings.get_profile(os.environ.get(PROFILE_ENV, "ci"))
    count = int(os.environ.get(EXAMPLES_ENV, "0")) or base.max_examples
    return settings(base, max_examples=max(1, int(count * scale)))


# -- strategies ----------------------------------------------------------------------------

_ALNUM = string.ascii_lowercase + string.digits
_LIMITS = (1, 2, 52, 62, 63, 64, 65, 128, 252, 253)


@st.composite
def dns_subdomain(draw: st.DrawFn, *, max_size: int = 253) -> str:
    """A valid DNS-1123 subdomain (the apiserver's rule for object names), of any length.

    Lengths cluster on the limits that matter downstream (63 for DNS labels such as Service
    names, 253 for names), and the name may hold dots and dashes, or start with a digit
    (valid for a Sandbox, invalid for a Service).
    """
    length = draw(
        st.one_of(st.sampled_from([n for n in _LIMITS if n <= max_size]), st.integers(1, max_size))
    )
    body = draw(st.text(alphabet=_ALNUM + "-.", min_size=length, max_size=length))
    chars = list(body)
    chars[0] = chars[0] if chars[0] in _ALNUM else "a"
    chars[-1] = chars[-1] if chars[-1] in _ALNUM else "z"
    for i in range(1, len(chars) - 1):
        # a dot needs an alphanumeric on both sides
        if chars[i] == "." and (chars[i - 1] not in _ALNUM or chars[i + 1] not in _ALNUM):
            chars[i] = "-"
        if chars[i] == "-" and chars[i - 1] == ".":
            chars[i] = "d"
    return "".join(chars)


def unique_name(name: str, index: int) -> str:
    """``name`` with its tail replaced by ``index`` (same length), so examples never collide."""
    tag = format(index, "x")
    if len(name) <= len(tag) + 1:
        return ("n" + tag)[: max(len(name), len(tag) + 1)]
    return name[: len(name) - len(tag) - 1] + "x" + tag


_unicode = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=40,
)
_valid_label_value = st.from_regex(r"\A([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z")
_label_value = st.one_of(
    _valid_label_value,
    _unicode,  # mostly invalid: rejected by the apiserver, or by the pod when copied there
)
_key_name = st.from_regex(r"\A[a-z0-9]([-a-z0-9_.]{0,20}[a-z0-9])?\Z")
_qualified_key = st.one_of(_key_name, st.builds(lambda p, n: f"{p}/{n}", _key_name, _key_name))


@st.composite
def annotations(draw: st.DrawFn) -> dict[str, str]:
    """Annotations with unicode values, sometimes one bulk value near or past the total limit."""
    found: dict[str, str] = draw(st.dictionaries(_qualified_key, _unicode, max_size=4))
    bulk = draw(st.sampled_from([0, 0, 0, 1024, 200_000, -64, -1, 0, 1]))
    if bulk:
        key = "fuzz.example.com/bulk"
        used = sum(len(k.encode()) + len(v.encode()) for k, v in found.items()) + len(key)
        size = bulk if bulk > 1024 else ANNOTATIONS_LIMIT - used + bulk
        # 1 over the limit is rejected, -1 and -64 are just within it
        char = draw(st.sampled_from(["x", "\u00e9"]))  # 1 or 2 bytes in UTF-8
        count = size // len(char.encode())
        if count > 0:
            found[key] = char * count
    return found


def labels(*, valid: bool = False) -> st.SearchStrategy[dict[str, str]]:
    """Labels with values of every kind (``valid``: only values the apiserver accepts)."""
    return st.dictionaries(
        _qualified_key, _valid_label_value if valid else _label_value, max_size=4
    )


_dns_label = st.from_regex(r"\A[a-z]([-a-z0-9]{0,14}[a-z0-9])?\Z")


@st.composite
def pod_spec(draw: st.DrawFn, *, max_containers: int = 12, max_env: int = 40) -> Obj:
    """A pod spec with many containers, env entries (unicode values), volumes and mounts."""
    volume_names = draw(st.lists(_dns_label, max_size=16, unique=True))
    volumes: list[Obj] = [{"name": v, "emptyDir": {}} for v in volume_names]
    container_names = draw(st.lists(_dns_label, min_size=1, max_size=max_containers, unique=True))
    containers: list[Obj] = []
    for name in container_names:
        env = draw(
            st.lists(
                st.fixed_dictionaries(
                    {"name": st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,20}\Z"), "value": _unicode}
                ),
                max_size=max_env,
            )
        )
        mounts = (
            [
                {"name": v, "mountPath": f"/mnt/{v}"}
                for v in draw(st.lists(st.sampled_from(volume_names), unique=True))
            ]
            if volume_names
            else []
        )
        container: Obj = {"name": name, "image": PAUSE}
        if env:
            container["env"] = env
        if mounts:
            container["volumeMounts"] = mounts
        containers.append(container)
    spec: Obj = {"containers": containers}
    if volumes:
        spec["volumes"] = volumes
    return spec


@st.composite
def pod_template(draw: st.DrawFn) -> Obj:
    """A pod template: deep spec, and metadata that may be huge, unicode or invalid."""
    template: Obj = {"spec": draw(pod_spec())}
    meta: Obj = {}
    if draw(st.booleans()):
        meta["labels"] = draw(labels())
    if draw(st.booleans()):
        meta["annotations"] = draw(annotations())
    if meta:
        template["metadata"] = meta
    return template


# -- probes --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reconcile:
    """One reconcile seen by :class:`ReconcileLog`."""

    at: float
    controller: str
    namespace: str
    name: str
    failed: bool


class ReconcileLog:
    """Every reconcile of the controllers of a manager, with its time and outcome."""

    def __init__(self) -> None:
        """An empty log; :meth:`attach` starts recording."""
        self._lock = threading.Lock()
        self.records: list[Reconcile] = []

    def attach(self, manager: Any) -> None:
        """Wrap the reconciler of every controller of ``manager`` so its calls are recorded."""
        for controller in manager.controllers:
            controller.reconciler = _Counted(controller.reconciler, controller.name, self)

    def add(self, record: Reconcile) -> None:
        """Record one reconcile (thread-safe)."""
        with self._lock:
            self.records.append(record)

    def counts(self, *, since: float, until: float) -> Counter[tuple[str, str]]:
        """Reconciles per ``(controller, name)`` between two ``time.monotonic()`` instants."""
        with self._lock:
            return Counter((r.controller, r.name) for r in self.records if since <= r.at <= until)


class _Counted:
    def __init__(self, inner: Any, controller: str, log: ReconcileLog) -> None:
        self._inner, self._controller, self._log = inner, controller, log

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def reconcile(self, request: Request) -> Result:
        failed = True
        try:
            result: Result = await self._inner.reconcile(request)
            failed = result.requeue
            return result
        finally:
            self._log.add(
                Reconcile(
                    time.monotonic(), self._controller, request.namespace, request.name, failed
                )
            )


def backoff_bound(window: float) -> int:
    """Most reconciles one key may see in ``window`` seconds without outrunning its backoff.

    Per-key exponential backoff from 5 ms allows ``log2(window / 5 ms + 1)`` retries; each
    retry may also write a status that comes back as one watch event (one more reconcile),
    and a few reconciles come from the object's own changes at the start of the window.
    """
    return 2 * math.ceil(math.log2(window / BASE_BACKOFF + 1)) + 4


# Failures an object can cause that are handled: the reconcile is retried with backoff.
_HANDLED = (ApiError, TimeoutError, ConnectionError, asyncio.TimeoutError)


class ErrorLog(logging.Handler):
    """Keeps log records that carry an exception other than a (handled) API failure."""

    def __init__(self) -> None:
        """A handler at ERROR level; add it to the root logger."""
        super().__init__(logging.ERROR)
        self.crashes: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        """Keep ``record`` when its exception is a crash, not an API or connection error."""
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and not isinstance(exc, _HANDLED):
            self.crashes.append(record)
        elif exc is None and record.name.startswith("asyncio"):
            self.crashes.append(record)  # "Task exception was never retrieved" and kin

    def describe(self) -> str:
        """The kept records, formatted with their tracebacks."""
        fmt = logging.Formatter("%(name)s: %(message)s")
        return "\n".join(fmt.format(r) for r in self.crashes)


@pytest.fixture
def probes(extensions_controller: list[Any]) -> Iterator[tuple[ReconcileLog, ErrorLog]]:
    """Reconcile counts and crash records of the running controllers."""
    reconciles = ReconcileLog()
    reconciles.attach(extensions_controller[0])
    errors = ErrorLog()
    root = logging.getLogger()
    root.addHandler(errors)
    try:
        yield reconciles, errors
    finally:
        root.removeHandler(errors)


def conditions(obj: Obj) -> dict[str, Obj]:
    """Conditions of an object by type."""
    return {cond["type"]: cond for cond in (obj.get("status") or {}).get("conditions") or ()}


def reported(cluster: ClusterAccess, namespace: str, kind: str, api_version: str) -> set[str]:
    """Names of the ``kind`` objects that have a Ready condition or an Event about them."""
    dyn = cluster.dynamic()
    items = dyn.resources.get(api_version=api_version, kind=kind).get(namespace=namespace)
    done = {
        item["metadata"]["name"] for item in items.to_dict()["items"] if "Ready" in conditions(item)
    }
    events = dyn.resources.get(api_version="events.k8s.io/v1", kind="Event").get(
        namespace=namespace
    )
    done |= {
        e["regarding"]["name"]
        for e in events.to_dict()["items"]
        if (e.get("regarding") or {}).get("kind") == kind
    }
    return done


def wait_reported(
    cluster: ClusterAccess, namespace: str, names: set[str], *, kind: str, api_version: str
) -> None:
    """Wait until every named object is reported (condition or event); fail naming the rest."""
    deadline = time.monotonic() + REPORT_WAIT
    missing = set(names)
    while missing and time.monotonic() < deadline:
        missing -= reported(cluster, namespace, kind, api_version)
        if missing:
            time.sleep(1.0)
    assert not missing, f"{kind}s never reported (no Ready condition, no Event): {missing}"


def assert_no_hot_loop(reconciles: ReconcileLog, *, names: set[str]) -> dict[str, int]:
    """Count reconciles over a quiet window; fail when one object outruns its backoff."""
    start = time.monotonic()
    time.sleep(QUIET_WINDOW)
    counts = reconciles.counts(since=start, until=time.monotonic())
    bound = backoff_bound(QUIET_WINDOW)
    hot = {key: n for key, n in counts.items() if n > bound and key[1] in names}
    assert not hot, f"reconciled faster than backoff allows ({bound} in {QUIET_WINDOW}s): {hot}"
    return {f"{k[0]}/{k[1]}": n for k, n in counts.items()}


def create_or_rejected(create: Callable[[], Obj]) -> Obj | None:
    """Run ``create``; None when the apiserver refused the object as invalid or too large.

    Args:
        create: Creates one object through the kubernetes client and returns it as a dict.

    Returns:
        The created object, or None for a 400, 413 or 422 answer.

    Raises:
        ApiException: For any other failure.
    """
    from kubernetes.client.exceptions import ApiException

    try:
        return create()
    except ApiException as exc:
        if exc.status in (400, 413, 422):
            return None
        raise
