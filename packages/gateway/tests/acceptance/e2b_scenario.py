"""The E2B acceptance scenario: an unmodified E2B client against the gateway, as a user runs it.

This program imports nothing of this project, only ``e2b`` (and ``e2b_code_interpreter`` for
the code-interpreter part), so it runs unchanged in any virtualenv that has a release of the
real SDK installed: the workspace's newest release and an older one in a venv of its own. It
reads the client configuration the way users set it (``E2B_API_URL``, ``E2B_SANDBOX_URL`` or
``E2B_DOMAIN``, ``E2B_API_KEY``), runs what ``docs/guides/gateway.md`` shows a client doing
(create, ``commands.run``, files, info, timeout, list, kill) plus the code interpreter's
``run_code``, and prints ONE JSON object on stdout: what each step observed (the
values, not a verdict: the pytest module asserts them) and timings.

Every step records its own error instead of stopping the run, so one broken call does not hide
the rest. Exit status 0 means "the JSON was written", never "everything passed".

Optional environment variables (the test sets them; defaults suit a real sandbox image):

* ``SCENARIO_WORKDIR``: directory inside the sandbox for the file steps (``/home/user``).
* ``SCENARIO_TEMPLATE`` / ``SCENARIO_CI_TEMPLATE``: templates (``base``, ``code-interpreter-v1``).
* ``SCENARIO_SKIP_CODE_INTERPRETER=1``: leave out the code-interpreter part.
* ``SCENARIO_THROUGHPUT_BYTES``: size of the file used for the throughput figures (4 MiB).
* ``SCENARIO_ROUND_TRIPS``: how many ``true`` commands time the command round trip (10).
* ``SCENARIO_OTHER_TENANT_KEY``: a key of another tenant; it must not reach the sandbox.
"""

from __future__ import annotations

import base64
import json
import os
import statistics
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

import e2b

WORKDIR = os.environ.get("SCENARIO_WORKDIR", "/home/user").rstrip("/") or "/"
TEMPLATE = os.environ.get("SCENARIO_TEMPLATE", "base")
CI_TEMPLATE = os.environ.get("SCENARIO_CI_TEMPLATE", "code-interpreter-v1")
THROUGHPUT_BYTES = int(os.environ.get("SCENARIO_THROUGHPUT_BYTES", str(4 * 1024 * 1024)))
ROUND_TRIPS = int(os.environ.get("SCENARIO_ROUND_TRIPS", "10"))


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


class Recorder:
    """Collects what each step saw; a step that raises records the error and the run goes on."""

    def __init__(self) -> None:
        """Start with no steps recorded."""
        self.steps: dict[str, Any] = {}
        self.timings: dict[str, float] = {}

    def step(self, name: str, body: Callable[[], Any]) -> Any:
        """Run ``body``; store its result (a JSON-able value) or its error under ``name``."""
        started = time.perf_counter()
        try:
            value = body()
        except Exception as err:
            self.steps[name] = {
                "error": f"{type(err).__name__}: {err}",
                "traceback": traceback.format_exc(limit=6),
            }
            return None
        finally:
            self.timings.setdefault(f"{name}_seconds", round(time.perf_counter() - started, 4))
        self.steps[name] = value
        return value


def _iso(value: Any) -> str | None:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    return None if value is None else str(value)


def _info(info: Any) -> dict[str, Any]:
    state = getattr(info, "state", None)
    return {
        "sandbox_id": info.sandbox_id,
        "template_id": info.template_id,
        "metadata": dict(info.metadata or {}),
        "state": getattr(state, "value", state),
        "started_at": _iso(info.started_at),
        "end_at": _iso(info.end_at),
        "seconds_left": (
            round((info.end_at - datetime.now(UTC)).total_seconds(), 1)
            if isinstance(info.end_at, datetime)
            else None
        ),
    }


def _settled_info(sandbox: Any, settled: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """get_info until ``settled`` holds (3 s at most); notes whether the first read was stale.

    The gateway answers reads from its watch caches, so a read right after a write may still
    show the old value for a moment.
    """
    started = time.perf_counter()
    first = info = _info(sandbox.get_info())
    while not settled(info) and time.perf_counter() - started < 3:
        time.sleep(0.05)
        info = _info(sandbox.get_info())
    return {
        **info,
        "first_read_stale": not settled(first),
        "settled_after_seconds": round(time.perf_counter() - started, 3),
    }


def _listed(suite: str, **extra: str) -> list[str]:
    query = e2b.SandboxQuery(metadata={"suite": suite, **extra})
    paginator = e2b.Sandbox.list(query=query)
    found: list[str] = []
    while paginator.has_next:
        found.extend(item.sandbox_id for item in paginator.next_items())
    return found


def _exit_error(run: Callable[[], Any]) -> dict[str, Any]:
    try:
        result = run()
    except e2b.CommandExitException as err:
        return {
            "raised": type(err).__name__,
            "exit_code": err.exit_code,
            "stdout": err.stdout,
            "stderr": err.stderr,
        }
    return {"raised": None, "exit_code": result.exit_code}


def _streaming(sandbox: Any) -> dict[str, Any]:
    chunks: list[tuple[float, str]] = []
    started = time.perf_counter()
    result = sandbox.commands.run(
        "for i in 1 2 3; do echo line$i; sleep 0.3; done",
        on_stdout=lambda data: chunks.append((time.perf_counter() - started, str(data))),
    )
    total = time.perf_counter() - started
    return {
        "chunks": [text for _, text in chunks],
        "first_chunk_seconds": round(chunks[0][0], 3) if chunks else None,
        "total_seconds": round(total, 3),
        "stdout": result.stdout,
        "exit_code": result.exit_code,
    }


def _round_trips(sandbox: Any, timings: dict[str, float]) -> dict[str, Any]:
    samples = []
    for _ in range(ROUND_TRIPS):
        started = time.perf_counter()
        sandbox.commands.run("true")
        samples.append(time.perf_counter() - started)
    timings["command_round_trip_median_seconds"] = round(statistics.median(samples), 4)
    timings["command_round_trip_min_seconds"] = round(min(samples), 4)
    return {"count": len(samples)}


def _files(sandbox: Any) -> dict[str, Any]:
    path = f"{WORKDIR}/acceptance-a.txt"
    written = sandbox.files.write(path, "hello from e2b\n")
    entries = sandbox.files.list(WORKDIR)
    return {
        "written_path": written.path,
        "written_name": written.name,
        "read": sandbox.files.read(path),
        "listed": sorted(entry.name for entry in entries),
        "exists": sandbox.files.exists(path),
        "exists_missing": sandbox.files.exists(f"{WORKDIR}/acceptance-nope.txt"),
        "cat": sandbox.commands.run(f"cat {path}").stdout,
    }


def _version_gated(sandbox: Any) -> dict[str, Any]:
    """The SDK features gated on the advertised envd version, through the real client."""
    path = f"{WORKDIR}/acceptance-meta.txt"
    written = sandbox.files.write(path, "m", metadata={"Owner": "acceptance"})
    watched = f"{WORKDIR}/acceptance-watched"
    sandbox.files.make_dir(f"{watched}/sub")
    handle = sandbox.files.watch_dir(watched, recursive=True, include_entry=True)
    entries: dict[str, str | None] = {}
    try:
        sandbox.files.write(f"{watched}/sub/deep.txt", "y")
        deadline = time.monotonic() + 5
        while "sub/deep.txt" not in entries and time.monotonic() < deadline:
            for event in handle.get_new_events():
                entry = getattr(event, "entry", None)
                entries[event.name] = None if entry is None else entry.path
            time.sleep(0.05)
    finally:
        handle.stop()
    return {
        "envd_version": str(sandbox._envd_version),
        "written_metadata": written.metadata,
        "read_metadata": sandbox.files.get_info(path).metadata,
        "watch_entries": entries,
    }


def signed_urls(sandbox: Any) -> dict[str, Any]:
    """``upload_url()`` / ``download_url()`` opened as a browser or curl would: no SDK headers.

    (Also used by ``e2b_hostname_scenario.py``.) httpx comes with ``e2b`` and, like the SDK,
    honours ``HTTPS_PROXY`` and ``SSL_CERT_FILE``.
    """
    import httpx

    path = f"{WORKDIR}/acceptance-signed.txt"
    upload = sandbox.upload_url(path)
    posted = httpx.post(upload, files={"file": ("x", b"through a signed url\n")}, timeout=30)
    download = sandbox.download_url(path, use_signature_expiration=120)
    fetched = httpx.get(download, timeout=30)
    forged = httpx.get(download.replace("signature=v1_", "signature=v1_x"), timeout=30)
    return {
        "upload_status": posted.status_code,
        "download_status": fetched.status_code,
        "downloaded": fetched.text,
        "forged_status": forged.status_code,
        "read_by_sdk": sandbox.files.read(path),
    }


def _throughput(sandbox: Any, timings: dict[str, float]) -> dict[str, Any]:
    payload = os.urandom(THROUGHPUT_BYTES)
    path = f"{WORKDIR}/acceptance-blob.bin"
    started = time.perf_counter()
    sandbox.files.write(path, payload)
    write_seconds = time.perf_counter() - started
    started = time.perf_counter()
    back = sandbox.files.read(path, format="bytes")
    read_seconds = time.perf_counter() - started
    mib = THROUGHPUT_BYTES / (1024 * 1024)
    timings["file_write_mib_per_second"] = round(mib / write_seconds, 2)
    timings["file_read_mib_per_second"] = round(mib / read_seconds, 2)
    return {"bytes": THROUGHPUT_BYTES, "identical": bytes(back) == payload}


def run_base(recorder: Recorder) -> None:
    """The envd part of the scenario on template ``TEMPLATE``."""
    suite = uuid.uuid4().hex[:12]
    recorder.steps["suite"] = suite
    recorder.step(
        "unknown_key",
        lambda: _raised(lambda: e2b.Sandbox.create(template=TEMPLATE, api_key="e2b_" + "0" * 40)),
    )
    sandbox = recorder.step(
        "create",
        lambda: e2b.Sandbox.create(
            template=TEMPLATE,
            timeout=120,
            metadata={"suite": suite, "owner": "acceptance"},
            envs={"ACCEPTANCE_VAR": "from-create"},
        ),
    )
    if sandbox is None:
        return
    recorder.steps["create"] = {"sandbox_id": sandbox.sandbox_id}
    sid = sandbox.sandbox_id
    connected = recorder.step("connect", lambda: e2b.Sandbox.connect(sid, timeout=120))
    if connected is not None:
        recorder.steps["connect"] = {"sandbox_id": connected.sandbox_id}
    recorder.step("echo", lambda: _command(sandbox, "echo hi; echo err >&2"))
    recorder.step("env_var", lambda: sandbox.commands.run("echo $ACCEPTANCE_VAR").stdout)
    recorder.step("exit_code", lambda: _exit_error(lambda: sandbox.commands.run("exit 3")))
    recorder.step("streaming", lambda: _streaming(sandbox))
    recorder.step("round_trips", lambda: _round_trips(sandbox, recorder.timings))
    recorder.step("files", lambda: _files(sandbox))
    recorder.step("throughput", lambda: _throughput(sandbox, recorder.timings))
    recorder.step("version_gated", lambda: _version_gated(sandbox))
    recorder.step("signed_urls", lambda: signed_urls(sandbox))
    recorder.step("get_info", lambda: _info(sandbox.get_info()))
    recorder.step("set_timeout", lambda: sandbox.set_timeout(60))
    recorder.step(
        "after_set_timeout", lambda: _settled_info(sandbox, lambda i: i["seconds_left"] <= 61)
    )
    recorder.step("is_running", sandbox.is_running)
    if os.environ.get("SCENARIO_OTHER_TENANT_KEY"):
        recorder.step("other_tenant", lambda: _other_tenant(sid))
    recorder.step(
        "list",
        lambda: {
            "matching": _listed(suite),
            "other_metadata": _listed(suite, owner="somebody-else"),
        },
    )
    recorder.step("kill", sandbox.kill)
    recorder.step("kill_again", lambda: e2b.Sandbox.kill(sid))
    recorder.step("is_running_after_kill", sandbox.is_running)
    recorder.step("list_after_kill", lambda: _listed(suite))
    recorder.step("get_info_after_kill", lambda: _raised(lambda: e2b.Sandbox.get_info(sid)))
    recorder.step("auto_pause", lambda: _auto_pause(suite))
    if os.environ.get("E2B_SANDBOX_URL"):
        recorder.step("public_traffic", lambda: _public_traffic(suite))


def _auto_pause(suite: str) -> dict[str, Any]:
    """A 3 s sandbox with ``on_timeout: "pause"``: how soon ``get_info`` says paused (25 s max)."""
    sandbox = e2b.Sandbox.create(
        template=TEMPLATE,
        timeout=3,
        metadata={"suite": suite, "owner": "auto-pause"},
        lifecycle={"on_timeout": "pause"},
    )
    started = time.monotonic()
    try:
        states = []
        while time.monotonic() - started < 25:
            state = _info(e2b.Sandbox.get_info(sandbox.sandbox_id))["state"]
            if not states or states[-1] != state:
                states.append(state)
            if state == "paused":
                break
            time.sleep(0.5)
        return {"states": states, "seconds": round(time.monotonic() - started, 1)}
    finally:
        e2b.Sandbox.kill(sandbox.sandbox_id)


def _public_traffic(suite: str) -> dict[str, Any]:
    """A user port (49999) reached without and with the traffic token, as a browser would
    (``E2B_SANDBOX_URL`` form): default sandbox vs ``allow_public_traffic=False``."""
    import httpx

    def status(sandbox: Any, token: str | None = None) -> int:
        headers = {"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": "49999"}
        if token:
            headers["E2B-Traffic-Access-Token"] = token
        url = os.environ["E2B_SANDBOX_URL"]
        return httpx.get(f"{url}/health", headers=headers, timeout=30).status_code

    meta = {"suite": suite, "owner": "network"}
    public = e2b.Sandbox.create(template=TEMPLATE, timeout=60, metadata=meta)
    private = e2b.Sandbox.create(
        template=TEMPLATE, timeout=60, metadata=meta, network={"allow_public_traffic": False}
    )
    try:
        return {
            "public": status(public),
            "private_without_token": status(private),
            "private_with_token": status(private, private.traffic_access_token),
        }
    finally:
        public.kill()
        private.kill()


def _raised(call: Callable[[], Any]) -> dict[str, Any]:
    try:
        value = call()
    except Exception as err:
        return {"raised": type(err).__name__}
    plain = isinstance(value, (bool, int, str, type(None)))
    return {"raised": None, "value": value if plain else type(value).__name__}


def _other_tenant(sid: str) -> dict[str, Any]:
    """What another tenant's key gets for this sandbox: the answers for an unknown id."""
    key = os.environ["SCENARIO_OTHER_TENANT_KEY"]
    return {
        "get_info": _raised(lambda: e2b.Sandbox.get_info(sid, api_key=key)),
        "connect": _raised(lambda: e2b.Sandbox.connect(sid, api_key=key)),
        "set_timeout": _raised(lambda: e2b.Sandbox.set_timeout(sid, 30, api_key=key)),
        "kill": _raised(lambda: e2b.Sandbox.kill(sid, api_key=key)),
        "listed": _raised(lambda: len(e2b.Sandbox.list(api_key=key).next_items())),
    }


def _command(sandbox: Any, cmd: str) -> dict[str, Any]:
    result = sandbox.commands.run(cmd)
    return {"stdout": result.stdout, "stderr": result.stderr, "exit_code": result.exit_code}


def run_code_interpreter(recorder: Recorder) -> None:
    """``run_code`` from template ``CI_TEMPLATE`` (e2b_code_interpreter)."""
    from e2b_code_interpreter import Sandbox as CodeSandbox

    sandbox = recorder.step("ci_create", lambda: CodeSandbox.create(template=CI_TEMPLATE))
    if sandbox is None:
        return
    recorder.steps["ci_create"] = {"sandbox_id": sandbox.sandbox_id}
    try:
        recorder.step("ci_value", lambda: sandbox.run_code("x = 40 + 2\nx").text)
        recorder.step("ci_state", lambda: sandbox.run_code("x + 1").text)
        recorder.step("ci_stdout", lambda: list(sandbox.run_code("print('out')").logs.stdout))
        recorder.step("ci_error", lambda: _ci_error(sandbox.run_code("1 / 0").error))
        recorder.step("ci_chart", lambda: _ci_chart(sandbox.run_code(CHART_CODE)))
        recorder.step("ci_r", lambda: _ci_r(sandbox))
        started = time.perf_counter()
        sandbox.run_code("None")
        recorder.timings["ci_run_code_seconds"] = round(time.perf_counter() - started, 4)
    finally:
        recorder.step("ci_kill", sandbox.kill)


CHART_CODE = """
import matplotlib.pyplot as plt
plt.bar(['A', 'B', 'C'], [1, 3, 2], label='Sold')
plt.title('Sales')
plt.xlabel('Author')
plt.ylabel('Books')
plt.show()
"""


def _ci_chart(execution: Any) -> dict[str, Any]:
    """What the client made of a matplotlib ``plt.show()``: the PNG and ``result.chart``."""
    if execution.error is not None:
        return {"error": f"{execution.error.name}: {execution.error.value}"}
    result = execution.results[0]
    png = base64.b64decode(result.png or "")
    chart = result.chart
    return {
        "results": len(execution.results),
        "is_main_result": result.is_main_result,
        "formats": list(result.formats()),
        "png_signature": png[:8].hex(),
        "png_bytes": len(png),
        "chart_class": type(chart).__name__,
        "chart_type": chart.type.value if chart is not None else None,
        "title": getattr(chart, "title", None),
        "x_label": getattr(chart, "x_label", None),
        "y_label": getattr(chart, "y_label", None),
        "bars": [[e.label, e.group, e.value] for e in getattr(chart, "elements", [])],
    }


def _ci_r(sandbox: Any) -> dict[str, Any]:
    """R through ``language="r"``: a value, state across calls, output, an error and a plot."""
    first = sandbox.run_code("x <- 1+1; x", language="r")
    second = sandbox.run_code('cat("r says", x * 21, "\\n"); x * 3', language="r")
    failed = sandbox.run_code('f <- function() stop("boom"); f()', language="r")
    plotted = sandbox.run_code("plot(1:10)", language="r")
    error = failed.error
    png = base64.b64decode(plotted.results[0].png or "") if plotted.results else b""
    return {
        "first": first.text,
        "first_error": _ci_error(first.error),
        "second": second.text,
        "second_stdout": list(second.logs.stdout),
        "failure": error and {"name": error.name, "value": error.value, "tb": error.traceback},
        "plot_png": png[:8].hex(),
    }


def _ci_error(error: Any) -> dict[str, Any] | None:
    if error is None:
        return None
    return {"name": error.name, "value": error.value}


def main() -> int:
    """Run the scenario and print the JSON object; 0 once it is written."""
    recorder = Recorder()
    run_base(recorder)
    if os.environ.get("SCENARIO_SKIP_CODE_INTERPRETER") != "1":
        try:
            run_code_interpreter(recorder)
        except ImportError as err:
            recorder.steps["ci_create"] = {"error": f"ImportError: {err}"}
    report = {
        "versions": {
            "python": sys.version.split()[0],
            "e2b": _version("e2b"),
            "e2b_code_interpreter": _version("e2b-code-interpreter"),
        },
        "steps": recorder.steps,
        "timings": recorder.timings,
    }
    sys.stdout.write(json.dumps(report, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
