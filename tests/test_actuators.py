"""Actuators with controls in the State (``Force.CoordinateActuator``), MuJoCo's joint
actuators and armature from ``load_mjcf``, and ``simulate(..., controls=...)``.

The oracle is MuJoCo 3 with contacts and constraints disabled but joint damping, springs,
armature and actuation on: at random states, controls (some outside ``ctrlrange``, which
MuJoCo clamps) and activations, simjax's generalized actuator forces equal ``qfrc_actuator``,
its actuator forces ``actuator_force``, its activation rates ``act_dot``, and its
accelerations ``qacc``, to 1e-9 relative, on eleven dm_control and MJX models (motors,
``general`` affine gains and biases with force and control ranges, position servos,
integrator and filter activation dynamics). Actuators simjax does not model (on tendons or
ball joints, muscles) are zeroed in the oracle and named in the load warning. A 2 s rollout
under a sinusoidal control equals MuJoCo's RK4 rollout at the same step.
"""

import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np
import pytest
from data_fetch import fetch
from test_io_mjcf import Case

import simjax as sj
from simjax.io._loaded import ModelFileError
from simjax.io._mjcf import load_mjcf

RTOL = 1e-9
SUITE = "dm_control/suite/"
MJX = "mujoco/mjx/test_data/"
#: name -> (distribution, version, member)
MODELS = {
    "cartpole": ("dm_control", "1.0.50", SUITE + "cartpole.xml"),
    "acrobot": ("dm_control", "1.0.50", SUITE + "acrobot.xml"),
    "cheetah": ("dm_control", "1.0.50", SUITE + "cheetah.xml"),
    "walker": ("dm_control", "1.0.50", SUITE + "walker.xml"),
    "hopper": ("dm_control", "1.0.50", SUITE + "hopper.xml"),
    "humanoid": ("dm_control", "1.0.50", SUITE + "humanoid.xml"),
    "reacher": ("dm_control", "1.0.50", SUITE + "reacher.xml"),
    "fish": ("dm_control", "1.0.50", SUITE + "fish.xml"),
    "pendula": ("mujoco-mjx", "3.17.0", MJX + "pendula.xml"),
    "general_dyntype": ("mujoco-mjx", "3.17.0", MJX + "actuator/general_dyntype.xml"),
    "barkour": ("mujoco-mjx", "3.17.0", MJX + "barkour_v0/assets/barkour_v0_mjx.xml"),
}
COMMON = [f"{SUITE}common/{f}.xml" for f in ("materials", "skybox", "visual")]


@pytest.fixture(scope="module")
def mujoco():
    return pytest.importorskip("mujoco")


BARKOUR_ASSETS = [
    f"{MJX}barkour_v0/assets/{f}"
    for f in (
        "hfield_240_280.png head.stl powercable.stl handle.stl head_mount.stl body.stl abduction.stl "
        "upper_right_1.stl upper_right_2.stl upper_right_3.stl upper_left_1.stl upper_left_2.stl "
        "upper_left_3.stl lower_leg_1to1.stl foot.stl"
    ).split()
]


def _path(name):
    """The model file (with what MuJoCo opens beside it), fetched once."""
    dist, version, member = MODELS[name]
    extra = COMMON if dist == "dm_control" else BARKOUR_ASSETS if name == "barkour" else []
    return fetch(dist, version, [member, *extra])[member]


def _oracle(mujoco, path, lm):
    """MuJoCo's model with contacts and constraints off, and the actuators simjax leaves out
    silenced (their gains and biases zeroed)."""
    m = mujoco.MjModel.from_xml_path(str(path))
    off = mujoco.mjtDisableBit
    m.opt.disableflags |= off.mjDSBL_CONSTRAINT | off.mjDSBL_CONTACT
    ball_or_free = (m.jnt_type == mujoco.mjtJoint.mjJNT_BALL) | (m.jnt_type == mujoco.mjtJoint.mjJNT_FREE)
    m.jnt_stiffness[ball_or_free] = 0.0
    m.tendon_armature[:] = 0.0  # tendon armature (listed as ignored); springs and dampers on
    m.body_gravcomp[:] = 0.0
    m.opt.density = m.opt.viscosity = 0.0  # fluid forces (listed as ignored)
    ids = []
    for i in range(m.nu):
        name = m.actuator(i).name or f"actuator#{i}"
        if name in lm.actuators:
            ids.append(i)
        else:
            m.actuator_gainprm[i] = 0.0
            m.actuator_biasprm[i] = 0.0
    assert [m.actuator(i).name or f"actuator#{i}" for i in ids] == lm.control_names
    return m, mujoco.MjData(m), np.array(ids, dtype=int)


def _quiet(path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_mjcf(path, **kw)


def _check(actual, desired, what, rtol=RTOL):
    actual, desired = np.asarray(actual, float), np.asarray(desired, float)
    scale = max(1.0, float(np.abs(desired).max(initial=0.0)))
    np.testing.assert_allclose(actual, desired, rtol=0, atol=rtol * scale, err_msg=what)


@pytest.mark.oracle
@pytest.mark.parametrize("name", list(MODELS))
def test_actuator_forces_activations_and_accelerations_equal_mujoco(name, mujoco):
    path = _path(name)
    case = Case(name, path, mujoco)
    lm = case.lm
    m, d, ids = _oracle(mujoco, path, lm)
    system = lm.system
    nc = len(ids)
    assert nc == system.get_num_controls() > 0
    s0 = case.state
    for con in lm.constraints.values():
        s0 = con.disable(s0)
    acts = [lm.actuators[n] for n in lm.control_names]

    @jax.jit
    def f(q, u, z, c):
        s = system.set_controls(s0.with_q(q).with_u(u).with_z(z), c)
        s = system.realize(s, sj.Stage.ACCELERATION)
        return (
            s.dynamics_cache.mobility_forces,
            jnp.stack([a.get_actuation(s) for a in acts]),
            s.zdot,
            s.udot,
        )

    rng = np.random.default_rng(7)
    for _ in range(3):
        q, u = case.random_state(rng)
        qpos, T = case.to_mujoco(q)
        # controls past their ranges (clamped by both), activations inside theirs
        lo = np.where(m.actuator_ctrllimited[ids], m.actuator_ctrlrange[ids, 0], -1.0)
        hi = np.where(m.actuator_ctrllimited[ids], m.actuator_ctrlrange[ids, 1], 1.0)
        c = rng.uniform(lo - 0.3 * (hi - lo), hi + 0.3 * (hi - lo))
        d.qpos[:], d.qvel[:] = qpos, T @ u
        d.ctrl[:] = 0.0
        d.ctrl[ids] = c
        d.act[:] = rng.uniform(-0.5, 0.5, m.na)
        for i in ids:  # activations within their range (MuJoCo keeps them there)
            a = m.actuator_actadr[i]
            if a >= 0 and m.actuator_actlimited[i]:
                d.act[a] = np.clip(d.act[a], *m.actuator_actrange[i])
        z = np.array([d.act[m.actuator_actadr[i]] for i in ids if m.actuator_actadr[i] >= 0])
        mujoco.mj_forward(m, d)
        tau, force, zdot, udot = f(q, u, z, c)
        # mobility forces = passive (dampers, springs) + actuators; MuJoCo's split
        _check(tau, T.T @ (d.qfrc_passive + d.qfrc_actuator), f"{name}: generalized forces")
        _check(force, d.actuator_force[ids], f"{name}: actuator forces")
        _check(
            zdot,
            [d.act_dot[m.actuator_actadr[i]] for i in ids if m.actuator_actadr[i] >= 0],
            f"{name}: act_dot",
        )
        if name == "general_dyntype":
            continue  # its 4th slide's axis (1 1 0) lies in the first two's plane: M is singular
        _check(
            udot, np.linalg.solve(T, d.qacc) if T.shape[0] == T.shape[1] else T.T @ d.qacc, f"{name}: qacc"
        )


ARM = """<mujoco model="arm">
  <option timestep="0.002" integrator="RK4"/>
  <default><joint damping="0.05" armature="0.02"/><geom type="capsule" size="0.03"/></default>
  <worldbody>
    <body name="upper" pos="0 0 1">
      <joint name="shoulder" axis="0 1 0" range="-150 150"/>
      <geom fromto="0 0 0 0.3 0 0"/>
      <body name="fore" pos="0.3 0 0">
        <joint name="elbow" axis="0 1 0" stiffness="0.5" springref="10"/>
        <geom fromto="0 0 0 0.25 0 0"/>
        <body name="hand" pos="0.25 0 0">
          <joint name="wrist" type="slide" axis="1 0 0"/>
          <geom type="sphere" size="0.04"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <general name="shoulder" joint="shoulder" dyntype="filter" dynprm="0.05" gainprm="4" ctrlrange="-1 1"/>
    <general name="elbow" joint="elbow" dyntype="filter" dynprm="0.02" gainprm="3" biastype="affine"
             biasprm="0 -3 -0.2" forcerange="-1 1"/>
    <general name="wrist" joint="wrist" dyntype="integrator" gainprm="2" biastype="affine" biasprm="0 -20 -1"
             gear="0.5"/>
  </actuator>
</mujoco>
"""


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["cheetah", "arm"])
def test_rollout_under_a_sinusoidal_control_equals_mujoco_rk4(name, mujoco, tmp_path):
    """2 s at MuJoCo's step, control ``sin(2 pi f t + phase)`` per actuator held over each step
    (MuJoCo sets ``ctrl`` before ``mj_step``): simjax's ``rk4`` with a policy equals MuJoCo's
    RK4 (contacts off), activations included. (``filterexact``, e.g. a ``position`` servo's
    ``timeconst``, is the filter's differential equation in simjax; MuJoCo's RK4 applies its
    exact-filter update to the RK-averaged rate instead, a different discretisation: the arm's
    positions then differ by 2e-3 after 2 s, so the arm uses ``filter``.)"""
    if name == "arm":
        path = tmp_path / "arm.xml"
        path.write_text(ARM)
    else:
        path = _path(name)
    lm = _quiet(path, limits=False)  # MuJoCo's limits are constraints, off in the oracle
    case = Case(name, path, mujoco)
    m, d, ids = _oracle(mujoco, path, lm)
    m.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    dt, T_end = float(m.opt.timestep), 2.0
    n = round(T_end / dt)
    nc = len(ids)
    freq, phase = np.linspace(0.5, 1.5, nc), np.linspace(0.0, 2.0, nc)

    def ctrl(t):
        return np.sin(2 * np.pi * freq * t + phase)

    rng = np.random.default_rng(3)
    q0, u0 = case.random_state(rng)
    u0 *= 0.3
    qpos, T = case.to_mujoco(q0)
    d.qpos[:], d.qvel[:] = qpos, T @ u0
    for k in range(n):
        d.ctrl[ids] = ctrl(k * dt)
        mujoco.mj_step(m, d)
    s0 = lm.default_state.with_q(q0).with_u(u0)
    policy = lambda t, s: jnp.sin(2 * jnp.pi * freq * t + phase)  # noqa: E731
    traj = sj.simulate(lm.system, s0, T_end, dt=dt, integrator="rk4", controls=policy, t0=0.0)
    qpos1, T1 = case.to_mujoco(np.asarray(traj.q[-1]))
    _check(qpos1, d.qpos, f"{name}: qpos after {T_end} s", rtol=1e-8)
    _check(T1 @ np.asarray(traj.u[-1]), d.qvel, f"{name}: qvel after {T_end} s", rtol=1e-8)
    act = [d.act[m.actuator_actadr[i]] for i in ids if m.actuator_actadr[i] >= 0]
    _check(traj.z[-1], act, f"{name}: activations after {T_end} s", rtol=1e-8)
    # the same run from a sequence, one row per step
    U = np.stack([ctrl(k * dt) for k in range(n)])
    traj2 = sj.simulate(lm.system, s0, T_end, dt=dt, integrator="rk4", controls=U, t0=0.0)
    np.testing.assert_allclose(traj2.q[-1], traj.q[-1], rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- the element


def _pendulum(**kw):
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    sj.Force.UniformGravity(forces, matter, [0, -9.81, 0])
    body = sj.Body(sj.MassProperties(1.0, [1.0, 0, 0], np.eye(3) * 2.0))
    pin = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(), body, sj.Transform())
    pin.set_default_armature(0.2)
    a = sj.Force.CoordinateActuator(forces, pin, 0, name="servo", **kw)
    b = sj.Force.CoordinateActuator(forces, pin, 0, dynamics="filter", time_constant=0.1, name="lag")
    return system, matter, a, b


def test_actuator_force_clamps_activation_and_armature():
    system, matter, a, b = _pendulum(gear=2.0, gain=(3.0, 0, 0), bias=(0, -1, -0.5), control_range=(-1, 1))
    assert [x.name for x in system.get_actuators()] == ["servo", "lag"] and system.get_num_controls() == 2
    s = system.realize_topology()
    assert s.z.shape == (1,)  # the filter's activation
    s = system.set_controls(s, [2.0, 0.5]).with_q([0.3]).with_u([0.1]).with_z([0.2])
    s = system.realize(s, sj.Stage.ACCELERATION)
    # control 2 clamped to 1; l = 2 * 0.3, v = 2 * 0.1: s = 3 - 0.6 - 0.5 * 0.2
    assert float(a.get_actuation(s)) == pytest.approx(2.3, abs=1e-15)
    assert float(b.get_actuation(s)) == pytest.approx(0.2, abs=1e-15)  # the activation
    assert float(s.zdot[0]) == pytest.approx((0.5 - 0.2) / 0.1, abs=1e-12)
    np.testing.assert_allclose(matter.calc_mass_matrix(s), [[2.2]], atol=1e-15)  # 2 + armature
    assert float(system.calc_kinetic_energy(s)) == pytest.approx(0.5 * 2.2 * 0.01, abs=1e-15)
    tau = 2.0 * 2.3 + 0.2
    g = -9.81 * np.cos(0.3)
    assert float(s.udot[0]) == pytest.approx((tau + g) / 2.2, abs=1e-12)
    # inverse dynamics includes the armature
    r = matter.calc_residual_force(s, known_udot=[1.0])
    s0 = system.realize(matter.set_armature(s, jnp.zeros(1)), sj.Stage.VELOCITY)
    r0 = matter.calc_residual_force(s0, known_udot=[1.0])
    assert float(r[0] - r0[0]) == pytest.approx(0.2, abs=1e-14)
    # a disabled actuator adds nothing
    s2 = system.realize(a.disable(s), sj.Stage.DYNAMICS)
    assert float(s2.dynamics_cache.mobility_forces[0]) == pytest.approx(0.2, abs=1e-15)


def test_controls_vmap_and_gradients_match_finite_differences():
    system, _, _, _ = _pendulum(gain=(3.0, 0, 0))
    s0 = system.realize_topology().with_q([0.3])

    def final_angle(U):
        return sj.simulate(system, s0, 0.2, dt=0.01, controls=U, t0=0.0).q[-1, 0]

    U = jnp.asarray(np.random.default_rng(0).normal(size=(20, 2)))
    g = jax.grad(final_angle)(U)
    for k, j in [(0, 0), (7, 1), (19, 0)]:
        e = jnp.zeros_like(U).at[k, j].set(1e-6)
        fd = (final_angle(U + e) - final_angle(U - e)) / 2e-6
        assert float(g[k, j]) == pytest.approx(float(fd), rel=1e-6, abs=1e-10)
    # a batch of control sequences in one call equals one by one
    batch = jnp.stack([U, 2 * U, -U])
    out = jax.vmap(final_angle)(batch)
    np.testing.assert_allclose(out, [final_angle(x) for x in batch], rtol=0, atol=1e-13)
    # held controls, a sequence of equal rows and a constant policy are the same run
    c = jnp.array([0.3, -0.2])
    runs = [
        sj.simulate(system, s0, 0.2, dt=0.01, controls=c, t0=0.0),
        sj.simulate(system, s0, 0.2, dt=0.01, controls=jnp.tile(c, (20, 1)), t0=0.0),
        sj.simulate(system, s0, 0.2, dt=0.01, controls=lambda t, s: c, t0=0.0),
        sj.simulate(system, system.set_controls(s0, c), 0.2, dt=0.01, t0=0.0),
    ]
    for r in runs[1:]:
        np.testing.assert_allclose(r.q[-1], runs[0].q[-1], rtol=0, atol=1e-14)
    # a feedback policy through an adaptive integrator, differentiated
    policy = lambda t, s: jnp.stack([-2.0 * s.q[0] - 0.5 * s.u[0], 0.0 * t])  # noqa: E731
    r = sj.simulate(system, s0, 1.0, integrator="tsit5", controls=policy, accuracy=1e-8, t0=0.0)
    np.testing.assert_allclose(system.get_controls(r.final_state)[0], -2.0 * r.q[-1, 0] - 0.5 * r.u[-1, 0])


def test_bad_controls_and_actuators_say_what_to_fix():
    system, _, _, _ = _pendulum()
    s = system.realize_topology()
    with pytest.raises(ValueError, match=r"shape \(3,\), but this System has 2 actuators \(servo, lag\)"):
        system.set_controls(s, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"sequence has 5 rows, but this run takes 20 steps"):
        sj.simulate(system, s, 0.2, dt=0.01, controls=jnp.zeros((5, 2)))
    with pytest.raises(ValueError, match="needs a fixed-step integrator"):
        sj.simulate(system, s, 0.2, integrator="tsit5", controls=jnp.zeros((5, 2)))
    with pytest.raises(ValueError, match=r"controls function returned shape \(3,\).*length 2"):
        sj.simulate(system, s, 0.2, dt=0.01, controls=lambda t, st: jnp.zeros(3))
    with pytest.raises(ValueError, match="control_range must be \\(low, high\\)"):
        _pendulum(control_range=(1.0, -1.0))
    with pytest.raises(ValueError, match="'servo': a filter needs time_constant > 0"):
        _pendulum(dynamics="filter", time_constant=0.0)
    with pytest.raises(ValueError, match="dynamics must be one of"):
        _pendulum(dynamics="hill")
    with pytest.raises(ValueError, match="armature must be finite and >= 0"):
        sj.MobilizedBody.Pin(
            sj.SimbodyMatterSubsystem(sj.MultibodySystem()).Ground(), sj.Transform(),
            sj.Body(sj.MassProperties(1.0, [0, 0, 0], np.eye(3))), sj.Transform(),
        ).set_default_armature(-1.0)  # fmt: skip


def _mjcf(tmp_path, actuators, extra=""):
    text = f"""<mujoco><worldbody><body name="b"><joint name="h" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.02"/>
      <body name="c" pos="0.3 0 0"><joint name="ball" type="ball"/><geom type="sphere" size="0.05"/>
      <site name="s"/></body></body></worldbody>
      {extra}<actuator>{actuators}</actuator></mujoco>"""
    p = tmp_path / "act.xml"
    p.write_text(text)
    return p


def test_mjcf_actuators_left_out_are_named_and_bad_ones_refused(tmp_path):
    p = _mjcf(
        tmp_path,
        '<motor name="m" joint="h"/><motor name="on_ball" joint="ball"/><motor name="on_site" site="s"/>'
        '<muscle name="mu" joint="h"/><position name="dr" joint="h" kp="5" dampratio="1"/>',
    )
    with pytest.warns(UserWarning) as rec:
        lm = load_mjcf(p)
    msg = str(rec[0].message)
    for part in (
        "on_ball (on the ball joint 'ball'",
        "on_site (transmission through a site",
        "mu (a muscle without lengthrange",
    ):
        assert part in msg
    assert "dr (dampratio (give kv instead" in msg
    assert lm.control_names == ["m"]
    with pytest.raises(ModelFileError, match=r"actuator 'x': unknown joint 'nope'"):
        load_mjcf(_mjcf(tmp_path, '<motor name="x" joint="nope"/>'))
    with pytest.raises(ModelFileError, match=r"actuator 'x': ctrlrange\[0\] must be smaller"):
        load_mjcf(_mjcf(tmp_path, '<motor name="x" joint="h" ctrllimited="true" ctrlrange="1 -1"/>'))
    with pytest.raises(ModelFileError, match="unknown default class 'servo'"):
        load_mjcf(_mjcf(tmp_path, '<motor class="servo" joint="h"/>'))


@pytest.mark.oracle
def test_mjcf_actuator_defaults_compile_as_mujoco(tmp_path, mujoco):
    """Shortcuts over a default class: a position servo's kp and kv default to its class's,
    a motor resets them, a velocity servo's kv defaults to 1, a general keeps the class's."""
    p = _mjcf(
        tmp_path,
        '<position class="servo" joint="h"/><motor class="servo" joint="h"/>'
        '<general class="servo" joint="h"/>'
        '<velocity class="servo" joint="h"/><position class="servo" joint="h" kp="3"/>'
        '<intvelocity class="servo" joint="h" actrange="-1 1"/><damper joint="h" kv="2" ctrlrange="0 1"/>',
        '<default><default class="servo"><position kp="7" kv="0.5" ctrlrange="-1 1"/></default></default>',
    )
    lm = _quiet(p)
    m = mujoco.MjModel.from_xml_path(str(p))
    s = lm.default_state
    assert len(lm.actuators) == m.nu
    for i, act in enumerate(lm.actuators.values()):
        affine = m.actuator_gaintype[i] == mujoco.mjtGain.mjGAIN_AFFINE
        gain = m.actuator_gainprm[i, :3] if affine else [m.actuator_gainprm[i, 0], 0, 0]
        np.testing.assert_array_equal(act._get(s, "gain"), gain, err_msg=str(i))
        np.testing.assert_array_equal(act._get(s, "bias"), m.actuator_biasprm[i, :3], err_msg=str(i))
        np.testing.assert_array_equal(act._get(s, "control_range"), m.actuator_ctrlrange[i], err_msg=str(i))


# ----------------------------------------------------------------------------- OpenSim


@pytest.mark.oracle
@pytest.mark.parametrize("key", ["MoBL_ARMS", "gait14dof22musc", "GPK_generic"])
def test_opensim_actuators_and_limit_forces_equal_opensim(key, tmp_path):
    """``CoordinateActuator`` (optimal force x control) and ``CoordinateLimitForce`` (soft
    stops in per-degree units, a quintic transition, damping past the limits) from real
    OpenSim models against OpenSim 4 with only those forces in its ForceSet: at random q
    (half of them past the limits), u and controls, simjax's generalized forces equal the
    sum of OpenSim's ``getRecordValues`` mapped to the coordinates, its udot OpenSim's, and
    the potential energy OpenSim's."""
    osim = pytest.importorskip("opensim")
    from test_io_osim import model_path

    om = osim.Model(model_path(key))
    fs = om.updForceSet()
    for i in reversed(range(fs.getSize())):
        if fs.get(i).getConcreteClassName() not in ("CoordinateActuator", "CoordinateLimitForce"):
            fs.remove(i)
    # both sides read the file without the other forces (GPK_generic's 100 Millard muscles on
    # wrapped paths would cost minutes of compilation here)
    path = str(tmp_path / f"{key}_actuators.osim")
    om.printToXML(path)
    om = osim.Model(path)
    fs = om.updForceSet()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = sj.io.load_osim(path)
    kept = [fs.get(i) for i in range(fs.getSize())]
    ours_kinds = ("CoordinateActuator", "CoordinateLimitForce")
    assert len(kept) == sum(type(e).__name__ in ours_kinds for e in m.forces._elements)
    s = om.initSystem()
    cs = om.getCoordinateSet()
    coords = [cs.get(i) for i in range(cs.getSize())]
    names = [c.getName() for c in coords]
    nu = s.getNU()
    ou = []
    for c in coords:
        s.setU(osim.Vector(nu, 0.0))
        c.setSpeedValue(s, 1.0)
        ou.append(int(np.argmax(np.abs([s.getU().get(i) for i in range(nu)]))))
    s.setU(osim.Vector(nu, 0.0))
    su = m.coordinate_u_indices(m.default_state, names)
    n_act = om.getActuators().getSize()
    n_mus = len(m.muscles)  # left out of OpenSim's ForceSet above; their controls come last
    assert n_act + n_mus == len(m.actuators)
    cons = [om.getConstraintSet().get(i) for i in range(om.getConstraintSet().getSize())]

    base = m.default_state
    for name, con in m.constraints.items():
        if not name.endswith("_locked"):
            base = con.disable(base)
    for force in [*m.contact_forces.values(), *m.muscles.values()]:  # left out of OpenSim's above
        base = force.disable(base)
    system = m.system
    limit_forces = [e for e in m.forces._elements if isinstance(e, sj.Force.CoordinateLimitForce)]
    osim_limits = [osim.CoordinateLimitForce.safeDownCast(f) for f in kept]
    osim_limits = [f for f in osim_limits if f is not None]
    assert len(osim_limits) == len(limit_forces)

    @jax.jit
    def ours(q_vals, u_vals, ctrl):
        st = m.set_coordinate_values(base, dict(zip(names, q_vals)))
        st = m.set_coordinate_speeds(st, dict(zip(names, u_vals)))
        st = system.realize(
            system.set_controls(st, jnp.concatenate([ctrl, jnp.zeros(n_mus)])), sj.Stage.ACCELERATION
        )
        return st.udot, sum(e.calc_potential_energy(st) for e in limit_forces)

    rng = np.random.default_rng(5)
    for trial in range(4):
        for c in coords:
            if c.getLocked(s):
                c.setSpeedValue(s, 0.0)
                continue
            lo, hi = max(c.getRangeMin(), -2.5), min(c.getRangeMax(), 2.5)
            pad = 0.3 * (hi - lo) if trial % 2 else 0.0  # odd trials: past the limits
            c.setValue(s, float(rng.uniform(lo - pad, hi + pad)), False)
            c.setSpeedValue(s, float(rng.normal()))
        for c in cons:
            c.setIsEnforced(s, False)
        ctrl = rng.normal(size=n_act)
        om.realizeVelocity(s)
        cv = om.getControls(s)
        for i in range(n_act):
            cv.set(i, float(ctrl[i]))
        om.setControls(s, cv)
        om.realizeAcceleration(s)
        q_vals = np.array([c.getValue(s) for c in coords])
        u_vals = np.array([c.getSpeedValue(s) for c in coords])
        udot, pe = ours(q_vals, u_vals, ctrl)
        ud = np.array([s.getUDot().get(i) for i in ou])
        _check(np.asarray(udot)[su], ud, f"{key}: udot", rtol=1e-8)
        _check(pe, sum(f.computePotentialEnergy(s) for f in osim_limits), f"{key}: limit energy", rtol=1e-12)
