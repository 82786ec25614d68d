"""Every URDF that example-robot-data ships, loaded and checked against Pinocchio (issue 17).

The 69 ``.urdf`` files of the ``example-robot-data`` wheel (fetched and cached by
``tests/data_fetch.py``): each is loaded with ``sj.io.load_urdf`` (fixed base, as
Pinocchio's ``buildModelFromUrdf``; the two flying robots with no joint get a free-flyer),
and at two random states the mass matrix and the forward dynamics (URDF joint damping in,
couplers off) equal Pinocchio's ``crba`` and ``aba`` to 1e-9 relative. The files simjax
refuses are listed in ``REFUSED`` with why; each is checked to be refused by Pinocchio too
or to be truly broken (a singular mass matrix, an inertia that is not positive
semi-definite). The README's refusal list is this one.
"""

import re
import warnings
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np
import pytest
from data_fetch import fetch_suffix
from test_io_urdf import Robot

from simjax.io._loaded import ModelFileError
from simjax.io._urdf import load_urdf

ERD = ("example-robot-data", "6.0.0")
PREFIX = "cmeel.prefix/share/example-robot-data/robots"
#: file -> (what simjax's error says, why that is right)
REFUSED = {
    "romeo_description/urdf/romeo.urdf": (
        r"revolute joint 'LHand' moves only massless links",
        "broken: the hand's links have no mass, so the mass matrix is singular (Pinocchio loads "
        "it; its crba has zero rows)",
    ),
    "romeo_description/urdf/romeo_laas_small.urdf": (
        r"link 'body': invalid inertia .*not positive semi-definite",
        "broken: link 'body' has a principal moment of -0.021 kg m^2 (Pinocchio loads it)",
    ),
    "ur_description/urdf/ur3.urdf": (r"the robot has no <link>", "Pinocchio refuses it too"),
}
#: robots with no joint at all (flying bases): compared with a free-flyer on both sides
FLOATING = {"hector_description/robots/quadrotor_base.urdf", "iris_description/robots/iris_simple.urdf"}


@pytest.fixture(scope="module")
def pin():
    return pytest.importorskip("pinocchio")


def _robots() -> tuple[Path, list[str]]:
    root = fetch_suffix(*ERD, PREFIX, (".urdf",))
    return root, sorted(str(p.relative_to(root)) for p in root.rglob("*.urdf"))


def _err(a, b) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.abs(a - b).max(initial=0.0)) / max(1.0, float(np.abs(b).max(initial=0.0)))


@pytest.mark.oracle
def test_every_example_robot_data_urdf_loads_and_equals_pinocchio(pin):
    root, files = _robots()
    assert len(files) == 69
    worst: dict[str, float] = {}
    loaded, refused = [], {}
    for rel in files:
        path = root / rel
        try:
            r = Robot(rel, path, rel in FLOATING)
        except ModelFileError as e:
            refused[rel] = str(e)
            continue
        loaded.append(rel)
        rng = np.random.default_rng(0)
        for _ in range(2):
            q, u = r.random_state(rng)
            M, udot = (np.asarray(x) for x in r.compiled(q, u))
            qp, vp, T, c = r.to_pin(q, u)
            a = np.array(pin.aba(r.pin, r.data, qp, vp, -np.asarray(r.pin.damping) * vp))
            worst[rel] = max(
                worst.get(rel, 0.0),
                _err(M, T.T @ r.pin_mass_matrix(qp) @ T),
                _err(udot, np.linalg.solve(T, a - c)),
            )
    print(f"\n{len(loaded)} URDFs equal Pinocchio; largest error {max(worst.values()):.1e}")
    for rel, e in sorted(worst.items(), key=lambda kv: -kv[1])[:5]:
        print(f"  {rel}: {e:.1e}")
    bad = {rel: e for rel, e in worst.items() if e > 1e-9}
    assert not bad, f"simjax differs from Pinocchio: {bad}"
    assert set(refused) == set(REFUSED), f"refused: {refused}"
    for rel, msg in refused.items():
        assert re.search(REFUSED[rel][0], msg), (rel, msg)


@pytest.mark.oracle
def test_refused_urdfs_are_broken_or_refused_by_pinocchio(pin):
    """Each refusal is right: Pinocchio refuses the file, or the robot is physically broken."""
    root, _ = _robots()
    with pytest.raises(ValueError):  # ur3.urdf: no links (a leftover wrapper)
        pin.buildModelFromUrdf(str(root / "ur_description/urdf/ur3.urdf"))
    # romeo: Pinocchio loads it, but the hand joints move nothing with mass
    pm = pin.buildModelFromUrdf(str(root / "romeo_description/urdf/romeo.urdf"))
    M = np.array(pin.crba(pm, pm.createData(), pin.neutral(pm)))
    M = np.triu(M) + np.triu(M, 1).T
    assert np.linalg.eigvalsh(M).min() < 1e-12 * np.abs(M).max()
    # romeo_laas_small: link 'body' has an inertia with a negative principal moment
    pm = pin.buildModelFromUrdf(str(root / "romeo_description/urdf/romeo_laas_small.urdf"))
    lam = min(float(np.linalg.eigvalsh(np.array(Y.inertia)).min()) for Y in pm.inertias)
    assert lam < -0.02
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ModelFileError, match="not positive semi-definite"):
            load_urdf(root / "romeo_description/urdf/romeo_laas_small.urdf")
