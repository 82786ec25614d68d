"""The figures (see ``simjax.viz``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..io._motion import CoordinateTable

_SUMMARY = ("total_squared_error", "marker_error_RMS", "marker_error_max")


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt  # noqa: PLC0415 - an optional dependency, loaded on use
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError("simjax.viz needs matplotlib: pip install matplotlib") from None
    return plt


def plot_marker_errors(
    table: CoordinateTable,
    *,
    markers: Sequence[str] | None = None,
    ax: Any = None,
    units: str = "mm",
) -> Any:
    """Each marker's distance to its observation over time, plus the RMS and the maximum
    over markers (dashed, black and grey).

    Args:
        table: Marker errors with one ``<marker>_error`` column per marker
            (``sj.io.marker_error_table(..., per_marker=True)``); a table with only the
            three summary columns draws just the RMS and maximum.
        markers: Markers to draw (default: all in the table).
        ax: A matplotlib Axes to draw into (default: a new figure).
        units: ``"mm"`` or ``"m"``.

    Returns:
        The matplotlib Figure.
    """
    if units not in ("mm", "m"):
        raise ValueError(f"plot_marker_errors: units must be 'mm' or 'm', got {units!r}")
    k = 1e3 if units == "mm" else 1.0
    per = {lb[: -len("_error")]: lb for lb in table.labels if lb.endswith("_error") and lb not in _SUMMARY}
    if markers is not None:
        unknown = [m for m in markers if m not in per]
        if unknown:
            raise ValueError(
                f"plot_marker_errors: no error column for {unknown}; the table has {sorted(per)[:8]} "
                "(make it with sj.io.marker_error_table(..., per_marker=True))"
            )
        per = {m: per[m] for m in markers}
    summary = [lb for lb in _SUMMARY[1:] if lb in table.labels]
    if not per and not summary:
        raise ValueError(
            "plot_marker_errors: the table has neither per-marker '<name>_error' columns nor "
            "marker_error_RMS/marker_error_max; make it with sj.io.marker_error_table"
        )
    plt = _pyplot()
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 3.5))
    else:
        fig = ax.figure
    t = np.asarray(table.time)
    for name, lb in per.items():
        ax.plot(t, k * table.column(lb), lw=1, label=name)
    styles = {"marker_error_RMS": ("k", "RMS"), "marker_error_max": ("0.5", "max")}
    for lb in summary:
        color, label = styles[lb]
        ax.plot(t, k * table.column(lb), "--", color=color, lw=1.5, label=label)
    ax.set_xlabel("time (s)")
    ax.set_ylabel(f"marker error ({units})")
    ax.legend(fontsize="x-small", ncol=max(1, math.ceil((len(per) + len(summary)) / 12)), loc="upper right")
    return fig


def plot_coordinates(
    table: CoordinateTable,
    reference: CoordinateTable | None = None,
    *,
    names: Sequence[str] | None = None,
    degrees: Sequence[str] | bool = True,
    labels: tuple[str, str] = ("simjax", "reference"),
    ncols: int = 4,
) -> Any:
    """Coordinates over time, one panel each, with a reference motion dashed.

    Args:
        table: Coordinates over time (``model.table_from_q(time, states.q)`` or
            ``sj.io.read_mot``).
        reference: Another motion over the same coordinates (e.g. OpenSim's IK ``.mot``);
            its columns are matched by name and drawn at its own times.
        names: Coordinates to draw (default: every column of ``table``; with a reference,
            the columns both have).
        degrees: Draw angles in degrees: ``True`` converts every column of a table in
            radians, or list the angular columns; ``False`` draws the numbers as stored.
            Tables already ``in_degrees`` are drawn as stored.
        labels: Legend names of ``table`` and ``reference``.
        ncols: Panels per row.

    Returns:
        The matplotlib Figure.
    """
    if names is None:
        names = [n for n in table.labels if reference is None or n in reference.labels]
    missing = [n for n in names if n not in table.labels]
    if reference is not None:
        missing += [f"{n} (reference)" for n in names if n not in reference.labels]
    if missing:
        raise ValueError(f"plot_coordinates: no column for {missing[:6]}")
    if not names:
        raise ValueError("plot_coordinates: no coordinate to draw (no column in common with the reference?)")

    def values(tab: CoordinateTable, n: str) -> np.ndarray:
        v = tab.column(n)
        to_deg = degrees is True or (not isinstance(degrees, bool) and n in degrees)
        return np.rad2deg(v) if to_deg and not tab.in_degrees else v

    plt = _pyplot()
    nc = max(1, min(ncols, len(names)))
    nr = math.ceil(len(names) / nc)
    fig, axes = plt.subplots(nr, nc, figsize=(3.2 * nc, 2.2 * nr), squeeze=False, sharex=True)
    for i, n in enumerate(names):
        ax = axes[i // nc][i % nc]
        ax.plot(np.asarray(table.time), values(table, n), lw=1.2, label=labels[0])
        if reference is not None:
            ax.plot(np.asarray(reference.time), values(reference, n), "--", lw=1.2, label=labels[1])
        ax.set_title(n, fontsize="small")
    for j in range(len(names), nr * nc):
        axes[j // nc][j % nc].set_visible(False)
    if reference is not None:
        axes[0][0].legend(fontsize="x-small")
    for ax in axes[-1]:
        ax.set_xlabel("time (s)")
    fig.tight_layout()
    return fig
