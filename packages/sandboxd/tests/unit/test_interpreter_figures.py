"""Matplotlib figures as PNG and chart results: real user code, real matplotlib (Agg)."""

from __future__ import annotations

import base64
import struct
from pathlib import Path
from typing import Any

import pytest

from kube_agent_sandbox.sandboxd.interpreter.events import Event
from kube_agent_sandbox.sandboxd.interpreter.worker import PythonWorker

pytest.importorskip("matplotlib")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

BAR_CODE = """
import matplotlib.pyplot as plt

authors = ['Author A', 'Author B', 'Author C', 'Author D']
sales = [100, 200, 300, 400]
plt.figure(figsize=(10, 6))
plt.bar(authors, sales, label='Books Sold', color='blue')
plt.xlabel('Authors')
plt.ylabel('Number of Books Sold')
plt.title('Book Sales by Authors')
plt.tight_layout()
plt.show()
"""

LINE_CODE = """
import matplotlib.pyplot as plt

fig, ax = plt.subplots()
ax.plot([0, 1, 2, 3], [0.5, 1.5, 1.0, 2.0], label='speed')
ax.plot([0, 1, 2, 3], [1, 2, 3, 4])
ax.set_title('Speed over time')
ax.set_xlabel('Time (s)')
ax.set_ylabel('Speed [m/s]')
fig
"""


async def _run(worker: PythonWorker, code: str) -> list[Event]:
    return [e async for e in worker.execute(code)]


def _results(found: list[Event]) -> list[Event]:
    return [e for e in found if e["type"] == "result"]


def _errors(found: list[Event]) -> list[Event]:
    return [e for e in found if e["type"] == "error"]


def _png_size(encoded: str) -> tuple[int, int]:
    data = base64.b64decode(encoded, validate=True)
    assert data[:8] == PNG_SIGNATURE
    assert len(data) > 2000, len(data)  # a drawn chart, not an empty image
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


async def test_matplotlib_is_not_loaded_until_user_code_imports_it(python: PythonWorker) -> None:
    probe = (
        "import sys\n"
        "sorted(m for m in sys.modules if m.split('.')[0] in "
        "('matplotlib', 'numpy', 'PIL', '_sandboxd_figures'))"
    )
    (result,) = _results(await _run(python, probe))
    assert result["text"] == "[]"
    (result,) = _results(await _run(python, "import matplotlib.pyplot\n" + probe))
    assert "'matplotlib.pyplot'" in result["text"]


async def test_show_gives_a_png_and_the_bar_chart(python: PythonWorker) -> None:
    found = await _run(python, BAR_CODE)
    assert not _errors(found)
    (result,) = _results(found)
    assert result["is_main_result"] is False  # shown, as by display()
    assert result["text"] == "<Figure size 1000x600 with 1 Axes>"
    width, height = _png_size(result["png"])
    assert 500 < width <= 1000
    assert 300 < height <= 600
    assert result["chart"] == {
        "type": "bar",
        "title": "Book Sales by Authors",
        "x_label": "Authors",
        "y_label": "Number of Books Sold",
        "x_unit": None,
        "y_unit": None,
        "elements": [
            {"label": f"Author {name}", "group": "Books Sold", "value": value}
            for name, value in zip("ABCD", (100.0, 200.0, 300.0, 400.0), strict=True)
        ],
    }
    # show() closed the figure: the next cell shows nothing again
    assert _results(await _run(python, "plt.get_fignums()"))[0]["text"] == "[]"


async def test_a_figure_as_the_last_value_is_the_main_result_with_a_line_chart(
    python: PythonWorker,
) -> None:
    found = await _run(python, LINE_CODE)
    (result,) = _results(found)  # not shown a second time by the end-of-cell flush
    assert result["is_main_result"] is True
    assert result["text"] == "<Figure size 640x480 with 1 Axes>"
    _png_size(result["png"])
    chart = result["chart"]
    assert chart["type"] == "line"
    assert chart["title"] == "Speed over time"
    assert (chart["x_label"], chart["y_label"]) == ("Time (s)", "Speed [m/s]")
    assert (chart["x_unit"], chart["y_unit"]) == ("s", "m/s")
    assert chart["x_scale"] == chart["y_scale"] == "linear"
    assert all(isinstance(tick, float) for tick in chart["x_ticks"] + chart["y_ticks"])
    assert len(chart["x_tick_labels"]) == len(chart["x_ticks"])
    assert chart["elements"] == [
        {"label": "speed", "points": [[0.0, 0.5], [1.0, 1.5], [2.0, 1.0], [3.0, 2.0]]},
        {"label": "Line 1", "points": [[0.0, 1.0], [1.0, 2.0], [2.0, 3.0], [3.0, 4.0]]},
    ]
    assert _results(await _run(python, "plt.get_fignums()"))[0]["text"] == "[]"


async def test_figures_left_open_are_shown_at_the_end_of_the_cell(python: PythonWorker) -> None:
    found = await _run(
        python,
        "import matplotlib.pyplot as plt\n"
        "plt.figure(); plt.plot([1, 2, 3])\n"
        "plt.figure(); plt.bar(['a', 'b'], [3, 1])\n"
        "'done'",
    )
    main, first, second = _results(found)
    assert (main["is_main_result"], main["text"]) == (True, "done")
    assert first["is_main_result"] is second["is_main_result"] is False
    assert first["chart"]["type"] == "line"
    assert second["chart"]["type"] == "bar"
    assert [e["value"] for e in second["chart"]["elements"]] == [3.0, 1.0]
    _png_size(first["png"])
    _png_size(second["png"])
    # A later cell that draws nothing shows nothing.
    assert _results(await _run(python, "x = 1")) == []


async def test_a_failing_cell_still_shows_its_figure_after_the_error(
    python: PythonWorker,
) -> None:
    found = await _run(python, "import matplotlib.pyplot as plt\nplt.plot([1, 2])\n1 / 0")
    assert [e["type"] for e in found[1:]] == ["error", "result"]
    assert found[1]["name"] == "ZeroDivisionError"
    assert found[2]["chart"]["type"] == "line"


async def test_dates_scatter_pie_box_and_several_axes(python: PythonWorker) -> None:
    found = await _run(
        python,
        "import datetime\nimport matplotlib.pyplot as plt\n"
        "days = [datetime.date(2024, 1, d) for d in range(1, 6)]\n"
        "plt.plot(days, [1, 4, 2, 5, 3], label='visits'); plt.show()\n"
        "plt.scatter([1, 2, 3], [3, 2, 1], label='dots'); plt.show()\n"
        "plt.pie([1, 2, 3], labels=['x', 'y', 'z']); plt.title('Share'); plt.show()\n"
        "fig, (a, b) = plt.subplots(1, 2); fig.suptitle('Both')\n"
        "a.plot([1, 2]); b.bar(['p', 'q'], [1, 2]); plt.show()\n"
        "data = [[1, 2, 3, 4, 5, 20], [2, 3, 4, 5, 6]]\n"
        "plt.boxplot(data, tick_labels=['A', 'B'], patch_artist=True); plt.show()\n",
    )
    assert not _errors(found)
    dated, scatter, pie, both, box = (r["chart"] for r in _results(found))
    assert dated["type"] == "line"
    assert dated["x_scale"] == "datetime"
    assert dated["y_scale"] == "linear"
    assert all(isinstance(tick, str) and "T" in tick for tick in dated["x_ticks"])
    assert dated["elements"][0]["points"][0] == ["2024-01-01", 1.0]
    assert scatter["type"] == "scatter"
    assert scatter["elements"] == [
        {"label": "dots", "points": [[1.0, 3.0], [2.0, 2.0], [3.0, 1.0]]}
    ]
    assert pie == {
        "type": "pie",
        "title": "Share",
        "elements": [
            {"label": "x", "angle": 60.0, "radius": 1.0},
            {"label": "y", "angle": 120.0, "radius": 1.0},
            {"label": "z", "angle": 180.0, "radius": 1.0},
        ],
    }
    assert both["type"] == "superchart"
    assert both["title"] == "Both"
    assert [element["type"] for element in both["elements"]] == ["line", "bar"]
    assert box["type"] == "box_and_whisker"
    assert box["elements"] == [
        {
            "label": "A",
            "min": 1.0,
            "first_quartile": 2.25,
            "median": 3.5,
            "third_quartile": 4.75,
            "max": 5.0,
            "outliers": [20.0],
        },
        {
            "label": "B",
            "min": 2.0,
            "first_quartile": 3.0,
            "median": 4.0,
            "third_quartile": 5.0,
            "max": 6.0,
            "outliers": [],
        },
    ]


async def test_a_figure_without_pyplot_and_horizontal_bars(python: PythonWorker) -> None:
    found = await _run(
        python,
        "from matplotlib.figure import Figure\n"
        "fig = Figure()\n"
        "ax = fig.add_subplot()\n"
        "ax.barh(['p', 'q'], [3, 5], label='stock')\n"
        "ax.set_xlabel('Units'); ax.set_ylabel('Product')\n"
        "display(fig)\n",
    )
    (result,) = _results(found)
    assert result["is_main_result"] is False
    _png_size(result["png"])
    chart: dict[str, Any] = result["chart"]
    # e2b-charts puts the category axis in x_label for horizontal bars
    assert (chart["x_label"], chart["y_label"]) == ("Product", "Units")
    assert chart["elements"] == [
        {"label": "p", "group": "stock", "value": 3.0},
        {"label": "q", "group": "stock", "value": 5.0},
    ]


async def test_an_empty_figure_has_text_only(python: PythonWorker) -> None:
    found = await _run(python, "import matplotlib.pyplot as plt\nplt.figure()\nplt.show()")
    (result,) = _results(found)
    assert result["text"] == "<Figure size 640x480 with 0 Axes>"
    assert "png" not in result
    assert "chart" not in result


@pytest.mark.parametrize(
    ("setup", "name", "message"),
    [
        (
            "from matplotlib.artist import Artist\n"
            "class Broken(Artist):\n"
            "    def draw(self, renderer):\n"
            "        raise RuntimeError('cannot draw this')\n"
            "fig, ax = plt.subplots(); ax.plot([1, 2]); ax.add_artist(Broken())\n",
            "RuntimeError",
            "cannot draw this",
        ),
        ("plt.figure(figsize=(1e5, 1e5)); plt.plot([1, 2])\n", "ValueError", "too large"),
    ],
    ids=["artist-raises", "too-large"],
)
async def test_a_figure_that_fails_to_render_is_an_error_not_a_crash(
    python: PythonWorker, setup: str, name: str, message: str
) -> None:
    pid = python.pid
    found = await _run(python, "import matplotlib.pyplot as plt\n" + setup + "plt.show()")
    (error,) = _errors(found)
    assert error["name"] == name
    assert message in error["value"]
    assert "render_png" in error["traceback"]
    (result,) = _results(found)  # the figure's text, without an image
    assert result["text"].startswith("<Figure size")
    assert "png" not in result
    assert found.index(error) < found.index(result)
    after = await _run(python, "plt.get_fignums(), 6 * 7")
    assert _results(after)[0]["text"] == "([], 42)"
    assert python.pid == pid


async def test_a_backend_chosen_by_the_user_is_left_alone(python: PythonWorker) -> None:
    found = await _run(
        python,
        "import matplotlib\nmatplotlib.use('svg')\nimport matplotlib.pyplot as plt\n"
        "plt.plot([1, 2])\nplt.show()\nlen(plt.get_fignums())",
    )
    (result,) = _results(found)  # no figure results; the figure stays open
    assert result["text"] == "1"


async def test_without_matplotlib_nothing_changes(tmp_path: Path) -> None:
    # A `matplotlib` without pyplot shadows the real one (the working directory comes first).
    (tmp_path / "matplotlib").mkdir()
    (tmp_path / "matplotlib" / "__init__.py").write_text("")
    worker = PythonWorker(cwd=str(tmp_path))
    await worker.start()
    try:
        found = await _run(worker, "import matplotlib.pyplot as plt")
        (error,) = _errors(found)
        assert error["name"] == "ModuleNotFoundError"
        assert "matplotlib.pyplot" in error["value"]
        assert _results(await _run(worker, "print('x')\n1 + 1"))[0]["text"] == "2"
    finally:
        await worker.close()
