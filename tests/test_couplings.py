"""Custom couplings (ArtiSynth's ``RigidBodyCoupling``, seed 001 4.9.3–4.9.5): the slotted hinge
of ``CustomJointDemo`` built as a coupling on a Free body and as a Custom mobilizer with
coordinate limits gives the same motion; wrenches and their derivatives from autodiff
match the manual's hand-derived ones and finite differences; bad couplings are refused."""

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import simjax as sj

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
import slotted_hinge as sh  # noqa: E402

DT = 1e-3


def _coords_of(system, joint, traj):
    return np.asarray(
        jax.vmap(lambda s: joint.get_coordinates(system.realize(s, sj.Stage.POSITION)))(traj.states)
    )


def test_slotted_hinge_two_ways_give_the_same_motion():
    system, joint, state = sh.build_coupled()
    system2, (lx, lt), state2 = sh.build_custom()
    np.testing.assert_allclose(
        joint.get_coordinates(system.realize(state, sj.Stage.POSITION)), [0, sh.THETA0], atol=1e-14
    )
    traj = sj.simulate(system, state, 2.0, integrator="euler", dt=DT, save_at=200)
    traj2 = sj.simulate(system2, state2, 2.0, integrator="euler", dt=DT, save_at=200)
    c, q2 = _coords_of(system, joint, traj), np.asarray(traj2.q)
    # the same semi-explicit step in maximal and in reduced coordinates: O(dt) apart
    assert np.abs(c - q2).max() < 5e-3
    E, E2 = (
        np.asarray(traj.discrete["matter"]["limit_engaged"]),
        np.asarray(traj2.discrete["matter"]["limit_engaged"]),
    )
    assert np.array_equal(E[-1], [1, 1]) and np.array_equal(E2[-1], [1, 1])  # slot end and angle stop
    # at rest both sit within the deadband of both stops ...
    for cc in (c[-1], q2[-1]):
        assert -0.5 - sh.TOL - 1e-12 <= cc[0] <= -0.5 and -1.0 - sh.TOL - 1e-12 <= cc[1] <= -1.0
    np.testing.assert_allclose(c[-1], q2[-1], atol=sh.TOL)
    # ... and carry the same static forces (these differ only through the rest poses)
    F = np.asarray(joint.get_multipliers(traj.final_state))
    F2 = np.array([lx.get_multipliers(traj2.final_state)[0], lt.get_multipliers(traj2.final_state)[0]])
    np.testing.assert_allclose(F, F2, rtol=1e-3)
    assert F.min() > 1.0
    # the bilateral rows hold throughout
    fin = system.realize(traj.final_state, sj.Stage.VELOCITY)
    assert np.abs(np.asarray(fin.qerr[:4])).max() < 1e-10
    assert np.abs(np.asarray(fin.uerr)).max() < 1e-10


class _Unlimited(sh.SlottedHinge):
    """The slotted hinge with its coordinates unlimited (no unilateral rows): smooth
    dynamics every integrator can run."""

    def initialize_constraints(self):
        self.add_slot_bilaterals()
        self.add_coordinate()
        self.add_coordinate()


def _unlimited_pair():
    system, matter = sh._system()
    slider = sj.MobilizedBody.Free(matter.Ground(), sj.Transform(), sh._slider_body(), sj.Transform())
    joint = sj.Constraint.Coupling(_Unlimited(), slider, sh.X_AC, matter.Ground(), sh.X_GD)
    state = joint.set_coordinates(system.realize_topology(), [0.1, sh.THETA0])
    system2, matter2 = sh._system()
    sj.MobilizedBody.Custom(
        matter2.Ground(),
        sh.X_GD,
        sh._slider_body(),
        sh.X_AC,
        nq=2,
        n_angles=1,
        X_FM=lambda q: (sh._rz(q[1]), jnp.stack([q[0], 0 * q[0], 0 * q[0]])),
    )
    state2 = system2.realize_topology().with_q(jnp.array([0.1, sh.THETA0]))
    return system, joint, state, system2, state2


def test_coupling_dynamics_equal_the_reduced_mobilizer():
    """Forward dynamics of the Free body held by the coupling's bilateral rows equal those
    of the 2-dof mobilizer: accelerations at a moving state and an RK4 run."""
    system, joint, state, system2, state2 = _unlimited_pair()
    u2 = jnp.array([0.3, -0.7])
    state2 = state2.with_u(u2)
    # the Free body's speeds that move the joint at (xdot, thetadot) = u2
    s = system.realize(state, sj.Stage.POSITION)

    def coords_of_q(q):
        return joint.get_coordinates(system.realize(state.with_q(q), sj.Stage.POSITION))

    matter = system.get_matter_subsystem()
    G = np.asarray(matter.calc_g(system.realize(s, sj.Stage.VELOCITY)))
    Jc = np.asarray(jax.jacfwd(coords_of_q)(s.q)) @ np.asarray(
        jax.jacfwd(lambda u: matter.calc_qdot(s, u))(jnp.zeros(6))
    )
    u = np.linalg.lstsq(np.vstack([G, Jc]), np.concatenate([np.zeros(4), np.asarray(u2)]), rcond=None)[0]
    traj = sj.simulate(system, state.with_u(jnp.asarray(u)), 0.5, integrator="rk4", dt=1e-3, save_at=10)
    traj2 = sj.simulate(system2, state2, 0.5, integrator="rk4", dt=1e-3, save_at=10)
    np.testing.assert_allclose(_coords_of(system, joint, traj), np.asarray(traj2.q), atol=1e-9)


def test_autodiff_wrenches_match_the_manual_and_finite_differences():
    system, joint, state, _, _ = _unlimited_pair()
    state = state.with_u(jnp.array([0.2, -0.4, 0.1, 0.3, 0.5, -0.2]))
    state = system.project(state)
    s = system.realize(state, sj.Stage.VELOCITY)
    x, th = np.asarray(joint.get_coordinates(s))
    W = np.asarray(joint.get_wrenches(s))
    # constraint 0 (y in D, seen in G) is (s, c, 0) (the manual's updateConstraints), up to sign
    w0 = sj.Coupling.wrench(f=(np.sin(th), np.cos(th), 0))
    assert min(np.abs(W[0] - w0).max(), np.abs(W[0] + w0).max()) < 1e-12
    # the wrench's time derivative (autodiff along the motion) vs finite differences
    matter = system.get_matter_subsystem()
    qdot = matter.calc_qdot(s)

    def wrench_at(q):
        return joint.get_wrenches(system.realize(s.with_q(q), sj.Stage.POSITION))

    dW = np.asarray(jax.jvp(wrench_at, (s.q,), (qdot,))[1])
    eps = 1e-6
    fd = (np.asarray(wrench_at(s.q + eps * qdot)) - np.asarray(wrench_at(s.q - eps * qdot))) / (2 * eps)
    np.testing.assert_allclose(dW, fd, atol=1e-8)
    thdot = float(
        jax.jvp(
            lambda q: joint.get_coordinates(system.realize(s.with_q(q), sj.Stage.POSITION)), (s.q,), (qdot,)
        )[1][1]
    )
    sign = 1.0 if np.abs(W[0] - w0).max() < 1e-12 else -1.0
    manual = sign * sj.Coupling.wrench(f=(np.cos(th) * thdot, -np.sin(th) * thdot, 0))
    np.testing.assert_allclose(dW[0], manual, atol=1e-8)
    # the velocity errors are the time derivatives of the position errors; the acceleration
    # rows (G udot = b, b from second derivatives) match finite differences of the velocity
    # errors along the motion
    perr = lambda q: system.realize(s.with_q(q), sj.Stage.POSITION).qerr[:4]
    fd_p = (np.asarray(perr(s.q + eps * qdot)) - np.asarray(perr(s.q - eps * qdot))) / (2 * eps)
    np.testing.assert_allclose(np.asarray(s.uerr), fd_p, atol=1e-8)
    a = system.realize(s, sj.Stage.ACCELERATION)
    udot = a.udot

    def uerr_at(h):
        q1 = s.q + h * qdot + 0.5 * h * h * a.qdotdot
        return system.realize(s.with_q(q1).with_u(s.u + h * udot), sj.Stage.VELOCITY).uerr

    fd_u = (np.asarray(uerr_at(eps)) - np.asarray(uerr_at(-eps))) / (2 * eps)
    np.testing.assert_allclose(fd_u, 0.0, atol=1e-7)  # the motion keeps uerr at 0: G udot = b holds


class _ManualWrench(sh.SlottedHinge):
    """The manual's updateConstraints: constraint 0's wrench given by hand."""

    def update_constraints(self, T_GD, coords):
        s, c = T_GD.R[1, 0], T_GD.R[0, 0]
        return {0: self.wrench(f=jnp.stack([s, c, 0 * s]))}


def test_a_hand_written_wrench_gives_the_same_motion_as_autodiff():
    system, joint, state = sh.build_coupled()
    system2, matter2 = sh._system()
    slider = sj.MobilizedBody.Free(matter2.Ground(), sj.Transform(), sh._slider_body(), sj.Transform())
    joint2 = sj.Constraint.Coupling(_ManualWrench(), slider, sh.X_AC, matter2.Ground(), sh.X_GD)
    state2 = joint2.set_coordinates(system2.realize_topology(), [0.0, sh.THETA0])
    t1 = sj.simulate(system, state, 0.3, integrator="euler", dt=DT, save_at=3)
    t2 = sj.simulate(system2, state2, 0.3, integrator="euler", dt=DT, save_at=3)
    np.testing.assert_allclose(_coords_of(system, joint, t1), _coords_of(system2, joint2, t2), atol=1e-10)


def test_bad_couplings_are_refused_with_the_fix():
    class BadFlags(sj.Coupling):
        def initialize_constraints(self):
            self.add_constraint(0x100)

    with pytest.raises(ValueError, match="unknown flags"):
        BadFlags()

    class NotInverse(sh.SlottedHinge):
        def tcd_to_coordinates(self, T_CD, coords_prev):
            return -super().tcd_to_coordinates(T_CD, coords_prev)

    class RestrictsX(sh.SlottedHinge):
        def update_constraints(self, T_GD, coords):
            return {0: self.wrench(f=(1.0, 0, 0))}

    class TwoMissing(sh.SlottedHinge):
        def initialize_constraints(self):
            B = sj.Coupling.BILATERAL
            self.add_constraint(B | sj.Coupling.LINEAR)
            self.add_constraint(B | sj.Coupling.LINEAR)
            self.add_coordinate()
            self.add_coordinate()

    class OnlyLimits(sj.Coupling):
        def initialize_constraints(self):
            self.add_constraint(sj.Coupling.ROTARY)

    system, matter = sh._system()
    slider = sj.MobilizedBody.Free(
        matter.Ground(), sj.Transform(), sh._slider_body(), sj.Transform(), name="box"
    )
    with pytest.raises(
        ValueError, match=r"does not invert.*tcd_to_coordinates\(coordinates_to_tcd\(c\), c\) == c"
    ):
        sj.Constraint.Coupling(NotInverse(), slider, sh.X_AC, matter.Ground(), sh.X_GD)
    with pytest.raises(ValueError, match="do not annihilate its coordinate motions"):
        sj.Constraint.Coupling(RestrictsX(), slider, sh.X_AC, matter.Ground(), sh.X_GD)
    with pytest.raises(ValueError, match=r"have no wrench.*update_constraints"):
        sj.Constraint.Coupling(TwoMissing(), slider, sh.X_AC, matter.Ground(), sh.X_GD)
    with pytest.raises(ValueError, match="declares no bilateral constraint"):
        sj.Constraint.Coupling(OnlyLimits(), slider, sh.X_AC, matter.Ground(), sh.X_GD)
    with pytest.raises(TypeError, match="sj.Coupling instance"):
        sj.Constraint.Coupling(sh.SlottedHinge, slider, sh.X_AC, matter.Ground(), sh.X_GD)
    with pytest.raises(ValueError, match="lim_con"):

        class BadLim(sj.Coupling):
            def initialize_constraints(self):
                self.add_constraint(sj.Coupling.BILATERAL | sj.Coupling.LINEAR)
                self.add_coordinate(-1, 1, 0, 0)

        BadLim()


class _SlotEndAsDistance(sh.SlottedHinge):
    """The slot's lower end as a one-sided constraint that limits no coordinate: its distance
    (ArtiSynth's ``setDistance`` in ``updateConstraints``) is ``x + 0.5``; its wrench comes
    from autodiff of the distance."""

    def initialize_constraints(self):
        R, L = sj.Coupling.ROTARY, sj.Coupling.LINEAR
        self.add_slot_bilaterals()
        self.add_constraint(L)  # the slot's end, by distance
        lt = self.add_constraint(R, self.wrench(m=(0, 0, 1)))
        self.add_coordinate()
        self.add_coordinate(*sh.THETA_RANGE, 0, lt)

    def unilateral_distances(self, T_GD, T_CD, coords):
        return {4: coords[0] - sh.X_RANGE[0]}


def test_a_unilateral_row_given_by_its_distance_acts_like_the_coordinate_limit():
    system, joint, state = sh.build_coupled()
    system2, matter2 = sh._system()
    slider = sj.MobilizedBody.Free(matter2.Ground(), sj.Transform(), sh._slider_body(), sj.Transform())
    joint2 = sj.Constraint.Coupling(_SlotEndAsDistance(), slider, sh.X_AC, matter2.Ground(), sh.X_GD)
    assert joint2.get_num_limits() == 2
    state2 = joint2.set_coordinates(system2.realize_topology(), [0.0, sh.THETA0])
    t1 = sj.simulate(system, state, 1.5, integrator="euler", dt=DT, save_at=15)
    t2 = sj.simulate(system2, state2, 1.5, integrator="euler", dt=DT, save_at=15)
    c1, c2 = _coords_of(system, joint, t1), _coords_of(system2, joint2, t2)
    assert c1[-1, 0] < -0.5 + 1e-9  # the slot's end was reached (its upper end never is)
    np.testing.assert_allclose(c1, c2, atol=1e-9)
    np.testing.assert_allclose(
        joint.get_multipliers(t1.final_state), joint2.get_multipliers(t2.final_state), rtol=1e-6
    )
    np.testing.assert_array_equal(joint.is_engaged(t1.final_state), joint2.is_engaged(t2.final_state))
