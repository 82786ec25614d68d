"""MuJoCo's joint, tendon and connect equality rows with ``load_mjcf(..., contact=True)``
(issues 63 and 64) against MuJoCo 4.0.1 C.

Oracle: ``mj_forward`` at the same State: per equality row ``efc_J`` (in simjax's speeds),
``efc_aref``, ``efc_R`` and ``efc_force``, and ``qacc``, on a small model written here (a
joint equality with a quartic ``polycoef`` between two hinges, one on a slide alone, a
tendon equality between a fixed and a spatial tendon, a connect of a body to the world and
one between sites on two bodies, default classes, ``active="false"``, a free base falling on
the floor) and on dm_control's quadruped (four fixed-tendon couplings, ``solref`` below
MuJoCo's refsafe limit), at random states, some dropped onto the floor: ``qacc`` to 1e-9
relative and the rows to 1e-9 (measured ~1e-13); the regulariser from
``dof_invweight0``/``tendon_invweight0``/``body_invweight0`` equals MuJoCo's. MuJoCo 4's
connect ``aref`` also subtracts ``dJ/dt qvel`` (measured: without it ``aref`` was 1e-5
relative off). The derivative of a function of ``udot`` through the solve equals central
differences. A weld with ``contact=True`` is refused; ``active="false"`` and ``<flag
equality="disable">`` give no row, as in MuJoCo.
"""

import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np
import pytest
from data_fetch import fetch
from test_contact_detection import _drop, _from_mujoco
from test_io_mjcf import Case, _mj_name

import simjax as sj
from simjax.constraints import soft
from simjax.io._loaded import Coordinate
from simjax.io._mjcf import load_mjcf

TOL = 1e-9
ERR: dict[str, float] = {}

SMALL = """<mujoco model="equalities">
  <option timestep="0.004"/>
  <default>
    <equality solref="0.01 0.8"/>
    <default class="stiff"><equality solimp="0.8 0.99 0.02 0.3 3"/></default>
  </default>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 .1"/>
    <body name="base" pos="0 0 0.3">
      <freejoint name="root"/>
      <geom type="sphere" size=".1" mass="2"/>
      <body name="a" pos=".2 0 0"><joint name="j1" axis="0 1 0" ref="10" range="-60 60"/>
        <geom type="capsule" fromto="0 0 0 .2 0 -.1" size=".03"/>
        <body name="b" pos=".2 0 -.1"><joint name="j2" axis="0 1 0"/>
          <geom type="capsule" fromto="0 0 0 .1 0 -.15" size=".03"/>
        </body>
      </body>
      <body name="c" pos="-.2 0 0"><joint name="j3" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 -.2 0 -.15" size=".03"/>
        <body name="d" pos="-.2 0 -.15"><joint name="j4" type="slide" axis="0 0 1"/>
          <geom type="sphere" size=".04"/>
          <site name="s2"/>
          <site name="tip" pos="0 0 -.04"/>
        </body>
      </body>
      <site name="s1" pos="0 0 .05"/>
    </body>
    <body name="ball" pos=".5 0 .5"><freejoint/><geom type="sphere" size=".05"/><site name="s3"/></body>
  </worldbody>
  <tendon>
    <fixed name="sum"><joint joint="j1" coef=".5"/><joint joint="j3" coef="-.7"/></fixed>
    <spatial name="rope"><site site="s1"/><site site="s2"/></spatial>
  </tendon>
  <equality>
    <joint name="poly" joint1="j2" joint2="j1" polycoef="0.05 -0.8 0.6 0.3 -0.2" class="stiff"/>
    <joint name="alone" joint1="j4" polycoef="0.01"/>
    <tendon name="tendons" tendon1="sum" tendon2="rope" polycoef="0.02 0.4 -0.5 0 0"
            solimp="0.9 0.95 0.05"/>
    <joint name="off" joint1="j3" active="false"/>
    <connect name="pin" body1="b" anchor=".1 0 -.15" class="stiff"/>
    <connect name="tether" site1="tip" site2="s3"/>
  </equality>
</mujoco>"""


@pytest.fixture(scope="module")
def mujoco():
    return pytest.importorskip("mujoco")


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    for k, v in sorted(ERR.items()):
        print(f"{k}: {v:.2e}")


class Setup:
    """A model loaded with ``contact=True``, MuJoCo's model of the same file (gravity
    compensation and the terrain height field, which simjax does not collide, off), the
    map between their states and a jitted ``(q, u) -> (udot, efc_force, status, the
    equality rows' J, aref, R)``."""

    def __init__(self, path, mujoco, tangents=False):
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            self.lm = lm = load_mjcf(path, contact=True)
        self.warning = " ".join(str(w.message) for w in rec)
        st = self.state = lm.default_state
        model = self.model = lm.system.model_for(st)
        m = self.m = mujoco.MjModel.from_xml_path(str(path))
        self.d = mujoco.MjData(m)
        m.body_gravcomp[:] = 0.0
        hf = m.geom_type == mujoco.mjtGeom.mjGEOM_HFIELD
        m.geom_contype[hf] = m.geom_conaffinity[hf] = 0
        # (a Case's maps without loading the file again)
        c = self.c = Case.__new__(Case)
        c.lm, c.state, c.m = lm, st, m
        c.joints = []
        for j in range(m.njnt):
            k = Coordinate("probe", lm.joints[_mj_name(m, "joint", j)], 0)
            c.joints.append(
                (int(m.jnt_type[j]), m.jnt_qposadr[j], m.jnt_dofadr[j], k.q_index(st), k.u_index(st))
            )
        ne = self.ne = len(model.mujoco.eq_obj1) + 3 * len(model.mujoco.connect_body1)

        def f(q, u):
            s = lm.system.realize(st.with_q(q).with_u(u), sj.Stage.ACCELERATION)
            bias = (s.dynamics_cache.a_bias, s.velocity_cache.V_O)
            rows, layout, _, _ = soft.model_rows(model, s, s.position_cache, bias)
            assert layout.eq == tuple(range(layout.m - ne, layout.m))  # the last rows
            ac = s.acceleration_cache
            return s.udot, ac.efc_force[-ne:], ac.solver_status, rows.J[-ne:], rows.aref[-ne:], rows.R[-ne:]

        if tangents:  # one compiled program for the values and their forward derivatives
            self.jvp = jax.jit(lambda q, u, dq, du: jax.jvp(f, (q, u), (dq, du)))
            self.f = lambda q, u: self.jvp(q, u, jnp.zeros_like(q), jnp.zeros_like(u))[0]
        else:
            self.f = jax.jit(f)

    def compare(self, mujoco, q, u, what):
        """Everything against MuJoCo at (q, u); MuJoCo's number of contacts."""
        c, m, d = self.c, self.m, self.d
        qp, T = c.to_mujoco(q)
        d.qpos[:], d.qvel[:] = qp, T @ u
        d.ctrl[:] = 0.0
        mujoco.mj_forward(m, d)
        udot, force, status, J, aref, R = (np.asarray(x) for x in self.f(jnp.asarray(q), jnp.asarray(u)))
        assert status[1] == 1, (what, status)
        rows = np.flatnonzero(d.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY)
        # simjax's order: the joint and tendon equalities, then the connects
        connect = m.eq_type[d.efc_id[rows]] == mujoco.mjtEq.mjEQ_CONNECT
        rows = rows[np.argsort(connect, kind="stable")]
        assert rows.size == self.ne
        ref = np.linalg.solve(T, d.qacc)
        fscale = max(1.0, np.abs(d.efc_force).max())
        errs = {
            "qacc": np.abs(udot - ref).max() / max(1.0, np.abs(ref).max()),
            "efc_J": np.abs(J - d.efc_J.reshape(d.nefc, m.nv)[rows] @ T).max() / max(1.0, np.abs(J).max()),
            "efc_aref": np.abs(aref - d.efc_aref[rows]).max() / max(1.0, np.abs(aref).max()),
            "efc_R": np.abs(R / d.efc_R[rows] - 1.0).max(),
            "efc_force": np.abs(force - d.efc_force[rows]).max() / fscale,
        }
        for k, v in errs.items():
            ERR[f"{what} {k}"] = max(ERR.get(f"{what} {k}", 0.0), v)
            assert v < TOL or what == "c", (what, k, v)
        return d.ncon

    def states(self, mujoco, n, seed):
        """Random states, every other one dropped onto the floor (a free ball, if any,
        lifted 5 m out of the way first)."""
        c, m, d = self.c, self.m, self.d
        rng = np.random.default_rng(seed)
        ball = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, "ball_root")
        for k in range(n):
            q, u = c.random_state(rng)
            qp, _ = c.to_mujoco(q)
            if ball >= 0:
                qp[m.jnt_qposadr[ball] + 2] += 5.0
            q = _from_mujoco(c, q, qp)
            if k % 2:
                q = _from_mujoco(c, q, _drop(mujoco, m, d, qp))
            yield q, u


@pytest.fixture(scope="module")
def small(mujoco, tmp_path_factory):
    path = tmp_path_factory.mktemp("equality") / "equalities.xml"
    path.write_text(SMALL)
    return Setup(path, mujoco, tangents=True)


@pytest.mark.oracle
def test_small_model_rows_equal_mujoco(small, mujoco):
    """The joint (quartic polycoef; alone), tendon (fixed against spatial) and connect
    (body to world; site to site) equalities: rows, forces and qacc equal MuJoCo's at
    random states, falling and on the floor; their regulariser's ``invweight`` is MuJoCo's
    ``dof_invweight0`` / ``tendon_invweight0`` / translational ``body_invweight0`` summed
    over the two objects; the inactive one has no row and is named."""
    opt, m = small.model.mujoco, small.m
    assert "equality 'off' active=\"false\": no row" in small.warning
    assert opt.eq_tendon.tolist() == [False, False, True] and opt.eq_obj2[1] == -1
    dof = m.dof_invweight0
    jd = [m.jnt_dofadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, n)] for n in ("j1", "j2", "j4")]
    ref = [dof[jd[1]] + dof[jd[0]], dof[jd[2]], m.tendon_invweight0.sum()]
    np.testing.assert_allclose(opt.eq_invweight, ref, rtol=1e-12)
    bw = m.body_invweight0[:, 0]
    body = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, n) for n in ("b", "d", "ball")]
    np.testing.assert_allclose(
        opt.connect_invweight, [bw[body[0]] + bw[0], bw[body[1]] + bw[body[2]]], rtol=1e-12
    )
    contacts = sum(small.compare(mujoco, q, u, "small") for q, u in small.states(mujoco, 6, 1))
    assert contacts >= 3


@pytest.mark.oracle
def test_quadruped_rows_equal_mujoco(mujoco):
    """dm_control's quadruped with contact: its four tendon couplings (``solref=".005
    .5"`` raised to ``2 timestep`` by refsafe) and its contacts with the floor, at random
    states, some with many contacts."""
    f = "dm_control/suite/quadruped.xml"
    setup = Setup(fetch("dm_control", "1.0.50", [f])[f], mujoco)
    assert "equality" not in setup.warning
    assert setup.ne == 4 and setup.model.mujoco.eq_tendon.all()
    contacts = [setup.compare(mujoco, q, u, "quadruped") for q, u in setup.states(mujoco, 4, 2)]
    assert max(contacts) >= 20


@pytest.mark.oracle
def test_gradient_through_the_equality_rows(small, mujoco):
    """On the floor: the derivative of a function of ``udot`` in ``(q, u)`` along random
    directions (forward mode) equals central differences (implicit differentiation through
    the solve, the equality rows' ``J``, ``aref`` and impedance, a fixed tendon's length)."""
    q, u = list(small.states(mujoco, 2, 5))[1]
    w = np.random.default_rng(6).normal(size=u.size)
    V = np.random.default_rng(7).normal(size=(2, q.size + u.size))
    h = 1e-6

    def at(x, v):  # (w . udot, its derivative along v) at x = (q, u)
        n = q.size
        val, tan = small.jvp(*(jnp.asarray(a) for a in (x[:n], x[n:], v[:n], v[n:])))
        return float(w @ np.asarray(val[0])), float(w @ np.asarray(tan[0]))

    x = np.concatenate([q, u])
    ad = np.array([at(x, v)[1] for v in V])
    fd = np.array([(at(x + h * v, v)[0] - at(x - h * v, v)[0]) / (2 * h) for v in V])
    err = np.abs(ad - fd).max() / np.abs(fd).max()
    ERR["gradient vs central differences"] = err
    assert np.all(np.isfinite(ad)) and err < 1e-6


def test_equality_terms_are_two_sided():
    """An equality row's cost is ``D jar^2 / 2`` on either side of zero (force ``-D jar``,
    Hessian ``D``), a limit row's only below it; a row set stacks them in any order."""
    jar = jnp.array([-2.0, 3.0, -1.0, 4.0])
    D = jnp.array([1.0, 2.0, 3.0, 4.0])
    layout = soft.Layout(4, (0, 1), (), (2, 3))
    c, f, hd, _ = soft._terms(layout, jar, D, (), ())
    np.testing.assert_allclose(np.asarray(f), [2.0, 0.0, 3.0, -16.0])
    np.testing.assert_allclose(np.asarray(hd), [1.0, 0.0, 3.0, 4.0])
    assert float(c) == pytest.approx(0.5 * (4.0 + 3.0 + 64.0))
    shuffled = soft.Layout(4, (1, 3), (), (0, 2))
    _, f2, hd2, _ = soft._terms(shuffled, jar, D, (), ())
    np.testing.assert_allclose(np.asarray(f2), [2.0, 0.0, 3.0, 0.0])
    np.testing.assert_allclose(np.asarray(hd2), [1.0, 0.0, 3.0, 0.0])


def test_refusals_and_disabled_equalities(tmp_path):
    """With ``contact=True``: a weld is refused (its soft rows are not built), naming it;
    ``<flag equality="disable">`` gives no equality row; without contact the equalities
    stay exact constraints."""
    xml = SMALL.replace("<equality>", '<equality><weld name="glue" body1="c"/>')
    with pytest.raises(NotImplementedError, match="weld.*glue"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            load_mjcf(xml, contact=True)
    off = SMALL.replace(
        '<option timestep="0.004"/>', '<option timestep="0.004"><flag equality="disable"/></option>'
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lm = load_mjcf(off, contact=True)
        exact = load_mjcf(SMALL)
    opt = lm.system.model_for(lm.default_state).mujoco
    assert opt.eq_obj1.size == 0 and opt.connect_body1.size == 0
    assert type(exact.constraints["poly"]).__name__ == "CoordinateCoupler"
