"""Motion data files: .trc, .mot/.sto and .c3d (round trips, OpenSim as oracle, bad files)."""

import os
import warnings

import numpy as np
import pytest

import simjax as sj
from simjax.io import (
    CoordinateTable,
    MarkerTable,
    read_c3d,
    read_mot,
    read_sto,
    read_trc,
    write_mot,
    write_sto,
    write_trc,
)

# A .trc exactly in OpenSim's layout (TRCFileAdapter output: trailing tabs, blank line 6),
# with a missing marker value written as empty fields in the middle and "nan" at the end.
TRC_FIXTURE = (
    "PathFileType\t4\t(X/Y/Z)\twalk.trc\n"
    "DataRate\tCameraRate\tNumFrames\tNumMarkers\tUnits\tOrigDataRate\tOrigDataStartFrame\tOrigNumFrames\n"
    "60\t120\t3\t3\tmm\t120\t7\t1500\n"
    "Frame#\tTime\tR.ASIS\t\t\tL.ASIS\t\t\tV.Sacral\t\t\t\n"
    "\t\tX1\tY1\tZ1\tX2\tY2\tZ2\tX3\tY3\tZ3\t\n"
    "\n"
    "7\t0.1\t1234.5\t987.25\t-12.125\t\t\t\t1100\t950.5\t-300\t\n"
    "8\t0.11666666666666667\t1235.5\t988.25\t-12.5\t1300.75\t1.5e-3\t0\tnan\tnan\tnan\t\n"
    "9\t0.13333333333333333\t1236.5\t989.25\t-12.875\t1301.75\t2.5e-3\t1\t1101\t951.5\t-301\t\n"
)


def _marker_table(T=5, M=4, seed=0, units="mm"):
    rng = np.random.default_rng(seed)
    data = rng.normal(0.0, 500.0, (T, M, 3))
    data[1, 2, :] = np.nan  # a missing marker
    data[3, 0, 1] = np.nan  # a single missing component
    data[-1, M - 1, :] = np.nan  # the last marker missing (trailing fields)
    time = np.arange(T) / 100.0 + 0.25
    return MarkerTable(
        time=time,
        marker_names=[f"M{i}_{'abc'[i % 3]}" for i in range(M)],
        data=data,
        units=units,
        data_rate=100.0,
        camera_rate=200.0,
        frame_numbers=np.arange(26, 26 + T),
    )


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def _assert_same_markers(a: MarkerTable, b: MarkerTable):
    assert a.marker_names == b.marker_names
    assert a.units == b.units
    np.testing.assert_array_equal(a.time, b.time)
    np.testing.assert_array_equal(a.frame_numbers, b.frame_numbers)
    np.testing.assert_array_equal(a.data, b.data)  # NaN positions must match too
    assert (a.data_rate, a.camera_rate) == (b.data_rate, b.camera_rate)


# ---------------------------------------------------------------------------- .trc
def test_trc_round_trip_is_exact(tmp_path):
    table = _marker_table()
    p = tmp_path / "rt.trc"
    write_trc(p, table)
    back = read_trc(p)
    _assert_same_markers(back, table)
    assert back.data.dtype == np.float64 and back.frame_numbers.dtype == np.int64
    assert (back.orig_data_rate, back.orig_data_start_frame, back.orig_num_frames) == (100.0, 26, 5)
    # and again: a second round trip changes nothing, byte for byte
    p2 = tmp_path / "rt2.trc"
    write_trc(p2, back)
    assert p2.read_text().splitlines()[1:] == p.read_text().splitlines()[1:]
    lines = p.read_text().splitlines()
    assert lines[0] == "PathFileType\t4\t(X/Y/Z)\trt.trc"
    assert lines[2] == "100\t200\t5\t4\tmm\t100\t26\t5"
    assert lines[3] == "Frame#\tTime\t" + "".join(f"{n}\t\t\t" for n in table.marker_names)
    assert lines[5] == ""


def test_trc_reads_opensim_layout_with_missing_values(tmp_path):
    t = read_trc(_write(tmp_path, "walk.trc", TRC_FIXTURE))
    assert t.marker_names == ["R.ASIS", "L.ASIS", "V.Sacral"]
    assert t.units == "mm" and t.data_rate == 60.0 and t.camera_rate == 120.0
    assert (t.orig_data_rate, t.orig_data_start_frame, t.orig_num_frames) == (120.0, 7, 1500)
    assert len(t) == 3 and t.data.shape == (3, 3, 3)
    np.testing.assert_array_equal(t.frame_numbers, [7, 8, 9])
    np.testing.assert_array_equal(t.time, [0.1, 0.11666666666666667, 0.13333333333333333])
    np.testing.assert_array_equal(t.marker("R.ASIS")[0], [1234.5, 987.25, -12.125])
    np.testing.assert_array_equal(t.marker("L.ASIS")[1], [1300.75, 1.5e-3, 0.0])
    missing = ~np.isfinite(t.data).any(axis=2)
    np.testing.assert_array_equal(missing, [[0, 1, 0], [0, 0, 1], [0, 0, 0]])
    assert t.metadata == {}


def test_trc_tolerates_exporter_variants(tmp_path):
    # spaces instead of tabs, no X/Y/Z line, an extra header key, no trailing tabs
    text = (
        "PathFileType  4  (X/Y/Z)  x.trc\n"
        "DataRate CameraRate NumFrames NumMarkers Units OrigDataRate "
        "OrigDataStartFrame OrigNumFrames Subject\n"
        "100 100 2 2 m 100 1 2 anna\n"
        "Frame#   Time   A   B\n"
        "1  0.00  1 2 3  4 5 6\n"
        "2  0.01  1 2 3  NaN NaN NaN\n"
    )
    t = read_trc(_write(tmp_path, "spaces.trc", text))
    assert t.marker_names == ["A", "B"] and t.metadata == {"Subject": "anna"}
    np.testing.assert_array_equal(t.data[0], [[1, 2, 3], [4, 5, 6]])
    assert np.isnan(t.data[1, 1]).all()
    # a short row ending in a tab: its last markers are missing
    lines = TRC_FIXTURE.splitlines()
    lines[8] = "9\t0.13333333333333333\t1236.5\t989.25\t-12.875\t"
    t = read_trc(_write(tmp_path, "short.trc", "\n".join(lines) + "\n"))
    assert np.isnan(t.data[2, 1:]).all() and not np.isnan(t.data[2, 0]).any()


def test_trc_header_mismatches_warn(tmp_path):
    text = TRC_FIXTURE.replace("60\t120\t3\t3\tmm", "60\t120\t5\t4\tmm")
    with pytest.warns(UserWarning) as rec:
        t = read_trc(_write(tmp_path, "counts.trc", text))
    msgs = " ".join(str(w.message) for w in rec)
    assert "NumFrames = 5" in msgs and "3 data rows" in msgs
    assert "NumMarkers = 4" in msgs and "names 3 markers" in msgs
    assert len(t) == 3 and len(t.marker_names) == 3


def test_trc_bad_files_name_file_line_and_column(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.trc"):
        read_trc(tmp_path / "nope.trc")
    lines = TRC_FIXTURE.splitlines()
    bad = lines.copy()
    bad[7] = bad[7].rstrip("\t") + "\t17"  # one column too many on line 8
    p = _write(tmp_path, "long.trc", "\n".join(bad) + "\n")
    with pytest.raises(ValueError, match=r"long\.trc, line 8: expected 11 columns .* found 12"):
        read_trc(p)
    bad = lines.copy()
    bad[6] = "7\t0.1\t1234.5\t987.25"  # truncated, not ending in a tab
    with pytest.raises(ValueError, match=r"short\.trc, line 7: expected 11 columns .* found 4"):
        read_trc(_write(tmp_path, "short.trc", "\n".join(bad) + "\n"))
    bad = lines.copy()
    bad[8] = bad[8].replace("951.5", "95l.5")
    with pytest.raises(ValueError, match=r"text\.trc, line 9, column 10 \(marker 'V.Sacral' Y\).*'95l.5'"):
        read_trc(_write(tmp_path, "text.trc", "\n".join(bad) + "\n"))
    with pytest.raises(ValueError, match=r"line 1: not a \.trc file"):
        read_trc(_write(tmp_path, "notrc.trc", "hello\n" * 6))
    bad = lines.copy()
    bad[4] = "\t\tX1\tY1\tZ1\tX2\tY2\tZ2\t"
    with pytest.raises(ValueError, match=r"line 5: 6 coordinate labels .* expected 9"):
        read_trc(_write(tmp_path, "xyz.trc", "\n".join(bad) + "\n"))
    bad = lines.copy()
    bad[2] = "sixty\t120\t3\t3\tmm\t120\t7\t1500"
    with pytest.raises(ValueError, match=r"line 3: header entry DataRate = 'sixty' is not a number"):
        read_trc(_write(tmp_path, "rate.trc", "\n".join(bad) + "\n"))
    with pytest.raises(ValueError, match="marker names must be unique"):
        read_trc(_write(tmp_path, "dup.trc", TRC_FIXTURE.replace("L.ASIS", "R.ASIS")))
    with pytest.raises(ValueError, match="cannot be written"):
        write_trc(tmp_path / "bad.trc", _marker_table().replace(marker_names=["a", "b\tc", "d", "e"]))


# ---------------------------------------------------------------------------- MarkerTable
def test_units_conversion_is_exact_power_of_ten():
    t = _marker_table(units="mm")
    m = t.in_units("m")
    assert m.units == "m"
    np.testing.assert_array_equal(m.data, t.data / 1000.0)
    np.testing.assert_array_equal(m.in_units("millimeters").data, m.data * 1000.0)
    np.testing.assert_array_equal(t.in_units("cm").data, t.data / 10.0)
    assert t.in_units("mm").data is not t.data
    with pytest.raises(ValueError, match=r"unknown length unit 'in'"):
        t.in_units("in")
    with pytest.raises(ValueError, match=r"the table's units 'px'"):
        t.replace(units="px").in_units("m")


def test_rotation_helpers():
    t = _marker_table()
    y = t.to_y_up()
    x, yy, z = (t.data[..., k] for k in range(3))
    expected = np.stack([x, z, -yy], axis=-1)
    expected[np.isnan(expected).any(axis=-1)] = np.nan  # a point with a missing component is missing
    np.testing.assert_array_equal(y.data, expected)
    np.testing.assert_array_equal(t.rotated_about("x", -90).data, y.data)
    a = 0.3
    Rz = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]])
    np.testing.assert_allclose(t.rotated(Rz).data, t.data @ Rz.T, rtol=0, atol=1e-12)
    np.testing.assert_allclose(t.rotated_about("z", np.rad2deg(a)).data, t.data @ Rz.T, rtol=0, atol=1e-12)
    assert np.isnan(t.rotated(Rz).data[3, 0]).all() and not np.isnan(t.rotated(Rz).data[3, 1]).any()
    with pytest.raises(ValueError, match="proper rotation"):
        t.rotated(np.diag([1.0, 1.0, -1.0]))  # a reflection
    with pytest.raises(ValueError, match="proper rotation"):
        t.rotated(2 * np.eye(3))
    with pytest.raises(ValueError, match="3x3"):
        t.rotated(np.eye(2))


def test_select_marker_and_validation():
    t = _marker_table()
    s = t.select(["M2_c", "M0_a"])
    assert s.marker_names == ["M2_c", "M0_a"]
    np.testing.assert_array_equal(s.data[:, 0], t.marker("M2_c"))
    with pytest.raises(KeyError, match="no marker named 'Q'"):
        t.marker("Q")
    with pytest.raises(KeyError, match="no marker.*'Q'"):
        t.select(["Q"])
    with pytest.raises(ValueError, match=r"data must have shape \(T, M, 3\) = \(2, 1, 3\)"):
        MarkerTable(time=[0, 1], marker_names=["a"], data=np.zeros((2, 2, 3)))
    with pytest.raises(ValueError, match="marker_names must be unique"):
        MarkerTable(time=[0, 1], marker_names=["a", "a"], data=np.zeros((2, 2, 3)))
    assert MarkerTable(time=[0, 0.5, 1.0], marker_names=["a"], data=np.zeros((3, 1, 3))).data_rate == 2.0


def test_observations_follow_markers_order():
    t = _marker_table(units="mm")
    mk = sj.Markers()
    for name in ["M3_a", "M1_b", "absent", "M0_a"]:
        mk.add_marker(name, "some_body", [0.0, 0.0, 0.0])
    with pytest.warns(UserWarning, match=r"1 of 4 markers are not in the table.*'absent'"):
        obs = t.observations(mk, units="m")
    assert obs.shape == (len(t), 4, 3)
    np.testing.assert_array_equal(obs[:, 0], t.marker("M3_a") / 1000.0)
    np.testing.assert_array_equal(obs[:, 3], t.marker("M0_a") / 1000.0)
    assert np.isnan(obs[:, 2]).all()
    # an explicit observation order (and a marker never observed)
    mk.define_observation_order(["M0_a", "M1_b"])
    obs = t.observations(mk)
    np.testing.assert_array_equal(obs, t.select(["M0_a", "M1_b"]).data)
    # plain names; each frame is what Markers.move_all_observations takes
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        obs = t.observations(["M1_b", "M0_a"])
    mk.move_all_observations(obs[1])
    np.testing.assert_array_equal(mk.get_all_observations(), obs[1])
    with pytest.raises(ValueError, match=r"none of the 2 marker names matches.*'LASI'.*'M0_a'"):
        t.observations(["LASI", "RASI"])
    with pytest.raises(TypeError, match="not a single string"):
        t.observations("M0_a")


# ---------------------------------------------------------------------------- .mot / .sto
def _coord_table(in_degrees=True):
    rng = np.random.default_rng(1)
    data = rng.normal(0.0, 30.0, (6, 3))
    data[2, 1] = np.nan
    return CoordinateTable(
        time=np.linspace(0.0, 0.05, 6),
        labels=["pelvis_tx", "hip_flexion_r", "knee_angle_r"],
        data=data,
        in_degrees=in_degrees,
        name="Coordinates",
        metadata={"DataType": "double", "header": "Units are S.I. units (second, meters, Newtons, ...)"},
    )


def test_mot_and_sto_round_trip(tmp_path):
    table = _coord_table()
    for writer, reader, name in [(write_mot, read_mot, "c.mot"), (write_sto, read_sto, "c.sto")]:
        writer(tmp_path / name, table)
        back = reader(tmp_path / name)
        assert back.labels == table.labels and back.name == "Coordinates" and back.in_degrees
        assert back.metadata == table.metadata
        np.testing.assert_array_equal(back.time, table.time)
        np.testing.assert_array_equal(back.data, table.data)
    text = (tmp_path / "c.mot").read_text().splitlines()
    assert text[:5] == ["Coordinates", "version=1", "nRows=6", "nColumns=4", "inDegrees=yes"]
    assert text[text.index("endheader") + 1] == "time\tpelvis_tx\thip_flexion_r\tknee_angle_r"
    # no name, radians
    plain = CoordinateTable(time=[0.0, 0.1], labels=["q"], data=[[1.0], [2.0]])
    write_mot(tmp_path / "p.mot", plain)
    assert (tmp_path / "p.mot").read_text().startswith("version=1\n")
    back = read_mot(tmp_path / "p.mot")
    assert back.name == "" and not back.in_degrees and back.metadata == {}


def test_mot_reads_old_header_and_space_separated(tmp_path):
    text = (
        "Coordinates\nversion=1\nnRows=2\nnColumns=3\ninDegrees=Yes\n\n"
        "Units are S.I. units (second, meters, Newtons, ...)\nAngles are in degrees.\n\nendheader\n"
        "time      hip       knee\n"
        "   0.00000000      1.50000000     -2.00000000\n"
        "   0.01000000      3.00000000      nan\n"
    )
    t = read_mot(_write(tmp_path, "old.mot", text))
    assert t.name == "Coordinates" and t.in_degrees and t.labels == ["hip", "knee"]
    assert t.metadata["header"].endswith("Angles are in degrees.")
    np.testing.assert_array_equal(t.time, [0.0, 0.01])
    np.testing.assert_array_equal(t.column("hip"), [1.5, 3.0])
    assert np.isnan(t.data[1, 1])


def test_coordinate_unit_conversion():
    t = _coord_table(in_degrees=True)
    r = t.to_radians(["hip_flexion_r", "knee_angle_r"])
    assert not r.in_degrees
    np.testing.assert_array_equal(r.column("pelvis_tx"), t.column("pelvis_tx"))
    np.testing.assert_array_equal(r.column("knee_angle_r"), np.deg2rad(t.column("knee_angle_r")))
    d = r.to_degrees(["hip_flexion_r", "knee_angle_r"])
    np.testing.assert_allclose(d.data, t.data, rtol=1e-15)
    with pytest.raises(ValueError, match="already in radians"):
        r.to_radians(["knee_angle_r"])
    with pytest.raises(ValueError, match="already in degrees"):
        t.to_degrees(["knee_angle_r"])
    with pytest.raises(KeyError, match="no column.*'ankle'"):
        t.to_radians(["ankle"])
    assert t.select(["knee_angle_r"]).labels == ["knee_angle_r"]
    with pytest.raises(ValueError, match=r"data must have shape \(T, N\) = \(2, 1\)"):
        CoordinateTable(time=[0, 1], labels=["q"], data=np.zeros((2, 2)))


def test_mot_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.mot"):
        read_mot(tmp_path / "missing.mot")
    with pytest.raises(ValueError, match=r"noend\.mot: no 'endheader' line"):
        read_mot(_write(tmp_path, "noend.mot", "name\ninDegrees=no\ntime\tq\n0\t1\n"))
    text = "inDegrees=no\nendheader\ntime\tq1\tq2\n0\t1\t2\n0.1\t1\n"
    with pytest.raises(ValueError, match=r"cols\.mot, line 5: expected 3 columns .* found 2"):
        read_mot(_write(tmp_path, "cols.mot", text))
    text = "inDegrees=no\nendheader\ntime\tq1\tq2\n0\t1\t2\n0.1\t1\tx2\n"
    with pytest.raises(ValueError, match=r"num\.mot, line 5, column 3 \('q2'\).*'x2'"):
        read_mot(_write(tmp_path, "num.mot", text))
    with pytest.raises(ValueError, match=r"line 1: inDegrees='maybe'"):
        read_mot(_write(tmp_path, "deg.mot", "inDegrees=maybe\nendheader\ntime\tq\n0\t1\n"))
    with pytest.raises(ValueError, match="DataType=Vec3 is not supported"):
        read_sto(_write(tmp_path, "v.sto", "DataType=Vec3\nendheader\ntime\tm\n0\t1,2,3\n"))
    with pytest.warns(UserWarning, match="nRows=5 but the file has 1 data rows"):
        read_mot(_write(tmp_path, "rows.mot", "nRows=5\nendheader\ntime\tq\n0\t1\n"))


def test_time_that_is_nan_or_runs_backwards_is_refused_naming_file_line_and_values(tmp_path):
    """Issue 65: a .mot/.sto or .trc whose time is NaN, repeats or runs backwards was read
    silently (a tracking run then interpolated between the wrong rows). Each reader now
    names the file, the line and the values; missing values elsewhere stay NaN (.trc
    markers, and .mot columns: the formats allow them), and what needs every value of a
    column (``q_from_table``) names the column and the row."""
    head = "inDegrees=no\nendheader\ntime\tq1\tq2\n"
    back = head + "0\t1\t2\n0.2\t1\t2\n0.1\t1\t2\n"
    with pytest.raises(
        ValueError, match=r"back\.mot, line 6, column 1 \(time\): the time 0\.1 is before 0\.2 on line 5"
    ):
        read_mot(_write(tmp_path, "back.mot", back))
    same = head + "0\t1\t2\n0.1\t1\t2\n0.1\t1\t2\n"
    with pytest.raises(ValueError, match=r"same\.sto, line 6, .*the time 0\.1 repeats 0\.1 on line 5"):
        read_sto(_write(tmp_path, "same.sto", same))
    with pytest.raises(ValueError, match=r"nan\.mot, line 5, column 1 \(time\): the time is nan"):
        read_mot(_write(tmp_path, "nan.mot", head + "0\t1\t2\nNaN\t1\t2\n0.2\t1\t2\n"))
    gap = read_mot(_write(tmp_path, "gap.mot", head + "0\t1\t2\n0.1\t\t2\n0.2\t1\tnan\n"))
    assert np.isnan(gap.data[1, 0]) and np.isnan(gap.data[2, 1]) and np.isfinite(gap.time).all()

    trc = TRC_FIXTURE.splitlines(keepends=True)
    rows = [i for i, line in enumerate(trc) if line.startswith(("7\t", "8\t"))]
    assert len(rows) == 2
    swapped = trc[: rows[0]] + [trc[rows[1]], trc[rows[0]]] + trc[rows[1] + 1 :]
    with pytest.raises(
        ValueError, match=rf"swapped\.trc, line {rows[0] + 2}, column 2 \(Time\): the time .* is before"
    ):
        read_trc(_write(tmp_path, "swapped.trc", "".join(swapped)))
    fields = trc[rows[0]].split("\t")
    fields[1] = "NaN"
    nan_time = trc[: rows[0]] + ["\t".join(fields)] + trc[rows[0] + 1 :]
    with pytest.raises(ValueError, match=rf"line {rows[0] + 1}, column 2 \(Time\): the time is nan"):
        read_trc(_write(tmp_path, "nantime.trc", "".join(nan_time)))
    assert np.isnan(read_trc(_write(tmp_path, "ok.trc", TRC_FIXTURE)).data).any()  # missing markers kept


def test_q_from_table_refuses_a_missing_value_naming_column_and_row(tmp_path):
    from test_io_osim import GOOD
    from test_io_osim import _write as write_osim

    m = sj.io.load_osim(write_osim(tmp_path, GOOD.replace("COUPLER", "")))
    t = np.linspace(0.0, 0.3, 4)
    q = np.sin(t)[:, None]
    q[2, 0] = np.nan
    with pytest.raises(ValueError, match=r"column 'q1' is missing \(NaN\) at row 2 \(time 0\.2\)"):
        m.q_from_table(CoordinateTable(t, ["q1"], q))


# ---------------------------------------------------------------------------- OpenSim as oracle
def test_opensim_reads_our_trc_and_we_read_opensims(tmp_path):
    osim = pytest.importorskip("opensim")
    table = _marker_table(T=4, M=3)
    p = tmp_path / "ours.trc"
    write_trc(p, table)
    o = osim.TimeSeriesTableVec3(str(p))
    assert list(o.getColumnLabels()) == table.marker_names
    np.testing.assert_array_equal(np.array(o.getIndependentColumn()), table.time)
    vals = np.array([[list(o.getRowAtIndex(i)[j].to_numpy()) for j in range(3)] for i in range(4)])
    np.testing.assert_array_equal(vals, table.data)  # exact, NaN included
    assert o.getTableMetaDataAsString("Units") == "mm"
    assert float(o.getTableMetaDataAsString("DataRate")) == 100.0

    # OpenSim writes; we read. Values with <= 15 significant digits survive its printing.
    rng = np.random.default_rng(3)
    ref = np.round(rng.normal(0.0, 0.5, (3, 2, 3)), 6)
    ref[1, 0] = np.nan
    ot = osim.TimeSeriesTableVec3()
    ot.setColumnLabels(["LASI", "RASI"])
    for i in range(3):
        row = osim.RowVectorVec3(2)
        for j in range(2):
            row[j] = osim.Vec3(*ref[i, j])
        ot.appendRow(0.005 * i, row)
    ot.addTableMetaDataString("DataRate", "200")
    ot.addTableMetaDataString("Units", "m")
    q = tmp_path / "theirs.trc"
    osim.TRCFileAdapter().write(ot, str(q))
    t = read_trc(q)
    assert t.marker_names == ["LASI", "RASI"] and t.units == "m" and t.data_rate == 200.0
    np.testing.assert_array_equal(t.time, [0.0, 0.005, 0.01])
    np.testing.assert_array_equal(t.data, ref)


def test_to_y_up_matches_simtk_rotation_about_x():
    """to_y_up is SimTK's Rotation(-90 deg, XAxis), the rotation OpenSim's examples apply."""
    osim = pytest.importorskip("opensim")
    t = _marker_table()
    R = osim.Rotation(-np.pi / 2, osim.CoordinateAxis(0))
    p = t.data[0, 0]
    np.testing.assert_allclose(t.to_y_up().data[0, 0], R.multiply(osim.Vec3(*p)).to_numpy(), rtol=1e-15)


def test_opensim_reads_our_mot_and_we_read_opensims(tmp_path):
    osim = pytest.importorskip("opensim")
    table = _coord_table(in_degrees=True)
    p = tmp_path / "ours.mot"
    write_mot(p, table)
    o = osim.TimeSeriesTable(str(p))
    assert list(o.getColumnLabels()) == table.labels
    assert o.getTableMetaDataAsString("inDegrees") == "yes"
    np.testing.assert_array_equal(np.array(o.getIndependentColumn()), table.time)
    np.testing.assert_array_equal(o.getMatrix().to_numpy(), table.data)

    ref = np.round(np.random.default_rng(4).normal(0.0, 1.0, (4, 2)), 9)
    ref[2, 0] = np.nan
    ot = osim.TimeSeriesTable()
    ot.setColumnLabels(["a", "b"])
    for i in range(4):
        row = osim.RowVector(2)
        row[0], row[1] = ref[i]
        ot.appendRow(0.25 * i, row)
    ot.addTableMetaDataString("inDegrees", "no")
    q = tmp_path / "theirs.sto"
    osim.STOFileAdapter.write(ot, str(q))
    t = read_sto(q)
    assert t.labels == ["a", "b"] and not t.in_degrees
    np.testing.assert_array_equal(t.time, [0.0, 0.25, 0.5, 0.75])
    np.testing.assert_array_equal(t.data, ref)


# ---------------------------------------------------------------------------- .c3d
def _write_c3d(path, *, units="mm", first_frame=0):
    ezc3d = pytest.importorskip("ezc3d")
    T, M = 6, 3
    rng = np.random.default_rng(5)
    xyz = np.round(rng.normal(0.0, 800.0, (3, M, T)), 3)
    xyz[:, 0, 4] = 0.0  # gap written as zeros
    pts = np.ones((4, M, T))
    pts[:3] = xyz
    res = np.ones((1, M, T))
    res[0, 1, 2] = -1.0  # gap flagged by a negative residual
    c = ezc3d.c3d()
    c["parameters"]["POINT"]["RATE"]["value"] = [250.0]
    c["parameters"]["POINT"]["LABELS"]["value"] = ("LASI  ", " RASI", "LKneeAngles")
    c["data"]["points"] = pts
    c["data"]["meta_points"] = {"residuals": res, "camera_masks": np.zeros((7, M, T), bool)}
    c.add_parameter("POINT", "UNITS", units)
    c.add_parameter("POINT", "ANGLES", ["LKneeAngles"])
    if first_frame:
        c["header"]["points"]["first_frame"] = first_frame
    c.write(str(path))
    return xyz.transpose(2, 1, 0)  # (T, M, 3) as written


def test_read_c3d_units_gaps_and_time(tmp_path):
    p = tmp_path / "trial.c3d"
    raw = _write_c3d(p, first_frame=9)
    t = read_c3d(p)
    assert t.marker_names == ["LASI", "RASI"]  # stripped; the model output LKneeAngles left out
    assert t.units == "m" and t.data_rate == 250.0
    np.testing.assert_array_equal(t.frame_numbers, np.arange(10, 16))
    np.testing.assert_array_equal(t.time, np.arange(9, 15) / 250.0)
    expected = raw[:, :2] / 1000.0
    expected[4, 0] = np.nan
    expected[2, 1] = np.nan
    # ezc3d stores floats in single precision
    np.testing.assert_allclose(t.data, expected, rtol=1e-7, atol=0)
    assert np.array_equal(np.isnan(t.data), np.isnan(expected))

    mm = read_c3d(p, units=None, markers_only=False)
    assert mm.units == "mm" and mm.marker_names == ["LASI", "RASI", "LKneeAngles"]
    np.testing.assert_array_equal(mm.in_units("m").data[:, :2], t.data)
    # a c3d -> trc -> read round trip keeps everything
    write_trc(tmp_path / "trial.trc", t)
    _assert_same_markers(read_trc(tmp_path / "trial.trc"), t)

    with pytest.raises(FileNotFoundError, match="none.c3d"):
        read_c3d(tmp_path / "none.c3d")
    _write_c3d(tmp_path / "px.c3d", units="px")
    with pytest.raises(ValueError, match="unknown length unit 'px'"):
        read_c3d(tmp_path / "px.c3d")
    assert read_c3d(tmp_path / "px.c3d", units=None).units == "px"
    (tmp_path / "junk.c3d").write_bytes(b"not a c3d file at all" * 40)
    with pytest.raises(ValueError, match=r"junk\.c3d"):
        read_c3d(tmp_path / "junk.c3d")


def test_paths_may_be_str(tmp_path):
    table = _marker_table()
    write_trc(os.fspath(tmp_path / "s.trc"), table)
    _assert_same_markers(read_trc(os.fspath(tmp_path / "s.trc")), table)
