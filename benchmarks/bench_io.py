"""Model loading time (issue 5): simjax's loaders against the tools the files come from.

For each model: ``sj.io.load_osim``/``load_urdf`` (parse and build the System; the median of
5 loads in one process after a first warm-up load), then the first ``realize`` to
Acceleration (trace + compile, once) and a compiled call; OpenSim's ``Model(path)`` +
``initSystem()`` and Pinocchio's ``buildModelFromUrdf`` for reference. Models are fetched as
the tests fetch them (``tests/data_fetch.py``).

    python benchmarks/bench_io.py            # prints a table, writes results/io_f64.json
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from data_fetch import fetch  # noqa: E402

import simjax as sj  # noqa: E402

sj.configure()

OSIM = {
    "arm26": ("osim-rl", "3.0.11", "osim/models/arm26.osim"),
    "gait14dof22musc": ("osim-rl", "3.0.11", "osim/models/gait14dof22musc_20170320.osim"),
    "MoBL_ARMS": ("osim-rl", "3.0.11", "osim/models/MoBL_ARMS_J.osim"),
    "GPK_generic": ("msk-modelling-python", "0.4.2", "msk_modelling_python/models/GPK_generic.osim"),
    "Full_Body": ("msk-modelling-python", "0.4.2", "msk_modelling_python/models/Full_Body_with_ball.osim"),
}
URDF = {
    "ur5": "robots/ur_description/urdf/ur5_robot.urdf",
    "panda": "robots/panda_description/urdf/panda.urdf",
    "talos_reduced": "robots/talos_data/robots/talos_reduced.urdf",
}

MJCF = {
    "humanoid_CMU": ("dm_control", "1.0.50", "dm_control/suite/humanoid_CMU.xml"),
    "pendula": ("mujoco-mjx", "3.17.0", "mujoco/mjx/test_data/pendula.xml"),
}
MJCF_EXTRA = {
    "humanoid_CMU": [f"dm_control/suite/common/{f}.xml" for f in ("materials", "skybox", "visual")],
}


def _median_time(fn, n=5):
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def _realize_times(model):
    f = jax.jit(lambda s: model.system.realize(s, sj.Stage.ACCELERATION).udot)
    st = model.default_state
    t = time.perf_counter()
    f(st).block_until_ready()
    first = time.perf_counter() - t
    run = _median_time(lambda: f(st).block_until_ready(), 20)
    return first, run


def main() -> None:
    warnings.simplefilter("ignore")
    rows = []
    for name, (dist, ver, member) in OSIM.items():
        path = str(fetch(dist, ver, [member])[member])
        sj.io.load_osim(path)
        load = _median_time(lambda p=path: sj.io.load_osim(p))
        m = sj.io.load_osim(path)
        first, run = _realize_times(m)
        ref = None
        try:
            import opensim as osim

            ref = _median_time(lambda p=path: osim.Model(p).initSystem(), 3)
        except ImportError:
            pass
        rows.append(
            dict(
                model=name,
                kind="osim",
                nb=len(m.bodies) - 1,
                nq=int(m.default_state.q.size),
                load_s=load,
                first_realize_s=first,
                realize_s=run,
                peer="opensim Model+initSystem",
                peer_load_s=ref,
            )
        )
    for name, member in URDF.items():
        try:
            path = str(fetch("example-robot-data", "6.0.0", [member])[member])
        except BaseException as e:  # noqa: BLE001 - skip when offline
            print(f"skipping {name}: {e}")
            continue
        floating = name == "talos_reduced"
        sj.io.load_urdf(path, floating_base=floating)
        load = _median_time(lambda p=path, f=floating: sj.io.load_urdf(p, floating_base=f))
        m = sj.io.load_urdf(path, floating_base=floating)
        first, run = _realize_times(m)
        ref = None
        try:
            import pinocchio as pin

            ref = _median_time(lambda p=path: pin.buildModelFromUrdf(p))
        except ImportError:
            pass
        rows.append(
            dict(
                model=name,
                kind="urdf",
                nb=len(m.bodies) - 1,
                nq=int(m.default_state.q.size),
                load_s=load,
                first_realize_s=first,
                realize_s=run,
                peer="pinocchio buildModelFromUrdf",
                peer_load_s=ref,
            )
        )
    for name, (dist, ver, member) in MJCF.items():
        try:
            path = str(fetch(dist, ver, [member, *MJCF_EXTRA.get(name, [])])[member])
        except BaseException as e:  # noqa: BLE001 - skip when offline
            print(f"skipping {name}: {e}")
            continue
        sj.io.load_mjcf(path)
        load = _median_time(lambda p=path: sj.io.load_mjcf(p))
        m = sj.io.load_mjcf(path)
        first, run = _realize_times(m)
        ref = None
        try:
            import mujoco

            ref = _median_time(lambda p=path: mujoco.MjModel.from_xml_path(p))
        except ImportError:
            pass
        rows.append(
            dict(
                model=name,
                kind="mjcf",
                nb=len(m.bodies) - 1,
                nq=int(m.default_state.q.size),
                load_s=load,
                first_realize_s=first,
                realize_s=run,
                peer="mujoco MjModel.from_xml_path",
                peer_load_s=ref,
            )
        )
    print(
        f"{'model':18s} {'bodies':>6s} {'nq':>4s} {'load':>9s} {'peer load':>10s} {'1st realize':>12s} "
        f"{'realize':>9s}"
    )
    for r in rows:
        peer = f"{r['peer_load_s'] * 1e3:8.1f}ms" if r["peer_load_s"] is not None else "       n/a"
        print(
            f"{r['model']:18s} {r['nb']:6d} {r['nq']:4d} {r['load_s'] * 1e3:7.1f}ms {peer} "
            f"{r['first_realize_s']:11.2f}s {r['realize_s'] * 1e6:7.0f}us"
        )
    out = Path(__file__).parent / "results" / "io_f64.json"
    meta = dict(
        machine=platform.processor() or platform.machine(),
        python=platform.python_version(),
        jax=jax.__version__,
        dtype="float64",
        device=str(jax.devices()[0]),
    )
    out.write_text(json.dumps(dict(meta=meta, rows=rows), indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
