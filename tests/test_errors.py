"""Every user error gets a clear message that names the part and the fix."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import pendulum

import simjax as sj

MB = sj.MobilizedBody


def _body():
    return sj.Body.Rigid(sj.MassProperties(1.0, [0, 0, 0], sj.Inertia(0.1)))


def test_unknown_parent_is_refused():
    system_a, matter_a, _, mobods_a = pendulum(2)
    system_b = sj.MultibodySystem()
    matter_b = sj.SimbodyMatterSubsystem(system_b)
    with pytest.raises(TypeError, match="unknown parent"):
        MB.Pin("ground", sj.Transform(), _body(), sj.Transform())
    # a parent from another System's matter subsystem is adopted there, not here
    child = MB.Pin(mobods_a[1], sj.Transform(), _body(), sj.Transform())
    assert child._matter is matter_a and len(matter_b._mobods) == 1
    # a parent that is no longer part of its subsystem
    ghost = MB.Pin(matter_b.Ground(), _body())
    matter_b._mobods.pop()
    with pytest.raises(ValueError, match="unknown parent"):
        MB.Pin(ghost, _body())


def test_body_added_twice_under_one_name_is_refused():
    system, matter, _, _ = pendulum(1)
    MB.Pin(matter.Ground(), _body(), name="thigh")
    with pytest.raises(ValueError, match="'thigh' was already added"):
        MB.Slider(matter.Ground(), _body(), name="thigh")


def test_mobilized_body_passed_as_body_is_refused():
    system, matter, _, mobods = pendulum(1)
    with pytest.raises(TypeError, match=r"body must be a sj.Body"):
        MB.Pin(matter.Ground(), sj.Transform(), mobods[1], sj.Transform())


def test_wrong_q_and_u_lengths():
    system, matter, _, mobods = pendulum(3)
    s = system.realize_topology()
    with pytest.raises(ValueError, match=r"q has shape \(2,\) but this State needs \(3,\)"):
        s.with_q(jnp.zeros(2))
    with pytest.raises(ValueError, match=r"u has shape"):
        s.with_u(jnp.zeros(4))
    with pytest.raises(ValueError, match="body1: q must have length 1"):
        mobods[1].set_q(s, [0.1, 0.2])
    with pytest.raises(ValueError, match="must have shape"):
        s.with_instance("matter", "mass", jnp.ones(7))
    with pytest.raises(KeyError, match="no Instance variable 'masses'"):
        s.with_instance("matter", "masses", jnp.ones(4))


def test_old_state_after_topology_change_is_refused_also_on_a_jit_cache_hit():
    system, matter, _, mobods = pendulum(2)
    old = system.realize_topology()
    system.realize(old, sj.Stage.POSITION)
    MB.Pin(mobods[-1], _body())  # the System changes after realize_topology()
    with pytest.raises(sj.TopologyError, match="call system.realize_topology\\(\\) again"):
        system.realize(old, sj.Stage.POSITION)
    new = system.realize_topology()
    assert new.nq == 3
    system.realize(new, sj.Stage.POSITION)
    # under jit: a compiled function that closed over the old model is not reused on a
    # cache hit with the old State (before: it ran silently); the new State works
    f = jax.jit(lambda st: system.realize(st, sj.Stage.ACCELERATION).udot)
    assert f(new).shape == (3,)
    MB.Pin(system.get_matter_subsystem().get_mobilized_body(3), _body())
    with pytest.raises(sj.TopologyError, match="call system.realize_topology\\(\\) again"):
        f(new)
    assert f(system.realize_topology()).shape == (4,)
    # a State of another System is refused too
    other = pendulum(2)[0]
    with pytest.raises(sj.TopologyError, match="different System"):
        other.realize(new, sj.Stage.POSITION)


def test_reading_acceleration_results_at_position_stage():
    system, matter, _, mobods = pendulum(2)
    s = system.realize(system.realize_topology(), sj.Stage.POSITION)
    with pytest.raises(sj.StageError, match="Stage.ACCELERATION.*only at Stage.POSITION"):
        s.udot
    with pytest.raises(sj.StageError, match="Stage.ACCELERATION"):
        mobods[1].get_body_acceleration(s)
    with pytest.raises(sj.StageError, match="Stage.VELOCITY"):
        matter.calc_kinetic_energy(s)
    # setting u drops a State realized to Acceleration back to Position
    a = system.realize(s, sj.Stage.ACCELERATION)
    assert a.with_u(a.u + 1).stage == sj.Stage.POSITION
    with pytest.raises(sj.StageError):
        a.with_u(a.u + 1).udot


def test_non_positive_definite_inertia():
    with pytest.raises(ValueError, match="triangle inequality"):
        sj.Inertia(1.0, 1.0, 3.0)
    with pytest.raises(ValueError, match="Inertia"):
        sj.Inertia(-1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="NaN"):
        sj.Inertia(np.nan, 1.0, 1.0)
    with pytest.raises(ValueError, match="mass must be finite"):
        sj.MassProperties(-2.0, [0, 0, 0], sj.Inertia(0.1))


def test_bad_constructor_arguments():
    system, matter, _, _ = pendulum(1)
    with pytest.raises(TypeError, match="needs a pitch"):
        MB.Screw(matter.Ground(), sj.Transform(), _body(), sj.Transform())
    with pytest.raises(ValueError, match="radii must be 3 positive"):
        MB.Ellipsoid(matter.Ground(), sj.Transform(), _body(), sj.Transform(), radii=[1, -1, 1])
    with pytest.raises(ValueError, match="nq=4 != nu=3, so give N"):
        MB.Custom(matter.Ground(), _body(), nq=4, nu=3, n_angles=3, X_FM=lambda q: (jnp.eye(3), jnp.zeros(3)))
    with pytest.raises(ValueError, match="R must have shape"):
        sj.Transform(jnp.eye(2))
    with pytest.raises(ValueError, match="highest stage"):
        system.realize(system.realize_topology(), sj.Stage.INFINITY)


def test_changing_mass_in_a_state_scales_inertia_like_simbody():
    """A State stores mass and unit inertia (Simbody's convention), so a new mass can never
    leave a body with a negative inertia about its mass center (a silent wrong answer)."""
    system, matter, _, mobods = pendulum(1)
    s = system.realize_topology()
    b = mobods[1]
    I0 = b.get_inertia_about_body_origin(s)
    s3 = b.set_mass(s, 3.0 * b.get_mass(s))
    np.testing.assert_allclose(b.get_inertia_about_body_origin(s3), 3.0 * I0, rtol=1e-15)
    ke = lambda st: matter.calc_kinetic_energy(system.realize(st.with_u(jnp.ones(1)), sj.Stage.VELOCITY))
    np.testing.assert_allclose(ke(s3), 3.0 * ke(s), rtol=1e-14)
    with pytest.raises(ValueError, match="massless body cannot have inertia"):
        sj.MassProperties(0.0, [0, 0, 0], sj.Inertia(0.1))


def test_a_frame_that_is_not_a_rotation_is_refused_with_the_fix():
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    with pytest.raises(ValueError, match=r"X_PF: R is not a rotation .*sj.Rotation"):
        sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(R=2 * np.eye(3)), _body(), sj.Transform())
    reflect = np.diag([1.0, 1.0, -1.0])  # orthonormal but det -1
    with pytest.raises(ValueError, match="X_BM: R is not a rotation"):
        sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(), _body(), sj.Transform(R=reflect))
    # a rotation with round-off is accepted
    R = np.asarray(sj.Rotation.about_axis(0.3, [1.0, 2.0, 3.0])) + 1e-12
    sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(R=R), _body(), sj.Transform())


def test_gravity_that_is_not_a_3_vector_is_refused():
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    with pytest.raises(ValueError, match=r"finite 3-vector .*got \[0.0, -9.81\]"):
        sj.Force.Gravity(forces, matter, (0.0, -9.81))
    with pytest.raises(ValueError, match="finite 3-vector"):
        sj.Force.Gravity(forces, matter, (0.0, np.nan, 0.0))


def test_a_moving_body_with_nothing_massive_outboard_is_refused():
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    tip = sj.MobilizedBody.Pin(
        matter.Ground(), sj.Transform(), sj.Body.Massless(), sj.Transform(), name="tip"
    )
    with pytest.raises(ValueError, match="'tip' .*neither it nor any body outboard.*mass"):
        system.realize_topology()
    # a massless body is fine when a massive body is outboard of it
    sj.MobilizedBody.Pin(tip, sj.Transform(p=[0.0, -1.0, 0.0]), _body(), sj.Transform())
    state = system.realize_topology()
    assert np.all(np.isfinite(np.asarray(system.realize(state, sj.Stage.ACCELERATION).udot)))


_MJCF = """<mujoco><worldbody><body name="a" pos="0 0 1">
  <joint name="j" type="hinge" axis="0 1 0"/>
  <inertial pos="0.1 0 -0.3" mass="1.5" diaginertia="0.02 0.03 0.04"/>
</body></worldbody></mujoco>"""
_URDF = """<robot name="r"><link name="base"/>
  <link name="a"><inertial><origin xyz="0.1 0 -0.3"/><mass value="1.5"/>
    <inertia ixx="0.02" iyy="0.03" izz="0.04" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <joint name="j" type="continuous"><parent link="base"/><child link="a"/><axis xyz="0 1 0"/></joint>
</robot>"""


@pytest.mark.parametrize("kind", ["mjcf", "urdf"])
def test_loaders_take_a_path_the_xml_text_or_an_open_file(tmp_path, kind):
    """As MuJoCo's ``from_xml_string`` and Pinocchio's ``buildModelFromXML`` do (issue 17;
    XML text was refused before): the same model from all three, with the same M."""
    import io

    load, text = (sj.io.load_mjcf, _MJCF) if kind == "mjcf" else (sj.io.load_urdf, _URDF)
    path = tmp_path / f"m.{'xml' if kind == 'mjcf' else 'urdf'}"
    path.write_text(text)

    def mass_matrix(m):
        s = m.system.realize(m.state.with_q(jnp.full(m.state.nq, 0.3)), sj.Stage.POSITION)
        return np.asarray(m.system.get_matter_subsystem().calc_mass_matrix(s))

    Ms = [
        mass_matrix(load(src))
        for src in (path, str(path), text, io.StringIO(text), io.BytesIO(text.encode()))
    ]
    with open(path) as fh:  # a real file object: its name is used in messages
        Ms.append(mass_matrix(load(fh)))
    for M in Ms[1:]:
        np.testing.assert_array_equal(M, Ms[0])
    # an error in text names it as such, with the line
    with pytest.raises(sj.io.ModelFileError, match=r"<string>:\d+:\d+: malformed XML"):
        load(text.replace("<worldbody>", "<worldbody").replace('<link name="base"/>', '<link name="base">'))
    with pytest.raises(FileNotFoundError, match=r"file not found: 'nothing.xml' \(relative to"):
        load("nothing.xml")
    with pytest.raises(TypeError, match="a file's path, the XML text, or an open file"):
        load(3.5)


def test_osim_from_text_or_an_open_file():
    """An .osim model as text or an open file is the same model as from its path."""
    import pathlib

    path = pathlib.Path(__file__).parent / "data" / "synthetic_joints.osim"
    a = sj.io.load_osim(path)
    with open(path, "rb") as fh:
        b = sj.io.load_osim(fh)
    c = sj.io.load_osim(path.read_text())
    for m in (b, c):
        assert m.state.nq == a.state.nq and list(m.coordinates) == list(a.coordinates)
        np.testing.assert_array_equal(np.asarray(m.state.q), np.asarray(a.state.q))


def test_mjcf_negative_inertial_mass_is_named(tmp_path):
    p = tmp_path / "m.xml"
    p.write_text(
        '<mujoco><worldbody><body><joint type="hinge"/>'
        '<inertial pos="0 0 0" mass="-1" diaginertia="1 1 1"/></body></worldbody></mujoco>'
    )
    with pytest.raises(sj.io.ModelFileError, match=r"m.xml:1: <inertial>: .*mass is negative \(-1\)"):
        sj.io.load_mjcf(p)


def test_simulate_with_a_traced_end_time_or_step_says_to_make_it_static():
    system, _, _, _ = pendulum(1)
    state = system.realize_topology()
    with pytest.raises(TypeError, match=r"t1 is traced.*Python number"):
        jax.jit(lambda t1: sj.simulate(system, state, t1, integrator="rk4", dt=1e-2).final_state.q)(1.0)
    with pytest.raises(TypeError, match=r"dt is traced"):
        jax.jit(lambda dt: sj.simulate(system, state, 1.0, integrator="rk4", dt=dt).final_state.q)(1e-2)


def test_a_vector_valued_witness_is_refused_with_the_fix():
    system, _, _, _ = pendulum(1)
    state = system.realize_topology()

    def both_angles(s):
        return jnp.stack([s.q[0], s.q[0] - 0.1])

    ev = sj.TriggeredEvent(both_angles)
    with pytest.raises(
        ValueError, match=r"TriggeredEvent \(both_angles\): the witness must return one number.*\(2,\)"
    ):
        sj.simulate(system, state, 0.1, integrator="rk4", dt=1e-2, events=[ev])


def test_realize_refuses_non_finite_q_u_and_a_zero_quaternion_naming_the_body():
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    arm = MB.Pin(matter.Ground(), sj.Transform(), _body(), sj.Transform(), name="arm")
    MB.Free(arm, sj.Transform(), _body(), sj.Transform(), name="hand")
    state = system.realize_topology()
    with pytest.raises(ValueError, match=r"q\[0\] \(MobilizedBody 'arm' \(Pin\)\) is nan"):
        system.realize(state.with_q(state.q.at[0].set(jnp.nan)), sj.Stage.POSITION)
    with pytest.raises(ValueError, match=r"u\[6\] \(MobilizedBody 'hand' \(Free\)\) is inf"):
        system.realize(state.with_u(state.u.at[6].set(jnp.inf)), sj.Stage.VELOCITY)
    with pytest.raises(ValueError, match=r"quaternion q\[1:5\] of MobilizedBody 'hand' \(Free\) is zero"):
        system.realize(state.with_q(state.q.at[1:5].set(0.0)), sj.Stage.POSITION)
    # traced States are not checked (and a unit quaternion passes)
    out = jax.jit(lambda s: system.realize(s, sj.Stage.POSITION).q)(state)
    assert np.all(np.isfinite(np.asarray(out)))


def test_an_osim_model_loaded_from_text_can_be_scaled():
    """scale_osim re-reads the model's XML: from a text-loaded model it must not look for
    a file named ``<string>``."""
    import pathlib

    text = (pathlib.Path(__file__).parent / "data" / "synthetic_joints.osim").read_text()
    m = sj.io.load_osim(text)
    scaled = sj.io.scale_osim(m, {})
    assert scaled.state.nq == m.state.nq


# ---------------------------------------------------------------- values no model has (issue 65)
def _readme_pendulum():
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    gravity = sj.Force.UniformGravity(forces, matter, [0, -9.81, 0])
    link1 = MB.Pin(matter.Ground(), sj.Transform(), _body(), sj.Transform(p=[0, 1, 0]))
    link2 = MB.Ball(link1, sj.Transform(), _body(), sj.Transform(p=[0, 1, 0]))
    return system, gravity, link1, link2, system.realize_topology()


def test_nonphysical_values_are_refused_naming_the_part_and_the_fix():
    """Each of these flowed silently into a number (udot of a NaN gravity was NaN; a massless
    terminal Ball, an inertia no body has, a NaN time, complex or boolean q/u were accepted)."""
    system, gravity, link1, link2, s = _readme_pendulum()
    with pytest.raises(ValueError, match=r"with_time: t must be finite"):
        s.with_time(float("nan"))
    with pytest.raises(TypeError, match="q must be real numbers, got complex128"):
        s.with_q(jnp.ones(s.nq, complex))
    with pytest.raises(TypeError, match="u must be real numbers, got bool"):
        s.with_u(jnp.ones(s.nu, bool))
    with pytest.raises(TypeError, match="must be real numbers"):
        s.with_instance("matter", "mass", jnp.ones(3, complex))
    with pytest.raises(ValueError, match=r"forces\.UniformGravity\.g\[0, 1\] is NaN; set a number"):
        system.realize(gravity.set_gravity(s, [0, float("nan"), 0]))
    with pytest.raises(ValueError, match="has mass 0, mobilities and no children.*give it a mass"):
        system.realize(link2.set_mass(s, 0.0))
    with pytest.raises(ValueError, match="negative mass"):  # set_mass refuses it itself; with_instance:
        system.realize(s.with_instance("matter", "mass", s.instance["matter"]["mass"].at[1].set(-1.0)))
    G = s.instance["matter"]["unit_inertia"]
    negative = G.at[1].set(jnp.diag(jnp.array([-0.1, 0.1, 0.1])))
    with pytest.raises(ValueError, match="principal moments .* a negative one"):
        system.realize(s.with_instance("matter", "unit_inertia", negative))
    # the triangle inequality broken: real models carry such inertias (Pose2Sim's toes) and
    # Simbody runs them, so a warning, once per body
    lopsided = G.at[1].set(jnp.diag(jnp.array([1.0, 0.1, 0.1])))
    with pytest.warns(UserWarning, match="break the triangle inequality"):
        system.realize(s.with_instance("matter", "unit_inertia", lopsided))
    with pytest.raises(ValueError, match="not symmetric"):
        system.realize(s.with_instance("matter", "unit_inertia", G.at[1, 0, 1].set(0.05)))
    # what is physical still realizes: a massless body with children, a point mass
    assert np.isfinite(np.asarray(system.realize(link1.set_mass(s, 0.0)).udot)).all()
    point = s.with_instance("matter", "unit_inertia", G.at[2].set(jnp.diag(jnp.array([0.0, 0.5, 0.5]))))
    assert np.isfinite(np.asarray(system.realize(point).udot)).all()
    # and under jit the checks stay out of the way (values are traced)
    jax.jit(lambda st: system.realize(st).udot)(s)


def _one_body(kind: str):
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    sj.Force.UniformGravity(sj.GeneralForceSubsystem(system), matter, [0, -9.81, 0])
    mp = sj.MassProperties(1.0, [0.1, -0.5, 0.05], sj.Inertia(0.4, 0.1, 0.4))
    getattr(sj.MobilizedBody, kind)(matter.Ground(), sj.Transform(), mp, sj.Transform(), name="arm")
    return system, matter


@pytest.mark.parametrize("kind", ["Gimbal", "Ball"])
def test_gimbal_lock_is_named_not_delivered_as_numbers(kind):
    """Issue 65: a Gimbal at its middle angle's 90 degrees gave NaN accelerations, and a Ball
    in Euler-angle mode there qdot = +-4.7e15 and a 'successful' rollout to q = 7.8e11,
    silently. Now realizing the stage that is singular there warns, naming the body and
    the fix (quaternions), and simulate reports RESULTS.gimbal_lock (under jit too), or
    raises with the fix; 1e-3 rad away nothing is reported."""
    system, matter = _one_body(kind)
    s = system.realize_topology()
    if kind == "Ball":
        s = matter.set_use_euler_angles(s, True)
    fix = "Ball" if kind == "Gimbal" else r"set_use_euler_angles\(state, False\)"
    stage = sj.Stage.ACCELERATION if kind == "Gimbal" else sj.Stage.VELOCITY
    at = s.with_q([0.3, np.pi / 2, 0.2]).with_u([0.1, 0.0, 0.3])
    with pytest.warns(RuntimeWarning, match=rf"'arm' \({kind}\) is at gimbal lock: .*q\[1\] = 1.57.*{fix}"):
        system.realize(at, stage)
    near = at.with_q([0.3, np.pi / 2 - 1e-3, 0.2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        system.realize(near, sj.Stage.ACCELERATION)
        system.realize(at, sj.Stage(int(stage) - 1))  # the pose itself is fine

    run = lambda st: sj.simulate(system, st, 0.01, integrator="rk4", dt=1e-3, t0=0.0, throw=False)
    tr = jax.jit(run)(at)
    assert tr.result == sj.RESULTS.gimbal_lock
    assert float(tr.termination_time) == 0.0 and np.all(np.asarray(tr.final_state.q) == np.asarray(at.q))
    assert run(near).result == sj.RESULTS.successful
    with pytest.raises(Exception, match=rf"gimbal lock.*'arm' \({kind}\)"):
        sj.simulate(system, at, 0.01, integrator="tsit5")
