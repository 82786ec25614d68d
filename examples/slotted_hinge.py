"""ArtiSynth's ``CustomJointDemo`` in simjax: a slotted hinge written as a custom coupling.

Run:  python examples/slotted_hinge.py   (add --plot to save slotted_hinge.png)

A box (the "slider", 1 x 1/3 x 1/3 m, 1000 kg/m^3) stands on a slotted hinge at its base:
it may slide along the slot (x, the x axis of frame D, limited to [-0.5, 0.5] m) and turn
about the hinge axis (theta, D's z axis = world -y, limited to [-1, 1] rad). Started at
theta = -45 degrees it falls over under gravity (world -z) onto the angle stop and, the
slot rising 0.3 rad towards +x (ArtiSynth's demo has it level), slides into the slot's
end. The joint is built two ways, with the same motion:

* ArtiSynth's: a Free body held by ``SlottedHinge`` (an ``sj.Coupling``: four bilateral
  constraints, two unilateral limits), ``sj.Constraint.Coupling(SlottedHinge(), ...)``;
* Simbody's: a 2-dof ``MobilizedBody.Custom`` (x, theta) with two ``CoordinateLimit``s.

Both step with ``integrator="euler"`` (velocity-level, complementarity, inelastic limits).
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np

import simjax as sj

sj.configure()  # XLA:CPU settings and a compilation cache, before the first computation
jax.config.update("jax_enable_x64", True)

SIZE = 1.0
MASS = 1000.0 * SIZE * (SIZE / 3) ** 2
X_RANGE = (-SIZE / 2, SIZE / 2)
THETA_RANGE = (-1.0, 1.0)
THETA0 = -np.pi / 4
TOL = 1e-4  # penetration and rotary limit tolerances (the deadband), set alike in both models


def _rot_x(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[1.0, 0, 0], [0, c, -s], [0, s, c]])


SLOT_TILT = 0.3  # the slot rises towards +x by this angle, so the slider also slides into its end


def _rot_z(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])


X_GD = sj.Transform(R=_rot_x(np.pi / 2) @ _rot_z(SLOT_TILT))  # frame D on Ground: z along world -y
X_AC = sj.Transform(R=_rot_x(np.pi / 2), p=[0, 0, -SIZE / 2])  # frame C on the slider, at its base


def _rz(theta):
    c, s = jnp.cos(theta), jnp.sin(theta)
    z, o = jnp.zeros_like(theta), jnp.ones_like(theta)
    return jnp.stack([jnp.stack([c, -s, z]), jnp.stack([s, c, z]), jnp.stack([z, z, o])])


class SlottedHinge(sj.Coupling):
    """ArtiSynth's tutorial ``CustomJoint``: translation x along D's x axis and rotation
    theta about D's z axis (T_CD = (Rz(theta), (x, 0, 0)))."""

    def add_slot_bilaterals(self):
        """The four bilateral rows that hold the slider in the slot (rows 0-3)."""
        B, R, L = sj.Coupling.BILATERAL, sj.Coupling.ROTARY, sj.Coupling.LINEAR
        self.add_constraint(B | L)  # y in D: not constant in G (its wrench from autodiff)
        self.add_constraint(B | L, self.wrench(f=(0, 0, 1)))  # z
        self.add_constraint(B | R, self.wrench(m=(1, 0, 0)))  # rotation about x
        self.add_constraint(B | R, self.wrench(m=(0, 1, 0)))  # rotation about y

    def initialize_constraints(self):
        R, L = sj.Coupling.ROTARY, sj.Coupling.LINEAR
        self.add_slot_bilaterals()
        lx = self.add_constraint(L)  # x limit (unilateral)
        lt = self.add_constraint(R, self.wrench(m=(0, 0, 1)))  # theta limit
        self.add_coordinate(*X_RANGE, 0, lx)
        self.add_coordinate(*THETA_RANGE, 0, lt)

    def coordinates_to_tcd(self, coords):
        x, theta = coords[0], coords[1]
        return sj.Transform(R=_rz(theta), p=jnp.stack([x, 0 * x, 0 * x]))

    def tcd_to_coordinates(self, T_CD, coords_prev):
        theta = jnp.arctan2(T_CD.R[1, 0], T_CD.R[0, 0])
        return jnp.stack([T_CD.p[0], self.nearest_angle(theta, coords_prev[1])])

    def project_to_constraints(self, T_CD):
        # rotate R's z axis onto D's z (the shortest rotation: ArtiSynth's rotateZDirection),
        # keep only the x translation
        z = T_CD.R[:, 2]
        v = jnp.cross(z, jnp.array([0.0, 0.0, 1.0]))
        c = z[2]
        K = _skew(v)
        align = jnp.eye(3) + K + K @ K / (1.0 + c)
        p = T_CD.p
        return sj.Transform(R=align @ T_CD.R, p=jnp.stack([p[0], 0 * p[0], 0 * p[0]]))


def _skew(v):
    return jnp.array([[0.0, -v[2], v[1]], [v[2], 0.0, -v[0]], [-v[1], v[0], 0.0]])


def _slider_body():
    a, b = SIZE, SIZE / 3
    inertia = sj.Inertia(MASS * (2 * b * b) / 12, MASS * (a * a + b * b) / 12, MASS * (a * a + b * b) / 12)
    return sj.Body.Rigid(sj.MassProperties(MASS, [0, 0, 0], inertia))


def _system():
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    sj.Force.UniformGravity(forces, matter, [0, 0, -9.81])
    matter.set_penetration_tol(TOL)
    matter.set_rotary_limit_tol(TOL)
    return system, matter


def build_coupled():
    """ArtiSynth's way: a Free slider held by the SlottedHinge coupling. Returns
    ``(system, joint, state)`` with the joint at x = 0, theta = THETA0."""
    system, matter = _system()
    slider = sj.MobilizedBody.Free(
        matter.Ground(), sj.Transform(), _slider_body(), sj.Transform(), name="slider"
    )
    joint = sj.Constraint.Coupling(SlottedHinge(), slider, X_AC, matter.Ground(), X_GD, name="slot")
    state = system.realize_topology()
    state = joint.set_coordinates(state, [0.0, THETA0])
    return system, joint, state


def build_custom():
    """Simbody's way: a 2-dof Custom mobilizer with two CoordinateLimits. Returns
    ``(system, (x_limit, theta_limit), state)``."""
    system, matter = _system()
    slider = sj.MobilizedBody.Custom(
        matter.Ground(),
        X_GD,
        _slider_body(),
        X_AC,
        nq=2,
        n_angles=1,
        X_FM=lambda q: (_rz(q[1]), jnp.stack([q[0], 0 * q[0], 0 * q[0]])),
        name="slider",
    )
    lx = sj.Constraint.CoordinateLimit(slider, 0, *X_RANGE, name="x")
    lt = sj.Constraint.CoordinateLimit(slider, 1, *THETA_RANGE, name="theta")
    state = system.realize_topology().with_q(jnp.array([0.0, THETA0]))
    return system, (lx, lt), state


def main(plot: bool = False):
    t1, dt, n = 1.5, 1e-3, 300
    system, joint, state = build_coupled()
    print(system.summary())
    traj = sj.simulate(system, state, t1, integrator="euler", dt=dt, save_at=n)
    states = traj.states
    coords = np.asarray(
        jax.vmap(lambda s: joint.get_coordinates(system.realize(s, sj.Stage.POSITION)))(states)
    )
    forces = np.asarray(traj.discrete["matter"]["limit_force"])
    engaged = np.asarray(traj.discrete["matter"]["limit_engaged"])
    system2, lims, state2 = build_custom()
    traj2 = sj.simulate(system2, state2, t1, integrator="euler", dt=dt, save_at=n)
    q2 = np.asarray(traj2.q)
    fin = traj.final_state
    print(f"final x = {coords[-1, 0]:.6f} m, theta = {coords[-1, 1]:.6f} rad; engaged {engaged[-1].tolist()}")
    print(f"limit forces at rest: x {forces[-1, 0]:.3f} N, theta {forces[-1, 1]:.3f} N m")
    print(f"Custom mobilizer (Simbody's way): final x = {q2[-1, 0]:.6f}, theta = {q2[-1, 1]:.6f}")
    print(f"largest difference of the two ways over the run: {np.abs(coords - q2).max():.2e}")
    print(
        "bilateral error at the end: "
        f"{float(jnp.max(jnp.abs(system.realize(fin, sj.Stage.POSITION).qerr[:4]))):.2e}"
    )
    if plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        t = np.asarray(traj.t)
        fig, ax = plt.subplots(3, 1, sharex=True, figsize=(6, 7))
        ax[0].plot(t, coords[:, 0], label="coupling (Free body)")
        ax[0].plot(t, q2[:, 0], "--", label="Custom mobilizer")
        ax[0].axhline(X_RANGE[0], color="gray", lw=0.5)
        ax[0].axhline(X_RANGE[1], color="gray", lw=0.5)
        ax[0].set_ylabel("x [m]")
        ax[0].legend()
        ax[1].plot(t, coords[:, 1])
        ax[1].plot(t, q2[:, 1], "--")
        ax[1].axhline(THETA_RANGE[0], color="gray", lw=0.5)
        ax[1].set_ylabel("theta [rad]")
        ax[2].plot(t, forces[:, 0], label="x limit [N]")
        ax[2].plot(t, forces[:, 1], label="theta limit [N m]")
        ax[2].set_yscale("symlog", linthresh=1.0)
        ax[2].set_ylabel("limit force")
        ax[2].set_xlabel("t [s]")
        ax[2].legend()
        fig.tight_layout()
        fig.savefig("slotted_hinge.png", dpi=120)
        print("saved slotted_hinge.png")
    return traj, traj2


if __name__ == "__main__":
    main(plot="--plot" in sys.argv)
