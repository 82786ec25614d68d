"""simjax.viz: the figures draw what the tables hold (headless, Agg backend)."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

import simjax as sj

matplotlib.use("Agg")


def _errors(T=20):
    t = np.linspace(0.0, 1.0, T)
    d = np.stack([0.01 + 0.005 * np.sin(t), 0.02 * t, np.full(T, 0.003)], axis=1)
    sq = (d**2).sum(axis=1)
    cols = [sq, np.sqrt(sq / 3), d.max(axis=1), *d.T]
    labels = ["total_squared_error", "marker_error_RMS", "marker_error_max", "A_error", "B_error", "C_error"]
    return sj.io.CoordinateTable(t, labels, np.stack(cols, axis=1), name="marker errors"), d


def test_plot_marker_errors_draws_each_marker_and_the_summary():
    table, d = _errors()
    fig = sj.viz.plot_marker_errors(table)
    ax = fig.axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert set(lines) == {"A", "B", "C", "RMS", "max"}
    np.testing.assert_allclose(lines["B"].get_ydata(), 1e3 * d[:, 1])
    np.testing.assert_allclose(lines["max"].get_ydata(), 1e3 * d.max(axis=1))
    assert ax.get_ylabel() == "marker error (mm)"
    fig = sj.viz.plot_marker_errors(table, markers=["C"], units="m")
    assert {ln.get_label() for ln in fig.axes[0].get_lines()} == {"C", "RMS", "max"}


def test_plot_marker_errors_round_trips_through_sto(tmp_path):
    table, d = _errors()
    sj.io.write_sto(tmp_path / "e.sto", table)
    fig = sj.viz.plot_marker_errors(sj.io.read_sto(tmp_path / "e.sto"))
    assert len(fig.axes[0].get_lines()) == 5


def test_plot_coordinates_with_a_reference():
    t = np.linspace(0, 1, 11)
    ours = sj.io.CoordinateTable(t, ["hip", "knee", "tx"], np.stack([t, 2 * t, 0.1 * t], 1), in_degrees=False)
    ref = sj.io.CoordinateTable(t, ["knee", "hip"], np.rad2deg(np.stack([2 * t, t], 1)), in_degrees=True)
    fig = sj.viz.plot_coordinates(ours, ref, degrees=["hip", "knee"])
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == ["hip", "knee"]  # the columns both have
    knee = shown[1].get_lines()
    np.testing.assert_allclose(knee[0].get_ydata(), np.rad2deg(2 * t))
    np.testing.assert_allclose(knee[1].get_ydata(), np.rad2deg(2 * t))
    fig = sj.viz.plot_coordinates(ours, names=["tx"], degrees=["hip"])
    np.testing.assert_allclose(fig.axes[0].get_lines()[0].get_ydata(), 0.1 * t)


MJCF_HINGE_SLIDE = """<mujoco><worldbody><body name="a"><joint name="hip" axis="0 1 0"/>
  <geom type="sphere" size="0.1" contype="0" conaffinity="0"/>
  <body name="b"><joint name="tx" type="slide" axis="1 0 0"/>
  <geom type="sphere" size="0.1" contype="0" conaffinity="0"/></body></body></worldbody></mujoco>"""


def test_plot_coordinates_converts_only_angles_and_says_the_units():
    """Issue 65: ``degrees=True`` converted every column, translations too (a slider at 0.1 m
    was drawn at 5.73), and a radian table beside a degree .mot was converted for one and not
    the other. With ``model`` only its rotational coordinates are converted, each table from
    its own unit, and each axis says deg, rad or m; without it a table needing conversion is
    refused (which columns are angles is not in a table)."""
    model = sj.io.load_mjcf(MJCF_HINGE_SLIDE)
    assert [c.motion_type for c in model.coordinates.values()] == ["rotational", "translational"]
    t = np.linspace(0, 1, 5)
    q = np.stack([0.5 * t, 0.1 * t], axis=1)
    ours = model.table_from_q(t, q)
    ref = model.table_from_q(t, q, in_degrees=True)  # as a .mot with inDegrees=yes
    assert not ours.in_degrees and ref.in_degrees
    for degrees, angle, unit in ((True, np.rad2deg(0.5 * t), "deg"), (False, 0.5 * t, "rad")):
        fig = sj.viz.plot_coordinates(ours, ref, model=model, degrees=degrees)
        hip, tx = (ax for ax in fig.axes if ax.get_visible())
        assert (hip.get_ylabel(), tx.get_ylabel()) == (unit, "m")
        for line in hip.get_lines():  # simjax's and the reference alike, converted once
            np.testing.assert_allclose(line.get_ydata(), angle, rtol=1e-15)
        for line in tx.get_lines():
            np.testing.assert_allclose(line.get_ydata(), 0.1 * t, rtol=1e-15)
    with pytest.raises(ValueError, match=r"simjax stores its angles in radians.*model=<the LoadedModel>"):
        sj.viz.plot_coordinates(ours, ref)
    with pytest.raises(ValueError, match=r"reference stores its angles in degrees.*degrees=True"):
        sj.viz.plot_coordinates(ours, ref, degrees=False)
    with pytest.raises(TypeError, match="model must be the LoadedModel"):
        sj.viz.plot_coordinates(ours, model=model.system)
    fig = sj.viz.plot_coordinates(ref)  # a table in degrees needs no conversion: as stored
    np.testing.assert_allclose(fig.axes[1].get_lines()[0].get_ydata(), 0.1 * t, rtol=1e-15)


def test_plot_errors_name_the_fix():
    table, _ = _errors()
    with pytest.raises(ValueError, match=r"no error column for \['Z'\]"):
        sj.viz.plot_marker_errors(table, markers=["Z"])
    with pytest.raises(ValueError, match="units"):
        sj.viz.plot_marker_errors(table, units="cm")
    bare = sj.io.CoordinateTable(table.time, ["x"], table.data[:, :1])
    with pytest.raises(ValueError, match="marker_error_table"):
        sj.viz.plot_marker_errors(bare)
    with pytest.raises(ValueError, match="no column for"):
        sj.viz.plot_coordinates(bare, names=["knee"])
