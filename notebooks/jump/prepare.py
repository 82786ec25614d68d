"""The real trial of notebook 09: a countermovement jump recorded with Vicon and a Kistler
force plate (the ``biomdp`` 0.11.2 wheel's ``vicon_CMJ_kinem_kinet_emg``: 200 Hz markers on
the pelvis and the right leg, Nexus's joint centres, a 2000 Hz plate under both feet), turned
into the files OpenSim's tools read, next to the setup files in this folder:

* ``static.trc`` (0.5-2.0 s of quiet standing) and ``jump.trc`` (the whole trial), in
  metres, OpenSim's axes (x forward, y up, z right; the lab's y, z, x);
* ``grf.mot``: the plate's ground reaction force (the plate's reading, negated) at 200 Hz,
  split in two halves, one per foot, each at the plate's centre of pressure moved sideways
  to its own foot (the jump is taken as symmetric: the markers are on the right leg only);
  zero in flight (under 20 N);
* ``jump_model.osim``: gait14dof22musc (osim-rl 3.0.11: 14 dof, 22 Thelen muscles) with
  this lab's markers (a first guess; the ScaleTool's marker placer moves them onto the
  static trial), the left leg's five coordinates coupled to the right's (symmetry) and
  reserve actuators on every coordinate (residuals on the pelvis).

``prepare(folder)`` writes them into ``folder`` and copies the setup files there. The data
come from PyPI through the tests' fetcher (``tests/data_fetch.py``)."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import numpy as np

import simjax as sj

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tests"))
from data_fetch import fetch  # noqa: E402

CSV = "biomdp/tests/datasets/vicon_CMJ_kinem_kinet_emg.csv"
MODEL = "osim/models/gait14dof22musc_20170320.osim"
SETUPS = ("Setup_Scale.xml", "Setup_IK.xml", "Setup_ID.xml", "ExternalLoads.xml", "Setup_SO.xml")
G = 9.80665

#: marker -> (body, first-guess location in the body (m), fixed). The joint centres (Nexus's
#: LHJC, RHJC, RKJC, RAJC) sit where the model's joints are, and stay there.
MARKERS = {
    "LHJC": ("pelvis", (-0.0707, -0.0661, -0.0835), True),
    "RHJC": ("pelvis", (-0.0707, -0.0661, 0.0835), True),
    "LASI": ("pelvis", (0.014, -0.003, -0.124), False),
    "RASI": ("pelvis", (0.014, -0.003, 0.124), False),
    "LPSI": ("pelvis", (-0.155, 0.019, -0.051), False),
    "RPSI": ("pelvis", (-0.155, 0.019, 0.051), False),
    "Right_MusloPS": ("femur_r", (-0.02, -0.15, 0.07), False),
    "Right_MusloAS": ("femur_r", (0.05, -0.15, 0.06), False),
    "Right_MusloAI": ("femur_r", (0.05, -0.25, 0.06), False),
    "Right_MusloPI": ("femur_r", (-0.02, -0.25, 0.07), False),
    "Right_KneeExt": ("femur_r", (0.0, -0.40, 0.05), False),
    "Right_KneeInt": ("femur_r", (0.0, -0.40, -0.05), False),
    "RKJC": ("tibia_r", (0.0, 0.0, 0.0), True),
    "Right_PiernaPS": ("tibia_r", (-0.02, -0.15, 0.06), False),
    "Right_PiernaAS": ("tibia_r", (0.04, -0.15, 0.05), False),
    "Right_PiernaAI": ("tibia_r", (0.04, -0.25, 0.05), False),
    "Right_PiernaPI": ("tibia_r", (-0.02, -0.25, 0.06), False),
    "Right_AnkleExt": ("tibia_r", (-0.005, -0.43, 0.04), False),
    "Right_AnkleInt": ("tibia_r", (0.005, -0.42, -0.04), False),
    "RAJC": ("tibia_r", (0.0, -0.43, 0.0), True),
    "Right_TalonSup": ("calcn_r", (-0.02, 0.06, 0.0), False),
    "Right_TalonInf": ("calcn_r", (-0.01, 0.02, 0.0), False),
    "Right_Meta": ("calcn_r", (0.17, 0.0, 0.03), False),
    "Right_Hombro": ("torso", (0.0, 0.43, 0.17), False),
}

#: the left leg follows the right one (OpenSim's left coordinates mirror the right's)
COUPLED = ("hip_flexion", "hip_adduction", "knee_angle", "ankle_angle")


def _sections(path: Path) -> dict[str, list[str]]:
    """Nexus's CSV export: sections ``Devices``, ``Model Outputs``, ``Trajectories``, each
    a title, a rate, a names row, a component row, a units row and the data rows."""
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    heads = [i for i, s in enumerate(lines) if s.strip() in ("Devices", "Model Outputs", "Trajectories")]
    return {lines[i].strip(): lines[i:j] for i, j in zip(heads, [*heads[1:], len(lines)], strict=True)}


def _table(sec: list[str]) -> tuple[float, list[str], np.ndarray]:
    rate = float(sec[1].split(",")[0])
    names, comp = sec[2].split(","), sec[3].split(",")
    labels, last = [], ""
    for n, c in zip(names, comp, strict=False):
        last = n.split(":")[-1].strip() or last
        labels.append(f"{last}.{c}")
    rows = [r for r in sec[5:] if r.strip()]
    data = np.genfromtxt(rows, delimiter=",", dtype=float)
    return rate, labels, data[:, : len(labels)]


def _lab_to_opensim(x: np.ndarray) -> np.ndarray:
    """The lab's (X right, Y forward, Z up) to OpenSim's (x forward, y up, z right)."""
    return x[..., [1, 2, 0]]


def read_trial() -> dict:
    """Markers (T, M, 3) in metres and the plate's force, moment-free CoP at 2000 Hz, all in
    OpenSim's axes."""
    path = fetch("biomdp", "0.11.2", [CSV])[CSV]
    s = _sections(path)
    rate, lab, traj = _table(s["Trajectories"])
    _, lab_mo, mo = _table(s["Model Outputs"])
    pos = {}
    for labels, data in ((lab, traj), (lab_mo, mo)):
        for m in MARKERS:
            if f"{m}.X" in labels and m not in pos:
                k = labels.index(f"{m}.X")
                xyz = data[:, k : k + 3]
                if not np.isnan(xyz).all():
                    pos[m] = _lab_to_opensim(xyz) / 1000.0
    missing = sorted(set(MARKERS) - set(pos))
    if missing:
        raise ValueError(f"{path}: markers missing from the trial: {missing}")
    frames = traj[:, 0]
    t = (frames - frames[0]) / rate
    _, lab_d, dev = _table(s["Devices"])
    k = lab_d.index("KistlerGrande1 - Force.Fx")
    kc = lab_d.index("KistlerGrande1 - CoP.Cx")
    force = _lab_to_opensim(dev[:, k : k + 3])
    cop = _lab_to_opensim(dev[:, kc : kc + 3]) / 1000.0
    return {"time": t, "rate": rate, "markers": pos, "force": force, "cop": cop, "device_rate": 2000.0}


def _trc(path: Path, t: np.ndarray, pos: dict, rows: slice) -> None:
    names = list(MARKERS)
    data = np.stack([pos[n][rows] for n in names], 1)
    sj.io.write_trc(path, sj.io.MarkerTable(t[rows], names, data, units="m"))


def _grf(path: Path, trial: dict) -> None:
    """Both feet's halves of the plate's reaction at the markers' rate."""
    step = int(round(trial["device_rate"] / trial["rate"]))
    T = trial["time"].size
    F = -trial["force"][: T * step].reshape(T, step, 3).mean(1)  # the plate's reading, negated
    cop = trial["cop"][: T * step].reshape(T, step, 3).mean(1)
    m = trial["markers"]
    # sideways: the pelvis's right axis (LASI -> RASI) in the floor plane
    side = m["RASI"] - m["LASI"]
    side[:, 1] = 0.0
    side /= np.linalg.norm(side, axis=1, keepdims=True)
    mid = 0.5 * (m["RASI"] + m["LASI"])
    foot = (m["Right_TalonInf"] + m["Right_Meta"]) / 2
    off = np.einsum("ti,ti->t", foot - mid, side)  # the right foot's distance from the middle
    at = np.einsum("ti,ti->t", cop - mid, side)
    cop_r = cop + (off - at)[:, None] * side
    cop_l = cop + (-off - at)[:, None] * side
    cop_r[:, 1] = cop_l[:, 1] = 0.0  # on the floor
    air = F[:, 1] < 20.0
    F[air] = 0.0
    cop_r[air], cop_l[air] = foot[air] * [1, 0, 1], (foot[air] - 2 * off[air, None] * side[air]) * [1, 0, 1]
    half = F / 2
    cols, labels = [], []
    for pre, c in (("r_", cop_r), ("l_", cop_l)):
        cols += [half, c, np.zeros_like(half)]
        labels += [f"{pre}ground_force_v{a}" for a in "xyz"] + [f"{pre}ground_force_p{a}" for a in "xyz"]
        labels += [f"{pre}ground_torque_{a}" for a in "xyz"]
    table = sj.io.CoordinateTable(trial["time"], labels, np.concatenate(cols, 1), in_degrees=False)
    sj.io.write_mot(path, table)


def _model(src: Path, out: Path) -> None:
    """gait14dof22musc with the markers, the couplers and the reserves, and without its foot
    contact spheres (the plate measured the ground's force). Edited as text: the file's
    ``HuntCrossleyForce::ContactParameters`` tags are not XML names."""
    text = src.read_text()
    for kind in ("HuntCrossleyForce", "CoordinateLimitForce"):
        text = re.sub(rf"\s*<{kind} name=.*?</{kind}>", "", text, flags=re.S)
    markers = "".join(
        f'<Marker name="{n}"><body>{b}</body><location>{" ".join(map(str, loc))}</location>'
        f"<fixed>{str(fixed).lower()}</fixed></Marker>\n"
        for n, (b, loc, fixed) in MARKERS.items()
    )
    couplers = "".join(
        f'<CoordinateCouplerConstraint name="{c}_symmetry"><isDisabled>false</isDisabled>'
        "<coupled_coordinates_function><LinearFunction><coefficients>1 0</coefficients>"
        f"</LinearFunction></coupled_coordinates_function><independent_coordinate_names>{c}_r"
        f"</independent_coordinate_names><dependent_coordinate_name>{c}_l</dependent_coordinate_name>"
        "<scale_factor>1</scale_factor></CoordinateCouplerConstraint>\n"
        for c in COUPLED
    )
    coords = re.findall(r'<Coordinate name="([^"]+)"', text)
    reserves = "".join(
        f'<CoordinateActuator name="{c}_reserve"><coordinate>{c}</coordinate><optimal_force>'
        f"{100 if c.startswith('pelvis') else 1}</optimal_force></CoordinateActuator>\n"
        for c in coords
    )
    close = text.rindex("</objects>", 0, text.index("</ForceSet>"))
    text = text[:close] + reserves + text[close:]
    for tag, body in (("MarkerSet", markers), ("ConstraintSet", couplers)):
        text = re.sub(rf"<{tag}>.*?</{tag}>", f"<{tag}><objects>\n{body}</objects></{tag}>", text, flags=re.S)
    out.write_text(text)


def subject_mass(trial: dict) -> float:
    """The subject's mass from the plate during quiet standing (0.5-2.0 s)."""
    t = np.arange(trial["force"].shape[0]) / trial["device_rate"]
    return float(-trial["force"][(t >= 0.5) & (t <= 2.0), 1].mean() / G)


def prepare(folder: str | Path) -> Path:
    """Write the trial's files and copy the setups into ``folder``; returns it."""
    d = Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    trial = read_trial()
    t = trial["time"]
    _trc(d / "static.trc", t, trial["markers"], slice(int(0.5 * 200), int(2.0 * 200) + 1))
    _trc(d / "jump.trc", t, trial["markers"], slice(None))
    _grf(d / "grf.mot", trial)
    _model(fetch("osim-rl", "3.0.11", [MODEL])[MODEL], d / "jump_model.osim")
    for s in SETUPS:
        if (HERE / s).exists():
            shutil.copy(HERE / s, d / s)
    return d
