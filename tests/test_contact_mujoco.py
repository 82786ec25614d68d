"""MuJoCo's soft contact and limit rows (``load_mjcf(..., contact=True)``,
``simjax.constraints.soft``) against MuJoCo 4.0.1 C.

Oracle: ``mj_forward`` at the same State (actuators idle, gravity compensation off):
``qacc`` (simjax's ``udot`` mapped by ``T``) to 1e-6 relative and ``efc_force`` per contact
(matched by geom pair, MuJoCo's row order within a contact) and per joint limit, on
dm_control's hopper, cheetah, walker and humanoid at States dropped onto the floor with
joints pushed past their limits; pyramidal and elliptic cones (and ``impratio``) on the
humanoid and on a small scene with condim 1, 3, 4 and 6, margins, gaps and direct
``solref``; MuJoCo's ``body_invweight0``/``dof_invweight0`` from simjax's mass matrix
(and MuJoCo's ``1/mass`` shortcut for simple slide-only bodies, on small variants); a
vmap over many States compiled once; a box dropped on a plane under semi-explicit Euler
against ``mj_step`` with ``integrator="Euler"``; gradients through the solve (implicit)
against central differences; dm_control's stacker with its arm's capsules pressed into a
box and a box into that box (capsule-box and box-box contacts). Run with ``-s`` to print the largest errors.
"""

import dataclasses
import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np
import pytest
from data_fetch import fetch
from test_actuators import COMMON, SUITE, _path
from test_contact_detection import _drop, _from_mujoco, _geom_id, small_scene
from test_io_mjcf import Case

import simjax as sj
from simjax.constraints import soft
from simjax.io._mjcf import load_mjcf

RTOL = 1e-6
ERR: dict[str, float] = {}


@pytest.fixture(scope="module")
def mujoco():
    return pytest.importorskip("mujoco")


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    for k, v in sorted(ERR.items()):
        print(f"{k}: {v:.2e}")


def _load(path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_mjcf(path, contact=True, **kw)


class Setup:
    """A model loaded with ``contact=True``, MuJoCo's model of the same file (gravity
    compensation off, actuators idle), the maps between them and a jitted
    ``(q, u) -> (udot, efc_force, status, dist, active)``."""

    def __init__(self, name, path, mujoco, cone=None, impratio=None, tight=False):
        self.c = Case(name, path, mujoco)  # (for its maps; its own model has contact off)
        self.lm = _load(path)
        lm = self.lm
        st = lm.default_state
        model = lm.system.model_for(st)
        if cone is not None or impratio is not None:
            opts = dataclasses.replace(
                model.mujoco,
                cone=cone or model.mujoco.cone,
                impratio=impratio or model.mujoco.impratio,
            )
            lm.matter.set_mujoco_constraints(opts)
            st = lm.system.realize_topology().with_q(st.q).with_u(st.u)
            model = lm.system.model_for(st)
        self.state, self.model = st, model
        m = mujoco.MjModel.from_xml_path(str(path))
        m.body_gravcomp[:] = 0.0
        if cone is not None:
            m.opt.cone = {"pyramidal": 0, "elliptic": 1}[cone]
        if impratio is not None:
            m.opt.impratio = impratio
        if tight:  # MuJoCo's Newton run to the optimum (see the cone test)
            m.opt.tolerance, m.opt.ls_tolerance, m.opt.iterations = 1e-13, 1e-10, 1000
        self.m, self.d = m, mujoco.MjData(m)
        system = lm.system

        @jax.jit
        def f(q, u):
            s = system.realize(st.with_q(q).with_u(u), sj.Stage.ACCELERATION)
            ac = s.acceleration_cache
            ct = lm.matter.find_contacts(s)
            return s.udot, ac.efc_force, ac.solver_status, ct.dist, ct.active

        self.f = f
        ct = lm.matter.find_contacts(system.realize(st, sj.Stage.POSITION))
        self.ct = ct
        opt = model.mujoco
        cand = model.contact
        self.cl = soft.contact_layout(
            ct, cand.surface_bodies, opt.body_invweight, opt.cone, opt.impratio, opt.timestep
        )
        self.nl = 2 * opt.limit_q.size
        self.names = cand.surface_names
        self.limit_joints = [
            next(j for j in range(m.njnt) if self.c.joints[j][3] == qi) for qi in opt.limit_q
        ]

    def compare(self, mujoco, q, u, what):
        """qacc and efc_force against MuJoCo at (q, u); returns the number of active
        contacts and limits."""
        c, m, d = self.c, self.m, self.d
        qp, T = c.to_mujoco(q)
        d.qpos[:], d.qvel[:] = qp, T @ u
        d.ctrl[:] = 0.0
        mujoco.mj_forward(m, d)
        udot, force, status, dist, active = (np.asarray(x) for x in self.f(jnp.asarray(q), jnp.asarray(u)))
        assert status[1] == 1, (what, status)
        ref = np.linalg.solve(T, d.qacc)
        scale = max(1.0, np.abs(ref).max())
        err = np.abs(udot - ref).max() / scale
        ERR[f"{what} qacc"] = max(ERR.get(f"{what} qacc", 0.0), err)
        np.testing.assert_allclose(udot, ref, rtol=0, atol=RTOL * scale, err_msg=what)
        fscale = max(1.0, np.abs(d.efc_force).max(initial=0.0))
        # contacts: simjax's slots in range by geom pair, in order, against d.contact
        got: dict[tuple, list[int]] = {}
        on = active & (dist < self.ct.includemargin)
        for k in np.flatnonzero(on):
            g = tuple(_geom_id(mujoco, m, self.names[s]) for s in self.ct.surface[k])
            got.setdefault(g, []).append(k)
        ref_c: dict[tuple, list[int]] = {}
        for i in range(d.ncon):
            if d.contact[i].efc_address >= 0:
                ref_c.setdefault(tuple(int(x) for x in d.contact[i].geom), []).append(i)
        assert sorted(got) == sorted(ref_c), what
        nf = 0
        for g, slots in got.items():
            assert len(slots) == len(ref_c[g]), (what, g)
            for k, i in zip(slots, ref_c[g]):
                con = d.contact[i]
                a, n = con.efc_address, int(self.cl.count[k])
                mine = force[self.nl + self.cl.start[k] : self.nl + self.cl.start[k] + n]
                theirs = d.efc_force[a : a + n]
                err = np.abs(mine - theirs).max() / fscale
                ERR[f"{what} efc_force"] = max(ERR.get(f"{what} efc_force", 0.0), err)
                np.testing.assert_allclose(mine, theirs, rtol=0, atol=RTOL * fscale, err_msg=f"{what} {g}")
                nf += 1
        # limits: row 2i (lower) and 2i+1 (upper) of limited joint i
        lim = {}
        for r in range(d.nefc):
            if d.efc_type[r] == mujoco.mjtConstraint.mjCNSTR_LIMIT_JOINT:
                j = int(d.efc_id[r])
                side = 0 if d.efc_J.reshape(d.nefc, m.nv)[r, m.jnt_dofadr[j]] > 0 else 1
                lim[(j, side)] = d.efc_force[r]
        mine = {}
        for i, j in enumerate(self.limit_joints):
            for side in (0, 1):
                if force[2 * i + side] != 0.0 or (j, side) in lim:
                    mine[(j, side)] = force[2 * i + side]
        for key, v in lim.items():
            assert key in mine, (what, key)
            np.testing.assert_allclose(
                mine[key], v, rtol=0, atol=RTOL * fscale, err_msg=f"{what} limit {key}"
            )
        assert all(key in lim or v == 0.0 for key, v in mine.items())
        return nf, len(lim)


def _push_limits(setup, q, rng):
    """q with a third of the limited joints near a limit: past it by up to 0.05 (rad or m),
    or inside by up to 0.01."""
    q = q.copy()
    opt = setup.model.mujoco
    for i in rng.choice(opt.limit_q.size, max(1, opt.limit_q.size // 3), replace=False):
        lo, hi = opt.limit_lower[i], opt.limit_upper[i]
        out = rng.uniform(-0.01, 0.05)
        q[opt.limit_q[i]] = lo - out if rng.random() < 0.5 else hi + out
    return q


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["hopper", "cheetah", "walker", "humanoid"])
def test_qacc_and_efc_force_equal_mujoco(name, mujoco):
    """States dropped onto the floor (a geom 5 mm in), some with joints pushed past their
    limits, random speeds: qacc to 1e-6 relative, every contact's and limit's efc_force."""
    setup = Setup(name, _path(name), mujoco)
    c, m, d = setup.c, setup.m, setup.d
    rng = np.random.default_rng(11)
    n_con = n_lim = 0
    for k in range(8):
        q, u = c.random_state(rng)
        if k % 4:
            q = _push_limits(setup, q, rng)
        qp, _ = c.to_mujoco(q)
        q = _from_mujoco(c, q, _drop(mujoco, m, d, qp))
        nf, nl = setup.compare(mujoco, q, u, name)
        n_con += nf
        n_lim += nl
    assert n_con >= 8 and n_lim >= 4


def test_invweights_equal_mujoco(mujoco):
    """``body_invweight0`` and the limited joints' ``dof_invweight0`` from simjax's mass
    matrix at qpos0 equal MuJoCo's (the regulariser's diagonal approximation)."""
    for name in ("walker", "humanoid"):
        setup = Setup(name, _path(name), mujoco)
        opt, m = setup.model.mujoco, setup.m
        for b in range(m.nbody):
            mine = opt.body_invweight[setup.lm.bodies[setup.c.body_names[b]].index]
            np.testing.assert_allclose(mine, m.body_invweight0[b], rtol=1e-10, atol=1e-12)
        dof = [m.jnt_dofadr[j] for j in setup.limit_joints]
        np.testing.assert_allclose(opt.limit_invweight, m.dof_invweight0[dof], rtol=1e-10)


def _slide(name, axis="1 0 0", extra=""):
    return f'<joint name="{name}" type="slide" axis="{axis}" range="-1 1" {extra}/>'


_XZ = _slide("x") + _slide("z", "0 0 1")
_BALL = '<geom type="sphere" size=".1"/>'


def _two(size):
    return "".join(f'<geom type="box" size="{size}" pos="0 0 {z}"/>' for z in (".1", "-.1"))


#: bodies for MuJoCo's "simple body" shortcut: name -> (body xml, MuJoCo's body_simple)
SIMPLE_BODIES = {
    "sphere": (_XZ + _BALL, 2),
    "armature": (_slide("x", extra='armature="0.5"') + _BALL, 2),
    "box_one_geom": (_XZ + '<geom type="box" size=".3 .2 .1"/>', 2),
    "boxes_descending": (_XZ + _two(".1 .2 .3"), 2),
    "boxes_ascending": (_XZ + _two(".3 .2 .1"), 0),
    "fullinertia_descending": (_XZ + '<inertial pos="0 0 0" mass="2" fullinertia="3 2 1 0 0 0"/>', 2),
    "fullinertia_ascending": (_XZ + '<inertial pos="0 0 0" mass="2" fullinertia="1 2 3 0 0 0"/>', 0),
    "com_offset": (_XZ + '<geom type="sphere" size=".1" pos="0.01 0 0"/>', 0),
    "capsule_along_x": (_XZ + '<geom type="capsule" fromto="-.1 0 0 .1 0 0" size=".05"/>', 0),
    "capsule_fromto_z": (_XZ + '<geom type="capsule" fromto="0 0 -.1 0 0 .1" size=".05"/>', 0),
    "capsule_z": (_XZ + '<geom type="capsule" size=".05 .1"/>', 2),
    "box_rotated": (_XZ + '<geom type="box" size=".1 .2 .3" euler="0 0 90"/>', 0),
    "tilted_axis": (_slide("x", "1 0 0.001") + _BALL, 0),
    "joint_pos": (_slide("x", extra='pos="0 0 .1"') + _BALL, 0),
    "with_hinge": (_slide("x") + '<joint name="h" axis="0 1 0" range="-1 1"/>' + _BALL, 1),
    "has_child": (_XZ + _BALL + f'<body pos="0 0 .3">{_slide("c", "0 1 0")}{_BALL}</body>', 0),
    "on_fixed_body": (f'{_BALL}<body name="inner" pos="0 0 .3">{_XZ}{_BALL}</body>', 2),
}


@pytest.mark.oracle
def test_simple_body_invweights_equal_mujoco(mujoco, tmp_path):
    """MuJoCo's shortcut for a "simple body with no rotations" (``body_simple == 2``:
    inertial frame = body frame, a child of the world or of a dof-less child of it, no
    children, slide joints only, at the body origin along body axes): ``body_invweight0 =
    (1/mass, 0)`` and ``dof_invweight0 = 1/mass`` (armature ignored), not the diagonal of
    ``J M^-1 J'``. simjax's invweights equal MuJoCo's on bodies that are simple and on ones
    that miss one condition each (MuJoCo's inertial frame from an eigen-decomposition keeps
    the body axes only for a diagonal inertia with non-increasing moments)."""
    for name, (body, simple) in SIMPLE_BODIES.items():
        xml = f'<mujoco><worldbody><body name="b" pos="0 0 1">{body}</body></worldbody></mujoco>'
        path = tmp_path / f"{name}.xml"
        path.write_text(xml)
        m = mujoco.MjModel.from_xml_path(str(path))
        b = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "inner" if name == "on_fixed_body" else "b")
        assert m.body_simple[b] == simple, name
        lm = _load(path)
        opt = lm.system.model_for(lm.default_state).mujoco
        for i in range(1, m.nbody):
            bn = mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, i)
            if bn in lm.bodies:
                mine = opt.body_invweight[lm.bodies[bn].index]
                np.testing.assert_allclose(mine, m.body_invweight0[i], rtol=1e-10, atol=1e-12, err_msg=name)
        ids = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, j) for j in ("x", "z", "h", "c")]
        theirs = np.sort(m.dof_invweight0[[m.jnt_dofadr[j] for j in ids if j >= 0]])
        np.testing.assert_allclose(np.sort(opt.limit_invweight), theirs, rtol=1e-10, err_msg=name)


@pytest.mark.oracle
@pytest.mark.parametrize(("cone", "impratio"), [("elliptic", None), ("elliptic", 3.0), ("pyramidal", 2.0)])
def test_cones_and_impratio_on_the_humanoid(cone, impratio, mujoco):
    """The humanoid (condim 1 and 3 geoms) with MuJoCo's ``opt.cone`` and ``impratio``
    set, the same on both sides. MuJoCo's solve is run to its optimum (tolerance 1e-13,
    ls_tolerance 1e-10): with its defaults (1e-8, an inexact line search with
    ls_tolerance 0.01) it stops short on elliptic cones, whose cost is not piecewise
    quadratic: measured 2.4e-6 relative in qacc and 4.2e-6 in efc_force from simjax's
    optimum, 1.1e-8 and 1.4e-8 once run to it."""
    setup = Setup("humanoid", _path("humanoid"), mujoco, cone=cone, impratio=impratio, tight=True)
    c, m, d = setup.c, setup.m, setup.d
    rng = np.random.default_rng(5)
    n_con = 0
    for k in range(6):
        q, u = c.random_state(rng)
        if k % 2:
            q = _push_limits(setup, q, rng)
        qp, _ = c.to_mujoco(q)
        q = _from_mujoco(c, q, _drop(mujoco, m, d, qp))
        n_con += setup.compare(mujoco, q, u, f"humanoid {cone} {impratio}")[0]
    assert n_con >= 6


def _scene(cone, impratio):
    """The small scene with a hinge limit (own margin, direct ``solreflimit``) and direct
    ``solref``/``solimp`` on the capsule ``cb``."""
    return small_scene(
        option=f' cone="{cone}" impratio="{impratio}" timestep="0.004"',
        limit=' range="-30 40" margin="0.05" solreflimit="-2000 -30" solimplimit="0.8 0.99 0.02 0.3 1"',
        cb=' solref="-5000 -40" solimp="0.7 0.95 0.005 0.5 2"',
    )


@pytest.mark.oracle
@pytest.mark.parametrize(("cone", "impratio"), [("pyramidal", 1.0), ("elliptic", 1.0), ("elliptic", 2.5)])
def test_condims_margins_and_direct_solref_on_a_small_scene(cone, impratio, mujoco, tmp_path):
    """condim 1 (a ``<pair>``), 3, 4 and 6, ``margin`` and ``gap`` (rows only within
    ``includemargin``), standard and direct (negative) ``solref`` with refsafe, solimp
    power 1 and 3, a hinge limit with its own margin and direct ``solreflimit``."""
    path = tmp_path / "scene.xml"
    path.write_text(_scene(cone, impratio))
    setup = Setup("scene", path, mujoco, tight=cone == "elliptic")
    c, d = setup.c, setup.d
    rng = np.random.default_rng(3)
    seen: set[int] = set()
    n_lim = 0
    for _ in range(30):
        q, u = c.random_state(rng)
        qp, _ = c.to_mujoco(q)
        qp[2] = rng.uniform(-0.05, 0.15)
        qp[8:11] = qp[0:3] + rng.uniform(-0.2, 0.2, 3)
        qp[7] = rng.choice([-0.55, 0.72, 0.0])  # the hinge near or past a limit
        q = _from_mujoco(c, q, qp)
        nf, nl = setup.compare(mujoco, q, 0.3 * u, f"scene {cone} {impratio}")
        n_lim += nl
        seen |= {int(d.contact[i].dim) for i in range(d.ncon) if d.contact[i].efc_address >= 0}
    assert seen == {1, 3, 4, 6} and n_lim >= 5


@pytest.mark.oracle
def test_vmap_over_states_compiles_once(mujoco):
    """A batch of 48 hopper States with different contacts and limits active: one compile
    (a second batch with other contacts reuses it), every member equal to MuJoCo's qacc."""
    setup = Setup("hopper", _path("hopper"), mujoco)
    c, m, d = setup.c, setup.m, setup.d
    system, st = setup.lm.system, setup.state
    rng = np.random.default_rng(2)

    def batch(n):
        Q, U, R = [], [], []
        for k in range(n):
            q, u = c.random_state(rng)
            if k % 3 == 0:
                q = _push_limits(setup, q, rng)
            qp, T = c.to_mujoco(q)
            if k % 2:
                qp = _drop(mujoco, m, d, qp)
            q = _from_mujoco(c, q, qp)
            qp, T = c.to_mujoco(q)
            d.qpos[:], d.qvel[:] = qp, T @ u
            mujoco.mj_forward(m, d)
            Q.append(q)
            U.append(u)
            R.append(np.linalg.solve(T, d.qacc))
        return np.array(Q), np.array(U), np.array(R)

    f = jax.jit(jax.vmap(lambda q, u: system.realize(st.with_q(q).with_u(u), sj.Stage.ACCELERATION).udot))
    for _ in range(2):
        Q, U, R = batch(48)
        got = np.asarray(f(jnp.asarray(Q), jnp.asarray(U)))
        scale = np.maximum(1.0, np.abs(R).max(axis=1, keepdims=True))
        assert np.all(np.abs(got - R) <= RTOL * scale)
    assert f._cache_size() == 1


BOX = """<mujoco><option timestep="0.002" integrator="Euler" cone="{cone}"/>
  <worldbody><geom name="floor" type="plane" size="5 5 .1"/>
    <body name="box" pos="0 0 0.3" euler="3 2 0"><freejoint/>
      <geom name="b" type="box" size=".1 .07 .05" mass="1.3"/></body>
  </worldbody></mujoco>"""


@pytest.mark.oracle
@pytest.mark.parametrize("cone", ["pyramidal", "elliptic"])
def test_box_dropped_on_a_plane_rests_at_mujocos_penetration(cone, mujoco):
    """A tilted box dropped from 0.25 m, 1 s of semi-explicit Euler at MuJoCo's timestep
    (``simulate(..., integrator="euler")``) against ``mj_step`` with ``integrator="Euler"``
    (no damping, so MuJoCo's implicit damping plays no part): the trajectory's positions
    agree to 1e-6 m and the box rests at MuJoCo's penetration (measured 1e-13)."""
    xml = BOX.format(cone=cone)
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    n = 500
    ref = []
    for _ in range(n):
        mujoco.mj_step(m, d)
        ref.append(d.qpos.copy())
    ref = np.array(ref)
    lm = _load(xml)
    traj = sj.simulate(lm.system, lm.default_state, n * m.opt.timestep, integrator="euler", dt=m.opt.timestep,
                       save_at=n)  # fmt: skip
    q = np.asarray(traj.q)
    np.testing.assert_allclose(q[:, 4:7], ref[:, :3], atol=1e-6)
    assert q[-1, 6] == pytest.approx(ref[-1, 2], abs=1e-10)  # at rest, 0.1 mm in
    mujoco.mj_forward(m, d)
    assert d.ncon == 4 and all(-2e-4 < d.contact[i].dist < 0 for i in range(4))


@pytest.mark.oracle
@pytest.mark.parametrize("cone", ["pyramidal", "elliptic"])
def test_gradients_through_the_solve_equal_central_differences(cone, mujoco):
    """On the hopper dropped on the floor with a joint past its limit, pyramidal and
    elliptic cones: the gradient of a function of udot in (q, u) is finite and equals
    central differences (implicit differentiation at the optimum; the active set unchanged
    by the steps). The hopper slides at 30 m/s: the elliptic contact is in the cone's
    middle zone (its friction force on the cone), where the cost is not quadratic."""
    setup = Setup("hopper", _path("hopper"), mujoco, cone=cone)
    c, m, d = setup.c, setup.m, setup.d
    system, st = setup.lm.system, setup.state
    rng = np.random.default_rng(4)
    q, u = c.random_state(rng)
    q = _push_limits(setup, q, rng)
    q = _from_mujoco(c, q, _drop(mujoco, m, d, c.to_mujoco(q)[0]))
    u[c.joints[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, "rootx")][4]] = 30.0
    w = rng.normal(size=u.size)
    _, force, _, dist, active = (np.asarray(x) for x in setup.f(jnp.asarray(q), jnp.asarray(u)))
    (k,) = np.flatnonzero(active & (dist < setup.ct.includemargin))
    f = force[setup.nl + setup.cl.start[k] : setup.nl + setup.cl.start[k] + setup.cl.count[k]]
    if cone == "elliptic":  # sliding: |friction| = mu normal (friction 1 here)
        assert np.linalg.norm(f[1:]) == pytest.approx(f[0], rel=1e-9)

    def fn(q, u):
        return jnp.dot(w, system.realize(st.with_q(q).with_u(u), sj.Stage.ACCELERATION).udot)

    gq, gu = (np.asarray(x) for x in jax.jit(jax.grad(fn, argnums=(0, 1)))(jnp.asarray(q), jnp.asarray(u)))
    assert np.all(np.isfinite(gq)) and np.all(np.isfinite(gu))
    f = jax.jit(jax.vmap(fn))
    h = 1e-6
    E = np.eye(q.size)
    fdq = (
        np.asarray(f(q + h * E, np.tile(u, (q.size, 1)))) - np.asarray(f(q - h * E, np.tile(u, (q.size, 1))))
    ) / (2 * h)
    E = np.eye(u.size)
    fdu = (
        np.asarray(f(np.tile(q, (u.size, 1)), u + h * E)) - np.asarray(f(np.tile(q, (u.size, 1)), u - h * E))
    ) / (2 * h)
    scale = max(1.0, np.abs(fdq).max())
    np.testing.assert_allclose(gq, fdq, atol=1e-5 * scale)
    np.testing.assert_allclose(gu, fdu, atol=1e-5 * max(1.0, np.abs(fdu).max()))


def _undamped(name, mujoco):
    """``(case, simjax model, MjModel, MjData)`` of a dm_control model with contact, joint
    damping, joint stiffness and gravity compensation off on both sides (MuJoCo's Euler
    integrates damping implicitly, simjax's semi-explicit Euler explicitly)."""
    path = _path(name)
    c = Case(name, path, mujoco)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lm = load_mjcf(path, contact=True, passive=False)
    m = mujoco.MjModel.from_xml_path(str(path))
    m.body_gravcomp[:] = 0.0
    m.dof_damping[:] = 0.0
    m.jnt_stiffness[:] = 0.0
    return c, lm, m, mujoco.MjData(m)


def _euler_rollouts(mujoco, c, lm, m, d, q, u, seconds):
    """``simulate(..., integrator="euler")`` and ``mj_step`` from the same ``(q, u)`` at
    the file's timestep: ``(trajectory, simjax qpos per step, MuJoCo's, most contacts)``."""
    qp, T = c.to_mujoco(q)
    d.qpos[:], d.qvel[:] = qp, T @ u
    dt = m.opt.timestep
    n = int(round(seconds / dt))
    ref, ncon = [], 0
    for _ in range(n):
        mujoco.mj_step(m, d)
        ref.append(d.qpos.copy())
        ncon = max(ncon, d.ncon)
    s0 = lm.default_state.with_q(jnp.asarray(q)).with_u(jnp.asarray(u))
    traj = sj.simulate(lm.system, s0, n * dt, integrator="euler", dt=dt, save_at=n)
    mine = np.array([c.to_mujoco(x)[0] for x in np.asarray(traj.q)])
    return traj, mine, np.array(ref), ncon


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["hopper", "cheetah"])
def test_half_second_rollouts_equal_mujoco_euler(name, mujoco):
    """0.5 s from a State dropped onto the floor with random joint angles and speeds:
    ``simulate(..., integrator="euler")`` at the file's timestep against ``mj_step`` (the
    file's Euler), joint damping off on both sides (MuJoCo's Euler integrates damping
    implicitly, simjax's semi-explicit Euler explicitly: with the hopper's damping 0.05
    they part by 1e-6 after two steps and 8.7e-4 in 0.5 s). Measured: qpos within 2e-14
    over the run; here bounded at 1e-9."""
    c, lm, m, d = _undamped(name, mujoco)
    rng = np.random.default_rng(0)
    q, u = c.random_state(rng)
    q = _from_mujoco(c, q, _drop(mujoco, m, d, c.to_mujoco(q)[0]))
    _, mine, ref, ncon = _euler_rollouts(mujoco, c, lm, m, d, q, 0.3 * u, 0.5)
    err = np.abs(mine - ref).max()
    ERR[f"{name} 0.5 s rollout qpos"] = err
    assert ncon >= 1 and err < 1e-9


def test_loader_options_status_and_refusals(tmp_path):
    """``contact=True``: the load warning no longer says the geoms produce no force (they
    are counted as MuJoCo's soft contact), the limits are soft rows (no hard
    CoordinateLimit); without it the geoms are detection-only as before. A file with
    equalities is refused (not solved together yet); bad options are refused naming the
    field; an iteration cap of 1 on a State needing more reports ``converged = 0``;
    ``set_mujoco_constraints(None)`` goes back to the contact-free dynamics."""
    xml = BOX.format(cone="pyramidal")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        lm = load_mjcf(xml, contact=True)
    msg = " ".join(str(w.message) for w in rec)
    assert (
        "no force" not in msg
        and lm.ignored.get("geom that collides (MuJoCo's soft contact, solved with the limits)") == 2
    )
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        plain = load_mjcf(xml)
    assert "produces no force" in " ".join(str(w.message) for w in rec)
    assert plain.system.model_for(plain.default_state).mujoco is None
    # the box 5 mm into the floor: the contact pushes it up; with 1 iteration it is not done
    q = np.array(lm.default_state.q)
    q[0:4] = [1.0, 0.0, 0.0, 0.0]
    q[6] = 0.045
    s = lm.system.realize(lm.default_state.with_q(jnp.asarray(q)), sj.Stage.ACCELERATION)
    assert float(s.udot[5]) > 0 and np.asarray(s.acceleration_cache.solver_status)[1] == 1
    model = lm.system.model_for(lm.default_state)
    lm.matter.set_mujoco_constraints(dataclasses.replace(model.mujoco, iterations=1, tolerance=1e-300))
    st = lm.system.realize_topology()
    s1 = lm.system.realize(st.with_q(jnp.asarray(q)), sj.Stage.ACCELERATION)
    assert np.asarray(s1.acceleration_cache.solver_status).tolist() == [1, 0]
    lm.matter.set_mujoco_constraints(None)
    st = lm.system.realize_topology()
    s2 = lm.system.realize(st.with_q(jnp.asarray(q)), sj.Stage.ACCELERATION)
    assert float(s2.udot[5]) == pytest.approx(-9.81) and s2.acceleration_cache.efc_force is None
    with pytest.raises(ValueError, match="cone"):
        dataclasses.replace(model.mujoco, cone="square")
    with pytest.raises(ValueError, match="impratio"):
        dataclasses.replace(model.mujoco, impratio=0.0)
    with pytest.raises(TypeError, match="MujocoConstraintOptions"):
        lm.matter.set_mujoco_constraints({"cone": "elliptic"})
    eq = xml.replace("</worldbody>", '</worldbody><equality><weld body1="box"/></equality>')
    with pytest.raises(NotImplementedError, match="equality"):
        _load(eq)
    with pytest.raises(Exception, match="cone"):
        _load(BOX.format(cone="round"))


def test_gradient_through_a_rollout_with_sliding_contact():
    """``jax.grad`` through 0.1 s of ``simulate(..., integrator="euler")`` of a box resting
    on the floor pushed sideways (sliding: the friction rows at the pyramid's edge): the
    derivative of its final x in the push speed equals central differences (measured
    3e-11 apart)."""
    lm = _load(BOX.format(cone="pyramidal").replace('pos="0 0 0.3" euler="3 2 0"', 'pos="0 0 0.0499"'))
    s0 = lm.default_state

    def final_x(vx):
        s = s0.with_u(s0.u.at[3].set(vx))
        return sj.simulate(lm.system, s, 0.1, integrator="euler", dt=0.002).q[-1, 4]

    g = float(jax.grad(final_x)(1.0))
    f = jax.jit(final_x)
    fd = (float(f(1.0 + 1e-5)) - float(f(1.0 - 1e-5))) / 2e-5
    assert 0.0 < g < 0.1 and g == pytest.approx(fd, rel=1e-6)


@pytest.mark.oracle
def test_float32_states_solve_in_their_precision(mujoco):
    """A float32 State of the hopper on the floor with limits engaged is solved in float32
    (the tolerance floored at 64 machine epsilons, so the solve converges): udot equals the
    float64 one to 1e-4 relative (measured 4e-6)."""
    setup = Setup("hopper", _path("hopper"), mujoco)
    c, m, d = setup.c, setup.m, setup.d
    system, st = setup.lm.system, setup.state
    st32 = jax.tree.map(
        lambda x: x.astype(jnp.float32) if getattr(x, "dtype", None) == jnp.float64 else x, st
    )
    rng = np.random.default_rng(4)
    for _ in range(3):
        q, u = c.random_state(rng)
        q = _push_limits(setup, q, rng)
        q = _from_mujoco(c, q, _drop(mujoco, m, d, c.to_mujoco(q)[0]))
        a = np.asarray(
            system.realize(st.with_q(jnp.asarray(q)).with_u(jnp.asarray(u)), sj.Stage.ACCELERATION).udot
        )
        s32 = system.realize(
            st32.with_q(jnp.asarray(q, jnp.float32)).with_u(jnp.asarray(u, jnp.float32)),
            sj.Stage.ACCELERATION,
        )
        assert s32.udot.dtype == jnp.float32 and np.asarray(s32.acceleration_cache.solver_status)[1] == 1
        np.testing.assert_allclose(np.asarray(s32.udot), a, atol=1e-4 * np.abs(a).max())


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["walker", "humanoid"])
def test_falls_and_lies_on_the_floor_as_mujoco(name, mujoco):
    """From the file's default pose (the humanoid standing, the walker upright) with a
    small push, 3 s of ``simulate(..., integrator="euler")`` against ``mj_step``, damping
    off on both sides: the two agree to round-off until the fall's impacts make the motion
    chaotic (the divergence time, where they first part by 1e-6 m or rad, is printed with
    ``-s``; measured: humanoid 0.255 s, the walker not within the 3 s), and both end lying
    on the floor, at rest, with no geom more than 1 cm in."""
    c, lm, m, d = _undamped(name, mujoco)
    q = np.asarray(lm.default_state.q, dtype=float)
    u = np.zeros(lm.default_state.u.size)
    u[: min(3, u.size)] = 0.3  # a small push (root speeds first in simjax's u)
    traj, mine, ref, _ = _euler_rollouts(mujoco, c, lm, m, d, q, u, 3.0)
    dt, n = m.opt.timestep, len(ref)
    assert bool(jnp.all(traj.result == sj.RESULTS.successful))
    gap = np.abs(mine - ref).max(axis=1)
    parted = int(np.argmax(gap > 1e-6)) if np.any(gap > 1e-6) else n
    ERR[f"{name} fall: divergence time (s)"] = (parted + 1) * dt
    assert parted * dt >= 0.1  # round-off agreement at least until the first impacts
    # both lie on the floor at rest: the root low, slow, nothing through the floor
    final = lm.system.realize(traj.final_state, sj.Stage.POSITION)
    ct = lm.matter.find_contacts(final)
    dist = np.asarray(ct.dist)[np.asarray(ct.active)]
    mujoco.mj_forward(m, d)
    for root_z, speed, lowest in (
        (
            float(mine[-1][2 if name == "humanoid" else 0]),
            float(np.abs(np.asarray(traj.final_state.u)).max()),
            dist.min(),
        ),
        (float(d.qpos[2 if name == "humanoid" else 0]), float(np.abs(d.qvel).max()), min(d.contact.dist)),
    ):
        assert len(dist) > 0 and lowest > -0.01
        assert speed < 0.5
        if name == "humanoid":
            assert root_z < 0.5  # lying (it stood at 1.4 m)


def test_stacker_capsule_box_and_box_box_match_mujoco(mujoco):
    """dm_control's stacker (planar arm of capsules, boxes on slide-slide-hinge joints):
    its capsule-box and box-box pairs, left out before simjax had those kernels, now give
    MuJoCo's contacts. States with random arm poses, box0 pushed into an arm capsule at a
    random angle and box1 into box0 (box2, box3 moved apart), the file's
    ``<equality><tendon>`` a soft row on both sides. ``qacc`` and ``efc_force`` per contact
    as in :class:`Setup`."""
    member = SUITE + "stacker.xml"
    path = fetch("dm_control", "1.0.50", [member, *COMMON])[member]
    setup = Setup("stacker", path, mujoco)
    said = " ".join(setup.lm.ignored)  # what the load warning lists
    assert "collision kernel" not in said, said
    m, d = setup.m, setup.d

    def adr(name):
        return m.jnt_qposadr[mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, name)]

    geom = mujoco.mjtGeom
    caps = [g for g in range(m.ngeom) if m.geom_type[g] == geom.mjGEOM_CAPSULE]
    rng = np.random.default_rng(0)
    n_states, n = 0, {(geom.mjGEOM_CAPSULE, geom.mjGEOM_BOX): 0, (geom.mjGEOM_BOX, geom.mjGEOM_BOX): 0}
    while n_states < 5:
        q, u = setup.c.random_state(rng)
        qp, _ = setup.c.to_mujoco(q)
        for b in (2, 3):
            qp[adr(f"box{b}_x")], qp[adr(f"box{b}_z")] = 3.0 + b, 0.5
        qp[adr("box1_x")] = 3.0
        d.qpos[:] = qp
        mujoco.mj_forward(m, d)
        at = d.geom_xpos[rng.choice(caps)] + rng.normal(size=3) * 0.01
        qp[adr("box0_x")], qp[adr("box0_z")] = at[0], at[2] + 0.02
        qp[adr("box0_y")] = rng.uniform(-np.pi, np.pi)
        qp[adr("box1_x")] = at[0] + rng.uniform(-0.05, 0.05)
        qp[adr("box1_z")] = at[2] + 0.02 + rng.choice([-1, 1]) * rng.uniform(0.03, 0.06)
        qp[adr("box1_y")] = rng.uniform(-np.pi, np.pi)
        d.qpos[:] = qp
        mujoco.mj_forward(m, d)
        kinds = [tuple(sorted(m.geom_type[c.geom])) for c in d.contact[: d.ncon]]
        if not all(kinds.count(k) for k in n):
            continue
        nf, _ = setup.compare(mujoco, _from_mujoco(setup.c, q, qp), 0.1 * rng.normal(size=u.size), "stacker")
        assert nf == d.ncon
        n_states += 1
        for k in n:
            n[k] += kinds.count(k)
    assert all(v >= 5 for v in n.values()), n
