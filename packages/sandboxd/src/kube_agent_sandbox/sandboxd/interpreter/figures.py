"""Matplotlib figures as E2B results: a PNG and the chart data of the ``e2b-charts`` package.

E2B's code interpreter runs a Jupyter kernel with matplotlib's inline backend and a display
formatter (``e2b/chart``) that extracts the data of a figure's plots with the ``e2b-charts``
package. This module does the same for the worker (``driver.py``), without Jupyter, IPython or
pydantic: it is loaded by the driver (from this file, as the driver is run as a script) only once
user code imported ``matplotlib.pyplot`` or showed a ``Figure``, and it imports matplotlib (and
numpy, which matplotlib needs) only inside its functions, when matplotlib is already loaded.

What it does, as the inline backend does under Agg:

* ``pyplot.show()`` shows every open figure (a non-main result each) and closes them all;
* at the end of each cell the figures still open are shown and closed (``flush``);
* a ``Figure`` as a result (the cell's last value, ``display(fig)``) gets ``png`` and ``chart``.

The chart dictionaries follow ``e2b_charts`` (``chart_figure_to_dict``): the types ``line``,
``scatter``, ``bar``, ``pie``, ``box_and_whisker``, ``superchart`` (a figure of several axes) and
``unknown``, with the same fields and the same heuristics, so ``e2b_code_interpreter`` builds the
same ``result.chart`` objects from them. Differences: a bar container's own ``orientation`` (when
matplotlib records it) wins over e2b-charts' guess from equal bar heights, and values that are not
finite (NaN, infinity) are sent as ``null`` so the line stays strict JSON.

This module uses the standard library only at import time; everything typed ``Any`` is a
matplotlib object.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import io
import math
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

NON_INTERACTIVE_BACKENDS = frozenset({"agg"})
_UNIT = re.compile(r"\s\((.*?)\)|\[(.*?)\]")


def is_figure(value: Any) -> bool:
    """Whether a value is a matplotlib ``Figure`` (False, without importing it, if not loaded).

    Args:
        value: Any value.

    Returns:
        True for a ``matplotlib.figure.Figure``.
    """
    module = sys.modules.get("matplotlib.figure")
    figure_class = getattr(module, "Figure", None)
    return isinstance(figure_class, type) and isinstance(value, figure_class)


def handles_show() -> bool:
    """Whether matplotlib's backend is one this module shows figures for (Agg).

    Returns:
        True when ``plt.show()`` and the end of a cell should turn figures into results.
    """
    matplotlib = sys.modules.get("matplotlib")
    if matplotlib is None:
        return False
    try:
        backend = str(matplotlib.get_backend())
    except Exception:
        return False
    return backend.lower() in NON_INTERACTIVE_BACKENDS


def patch_pyplot(pyplot: Any, show_figures: Callable[[], None]) -> None:
    """Replaces ``pyplot.show`` by one that shows the open figures as results under Agg.

    Under another backend (set by the user) the original ``show`` runs.

    Args:
        pyplot: The freshly imported ``matplotlib.pyplot`` module.
        show_figures: Shows and closes the open figures (the driver's).
    """
    original = pyplot.show
    if getattr(original, "_sandboxd_show", False):
        return

    def show(*args: Any, **kwargs: Any) -> Any:
        if not handles_show():
            return original(*args, **kwargs)
        show_figures()
        return None

    show.__doc__ = original.__doc__
    show.__wrapped__ = original  # type: ignore[attr-defined]
    show._sandboxd_show = True  # type: ignore[attr-defined]
    pyplot.show = show


def open_figures() -> list[Any]:
    """The figures pyplot holds open, oldest first (none if pyplot is not loaded).

    Returns:
        The figures.
    """
    if sys.modules.get("matplotlib.pyplot") is None:
        return []
    from matplotlib._pylab_helpers import Gcf

    return [manager.canvas.figure for manager in Gcf.get_all_fig_managers()]


def close_all() -> None:
    """Closes every pyplot figure (nothing if pyplot is not loaded)."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close("all")


def render_png(figure: Any) -> str | None:
    """Renders a figure as IPython's inline backend does (``bbox_inches="tight"``).

    Args:
        figure: The figure.

    Returns:
        The base64 PNG, or None for a figure with nothing in it (no axes, no lines), which
        IPython does not render either.

    Raises:
        Exception: Whatever drawing the figure raised.
    """
    if not figure.axes and not figure.lines:
        return None
    buffer = io.BytesIO()
    figure.canvas.print_figure(
        buffer,
        format="png",
        dpi=figure.dpi,
        facecolor=figure.get_facecolor(),
        edgecolor=figure.get_edgecolor(),
        bbox_inches="tight",
    )
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def chart(figure: Any) -> dict[str, Any] | None:
    """The ``e2b-charts`` data of a figure.

    Args:
        figure: The figure.

    Returns:
        The chart dictionary, or None for a blank figure or one whose data could not be read
        (as the E2B formatter, which then sends an empty chart).
    """
    try:
        axes = list(figure.get_axes())
        if not axes or not any(ax.has_data() for ax in axes):
            return None
        if len(axes) > 1:
            return {
                "type": "superchart",
                "title": _suptitle(figure),
                "elements": [_chart_of_axes(ax) for ax in axes],
            }
        return _chart_of_axes(axes[0])
    except Exception:
        return None


def _suptitle(figure: Any) -> str:
    get = getattr(figure, "get_suptitle", None)
    if get is not None:
        return str(get())
    title = getattr(figure, "_suptitle", None)
    return str(title.get_text()) if title is not None else ""


def _is_grid_line(line: Any) -> bool:
    x = line.get_xdata()
    y = line.get_ydata()
    if len(x) != 2 or len(y) != 2:
        return False
    return bool(x[0] == x[1] or y[0] == y[1])


def _chart_type(ax: Any) -> str:
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import PathPatch, Rectangle, Wedge
    from matplotlib.text import Text

    children = getattr(ax, "_children", None)
    if children is None:
        return "unknown"
    objects = [obj for obj in children if not isinstance(obj, Text)]
    if all(isinstance(obj, Line2D) for obj in objects):
        return "line"
    if all(isinstance(obj, PathPatch | Line2D) for obj in objects):
        return "box_and_whisker"
    objects = [obj for obj in objects if not (isinstance(obj, Line2D) and _is_grid_line(obj))]
    if all(isinstance(obj, PathCollection) for obj in objects):
        return "scatter"
    if all(isinstance(obj, Wedge) for obj in objects):
        return "pie"
    if all(isinstance(obj, Rectangle) for obj in objects):
        return "bar"
    return "unknown"


def _chart_of_axes(ax: Any) -> dict[str, Any]:
    kind = _chart_type(ax)
    if kind in ("line", "scatter"):
        return _point_chart(ax, kind)
    if kind == "bar":
        return _bar_chart(ax)
    if kind == "pie":
        return _pie_chart(ax)
    if kind == "box_and_whisker":
        return _box_chart(ax)
    return {"type": "unknown", "title": _title(ax), "elements": []}


def _title(ax: Any) -> str | None:
    return str(ax.get_title()) or None


def _unit(label: str | None) -> str | None:
    if not label:
        return None
    match = _UNIT.search(label)
    if match is None:
        return None
    return match.group(1) or match.group(2)


def _chart_2d(ax: Any, kind: str) -> dict[str, Any]:
    x_label = str(ax.get_xlabel()) or None
    y_label = str(ax.get_ylabel()) or None
    return {
        "type": kind,
        "title": _title(ax),
        "x_label": x_label,
        "y_label": y_label,
        "x_unit": _unit(x_label),
        "y_unit": _unit(y_label),
        "elements": [],
    }


def _swap_axes(chart: dict[str, Any]) -> None:
    chart["x_label"], chart["y_label"] = chart["y_label"], chart["x_label"]
    chart["x_unit"], chart["y_unit"] = chart["y_unit"], chart["x_unit"]


def _number(value: Any) -> float | None:
    number = float(value)
    return number if math.isfinite(number) else None


def _point_value(value: Any) -> str | float | None:
    if isinstance(value, datetime.date):
        return value.isoformat()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        if isinstance(value, numpy.datetime64):
            return str(value.astype("datetime64[s]").astype(str))
        if isinstance(value, numpy.str_):
            return str(value)
    if isinstance(value, str):
        return value
    return _number(value)


def _converter(axis: Any) -> Any:
    get = getattr(axis, "get_converter", None)
    return get() if get is not None else getattr(axis, "converter", None)


def _is_date_converter(converter: Any) -> bool:
    dates = sys.modules.get("matplotlib.dates")
    switchable = getattr(dates, "_SwitchableDateConverter", None)
    known = tuple(
        cls
        for cls in (
            switchable,
            getattr(dates, "DateConverter", None),
            getattr(dates, "ConciseDateConverter", None),
        )
        if isinstance(cls, type)
    )
    return bool(known) and isinstance(converter, known)


def _ticks(converter: Any, ticks: Sequence[Any]) -> list[Any]:
    if _is_date_converter(converter):
        dates: Any = sys.modules["matplotlib.dates"]  # loaded: the converter is one of its
        return [dates.num2date(tick).isoformat() for tick in ticks]
    if isinstance(ticks[0], int | float):
        return [_number(tick) for tick in ticks]
    return [_point_value(tick) for tick in ticks]


def _scale(converter: Any, scale: str, ticks: Sequence[Any], labels: Sequence[str]) -> str:
    if _is_date_converter(converter):
        return "datetime"
    if scale != "linear":
        return scale
    for i, (tick, label) in enumerate(zip(ticks, labels, strict=False)):
        if isinstance(tick, int | float) and tick == i and str(i) != label:
            continue
        return "linear"
    return "categorical"


def _point_chart(ax: Any, kind: str) -> dict[str, Any]:
    chart = _chart_2d(ax, kind)
    for name, axis, scale in (("x", ax.xaxis, ax.get_xscale()), ("y", ax.yaxis, ax.get_yscale())):
        converter = _converter(axis)
        labels = [str(label.get_text()) for label in axis.get_ticklabels()]
        ticks = _ticks(converter, list(axis.get_ticklocs()))
        chart[f"{name}_ticks"] = ticks
        chart[f"{name}_tick_labels"] = labels
        chart[f"{name}_scale"] = _scale(converter, str(scale), ticks, labels)
    elements: list[dict[str, Any]] = []
    if kind == "line":
        for line in ax.get_lines():
            if _is_grid_line(line):
                continue
            label = str(line.get_label())
            if label.startswith("_child") and label[6:].isdigit():
                label = f"Line {int(label[6:])}"
            points = zip(line.get_xdata(), line.get_ydata(), strict=False)
            elements.append(
                {"label": label, "points": [[_point_value(x), _point_value(y)] for x, y in points]}
            )
    else:
        for collection in ax.collections:
            elements.append(
                {
                    "label": str(collection.get_label()),
                    "points": [[_number(x), _number(y)] for x, y in collection.get_offsets()],
                }
            )
    chart["elements"] = elements
    return chart


def _bar_chart(ax: Any) -> dict[str, Any]:
    chart = _chart_2d(ax, "bar")
    elements: list[dict[str, Any]] = []
    swapped = False
    for container in ax.containers:
        group = str(container.get_label())
        if group.startswith("_container") and group[10:].isdigit():
            group = f"Group {int(group[10:])}"
        rects = list(container)
        if not rects:
            continue
        heights = [rect.get_height() for rect in rects]
        orientation = getattr(container, "orientation", None)
        if orientation not in ("vertical", "horizontal"):
            # e2b-charts' guess: bars of one height are horizontal bars
            orientation = "horizontal" if all(h == heights[0] for h in heights) else "vertical"
        if orientation == "horizontal":
            if not swapped:
                _swap_axes(chart)
                swapped = True
            labels = [str(label.get_text()) for label in ax.get_yticklabels()]
            values = [rect.get_width() for rect in rects]
        else:
            labels = [str(label.get_text()) for label in ax.get_xticklabels()]
            values = heights
        for label, value in zip(labels, values, strict=False):
            elements.append({"label": label, "group": group, "value": _number(value)})
    chart["elements"] = elements
    return chart


def _round(number: Any) -> decimal.Decimal:
    """e2b-charts' ``dynamic_round``: 8 significant digits around the number's magnitude."""
    value = decimal.Decimal(str(number))
    with decimal.localcontext() as context:
        context.prec = max(1, 8 - value.adjusted())
        return +value


def _pie_chart(ax: Any) -> dict[str, Any]:
    elements = []
    for wedge in ax.patches:
        theta1, theta2 = decimal.Decimal(float(wedge.theta1)), decimal.Decimal(float(wedge.theta2))
        angle = abs(_round(theta2 - theta1))
        elements.append(
            {"label": str(wedge.get_label()), "angle": float(angle), "radius": _number(wedge.r)}
        )
    return {"type": "pie", "title": _title(ax), "elements": elements}


def _box_chart(ax: Any) -> dict[str, Any]:
    chart = _chart_2d(ax, "box_and_whisker")
    labels = [str(item.get_text()) for item in ax.get_xticklabels()]
    boxes: list[dict[str, Any]] = []
    for label, patch in zip(labels, ax.patches, strict=False):
        vertices = patch.get_path().vertices
        xs = [_round(x) for x in vertices[:, 0]]
        ys = [_round(y) for y in vertices[:, 1]]
        boxes.append(
            {
                "x": min(xs),
                "y": min(ys),
                "label": label,
                "width": max(xs) - min(xs),
                "height": max(ys) - min(ys),
                "outliers": [],
            }
        )
    vertical = bool(boxes) and all(box["height"] == boxes[0]["height"] for box in boxes)
    if vertical:
        _swap_axes(chart)
        for box in boxes:
            box["x"], box["y"] = box["y"], box["x"]
            box["width"], box["height"] = box["height"], box["width"]
    for line in ax.lines:
        xdata = [_round(x) for x in line.get_xdata()]
        ydata = [_round(y) for y in line.get_ydata()]
        if vertical:
            xdata, ydata = ydata, xdata
        if len(xdata) == 1:
            owner = next((b for b in boxes if b["x"] <= xdata[0] <= b["x"] + b["width"]), None)
            if owner is None:
                continue
            owner["outliers"].append(ydata[0])
        if len(ydata) != 2:
            continue
        owner = next(
            (b for b in boxes if b["x"] <= xdata[0] <= xdata[1] <= b["x"] + b["width"]), None
        )
        if owner is None:
            continue
        if ydata[0] == ydata[1] and owner["y"] <= ydata[0] <= owner["y"] + owner["height"]:
            owner["median"] = ydata[0]
            continue
        lower, upper = min(ydata), max(ydata)
        if upper == owner["y"]:
            owner["whisker_lower"] = lower
        elif lower == owner["y"] + owner["height"]:
            owner["whisker_upper"] = upper
    chart["elements"] = [
        {
            "label": box["label"],
            "min": float(box["whisker_lower"]),
            "first_quartile": float(box["y"]),
            "median": float(box["median"]),
            "third_quartile": float(box["y"] + box["height"]),
            "max": float(box["whisker_upper"]),
            "outliers": [float(value) for value in box["outliers"]],
        }
        for box in boxes
    ]
    return chart
