"""Motion data: marker trajectories (.trc, .c3d) and coordinate tables (.mot, .sto).

Plain NumPy and the standard library; nothing here is traced. The file layouts follow
OpenSim 4 (``TRCFileAdapter``, ``STOFileAdapter`` and the older ``Storage`` .mot files) so
that a file written here loads in OpenSim with the same numbers, and a file OpenSim writes
loads here. ``.c3d`` files are read through the optional ``ezc3d`` package
(``pip install "simjax[c3d]"``).

Conventions:

- Missing marker values are NaN in memory. The .trc writer writes them as ``NaN``: OpenSim
  reads ``NaN`` back as NaN, but it refuses a row whose *trailing* fields are empty, so
  empty fields (which this reader also accepts) are not written.
- Numbers are written with ``repr`` (the shortest text that reads back to the same
  float64), so write -> read returns identical arrays.
- Units of length are ``"mm"``, ``"cm"``, ``"dm"`` and ``"m"`` (long spellings such as
  ``"millimeters"`` are understood too); conversion divides or multiplies by a power of ten,
  which is correctly rounded.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .. import _spatial as sp

__all__ = [
    "CoordinateTable",
    "MarkerTable",
    "read_c3d",
    "read_mot",
    "read_sto",
    "read_trc",
    "write_mot",
    "write_sto",
    "write_trc",
]

PathLike = str | os.PathLike

# Power of ten of one unit in metres.
_UNIT_EXPONENT = {"mm": -3, "cm": -2, "dm": -1, "m": 0}
_UNIT_ALIASES = {
    "millimeter": "mm",
    "millimeters": "mm",
    "millimetre": "mm",
    "millimetres": "mm",
    "centimeter": "cm",
    "centimeters": "cm",
    "centimetre": "cm",
    "centimetres": "cm",
    "decimeter": "dm",
    "decimeters": "dm",
    "decimetre": "dm",
    "decimetres": "dm",
    "meter": "m",
    "meters": "m",
    "metre": "m",
    "metres": "m",
}

# Lab Z up -> Y up: a rotation of -90 degrees about X, p' = (x, z, -y). This is the rotation
# OpenSim's examples apply to Z-up C3D data (``rotateData('x', -90)``).
_Z_UP_TO_Y_UP = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]])

_TRC_KEYS = (
    "DataRate",
    "CameraRate",
    "NumFrames",
    "NumMarkers",
    "Units",
    "OrigDataRate",
    "OrigDataStartFrame",
    "OrigNumFrames",
)
_TRC_FLOAT_KEYS = ("DataRate", "CameraRate", "OrigDataRate")
_TRC_INT_KEYS = ("NumFrames", "NumMarkers", "OrigDataStartFrame", "OrigNumFrames")

# Header keys of .mot/.sto files that the table itself carries (not kept in ``metadata``).
_STO_OWN_KEYS = ("version", "nrows", "ncolumns", "indegrees")


# ---------------------------------------------------------------------------- helpers
def _canonical_units(units: str, who: str) -> str:
    u = str(units).strip()
    key = _UNIT_ALIASES.get(u.lower(), u.lower())
    if key not in _UNIT_EXPONENT:
        raise ValueError(
            f"{who}: unknown length unit {units!r}; use one of 'mm', 'cm', 'dm', 'm' "
            "(or their long spellings such as 'millimeters')"
        )
    return key


def _convert_length(x: np.ndarray, src: str, dst: str, who: str) -> np.ndarray:
    """Convert lengths from ``src`` to ``dst`` units (a correctly rounded power of ten)."""
    d = _UNIT_EXPONENT[_canonical_units(src, who)] - _UNIT_EXPONENT[_canonical_units(dst, who)]
    if d > 0:
        return x * float(10**d)
    if d < 0:
        return x / float(10 ** (-d))
    return x.copy()


def _fmt(x: float) -> str:
    """Shortest text that reads back to the same float64; NaN as ``NaN`` (OpenSim reads it)."""
    x = float(x)
    if np.isnan(x):
        return "NaN"
    return repr(x)


def _fmt_row(values: np.ndarray) -> list[str]:
    """``_fmt`` over a 1-D array, fast (``repr`` of Python floats, ``nan`` -> ``NaN``)."""
    return [r if r != "nan" else "NaN" for r in map(repr, values.tolist())]


def _fmt_header_number(x: float) -> str:
    x = float(x)
    if np.isfinite(x) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return _fmt(x)


def _read_lines(path: PathLike, who: str) -> list[str]:
    p = os.fspath(path)
    if not os.path.exists(p):
        raise FileNotFoundError(f"{who}: no such file: {p!r}")
    if os.path.isdir(p):
        raise IsADirectoryError(f"{who}: {p!r} is a directory, not a file")
    with open(p, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")  # older exporters write Windows-1252 marker names
    return text.splitlines()


def _split(line: str) -> list[str]:
    """Fields of one line: tab-separated when it has a tab (empty fields kept), otherwise
    separated by runs of spaces (some exporters)."""
    line = line.rstrip("\r\n")
    if "\t" in line:
        return [f.strip() for f in line.split("\t")]
    return line.split()


def _trim_trailing_empty(fields: list[str]) -> list[str]:
    while fields and fields[-1] == "":
        fields = fields[:-1]
    return fields


def _parse_floats(fields: list[str], path: str, lineno: int, describe: Any, first_col: int = 1) -> np.ndarray:
    """Fields -> float64 (empty, ``nan`` or ``NaN`` -> NaN); a clear error naming the file,
    line, column (1-based, counted from ``first_col``) and what the column holds."""
    filled = [f if f else "nan" for f in fields]
    try:
        return np.array(filled, dtype=np.float64)
    except ValueError:
        pass
    for j, f in enumerate(filled):
        try:
            float(f)
        except ValueError:
            raise ValueError(
                f"{path}, line {lineno}, column {first_col + j} ({describe(j)}): "
                f"expected a number, found {f!r}"
            ) from None
    raise AssertionError("unreachable")  # pragma: no cover


def _check_times(times: np.ndarray, path: str, linenos: Sequence[int], column: str) -> None:
    """Refuse a time column that is not finite and strictly increasing, naming the file,
    the line(s) and the values (a NaN time, or a repeated or backward row, would make every
    reader of the table interpolate or step silently wrong)."""
    t = [float(x) for x in times]
    bad = ~np.isfinite(t)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"{path}, line {linenos[i]}, {column}: the time is {t[i]!r}; every row needs a finite time"
        )
    back = ~(np.diff(t) > 0)
    if back.any():
        i = int(np.argmax(back))
        what = "repeats" if t[i + 1] == t[i] else "is before"
        raise ValueError(
            f"{path}, line {linenos[i + 1]}, {column}: the time {t[i + 1]!r} {what} {t[i]!r} on line "
            f"{linenos[i]}; times must be strictly increasing (sort the rows, or drop the repeated one)"
        )


def _list_some(names: Sequence[str], k: int = 8) -> str:
    names = list(names)
    s = ", ".join(repr(n) for n in names[:k])
    return s + (f", ... ({len(names)} in all)" if len(names) > k else "")


def _repeated(items: Sequence[str]) -> list[str]:
    """Every item that already occurred earlier in ``items``, in order."""
    seen: set[str] = set()
    dup = []
    for x in items:
        if x in seen:
            dup.append(x)
        seen.add(x)
    return dup


def _check_names(names: Sequence[str], who: str, what: str) -> list[str]:
    if isinstance(names, str):
        raise TypeError(f"{who}: {what} must be a list of strings, not a single string {names!r}")
    out = [str(n) for n in names]
    dup = _repeated(out)
    if dup:
        raise ValueError(f"{who}: {what} must be unique; repeated: {_list_some(sorted(set(dup)))}")
    return out


# ---------------------------------------------------------------------------- MarkerTable
@dataclasses.dataclass(frozen=True, eq=False)
class MarkerTable:
    """Marker trajectories: one 3-vector per marker per frame, NaN where a marker is missing.

    Build one directly or with :func:`read_trc` / :func:`read_c3d`; methods return new tables.
    ``data_rate`` defaults to ``1 / median(diff(time))``, ``camera_rate`` to ``data_rate``,
    ``frame_numbers`` to ``1, 2, ..., T``.

    Attributes:
        time: Time of each frame in seconds, shape (T,).
        marker_names: Marker names, unique, length M.
        data: Marker positions in ``units``, shape (T, M, 3); NaN marks a missing value.
        units: Length unit of ``data`` as written in the file (``"mm"``, ``"m"``, ...).
        data_rate: Frames per second of the data.
        camera_rate: Frames per second of the cameras.
        frame_numbers: Frame number of each row, shape (T,), integers.
        orig_data_rate: ``OrigDataRate`` of a .trc file, if known.
        orig_data_start_frame: ``OrigDataStartFrame`` of a .trc file, if known.
        orig_num_frames: ``OrigNumFrames`` of a .trc file, if known.
        metadata: Other header entries (strings); not written to .trc files, whose header
            OpenSim requires to hold exactly the 8 standard keys.
    """

    time: np.ndarray
    marker_names: list[str]
    data: np.ndarray
    units: str = "m"
    data_rate: float | None = None
    camera_rate: float | None = None
    frame_numbers: np.ndarray | None = None
    orig_data_rate: float | None = None
    orig_data_start_frame: int | None = None
    orig_num_frames: int | None = None
    metadata: dict[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        who = "MarkerTable"
        set_ = object.__setattr__
        t = np.array(self.time, dtype=np.float64)
        if t.ndim != 1:
            raise ValueError(f"{who}: time must have shape (T,), got {t.shape}")
        names = _check_names(self.marker_names, who, "marker_names")
        d = np.array(self.data, dtype=np.float64)
        if d.shape != (t.shape[0], len(names), 3):
            raise ValueError(
                f"{who}: data must have shape (T, M, 3) = ({t.shape[0]}, {len(names)}, 3) "
                f"for {t.shape[0]} times and {len(names)} marker names, got {d.shape}"
            )
        if self.frame_numbers is None:
            fn = np.arange(1, t.shape[0] + 1, dtype=np.int64)
        else:
            fn = np.asarray(self.frame_numbers)
            if fn.shape != t.shape:
                raise ValueError(f"{who}: frame_numbers must have shape {t.shape}, got {fn.shape}")
            if fn.size and not np.array_equal(fn, np.round(fn)):
                raise ValueError(f"{who}: frame_numbers must be integers")
            fn = fn.astype(np.int64)
        rate = self.data_rate
        if rate is None:
            dt = np.diff(t)
            if dt.size == 0 or not np.all(np.isfinite(dt)) or np.median(dt) <= 0:
                raise ValueError(
                    f"{who}: cannot infer data_rate from {t.shape[0]} time value(s); pass data_rate="
                )
            rate = 1.0 / float(np.median(dt))
        rate = float(rate)
        if not (np.isfinite(rate) and rate > 0):
            raise ValueError(f"{who}: data_rate must be a positive number, got {rate}")
        cam = rate if self.camera_rate is None else float(self.camera_rate)
        if not isinstance(self.units, str):
            raise TypeError(f"{who}: units must be a string such as 'mm' or 'm', got {self.units!r}")
        set_(self, "time", t)
        set_(self, "marker_names", names)
        set_(self, "data", d)
        set_(self, "units", self.units.strip())
        set_(self, "frame_numbers", fn)
        set_(self, "data_rate", rate)
        set_(self, "camera_rate", cam)
        if self.orig_data_rate is not None:
            set_(self, "orig_data_rate", float(self.orig_data_rate))
        for k in ("orig_data_start_frame", "orig_num_frames"):
            if getattr(self, k) is not None:
                set_(self, k, int(getattr(self, k)))
        set_(self, "metadata", {str(k): str(v) for k, v in dict(self.metadata).items()})

    def __len__(self) -> int:
        """Number of frames T."""
        return int(self.time.shape[0])

    def __repr__(self) -> str:
        return (
            f"MarkerTable({len(self)} frames at {self.data_rate:g} Hz, {len(self.marker_names)} markers "
            f"[{_list_some(self.marker_names, 5)}], units={self.units!r})"
        )

    def replace(self, **changes: Any) -> MarkerTable:
        """A copy with some fields changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    def _index(self, name: str) -> int:
        try:
            return self.marker_names.index(name)
        except ValueError:
            raise KeyError(
                f"MarkerTable: no marker named {name!r}; markers: {_list_some(self.marker_names)}"
            ) from None

    def marker(self, name: str) -> np.ndarray:
        """Trajectory of one marker, shape (T, 3), in ``units`` (a copy).

        Raises:
            KeyError: No marker has this name.
        """
        return self.data[:, self._index(name), :].copy()

    def select(self, names: Sequence[str]) -> MarkerTable:
        """A table with only these markers, in this order.

        Raises:
            KeyError: A name is not in the table.
        """
        names = _check_names(names, "MarkerTable.select", "names")
        missing = [n for n in names if n not in self.marker_names]
        if missing:
            raise KeyError(
                f"MarkerTable.select: no marker(s) {_list_some(missing)}; "
                f"markers: {_list_some(self.marker_names)}"
            )
        idx = [self.marker_names.index(n) for n in names]
        return self.replace(marker_names=names, data=self.data[:, idx, :])

    def in_units(self, units: str) -> MarkerTable:
        """A copy with lengths in ``units`` (``"mm"``, ``"cm"``, ``"dm"`` or ``"m"``).

        Raises:
            ValueError: ``units`` or the table's own units are not a known length unit.
        """
        dst = _canonical_units(units, "MarkerTable.in_units")
        src = _canonical_units(self.units, f"MarkerTable.in_units (the table's units {self.units!r})")
        return self.replace(units=dst, data=_convert_length(self.data, src, dst, "MarkerTable.in_units"))

    def rotated(self, R: Any) -> MarkerTable:
        """A copy with every position mapped by a rotation: ``p' = R @ p``.

        A position with any NaN component becomes NaN in all three (it is missing).

        Args:
            R: A proper rotation matrix, shape (3, 3): orthonormal with determinant +1
                (to within 1e-9).

        Raises:
            ValueError: ``R`` is not a proper rotation.
        """
        R = sp.check_rotation(R, "MarkerTable.rotated", tol=1e-9)
        out = np.einsum("ij,tmj->tmi", R, self.data)
        out[np.isnan(self.data).any(axis=2)] = np.nan
        return self.replace(data=out)

    def rotated_about(self, axis: str, degrees: float) -> MarkerTable:
        """A copy rotated by ``degrees`` about the lab ``axis`` (``"x"``, ``"y"`` or ``"z"``),
        right-handed: ``rotated_about("x", -90)`` equals :meth:`to_y_up`."""
        a = str(axis).lower()
        if a not in ("x", "y", "z"):
            raise ValueError(f"MarkerTable.rotated_about: axis must be 'x', 'y' or 'z', got {axis!r}")
        th = np.deg2rad(float(degrees))
        c, s = np.cos(th), np.sin(th)
        # Exact for multiples of 90 degrees (avoid cos(pi/2) = 6e-17).
        if float(degrees) % 90.0 == 0.0:
            c, s = float(np.round(c)), float(np.round(s))
        i, j = {"x": (1, 2), "y": (2, 0), "z": (0, 1)}[a]
        R = np.eye(3)
        R[i, i], R[i, j], R[j, i], R[j, j] = c, -s, s, c
        return self.rotated(R)

    def to_y_up(self) -> MarkerTable:
        """From a Z-up lab frame to OpenSim's Y-up frame: ``(x, y, z) -> (x, z, -y)``.

        This is a rotation of -90 degrees about the lab X axis (what OpenSim's C3D examples
        do with ``rotateData('x', -90)``): the lab's vertical Z becomes Y, X stays the same.
        For another lab layout use :meth:`rotated` or :meth:`rotated_about`.
        """
        return self.rotated(_Z_UP_TO_Y_UP)

    def observations(self, markers: Any, *, units: str | None = None) -> np.ndarray:
        """Marker observations in the order an Assembler's ``Markers`` expects them.

        Args:
            markers: Either a list of marker names in observation order, or a simjax
                ``Markers`` condition: its observation order (``define_observation_order``,
                or the order markers were added) gives the names.
            units: Convert to these units first (e.g. ``"m"``, the unit simjax models use);
                ``None`` keeps the table's units.

        Returns:
            Array of shape (T, n_obs, 3): row ``t`` is what ``Markers.move_all_observations``
            takes at frame ``t``. A marker the table lacks is a column of NaN (missing).

        Raises:
            ValueError: None of the names is in the table (almost surely the wrong file or
                naming scheme).

        Warns:
            UserWarning: listing the names that the table lacks, when some match and some do not.
        """
        names = self._observation_names(markers)
        table = self if units is None else self.in_units(units)
        T = len(table)
        out = np.full((T, len(names), 3), np.nan)
        if not names:
            return out
        have = {n: i for i, n in enumerate(table.marker_names)}
        missing = [n for n in names if n not in have]
        if len(missing) == len(names):
            raise ValueError(
                f"MarkerTable.observations: none of the {len(names)} marker names matches the table; "
                f"wanted {_list_some(names, 5)}; the table has {_list_some(table.marker_names, 5)}"
            )
        if missing:
            warnings.warn(
                f"MarkerTable.observations: {len(missing)} of {len(names)} markers are not in the "
                f"table and will be missing (NaN): {_list_some(missing)}",
                stacklevel=2,
            )
        for ox, n in enumerate(names):
            if n in have:
                out[:, ox, :] = table.data[:, have[n], :]
        return out

    @staticmethod
    def _observation_names(markers: Any) -> list[str]:
        if isinstance(markers, str):
            raise TypeError(
                "MarkerTable.observations: pass a list of marker names or a Markers condition, "
                f"not a single string {markers!r}"
            )
        if hasattr(markers, "get_marker_name") and hasattr(markers, "get_num_markers"):
            if hasattr(markers, "get_num_observations") and hasattr(markers, "get_index_for_observation"):
                n_obs = int(markers.get_num_observations())
                return [
                    str(markers.get_marker_name(markers.get_index_for_observation(ox))) for ox in range(n_obs)
                ]
            return [str(markers.get_marker_name(i)) for i in range(int(markers.get_num_markers()))]
        if isinstance(markers, Iterable):
            names = list(markers)
            if not all(isinstance(n, str) for n in names):
                raise TypeError("MarkerTable.observations: marker names must be strings")
            return names
        raise TypeError(
            "MarkerTable.observations: expected a list of marker names or a Markers condition, "
            f"got {type(markers).__name__}"
        )


# ---------------------------------------------------------------------------- .trc
def read_trc(path: PathLike) -> MarkerTable:
    """Read a .trc marker file (the layout OpenSim's ``TRCFileAdapter`` reads and writes).

    Line 1 ``PathFileType 4 (X/Y/Z) <file>``; line 2 header keys (``DataRate CameraRate
    NumFrames NumMarkers Units OrigDataRate OrigDataStartFrame OrigNumFrames``); line 3 their
    values; line 4 ``Frame# Time <marker1> <marker2> ...``; line 5 ``X1 Y1 Z1 X2 ...``; then,
    after optional blank lines, one row per frame. Fields are tab-separated (empty fields
    allowed) or, for some exporters, separated by runs of spaces.

    Missing values may be empty fields or ``NaN``/``nan``; they become NaN. Extra empty
    fields at the end of a line (trailing tabs) are ignored. A row shorter than expected is
    accepted only when it ends with a tab, i.e. its last markers were left empty; the rest
    of it is then NaN. Other header keys go to ``metadata``.

    Warns:
        UserWarning: ``NumFrames`` differs from the number of rows (the rows are kept), or
            ``NumMarkers`` differs from the names on line 4 (the names are used).

    Raises:
        FileNotFoundError: No such file.
        ValueError: Malformed file; the message names the file, the line and, for a bad
            number, the column and marker. A time that is missing (NaN) or not after the
            row before (times must be strictly increasing) names its line and the values.
    """
    p = os.fspath(path)
    lines = _read_lines(p, "read_trc")
    if len(lines) < 5:
        raise ValueError(f"{p}: not a .trc file: it has {len(lines)} line(s); the header alone takes 5")
    l1 = _split(lines[0])
    if not l1 or l1[0].lower() != "pathfiletype":
        raise ValueError(f"{p}, line 1: not a .trc file: expected 'PathFileType\\t4\\t(X/Y/Z)\\t<name>'")
    keys = _trim_trailing_empty(_split(lines[1]))
    vals = _trim_trailing_empty(_split(lines[2]))
    if len(keys) != len(vals):
        raise ValueError(f"{p}, line 3: {len(vals)} header value(s) for the {len(keys)} key(s) on line 2")
    header = dict(zip(keys, vals))
    lower = {k.lower(): k for k in header}

    def get(key: str, kind: type | None) -> Any:
        k = lower.get(key.lower())
        if k is None:
            return None
        v = header[k]
        if kind is None:
            return v
        try:
            x = float(v)
            if kind is int:
                if not x.is_integer():
                    raise ValueError
                return int(x)
            return x
        except ValueError:
            raise ValueError(
                f"{p}, line 3: header entry {k} = {v!r} is not {'an integer' if kind is int else 'a number'}"
            ) from None

    units = get("Units", None)
    if units is None:
        raise ValueError(f"{p}, line 2: the header has no 'Units' entry (e.g. mm or m)")
    info = {k: get(k, float) for k in _TRC_FLOAT_KEYS} | {k: get(k, int) for k in _TRC_INT_KEYS}
    metadata = {k: v for k, v in header.items() if k.lower() not in {s.lower() for s in _TRC_KEYS}}

    l4 = _split(lines[3])
    if len(l4) < 2 or not l4[0].lower().startswith("frame") or l4[1].lower() != "time":
        raise ValueError(f"{p}, line 4: expected 'Frame#\\tTime\\t<marker names>', found {lines[3][:60]!r}")
    names = [n for n in l4[2:] if n]
    dup = _repeated(names)
    if dup:
        raise ValueError(
            f"{p}, line 4: marker names must be unique; repeated: {_list_some(sorted(set(dup)))}"
        )
    M = len(names)
    if info["NumMarkers"] is not None and info["NumMarkers"] != M:
        warnings.warn(
            f"{p}: NumMarkers = {info['NumMarkers']} in the header but line 4 names {M} markers; "
            "using the names on line 4",
            stacklevel=2,
        )

    # Line 5 holds X1 Y1 Z1 ...; tolerate files that omit it (the next line is a number).
    start = 4
    l5 = [f for f in _split(lines[4]) if f]
    if l5 and l5[0][:1].upper() in ("X", "Y", "Z"):
        if len(l5) != 3 * M:
            raise ValueError(
                f"{p}, line 5: {len(l5)} coordinate labels (X1 Y1 Z1 ...) for the {M} markers on line 4; "
                f"expected {3 * M}"
            )
        start = 5

    expected = 2 + 3 * M
    coord = "XYZ"

    def describe(c: int) -> str:  # c: 0-based column in the row
        if c == 0:
            return "Frame#"
        if c == 1:
            return "Time"
        m, k = divmod(c - 2, 3)
        return f"marker {names[m]!r} {coord[k]}"

    frames: list[float] = []
    rows: list[np.ndarray] = []
    linenos: list[int] = []
    for i in range(start, len(lines)):
        line = lines[i]
        if not line.strip():
            continue
        lineno = i + 1
        linenos.append(lineno)
        fields = _split(line)
        if len(fields) > expected:
            if any(fields[expected:]):
                raise ValueError(
                    f"{p}, line {lineno}: expected {expected} columns (Frame#, Time and 3 for each of "
                    f"{M} markers), found {len(_trim_trailing_empty(fields))}"
                )
            fields = fields[:expected]
        elif len(fields) < expected:
            if fields and fields[-1] == "" and len(fields) > 2:
                fields = fields + [""] * (expected - len(fields))
            else:
                raise ValueError(
                    f"{p}, line {lineno}: expected {expected} columns (Frame#, Time and 3 for each of "
                    f"{M} markers), found {len(fields)}"
                )
        if not fields[0] or not fields[1]:
            raise ValueError(f"{p}, line {lineno}: the Frame# and Time columns must not be empty")
        row = _parse_floats(fields, p, lineno, describe)
        if not row[0].is_integer():
            raise ValueError(
                f"{p}, line {lineno}, column 1 (Frame#): expected an integer, found {fields[0]!r}"
            )
        frames.append(row[0])
        rows.append(row[1:])

    T = len(rows)
    arr = np.array(rows, dtype=np.float64).reshape(T, 1 + 3 * M)
    _check_times(arr[:, 0], p, linenos, "column 2 (Time)")
    if info["NumFrames"] is not None and info["NumFrames"] != T:
        warnings.warn(
            f"{p}: NumFrames = {info['NumFrames']} in the header but the file has {T} data rows; "
            "keeping the rows",
            stacklevel=2,
        )
    rate = info["DataRate"]
    if rate is None or not (np.isfinite(rate) and rate > 0):
        if T < 2:
            raise ValueError(f"{p}, line 3: DataRate is missing or not positive ({rate})")
        rate = None  # infer from the times
    return MarkerTable(
        time=arr[:, 0],
        marker_names=names,
        data=arr[:, 1:].reshape(T, M, 3),
        units=units,
        data_rate=rate,
        camera_rate=info["CameraRate"],
        frame_numbers=np.array(frames, dtype=np.int64),
        orig_data_rate=info["OrigDataRate"],
        orig_data_start_frame=info["OrigDataStartFrame"],
        orig_num_frames=info["OrigNumFrames"],
        metadata=metadata,
    )


def write_trc(path: PathLike, table: MarkerTable) -> None:
    """Write a .trc file in the layout of OpenSim's ``TRCFileAdapter``.

    The header holds exactly OpenSim's 8 keys (OpenSim refuses any other), so ``metadata``
    is not written. ``OrigDataRate``, ``OrigDataStartFrame`` and ``OrigNumFrames`` default to
    the data rate, the first frame number and the number of frames. Missing values are
    written as ``NaN``; numbers with ``repr``, so :func:`read_trc` returns identical arrays.

    Raises:
        TypeError: ``table`` is not a :class:`MarkerTable`.
        ValueError: A marker name is empty or holds a tab or line break, or the units hold one.
    """
    if not isinstance(table, MarkerTable):
        raise TypeError(f"write_trc: table must be a MarkerTable, got {type(table).__name__}")
    for n in table.marker_names:
        if not n.strip() or any(c in n for c in "\t\r\n") or n != n.strip():
            raise ValueError(
                f"write_trc: marker name {n!r} cannot be written "
                "(empty, surrounding spaces, tab or line break)"
            )
    if any(c in table.units for c in "\t\r\n") or not table.units:
        raise ValueError(f"write_trc: units {table.units!r} cannot be written")
    p = os.fspath(path)
    T, M = len(table), len(table.marker_names)
    fn, rate, cam = table.frame_numbers, table.data_rate, table.camera_rate
    assert fn is not None and rate is not None and cam is not None  # filled in by __post_init__
    values = [
        _fmt_header_number(rate),
        _fmt_header_number(cam),
        str(T),
        str(M),
        table.units,
        _fmt_header_number(rate if table.orig_data_rate is None else table.orig_data_rate),
        str((int(fn[0]) if T else 1) if table.orig_data_start_frame is None else table.orig_data_start_frame),
        str(T if table.orig_num_frames is None else table.orig_num_frames),
    ]
    out = [
        f"PathFileType\t4\t(X/Y/Z)\t{os.path.basename(p)}",
        "\t".join(_TRC_KEYS),
        "\t".join(values),
        "Frame#\tTime\t" + "".join(f"{n}\t\t\t" for n in table.marker_names),
        "\t\t" + "".join(f"X{k}\tY{k}\tZ{k}\t" for k in range(1, M + 1)),
        "",
    ]
    flat = table.data.reshape(T, 3 * M)
    times = _fmt_row(table.time)
    for t in range(T):
        out.append("\t".join([str(int(fn[t])), times[t], *_fmt_row(flat[t])]))
    with open(p, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(out) + "\n")


# ---------------------------------------------------------------------------- .mot / .sto
@dataclasses.dataclass(frozen=True, eq=False)
class CoordinateTable:
    """A table of numbers over time with named columns: an OpenSim .mot or .sto file.

    Typically generalized coordinates. Which columns are angles is not in the file; only
    ``inDegrees`` is, so unit changes take the angular labels from the caller (who knows the
    model): ``table.to_radians(["hip_flexion_r", "knee_angle_r"])``.

    Attributes:
        time: Time of each row in seconds, shape (T,).
        labels: Column names without the time column, unique, length N.
        data: Values, shape (T, N); NaN for missing.
        in_degrees: Whether angular columns are in degrees (the header's ``inDegrees``).
        name: The name on the first header line of older .mot files (``""`` if none).
        metadata: Other header entries ``key=value`` as strings; free text lines of the
            header under ``"header"`` (joined by line breaks).
    """

    time: np.ndarray
    labels: list[str]
    data: np.ndarray
    in_degrees: bool = False
    name: str = ""
    metadata: dict[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        who = "CoordinateTable"
        t = np.array(self.time, dtype=np.float64)
        if t.ndim != 1:
            raise ValueError(f"{who}: time must have shape (T,), got {t.shape}")
        labels = _check_names(self.labels, who, "labels")
        d = np.array(self.data, dtype=np.float64)
        if d.shape != (t.shape[0], len(labels)):
            raise ValueError(
                f"{who}: data must have shape (T, N) = ({t.shape[0]}, {len(labels)}) for {t.shape[0]} "
                f"times and {len(labels)} labels, got {d.shape}"
            )
        if not isinstance(self.in_degrees, bool | np.bool_):
            raise TypeError(f"{who}: in_degrees must be True or False, got {self.in_degrees!r}")
        object.__setattr__(self, "time", t)
        object.__setattr__(self, "labels", labels)
        object.__setattr__(self, "data", d)
        object.__setattr__(self, "in_degrees", bool(self.in_degrees))
        object.__setattr__(self, "name", str(self.name))
        object.__setattr__(self, "metadata", {str(k): str(v) for k, v in dict(self.metadata).items()})

    def __len__(self) -> int:
        """Number of rows T."""
        return int(self.time.shape[0])

    def __repr__(self) -> str:
        return (
            f"CoordinateTable({self.name!r}, {len(self)} rows, {len(self.labels)} columns "
            f"[{_list_some(self.labels, 5)}], in_degrees={self.in_degrees})"
        )

    def replace(self, **changes: Any) -> CoordinateTable:
        """A copy with some fields changed (``dataclasses.replace``)."""
        return dataclasses.replace(self, **changes)

    def _indices(self, labels: Sequence[str], who: str) -> list[int]:
        labels = _check_names(labels, who, "labels")
        missing = [lab for lab in labels if lab not in self.labels]
        if missing:
            raise KeyError(f"{who}: no column(s) {_list_some(missing)}; columns: {_list_some(self.labels)}")
        return [self.labels.index(lab) for lab in labels]

    def column(self, label: str) -> np.ndarray:
        """One column, shape (T,) (a copy).

        Raises:
            KeyError: No column has this label.
        """
        if not isinstance(label, str):
            raise TypeError(f"CoordinateTable.column: label must be a string, got {label!r}")
        return self.data[:, self._indices([label], "CoordinateTable.column")[0]].copy()

    def select(self, labels: Sequence[str]) -> CoordinateTable:
        """A table with only these columns, in this order.

        Raises:
            KeyError: A label is not in the table.
        """
        idx = self._indices(labels, "CoordinateTable.select")
        return self.replace(labels=[self.labels[i] for i in idx], data=self.data[:, idx])

    def to_radians(self, angular_labels: Sequence[str]) -> CoordinateTable:
        """Convert the listed (angular) columns from degrees to radians; ``in_degrees`` becomes False.

        Args:
            angular_labels: The rotational columns; every other column is left as is.

        Raises:
            ValueError: The table is already in radians.
            KeyError: A label is not in the table.
        """
        if not self.in_degrees:
            raise ValueError("CoordinateTable.to_radians: the table is already in radians (in_degrees=False)")
        idx = self._indices(angular_labels, "CoordinateTable.to_radians")
        d = self.data.copy()
        d[:, idx] = np.deg2rad(d[:, idx])
        return self.replace(data=d, in_degrees=False)

    def to_degrees(self, angular_labels: Sequence[str]) -> CoordinateTable:
        """Convert the listed (angular) columns from radians to degrees; ``in_degrees`` becomes True.

        Args:
            angular_labels: The rotational columns; every other column is left as is.

        Raises:
            ValueError: The table is already in degrees.
            KeyError: A label is not in the table.
        """
        if self.in_degrees:
            raise ValueError("CoordinateTable.to_degrees: the table is already in degrees (in_degrees=True)")
        idx = self._indices(angular_labels, "CoordinateTable.to_degrees")
        d = self.data.copy()
        d[:, idx] = np.rad2deg(d[:, idx])
        return self.replace(data=d, in_degrees=True)


def _parse_bool(v: str, p: str, lineno: int, key: str) -> bool:
    s = v.strip().lower()
    if s in ("yes", "true", "1"):
        return True
    if s in ("no", "false", "0"):
        return False
    raise ValueError(f"{p}, line {lineno}: {key}={v!r}; expected yes or no")


def _read_storage(path: PathLike, who: str) -> CoordinateTable:
    p = os.fspath(path)
    lines = _read_lines(p, who)
    end = next((i for i, line in enumerate(lines) if line.strip().lower() == "endheader"), None)
    if end is None:
        raise ValueError(
            f"{p}: no 'endheader' line; an OpenSim .mot/.sto file has header lines (name, inDegrees=...) "
            "ending with a line 'endheader', then the column labels"
        )
    name = ""
    in_degrees = False
    metadata: dict[str, str] = {}
    text: list[str] = []
    counts: dict[str, tuple[int, int]] = {}
    for i in range(end):
        line = lines[i].strip()
        if "=" not in line:
            if i == 0:
                name = line
            elif line:
                text.append(line)
            continue
        key, value = (s.strip() for s in line.split("=", 1))
        kl = key.lower()
        if kl == "indegrees":
            in_degrees = _parse_bool(value, p, i + 1, key)
        elif kl in ("nrows", "ncolumns"):
            try:
                counts[kl] = (int(value), i + 1)
            except ValueError:
                raise ValueError(f"{p}, line {i + 1}: {key}={value!r} is not an integer") from None
        elif kl == "version":
            pass
        else:
            if kl == "datatype" and value.lower() != "double":
                raise ValueError(
                    f"{p}, line {i + 1}: DataType={value} is not supported; only tables of numbers "
                    "(DataType=double) can be read"
                )
            metadata[key] = value
    if text:
        metadata["header"] = "\n".join(text)

    # Column labels: the first non-blank line after endheader.
    li = next((i for i in range(end + 1, len(lines)) if lines[i].strip()), None)
    if li is None:
        raise ValueError(f"{p}: no column labels after 'endheader' (line {end + 1})")
    cols = _trim_trailing_empty(_split(lines[li]))
    if any(not c for c in cols):
        raise ValueError(f"{p}, line {li + 1}: an empty column label")
    dup = _repeated(cols)
    if dup:
        raise ValueError(f"{p}, line {li + 1}: column labels must be unique; repeated: {_list_some(dup)}")
    # The first column is the time, whatever its label (as in OpenSim).
    labels = cols[1:]
    expected = len(cols)
    if "ncolumns" in counts and counts["ncolumns"][0] != expected:
        warnings.warn(
            f"{p}, line {counts['ncolumns'][1]}: nColumns={counts['ncolumns'][0]} but line {li + 1} has "
            f"{expected} column labels; using the labels",
            stacklevel=3,
        )

    rows: list[np.ndarray] = []
    linenos: list[int] = []
    for i in range(li + 1, len(lines)):
        if not lines[i].strip():
            continue
        linenos.append(i + 1)
        fields = _split(lines[i])
        if len(fields) > expected and not any(fields[expected:]):
            fields = fields[:expected]
        if len(fields) != expected:
            raise ValueError(
                f"{p}, line {i + 1}: expected {expected} columns ({cols[0]} and {len(labels)} labels on line "
                f"{li + 1}), found {len(_trim_trailing_empty(fields))}"
            )
        if not fields[0]:
            raise ValueError(f"{p}, line {i + 1}, column 1 ({cols[0]}): empty time")
        rows.append(_parse_floats(fields, p, i + 1, lambda j: repr(cols[j])))
    T = len(rows)
    if "nrows" in counts and counts["nrows"][0] != T:
        warnings.warn(
            f"{p}, line {counts['nrows'][1]}: nRows={counts['nrows'][0]} but the file has {T} data rows; "
            "keeping the rows",
            stacklevel=3,
        )
    arr = np.array(rows, dtype=np.float64).reshape(T, expected)
    _check_times(arr[:, 0], p, linenos, f"column 1 ({cols[0]})")
    return CoordinateTable(
        time=arr[:, 0], labels=labels, data=arr[:, 1:], in_degrees=in_degrees, name=name, metadata=metadata
    )


def read_mot(path: PathLike) -> CoordinateTable:
    """Read an OpenSim .mot file (same format as .sto; see :func:`read_sto`)."""
    return _read_storage(path, "read_mot")


def read_sto(path: PathLike) -> CoordinateTable:
    """Read an OpenSim .sto (or .mot) file of numbers.

    Header lines up to ``endheader``: an optional name on the first line (older .mot files),
    ``key=value`` entries (``inDegrees=yes|no``, default no as in OpenSim; ``nRows`` and
    ``nColumns`` are checked; others go to ``metadata``) and free text (``metadata["header"]``).
    Then a line of column labels, tab- or space-separated; the first column is the time,
    whatever its label, as in OpenSim. Then one row per line; empty fields and ``nan`` are NaN.

    Warns:
        UserWarning: ``nRows`` or ``nColumns`` disagree with the data (the data are kept).

    Raises:
        FileNotFoundError: No such file.
        ValueError: No ``endheader``, a row with the wrong number of columns, a field that is
            not a number (the message names the file, line and column), a time that is NaN
            or not after the row before (times must be strictly increasing; the message names
            the line and the values), or ``DataType`` other than ``double``. Missing values
            (NaN) in the other columns are kept: the format allows them (OpenSim writes
            them); consumers that need every value refuse them by column and row.
    """
    return _read_storage(path, "read_sto")


def _write_storage(path: PathLike, table: CoordinateTable, who: str) -> None:
    if not isinstance(table, CoordinateTable):
        raise TypeError(f"{who}: table must be a CoordinateTable, got {type(table).__name__}")
    for lab in table.labels:
        if not lab.strip() or any(c in lab for c in "\t\r\n") or lab != lab.strip():
            raise ValueError(
                f"{who}: column label {lab!r} cannot be written "
                "(empty, surrounding spaces, tab or line break)"
            )
    if "\n" in table.name or "\r" in table.name or "=" in table.name:
        raise ValueError(f"{who}: name {table.name!r} cannot be written (line break or '=')")
    T, N = table.data.shape
    head = []
    text = table.metadata.get("header", "")
    if table.name or text:
        head.append(table.name)
    head += [
        "version=1",
        f"nRows={T}",
        f"nColumns={N + 1}",
        f"inDegrees={'yes' if table.in_degrees else 'no'}",
    ]
    for k, v in table.metadata.items():
        if k == "header" or k.lower() in _STO_OWN_KEYS:
            continue
        if not k.strip() or "=" in k or any(c in k + v for c in "\r\n") or k.strip().lower() == "endheader":
            raise ValueError(f"{who}: metadata entry {k!r}={v!r} cannot be written as a 'key=value' line")
        head.append(f"{k}={v}")
    for line in text.splitlines():
        if "=" in line or line.strip().lower() == "endheader":
            raise ValueError(
                f"{who}: header text line {line!r} cannot be written (holds '=' or is 'endheader')"
            )
        if line.strip():
            head.append(line)
    out = [*head, "endheader", "\t".join(["time", *table.labels])]
    times = _fmt_row(table.time)
    for t in range(T):
        out.append("\t".join([times[t], *_fmt_row(table.data[t])]))
    with open(os.fspath(path), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(out) + "\n")


def write_mot(path: PathLike, table: CoordinateTable) -> None:
    """Write a .mot file that OpenSim reads (``TimeSeriesTable(path)``, the Storage class).

    Layout: the name (if any), ``version=1``, ``nRows``, ``nColumns`` (time included),
    ``inDegrees=yes|no``, the ``metadata`` entries, ``endheader``, the tab-separated labels
    starting with ``time``, and one row per time. Numbers are written with ``repr`` (exact
    round trip), NaN as ``NaN``. Build the table from arrays with
    ``CoordinateTable(time, labels, data, in_degrees=...)``.

    Raises:
        TypeError: ``table`` is not a :class:`CoordinateTable`.
        ValueError: A label, the name or a metadata entry cannot be written in this format.
    """
    _write_storage(path, table, "write_mot")


def write_sto(path: PathLike, table: CoordinateTable) -> None:
    """Write a .sto file; the same layout as :func:`write_mot` (OpenSim reads both alike)."""
    _write_storage(path, table, "write_sto")


# ---------------------------------------------------------------------------- .c3d
# POINT groups listing labels that are not markers (computed angles, forces, ...).
_C3D_NON_MARKER_GROUPS = ("ANGLES", "FORCES", "MOMENTS", "POWERS", "SCALARS", "REACTIONS")


def _c3d_strings(P: Any, key: str) -> list[str]:
    if key not in P:
        return []
    v = P[key]["value"]
    if isinstance(v, str):
        return [v.strip()]
    return [str(s).strip() for s in np.ravel(np.asarray(v, dtype=object))]


def read_c3d(path: PathLike, *, units: str | None = "m", markers_only: bool = True) -> MarkerTable:
    """Read the marker trajectories of a .c3d file (needs ``ezc3d``: ``pip install "simjax[c3d]"``).

    Names come from ``POINT:LABELS`` (and ``LABELS2``, ... for more than 255 points),
    stripped of spaces; the rate from ``POINT:RATE``; the units from ``POINT:UNITS``.
    ``frame_numbers`` are the C3D frame numbers (the first one is 1 in a file that starts at
    its first frame) and ``time = (frame_number - 1) / rate``. (OpenSim's C3D reader starts
    its time at 0 whatever the first frame; subtract ``time[0]`` to match it.)

    A gap (a negative residual, or coordinates exactly (0, 0, 0), the two conventions in
    use) is NaN. Positions stay in the lab frame of the file; for a Z-up lab use
    :meth:`MarkerTable.to_y_up` to get OpenSim's Y-up convention.

    Args:
        path: The .c3d file.
        units: Convert to these units (``"m"`` by default, the unit simjax models use);
            ``None`` keeps the file's units.
        markers_only: Leave out the points that ``POINT:ANGLES``, ``FORCES``, ``MOMENTS``,
            ``POWERS``, ``SCALARS`` or ``REACTIONS`` list (model outputs, not markers).

    Raises:
        ImportError: ``ezc3d`` is not installed.
        FileNotFoundError: No such file.
        ValueError: The file cannot be read, or ``units`` is given and the file's
            ``POINT:UNITS`` is missing or not a length unit.
    """
    p = os.fspath(path)
    if not os.path.exists(p):
        raise FileNotFoundError(f"read_c3d: no such file: {p!r}")
    try:
        import ezc3d  # noqa: PLC0415 (optional dependency, imported when used)
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            'read_c3d needs the optional package ezc3d: pip install "simjax[c3d]" (or pip install ezc3d)'
        ) from e
    try:
        c3d = ezc3d.c3d(p)
    except Exception as e:  # ezc3d raises bare RuntimeErrors
        raise ValueError(f"{p}: ezc3d could not read this .c3d file: {e}") from e

    P = c3d["parameters"]["POINT"]
    pts = np.asarray(c3d["data"]["points"], dtype=np.float64)  # (4, M, T)
    M, T = pts.shape[1], pts.shape[2]
    labels = _c3d_strings(P, "LABELS")
    k = 2
    while f"LABELS{k}" in P:
        labels += _c3d_strings(P, f"LABELS{k}")
        k += 1
    if len(labels) < M:
        warnings.warn(f"{p}: {M} points but only {len(labels)} POINT:LABELS; naming the rest", stacklevel=2)
        labels += [f"UNLABELED_{i + 1}" for i in range(len(labels), M)]
    labels = labels[:M]
    # Make empty or repeated labels unique, so every column keeps a name.
    names: list[str] = []
    renamed = []
    for i, lab in enumerate(labels):
        n = lab or f"UNLABELED_{i + 1}"
        base, j = n, 2
        while n in names:
            n, j = f"{base}_{j}", j + 1
        if n != lab:
            renamed.append(f"{lab!r} -> {n!r}")
        names.append(n)
    if renamed:
        warnings.warn(f"{p}: empty or repeated point labels renamed: {', '.join(renamed)}", stacklevel=2)

    xyz = np.transpose(pts[:3], (2, 1, 0)).copy()  # (T, M, 3)
    meta = c3d["data"].get("meta_points", {}) if hasattr(c3d["data"], "get") else {}
    res = np.asarray(meta.get("residuals", np.zeros((1, M, T))), dtype=np.float64)
    gap = np.all(xyz == 0.0, axis=2) | ~np.all(np.isfinite(xyz), axis=2)
    if res.shape == (1, M, T):
        gap |= res[0].T < 0
    xyz[gap] = np.nan

    keep = list(range(M))
    if markers_only:
        not_markers = {s for g in _C3D_NON_MARKER_GROUPS for s in _c3d_strings(P, g) if s}
        keep = [i for i in keep if labels[i] not in not_markers]

    rate = (
        float(np.ravel(P["RATE"]["value"])[0])
        if "RATE" in P
        else float(c3d["header"]["points"]["frame_rate"])
    )
    if not (np.isfinite(rate) and rate > 0):
        raise ValueError(f"{p}: POINT:RATE = {rate} is not a positive frame rate")
    first = int(c3d["header"]["points"]["first_frame"])  # 0-based in ezc3d
    frames = np.arange(first + 1, first + 1 + T, dtype=np.int64)
    time = (frames - 1) / rate

    file_units = (_c3d_strings(P, "UNITS") or [""])[0]
    data = xyz[:, keep, :]
    out_units = file_units
    if units is not None:
        if not file_units:
            raise ValueError(
                f"{p}: the file has no POINT:UNITS, so its lengths cannot be converted to {units!r}; "
                "pass units=None to keep the raw numbers"
            )
        src = _canonical_units(file_units, f"read_c3d ({p}: POINT:UNITS)")
        out_units = _canonical_units(units, "read_c3d")
        data = _convert_length(data, src, out_units, "read_c3d")
    return MarkerTable(
        time=time,
        marker_names=[names[i] for i in keep],
        data=data,
        units=out_units,
        data_rate=rate,
        camera_rate=rate,
        frame_numbers=frames,
        orig_data_rate=rate,
        orig_data_start_frame=int(frames[0]) if T else first + 1,
        orig_num_frames=T,
    )
