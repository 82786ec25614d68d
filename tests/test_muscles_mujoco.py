"""MuJoCo's muscle actuators in ``load_mjcf`` against MuJoCo 4.0.1.

Models: MJX's ``arm21`` (a muscle with ``force`` and ``lengthrange`` on a spatial tendon
of constant length: compiled parameters only) and ``arm26`` (two hinges, six
``<muscle>``s on spatial tendons wrapping two cylinders; MuJoCo 4.0.1 cannot compile the
file as shipped, its length-range simulation does not converge, so both sides read it
with each muscle's ``lengthrange`` set to its tendon's length range over the joints'
ranges, found with MuJoCo on a grid) and a model
written here: muscles on hinge and slide joints (gear, the joint's range as length range
through ``<compiler><lengthrange uselimit>``, a default class with ``timeconst``, ``lmin``,
``lmax``, ``tausmooth`` on the element), on a fixed and a spatial tendon (``forcerange``:
clamped in 13 of the 48 states), ``<general>`` with muscle gain/bias/dynamics of its own
parameters (``biasprm`` unlike ``gainprm``), a muscle gain with an affine bias and a
filter, and a fixed gain with muscle activation dynamics.

Checked: the compiled ``actuator_lengthrange``, ``actuator_acc0`` (``|M^-1 moment|`` at
qpos0), ``gainprm``, ``biasprm`` and ``dynprm`` (measured: acc0 to 2e-15 relative, the rest
exactly); at random states (joints in and past their ranges, speeds, activations in
[-0.1, 1.1], controls in [-0.2, 1.2]) ``actuator_force``, ``act_dot``, ``qfrc_actuator``
and ``qacc`` with constraints off (measured <= 1.1e-14 relative, bounded at 1e-9); a 0.5 s
rollout of arm26 with random controls, ``simulate(..., integrator="euler")`` against
``mj_step`` (Euler), joint damping off on both sides, joint limits as MuJoCo's soft rows
(``contact=True``): qpos and act within 9e-16 (measured over 2 s outside the test, the
elbow pressed on its limit from 0.3 s); the derivatives of a muscle's force with respect
to its activation, the joint angles and speeds against central differences (7e-11). Bad
input (MuJoCo's compiler checks, and a muscle whose length range MuJoCo would find by
simulation) is refused or named.
"""

import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np
import pytest
from data_fetch import fetch

import simjax as sj
from simjax.io._loaded import ModelFileError
from simjax.io._mjcf import load_mjcf

ARM26 = "mujoco/mjx/test_data/actuator/arm26.xml"
ARM21 = "mujoco/mjx/test_data/actuator/arm21.xml"
ERR: dict[str, float] = {}

SYNTH = """<mujoco model="muscles">
  <compiler angle="radian"><lengthrange uselimit="true"/></compiler>
  <option timestep="0.002" integrator="Euler"/>
  <default>
    <muscle ctrllimited="true" ctrlrange="0 1"/>
    <default class="quick"><muscle timeconst="0.02 0.06" lmin="0.4" lmax="1.7"/></default>
  </default>
  <worldbody>
    <site name="o" pos="-0.1 0 1.1"/>
    <body name="upper" pos="0 0 1">
      <joint name="shoulder" axis="0 1 0" range="-1.5 1.2" armature="0.01"/>
      <geom type="capsule" fromto="0 0 0 0.4 0 0" size="0.04"/>
      <site name="a" pos="0.1 0 0.05"/>
      <body name="lower" pos="0.4 0 0">
        <joint name="elbow" axis="0 1 0" damping="0.2"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
        <site name="b" pos="0.15 0 0.03"/>
        <body name="slider" pos="0.3 0 0">
          <joint name="slide" type="slide" axis="1 0 0" range="-0.1 0.1"/>
          <geom type="box" size="0.03 0.03 0.03"/>
        </body>
      </body>
    </body>
  </worldbody>
  <tendon>
    <fixed name="fx" range="-1 1.5">
      <joint joint="shoulder" coef="0.5"/><joint joint="elbow" coef="-0.3"/>
    </fixed>
    <spatial name="sp"><site site="o"/><site site="a"/><site site="b"/></spatial>
  </tendon>
  <actuator>
    <muscle name="m_shoulder" joint="shoulder" gear="0.3"/>
    <muscle name="m_elbow" joint="elbow" lengthrange="-1 1" force="50" class="quick"
            tausmooth="0.2"/>
    <muscle name="m_slide" joint="slide" gear="2" scale="300" range="0.6 1.1" vmax="2" fpmax="1.5"
            fvmax="1.4"/>
    <general name="g_fx" tendon="fx" dyntype="muscle" gaintype="muscle" biastype="muscle"
             dynprm="0.02 0.05 0.1"
             gainprm="0.7 1.1 80 200 0.5 1.6 1.5 1.3 1.2" biasprm="0.7 1.1 80 200 0.5 1.6 1.5 2.0 1.2"/>
    <muscle name="m_sp" tendon="sp" lengthrange="0.3 0.9" timeconst="0.015 0.05" forcerange="-150 0"/>
    <general name="g_mix" joint="elbow" gaintype="muscle" biastype="affine" biasprm="0 -1 -0.1"
             dyntype="filter"
             dynprm="0.05" gainprm="0.75 1.05 20 200 0.5 1.6 1.5 1.3 1.2" lengthrange="-2 2"/>
    <general name="g_dyn" joint="shoulder" dyntype="muscle" dynprm="0.02 0.05" gaintype="fixed"
             biastype="none" gainprm="30"/>
  </actuator>
</mujoco>
"""


@pytest.fixture(scope="module")
def mujoco():
    return pytest.importorskip("mujoco")


def _arm26_xml(mujoco) -> str:
    """arm26 with each muscle's ``lengthrange`` its tendon's length range over the joints'
    ranges (MuJoCo's lengths on a 41 x 41 grid)."""
    xml = fetch("mujoco-mjx", "3.17.0", [ARM26])[ARM26].read_text()
    grid = xml.replace("<option ", '<compiler><lengthrange mode="none"/></compiler>\n  <option ', 1)
    m = mujoco.MjModel.from_xml_string(grid)
    d = mujoco.MjData(m)
    g = np.linspace(0, np.radians(120), 41)
    lengths = []
    for a in g:
        for b in g:
            d.qpos[:] = a, b
            mujoco.mj_fwdPosition(m, d)
            lengths.append(d.ten_length.copy())
    lo, hi = np.min(lengths, 0), np.max(lengths, 0)
    for i in range(m.nu):
        n = m.actuator(i).name
        xml = xml.replace(
            f'<muscle name="{n}" tendon="{n}"/>',
            f'<muscle name="{n}" tendon="{n}" lengthrange="{float(lo[i])!r} {float(hi[i])!r}"/>',
        )
    return xml


class Model:
    """simjax's and MuJoCo's model of one file, and the map between their qpos."""

    def __init__(self, mujoco, xml: str, path, **kw):
        path.write_text(xml)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.lm = load_mjcf(str(path), **kw)
        self.m = mujoco.MjModel.from_xml_path(str(path))
        self.state = self.lm.default_state
        m = self.m
        joints = [m.joint(j).name or f"joint#{j}" for j in range(m.njnt)]
        self.qi = np.array([self.lm.coordinates[j].q_index(self.state) for j in joints])
        self.names = [m.actuator(i).name or f"actuator#{i}" for i in range(m.nu)]
        self.acts = [self.lm.actuators[n] for n in self.names]


@pytest.fixture(scope="module")
def models(mujoco, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("muscles")
    arm21 = fetch("mujoco-mjx", "3.17.0", [ARM21])[ARM21].read_text()
    return {
        "arm21": Model(mujoco, arm21, tmp / "arm21.xml", limits=False),
        "arm26": Model(mujoco, _arm26_xml(mujoco), tmp / "arm26.xml", limits=False),
        "synth": Model(mujoco, SYNTH, tmp / "synth.xml", limits=False),
    }


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["arm21", "arm26", "synth"])
def test_compiled_muscle_parameters_equal_mujoco(models, name):
    """``actuator_lengthrange`` (given, or the joint's / tendon's range with ``uselimit``),
    ``actuator_acc0``, ``gainprm``, ``biasprm``, ``dynprm`` (the ``<muscle>`` shortcut's
    defaults and attributes) as MuJoCo's compiler sets them."""
    c = models[name]
    m = c.m
    assert c.lm.control_names == c.names  # MuJoCo's order; the activations in z, the same order
    z = jnp.arange(1.0, m.na + 1)
    s = c.state.with_z(z)
    acts = [float(a.get_activation(s)) for a, i in zip(c.acts, range(m.nu)) if m.actuator_actadr[i] >= 0]
    np.testing.assert_array_equal(
        acts, [float(z[m.actuator_actadr[i]]) for i in range(m.nu) if m.actuator_actadr[i] >= 0]
    )
    for i, a in enumerate(c.acts):
        v = a._v
        muscle = m.actuator_gaintype[i] == 2 or m.actuator_biastype[i] == 2
        assert a._gain_kind == int(m.actuator_gaintype[i] == 2) and a._bias_kind == int(
            m.actuator_biastype[i] == 2
        )
        if not muscle:
            continue
        np.testing.assert_array_equal(v["length_range"], m.actuator_lengthrange[i])
        np.testing.assert_allclose(v["acc0"], m.actuator_acc0[i], rtol=1e-13, atol=0)
        if a._gain_kind:
            np.testing.assert_array_equal(v["muscle_gain"], m.actuator_gainprm[i, :9])
        if a._bias_kind:
            np.testing.assert_array_equal(v["muscle_bias"], m.actuator_biasprm[i, :9])
        if m.actuator_dyntype[i] == 3:
            np.testing.assert_array_equal(v["muscle_dynamics"], m.actuator_dynprm[i, :3])


def _evaluate(c: Model):
    system, acts, matter = c.lm.system, c.acts, c.lm.matter

    def one(q, u, z, ctrl):
        s = system.set_controls(c.state.with_q(q).with_u(u).with_z(z), ctrl)
        s = system.realize(s, sj.Stage.ACCELERATION)
        force = jnp.stack([a.get_actuation(s) for a in acts])
        J = matter.calc_tendon_jacobians(s) if c.m.ntendon else None
        qfrc = jnp.zeros(u.shape[0])
        for k, a in enumerate(acts):
            gear = a._v["gear"]
            if isinstance(a, sj.Force.TendonActuator):
                qfrc = qfrc + gear * force[k] * J[a.get_tendon().index]
            else:
                qfrc = qfrc.at[c.ui[k]].add(gear * force[k])
        return force, s.zdot, qfrc, s.udot

    return jax.jit(jax.vmap(one))


@pytest.mark.oracle
@pytest.mark.parametrize("name", ["arm26", "synth"])
def test_muscle_forces_rates_and_accelerations_equal_mujoco(models, name, mujoco):
    """48 random states: ``actuator_force``, ``act_dot``, ``qfrc_actuator`` and ``qacc``
    (constraints off) to 1e-9 relative."""
    c = models[name]
    m = c.m
    m.opt.disableflags |= int(mujoco.mjtDisableBit.mjDSBL_CONSTRAINT)
    d = mujoco.MjData(m)
    c.ui = np.array(
        [
            c.lm.coordinates[m.joint(m.actuator_trnid[i, 0]).name].u_index(c.state)
            if m.actuator_trntype[i] == 0
            else 0
            for i in range(m.nu)
        ]
    )
    rng = np.random.default_rng(3)
    n = 48
    lo = np.where(m.jnt_limited, m.jnt_range[:, 0], -2.0)
    hi = np.where(m.jnt_limited, m.jnt_range[:, 1], 2.0)
    span = hi - lo
    lo, hi = lo - 0.1 * span, hi + 0.1 * span
    if name == "arm26":  # side sites outside the wrap cylinders: MuJoCo 4.0.1 wraps differently
        lo, hi = np.full(2, -0.2), np.full(2, 1.8)  # past ~110 degrees (see test_tendons_mujoco)
    qpos = rng.uniform(lo, hi, (n, m.nq))
    qvel = rng.uniform(-3, 3, (n, m.nv))
    act = rng.uniform(-0.1, 1.1, (n, m.na))
    ctrl = rng.uniform(-0.2, 1.2, (n, m.nu))
    ref = {k: [] for k in ("actuator_force", "act_dot", "qfrc_actuator", "qacc")}
    for k in range(n):
        d.qpos[:], d.qvel[:], d.act[:], d.ctrl[:] = qpos[k], qvel[k], act[k], ctrl[k]
        mujoco.mj_forward(m, d)
        for key in ref:
            ref[key].append(getattr(d, key).copy())
    q = np.zeros((n, c.state.q.size))
    q[:, c.qi] = qpos
    u = np.zeros((n, c.state.u.size))
    u[:, c.qi] = qvel  # hinge and slide joints only: u follows q's order
    mine = _evaluate(c)(jnp.asarray(q), jnp.asarray(u), jnp.asarray(act), jnp.asarray(ctrl))
    for key, x in zip(ref, mine):
        x, r = np.asarray(x), np.asarray(ref[key])
        if key in ("qfrc_actuator", "qacc"):
            x = x[:, c.qi]
        err = np.abs(x - r).max() / max(1.0, np.abs(r).max())
        ERR[f"{name} {key}"] = err
        assert err < 1e-9, (key, err)
    assert np.abs(ref["actuator_force"]).max() > 10  # the muscles do pull


@pytest.mark.oracle
def test_arm26_rollout_follows_mujoco_euler(mujoco, tmp_path):
    """0.5 s of arm26 (100 steps of 5 ms) from a random State with constant random controls
    (the elbow reaches its limit, a soft row, at ~0.3 s):
    ``simulate(..., integrator="euler")`` against ``mj_step``, joint damping off on both
    sides (MuJoCo's Euler integrates damping implicitly), joint limits as MuJoCo's soft
    rows (``contact=True``). Measured 9e-16; bounded at 1e-9."""
    path = tmp_path / "arm26.xml"
    path.write_text(_arm26_xml(mujoco))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lm = load_mjcf(str(path), contact=True, passive=False)
    m = mujoco.MjModel.from_xml_path(str(path))
    m.dof_damping[:] = 0.0
    d = mujoco.MjData(m)
    rng = np.random.default_rng(7)
    q0 = rng.uniform(0.3, 1.8, 2)
    ctrl = rng.uniform(0, 1, 6)
    act0 = rng.uniform(0, 1, 6)
    d.qpos[:], d.act[:], d.ctrl[:] = q0, act0, ctrl
    dt, n = m.opt.timestep, 100
    ref, rows = [], 0
    for _ in range(n):
        mujoco.mj_step(m, d)
        ref.append(np.concatenate([d.qpos, d.act]))
        rows = max(rows, d.nefc)
    s0 = lm.system.set_controls(lm.default_state.with_q(jnp.asarray(q0)).with_z(jnp.asarray(act0)), ctrl)
    traj = sj.simulate(lm.system, s0, n * dt, integrator="euler", dt=dt, save_at=n)
    mine = np.concatenate([np.asarray(traj.q), np.asarray(traj.z)], axis=1)
    ref = np.array(ref)
    err = np.abs(mine - ref).max(axis=1)
    ERR["arm26 rollout"] = float(err.max())
    assert np.abs(ref[-1, :2] - q0).max() > 0.05 and rows >= 1  # it moves, onto the elbow's limit
    assert err.max() < 1e-9


@pytest.mark.oracle
def test_muscle_force_gradients_equal_central_differences(models):
    """d(actuator force)/d(activation, joint angles, joint speeds) of arm26's biarticular
    muscle by ``jax.grad`` against central differences."""
    c = models["arm26"]
    system, a = c.lm.system, c.lm.actuators["BF"]
    k = list(c.lm.actuators).index("BF")

    def f(x):
        q, u, act = x[:2], x[2:4], x[4]
        z = jnp.full(6, 0.4).at[k].set(act)
        s = system.realize(c.state.with_q(q).with_u(u).with_z(z), sj.Stage.VELOCITY)
        return a.get_actuation(s)

    x = jnp.array([0.9, 1.1, 0.3, -0.4, 0.6])
    h = 1e-6
    E = h * jnp.eye(5)
    both = jax.jit(lambda x: (jax.grad(f)(x), jax.vmap(f)(jnp.concatenate([x[None] + E, x[None] - E]))))
    g, fs = (np.asarray(v) for v in both(x))
    fd = (fs[:5] - fs[5:]) / (2 * h)
    ERR["arm26 BF gradient vs central differences"] = float(np.abs(g - fd).max() / np.abs(fd).max())
    assert np.abs(g).min() > 0  # each input moves it
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6 * np.abs(fd).max())


BAD = """<mujoco><compiler angle="radian"/><worldbody><body><joint name="j" range="-1 1"/>
<geom type="sphere" size="0.1"/></body></worldbody><actuator>{}</actuator></mujoco>"""


@pytest.mark.parametrize(
    "actuator, match",
    [
        ('<muscle name="bad" joint="j" lengthrange="-1 1" lmin="1.1"/>', "'bad'.*lmin<1<lmax"),
        ('<muscle name="bad" joint="j" lengthrange="-1 1" lmax="0.9"/>', "'bad'.*lmin<1<lmax"),
        ('<muscle name="bad" joint="j" lengthrange="-1 1" vmax="0"/>', "'bad'.*positive scale, vmax"),
        ('<muscle name="bad" joint="j" lengthrange="-1 1" range="1 0.5"/>', r"'bad'.*range\[0\]<range\[1\]"),
        (
            '<muscle name="bad" joint="j" lengthrange="-1 1" tausmooth="-1"/>',
            "bad.*tausmooth cannot be negative",
        ),
        (
            '<general name="bad" joint="j" gaintype="muscle" gainprm="0.75 1.05 1 0 0.5 1.6 1.5 1.3 1.2" '
            'lengthrange="-1 1"/>',
            "'bad'.*positive scale",
        ),
    ],
)
def test_bad_muscles_are_refused(tmp_path, actuator, match):
    """MuJoCo's compiler's muscle checks, naming the actuator."""
    p = tmp_path / "bad.xml"
    p.write_text(BAD.format(actuator))
    with pytest.raises(ModelFileError, match=match):
        load_mjcf(str(p))


def test_muscle_without_length_range_is_named(tmp_path):
    """A muscle whose length range MuJoCo finds by simulation (no ``lengthrange``, no
    ``uselimit``) is left out with a warning naming it and the fix; with ``uselimit`` on
    the limited joint it is modelled, its length range the joint's."""
    p = tmp_path / "m.xml"
    p.write_text(BAD.format('<muscle name="biceps" joint="j"/>'))
    with pytest.warns(UserWarning, match=r"biceps \(a muscle without lengthrange.*give lengthrange"):
        lm = load_mjcf(str(p))
    assert "biceps" not in lm.actuators
    p.write_text(BAD.format('<muscle name="biceps" joint="j"/>').replace(
        '<compiler angle="radian"/>', '<compiler angle="radian"><lengthrange uselimit="true"/></compiler>'
    ))  # fmt: skip
    lm = load_mjcf(str(p))
    np.testing.assert_array_equal(lm.actuators["biceps"]._v["length_range"], [-1.0, 1.0])
    assert "gain muscle, bias muscle, unlimited, muscle activation]" in lm.summary()


def test_muscle_actuator_api_refuses_bad_parameters(tmp_path):
    """``Force.CoordinateActuator(gain="muscle", ...)`` checks MuJoCo's conditions itself."""
    p = tmp_path / "m.xml"
    p.write_text(BAD.format('<motor name="m" joint="j"/>'))
    lm = load_mjcf(str(p))
    body = lm.joints["j"]
    good = [0.75, 1.05, -1, 200, 0.5, 1.6, 1.5, 1.3, 1.2]
    cases = [
        ({"gain": "hill"}, "gain must be three numbers or 'muscle'"),
        ({"gain": "muscle", "muscle": good[:8]}, "muscle must be nine finite numbers"),
        ({"gain": "muscle", "muscle": [1.1, 1.0, *good[2:]]}, r"range\[0\] < range\[1\]"),
        ({"bias": "muscle", "muscle": [*good[:5], 0.9, *good[6:]]}, "lmin < 1 < lmax"),
        ({"gain": "muscle", "muscle": [*good[:6], 0.0, *good[7:]]}, "vmax, fpmax and fvmax must be > 0"),
        ({"gain": "muscle", "muscle": good, "length_range": (0, 1, 2)}, "length_range must be two"),
        ({"dynamics": "muscle", "muscle_dynamics": (0.01, 0.04, -1)}, "tausmooth >= 0"),
        ({"gain": "muscle", "muscle": good, "acc0": -1.0}, "acc0 must be >= 0"),
    ]
    for kw, match in cases:
        with pytest.raises(ValueError, match=match):
            sj.Force.CoordinateActuator(lm.forces, body, 0, name="x", **kw)


@pytest.mark.oracle
def test_negative_muscle_attributes_are_left_unset_as_mujoco_does(tmp_path, mujoco):
    """MuJoCo reads a negative muscle attribute as not given (its default stays; a negative
    ``force`` is the automatic one): the same parameters, and a note naming them."""
    p = tmp_path / "neg.xml"
    p.write_text(
        BAD.format(
            '<muscle name="n" joint="j" lengthrange="-1 1" timeconst="-0.5 0.03" vmax="-2" force="-3"/>'
        )
    )
    with pytest.warns(
        UserWarning, match=r"actuator 'n': negative muscle timeconst, vmax left at the default"
    ):
        lm = load_mjcf(str(p))
    m = mujoco.MjModel.from_xml_path(str(p))
    v = lm.actuators["n"]._v
    np.testing.assert_array_equal(v["muscle_gain"], m.actuator_gainprm[0, :9])
    np.testing.assert_array_equal(v["muscle_dynamics"], m.actuator_dynprm[0, :3])


def test_report_errors():
    """Prints the measured errors (``pytest -s``)."""
    for k, v in ERR.items():
        print(f"{k}: {v:.2e}")
