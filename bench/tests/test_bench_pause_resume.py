"""The pause-resume scenario's pure parts: its cases, its program, its checks and its rows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from benchlib import pause_resume as pr
from benchlib.report import BenchResult

from kube_agent_sandbox.api import keepstate as k


def test_cases_are_each_size_then_the_process_where_the_node_checkpoints() -> None:
    sizes = pr.PauseSizes(mib=(10, 500), memory_mib=200)
    found = pr.cases(sizes, memory=True)
    assert [(c.label, c.mode, c.slug) for c in found] == [
        ("10 MiB files", k.MODE_FILESYSTEM, "files-10"),
        ("500 MiB files", k.MODE_FILESYSTEM, "files-500"),
        ("200 MiB process", k.MODE_MEMORY, "memory-200"),
    ]
    assert [c.label for c in pr.cases(sizes, memory=False)] == ["10 MiB files", "500 MiB files"]
    no_memory = pr.PauseSizes(mib=(10,), memory_mib=0)
    assert [c.label for c in pr.cases(no_memory, memory=True)] == ["10 MiB files"]


def test_the_files_program_writes_once_and_reports_the_size_in_a_later_life(
    tmp_path: Path,
) -> None:
    program = pr.FILES.replace(pr.BLOB, str(tmp_path / "blob")).replace("86400", "0")

    def life() -> str:
        done = subprocess.run(
            [sys.executable, "-c", program, "2"], capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    assert life() == "written"
    assert life() == f"size {2 << 20}"  # what a resume or a create from the snapshot sees


def _case(mode: str) -> pr.Case:
    return next(c for c in pr.cases(pr.PauseSizes(mib=(2,), memory_mib=3), memory=True)
                if c.mode == mode)  # fmt: skip


def test_a_files_case_passes_only_at_the_written_size() -> None:
    case = _case(k.MODE_FILESYSTEM)
    assert pr.check_output(case, f"size {2 << 20}", None) is None
    assert "not 'size 2097152'" in str(pr.check_output(case, "size 0", None))
    assert pr.check_output(case, "written", None) is not None  # a cold start wrote it again


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("tick abcd 12", None),
        ("tick abcd 10", "cold start"),  # not past the counter before the suspend
        ("tick ffff 99", "cold start"),  # another token: a new process
        ("tick abcd", "not a tick"),
        ("", "not a tick"),
    ],
)
def test_a_process_case_passes_only_for_the_same_token_counting_on(
    line: str, problem: str | None
) -> None:
    found = pr.check_output(_case(k.MODE_MEMORY), line, ("abcd", 10))
    if problem is None:
        assert found is None
    else:
        assert problem in str(found)


def test_rows_are_min_median_max_of_each_measured_list() -> None:
    result = BenchResult("pause-resume")
    pr.add_rows(result, "10 MiB files", pr.Samples(pause=[3.0, 1.0, 2.0], resume=[4.0, 6.0]))
    assert [(m.name, m.value) for m in result.metrics] == [
        ("10 MiB files: pause (Suspended -> snapshot Ready, Pod gone) min", 1.0),
        ("10 MiB files: pause (Suspended -> snapshot Ready, Pod gone) median", 2.0),
        ("10 MiB files: pause (Suspended -> snapshot Ready, Pod gone) max", 3.0),
        ("10 MiB files: resume (Running -> Ready) min", 4.0),
        ("10 MiB files: resume (Running -> Ready) median", 5.0),
        ("10 MiB files: resume (Running -> Ready) max", 6.0),
    ]
    assert {m.unit for m in result.metrics} == {"s"}
