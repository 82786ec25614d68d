"""Every force element (``sj.Force``: handles in ``simjax.system.forces``, kernels in
``simjax.dynamics.forces``) against Simbody and against its own identities.

Model: ``oracle_models.small_tree`` (a free base, a pin arm and a ball head on it, a slider
tip on the head, tilted gravity) carrying every force element at once, at random states
(simjax in quaternion mode; OpenSim runs Simbody in Euler-angle mode, same physical state).

1. Simbody, through OpenSim 4.6. The ``opensim`` package does not wrap Simbody's own force
   classes (no ``Force_*``, ``GeneralForceSubsystem`` or ``MultibodySystem``), so each
   element is matched by the OpenSim component that creates the same Simbody force or
   computes the same formula. For one element at a time (every other OpenSim force
   switched off with ``setAppliesForce``) we compare the body forces
   (``Model.getRigidBodyForces``: ``[torque about the body origin; force]`` in Ground per
   MobilizedBodyIndex), the mobility forces (``getMobilityForces``), the potential energy
   (``calcPotentialEnergy``; for the bushing, Simbody's own value, see below) and the
   power ``sum F.V + f.u`` with OpenSim's own body velocities and speeds, all to 1e-10
   relative (they agree to ~1e-14):

   ======================  ===============================================================
   simjax element           OpenSim component (what Simbody evaluates)
   ======================  ===============================================================
   UniformGravity, Gravity  the model's gravity, a ``SimTK::Force::Gravity``; it cannot be
                            switched off, so it is the baseline subtracted from the others.
                            OpenSim's zero height is 0: ``Gravity`` here has 0.7, so its
                            energy is shifted by ``-M |g| 0.7`` (Simbody's formula)
   TwoPointLinearSpring     PointToPointSpring (creates ``SimTK::Force::TwoPointLinearSpring``)
   TwoPointLinearDamper     ExpressionBasedPointToPointForce ``c*ddot`` (OpenSim: a positive
                            magnitude pulls the points together)
   TwoPointConstantForce    ExpressionBasedPointToPointForce ``-f`` (Simbody: positive ``f``
                            pushes the points apart, hence the sign)
   ConstantForce            PrescribedForce: constant point (body frame), force (Ground)
   ConstantTorque           PrescribedForce: constant torque (Ground)
   GlobalDamper             SpringGeneralizedForce(viscosity c) on every coordinate
   MobilityLinearSpring     SpringGeneralizedForce(stiffness, rest length); it reports no
                            energy, so the energy is checked against ``k (q - q0)^2 / 2``
   MobilityLinearDamper     SpringGeneralizedForce(viscosity) on one ball speed
   MobilityConstantForce    ExpressionBasedCoordinateForce with a constant expression
   LinearBushing            BushingForce (creates a ``SimTK::Force::LinearBushing``). Its
                            energy is taken from ``BushingForce.computePotentialEnergy``
                            (Simbody's ``calcPotentialEnergyContribution``): the model total
                            counts it twice (once for the Simbody force, once through
                            OpenSim's wrapper of the same component)
   ======================  ===============================================================

   and ``udot`` of the whole model with all of those forces on at once. Each element's
   forces, energy and power are also compared between quaternion and Euler-angle mode.
   MobilityLinearStop, DiscreteForces and Force.Custom have no OpenSim counterpart; the
   stop is checked against Simbody's formula (``Force::MobilityLinearStop`` in Simbody's
   ``Force.cpp``) written out in NumPy, the custom force against the built-in spring it
   re-implements.

2. Identities for every element: the generalized force ``J^T F + f`` equals
   ``-N^T dPE/dq`` (autodiff) for conservative elements (for TwoPointConstantForce and
   ConstantForce, which report no energy, against the potentials ``-f d`` and
   ``-force . p``); ``calc_power`` equals ``(J^T F + f) . u`` and, for conservative
   elements, ``-dPE/dt`` along the motion; dampers dissipate exactly ``c * rate^2``; the
   per-element contributions add up to what ``realize`` applies; enabling and disabling
   through the State; the setters; Gravity's zero height and body exclusion;
   DiscreteForces.

3. ``jax.test_util.check_grads`` (forward and reverse, order 1) of ``udot`` with respect to
   the numeric force parameters held in the State's Instance dict (one function).

Run ``pytest tests/test_forces.py -s`` to print the largest discrepancy per comparison.
"""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import simjax as sj

sys.path.insert(0, str(Path(__file__).parent))
import oracle_models as om

RTOL = 1e-10
ERRORS: dict[str, float] = {}

# ----------------------------------------------------------------------------- parameters
# Bodies are spec indices of ``om.small_tree``: 0 base (free), 1 arm (pin on base),
# 2 head (ball on base), 3 tip (slider on head); -1 is Ground.
SPRING_G = (-1, [0.2, 1.0, 0.1], 1, [0.05, -0.1, 0.02], 40.0, 0.3)  # b1, s1, b2, s2, k, x0
SPRING = (0, [0.1, 0.05, -0.1], 3, [0.02, 0.03, 0.1], 25.0, 0.5)
DAMPER = (1, [0.1, 0.0, 0.05], 2, [-0.05, 0.1, 0.0], 3.0)  # b1, s1, b2, s2, c
PULL = (-1, [0.3, 0.2, 0.1], 3, [0.01, 0.02, 0.03], 7.0)  # b1, s1, b2, s2, f
CONST_FORCE = (2, [0.1, -0.2, 0.05], [1.0, -2.0, 0.5])  # body, station, force (Ground)
CONST_TORQUE = (3, [0.3, 0.1, -0.4])  # body, torque (Ground)
GLOBAL_C = 0.7
MOB_SPRING_PIN = (1, 0, 5.0, 0.3)  # body, which, k, q0
MOB_SPRING_SLIDER = (3, 0, 11.0, -0.1)
MOB_DAMPER = (2, 1, 0.9)  # body, which u, c
MOB_FORCE = (0, 4, 2.5)  # body, which u, f
# Bushings: body1, (angles, p) of X_B1F, body2, (angles, p) of X_B2M, k6, c6 ([rx ry rz px py pz])
BUSHING = (
    1,
    ([0.2, 0.1, -0.3], [0.1, 0.0, 0.0]),
    3,
    ([-0.1, 0.3, 0.2], [0.0, 0.1, 0.0]),
    [1.0, 2.0, 3.0, 10.0, 20.0, 30.0],
    [0.1, 0.2, 0.3, 0.5, 0.6, 0.7],
)
BUSHING_K = (
    0,
    ([0.0, 0.4, 0.1], [0.0, 0.2, 0.1]),
    2,
    ([0.3, -0.2, 0.0], [0.05, 0.0, 0.0]),
    [4, 5, 6, 7, 8, 9],
)
G_ZERO = 0.7  # Force.Gravity's zero height
# Stops: body, which, k, d. Bounds are set per state (see ``CaseData.state``).
STOP_HI = (3, 0, 300.0, 0.0)  # engaged above q_high, no dissipation
STOP_LO = (1, 0, 200.0, 0.4)  # engaged below q_low, dissipative
STOP_OFF = (3, 0, 100.0, 0.5)  # not engaged

CONSERVATIVE = (
    "uniform_gravity",
    "gravity",
    "spring_g",
    "spring",
    "mob_spring_pin",
    "mob_spring_slider",
    "bushing_k",
    "stop_hi",
    "custom",
)
OSIM_COMPARED = (
    "uniform_gravity",
    "gravity",
    "spring_g",
    "spring",
    "damper",
    "pull",
    "const_force",
    "const_torque",
    "global_damper",
    "mob_spring_pin",
    "mob_spring_slider",
    "mob_damper",
    "mob_force",
    "bushing",
    "bushing_k",
)
#: elements compared between Euler-angle and quaternion mode
EULER_CHECKED = (
    "uniform_gravity",
    "global_damper",
    "mob_spring_pin",
    "mob_spring_slider",
    "mob_damper",
    "mob_force",
    "bushing",
    "stop_hi",
    "stop_lo",
    "discrete",
)
#: elements off in the end-to-end comparison of udot with OpenSim (gravity is on once)
NO_OSIM = ("gravity", "stop_hi", "stop_lo", "stop_off", "discrete", "custom")


def _record(key: str, actual, desired, scale=None) -> None:
    actual, desired = np.asarray(actual, float), np.asarray(desired, float)
    s = float(np.abs(desired).max()) if scale is None else float(scale)
    s = max(s, 1e-12)
    err = float(np.abs(actual - desired).max()) / s
    ERRORS[key] = max(ERRORS.get(key, 0.0), err)
    np.testing.assert_allclose(actual, desired, rtol=0, atol=RTOL * s, err_msg=key)


@pytest.fixture(scope="module", autouse=True)
def _report_errors():
    yield
    if ERRORS:
        print("\nlargest relative discrepancies (max|simjax - reference| / max|reference|):")
        for k, e in sorted(ERRORS.items()):
            print(f"  {k:52s} {e:.1e}")


# ----------------------------------------------------------------------------- simjax side


class CustomSpring:
    """``SPRING_G`` written again as a ``Force.Custom`` implementation."""

    def __init__(self, b1: int, s1, b2: int, s2, k: float, x0: float):
        self.b, self.s = (b1, b2), (np.asarray(s1, float), np.asarray(s2, float))
        self.k, self.x0 = k, x0

    def _geometry(self, ctx):
        r1 = ctx.R_GB[self.b[0]] @ self.s[0]
        r2 = ctx.R_GB[self.b[1]] @ self.s[1]
        d = ctx.p_GB[self.b[1]] + r2 - ctx.p_GB[self.b[0]] - r1
        return r1, r2, d, jnp.linalg.norm(d)

    def calc_force(self, ctx):
        r1, r2, d, L = self._geometry(ctx)
        f2 = -self.k * (L - self.x0) * d / L  # on body 2; -f2 on body 1
        F = jnp.zeros((ctx.num_bodies, 6), d.dtype)
        F = F.at[self.b[1]].add(jnp.concatenate([jnp.cross(r2, f2), f2]))
        return F.at[self.b[0]].add(jnp.concatenate([jnp.cross(r1, -f2), -f2])), None

    def calc_potential_energy(self, ctx):
        return 0.5 * self.k * (self._geometry(ctx)[3] - self.x0) ** 2

    def depends_only_on_positions(self):
        return True


def _X(angles_p) -> sj.Transform:
    angles, p = angles_p
    return sj.Transform(R=om.body_xyz(angles), p=p)


def build_simjax(spec: om.ModelSpec):
    system, matter, bodies, forces, ugrav = om.to_simjax(spec, return_forces=True)
    B = lambda i: matter.Ground() if i < 0 else bodies[i]
    F = sj.Force
    el = {"uniform_gravity": ugrav}
    el["gravity"] = F.Gravity(forces, matter, list(spec.gravity), zero_height=G_ZERO)
    el["gravity"].set_disabled_by_default(True)  # one gravity at a time in the totals
    for name, (b1, s1, b2, s2, k, x0) in (("spring_g", SPRING_G), ("spring", SPRING)):
        el[name] = F.TwoPointLinearSpring(forces, B(b1), s1, B(b2), s2, k, x0)
    b1, s1, b2, s2, c = DAMPER
    el["damper"] = F.TwoPointLinearDamper(forces, B(b1), s1, B(b2), s2, c)
    b1, s1, b2, s2, f = PULL
    el["pull"] = F.TwoPointConstantForce(forces, B(b1), s1, B(b2), s2, f)
    el["const_force"] = F.ConstantForce(forces, B(CONST_FORCE[0]), *CONST_FORCE[1:])
    el["const_torque"] = F.ConstantTorque(forces, B(CONST_TORQUE[0]), CONST_TORQUE[1])
    el["global_damper"] = F.GlobalDamper(forces, matter, GLOBAL_C)
    for name, (b, w, k, q0) in (("mob_spring_pin", MOB_SPRING_PIN), ("mob_spring_slider", MOB_SPRING_SLIDER)):
        el[name] = F.MobilityLinearSpring(forces, B(b), w, k, q0)
    el["mob_damper"] = F.MobilityLinearDamper(forces, B(MOB_DAMPER[0]), *MOB_DAMPER[1:])
    el["mob_force"] = F.MobilityConstantForce(forces, B(MOB_FORCE[0]), *MOB_FORCE[1:])
    b1, X1, b2, X2, k, c = BUSHING
    el["bushing"] = F.LinearBushing(forces, B(b1), _X(X1), B(b2), _X(X2), k, c)
    b1, X1, b2, X2, k = BUSHING_K
    el["bushing_k"] = F.LinearBushing(forces, B(b1), _X(X1), B(b2), _X(X2), k, np.zeros(6))
    for name, (b, w, k, d) in (("stop_hi", STOP_HI), ("stop_lo", STOP_LO), ("stop_off", STOP_OFF)):
        el[name] = F.MobilityLinearStop(forces, B(b), w, k, d, -0.1, 0.1)
    el["discrete"] = F.DiscreteForces(forces, matter)
    b1, s1, b2, s2, k, x0 = SPRING_G
    el["custom"] = F.Custom(forces, CustomSpring(B(b1).index, s1, B(b2).index, s2, k, x0))
    return system, matter, bodies, el


def _station_G(pc, b: int, s) -> jax.Array:
    return pc.p_GB[b] + pc.R_GB[b] @ jnp.asarray(s, pc.p_GB.dtype)


def _bushing_coords(pc, b1: int, XF, b2: int, XM) -> jax.Array:
    """``[body-fixed XYZ angles of R_FM; p_FM in F]`` from the body poses (Simbody's
    LinearBushing deflection), computed here independently of ``simjax._forces``."""
    (aF, pF), (aM, pM) = XF, XM
    R_GF = pc.R_GB[b1] @ om.body_xyz(aF)
    R_GM = pc.R_GB[b2] @ om.body_xyz(aM)
    p_GF = _station_G(pc, b1, pF)
    p_GM = _station_G(pc, b2, pM)
    R = R_GF.T @ R_GM
    ang = jnp.stack([jnp.arctan2(-R[1, 2], R[2, 2]), jnp.arcsin(R[0, 2]), jnp.arctan2(-R[0, 1], R[0, 0])])
    return jnp.concatenate([ang, R_GF.T @ (p_GM - p_GF)])


def make_evaluate(system, matter, bodies, el, s0):
    """Jitted functions of ``(q, u, instance, discrete)`` (arrays, so that a State of any
    stage or parameter values reuses one compilation): ``evaluate`` (everything the tests
    look at), ``udot`` and ``euler`` (the element results in Euler-angle mode); and
    ``rebuild``, which makes the State from those arrays."""
    idx = lambda i: 0 if i < 0 else bodies[i].index
    names = list(el)

    def rebuild(q, u, inst, disc, base=s0):
        st = base
        for sub, d in inst.items():
            for k, v in d.items():
                st = st.with_instance(sub, k, v)
        for sub, d in disc.items():
            for k, v in d.items():
                st = st.with_discrete(sub, k, v)
        return st.with_q(q).with_u(u)

    def potentials(st, q):
        """Each element's energy, then reference potentials of two no-energy elements and
        the bushings' coordinates (for their rates)."""
        p = system.realize(st.with_q(q), sj.Stage.POSITION)
        pc = p.position_cache
        pe = [el[n].calc_potential_energy(p) for n in names]
        b1, s1, b2, s2, f = PULL
        pull = -f * jnp.linalg.norm(_station_G(pc, idx(b2), s2) - _station_G(pc, idx(b1), s1))
        b, s, force = CONST_FORCE
        const = -jnp.asarray(force) @ _station_G(pc, idx(b), s)
        qb = [_bushing_coords(pc, idx(B[0]), B[1], idx(B[2]), B[3]) for B in (BUSHING, BUSHING_K)]
        b1, s1, b2, s2, _ = DAMPER
        dist = jnp.linalg.norm(_station_G(pc, idx(b2), s2) - _station_G(pc, idx(b1), s1))
        return jnp.concatenate([jnp.stack(pe + [pull, const, dist]), *qb])

    def evaluate(q, u, inst, disc):
        st = rebuild(q, u, inst, disc)
        v = system.realize(st, sj.Stage.VELOCITY)
        d = system.realize(v, sj.Stage.DYNAMICS)
        out = {"F": d.dynamics_cache.body_forces, "tau": d.dynamics_cache.mobility_forces}
        out["gen"] = matter.calc_gravity_and_applied_generalized_forces(d)
        out["pe"] = system.calc_potential_energy(v)
        out["J"] = matter.calc_system_jacobian(v)  # V = J u, rows [w; v] per body
        out["V"] = matter.get_body_velocities(v)
        out["qdot"] = v.qdot
        out["com"] = v.position_cache.com_G
        out["N"] = jax.jacfwd(lambda uu: matter.calc_qdot(v, uu))(u)
        out["pot"] = potentials(st, q)
        out["dpot_dq"] = jax.jacrev(lambda qq: potentials(st, qq))(q)
        for n in names:
            F, tau = el[n].calc_force_contribution(v)
            out[n] = {
                "F": F,
                "tau": tau,
                "pe": el[n].calc_potential_energy(v),
                "power": el[n].calc_power(v),
                "disabled": el[n].is_disabled(v),
            }
        return out, v

    def udot(q, u, inst, disc):
        return system.realize(rebuild(q, u, inst, disc), sj.Stage.ACCELERATION).udot

    s0_euler = matter.set_use_euler_angles(s0, True)

    def euler(q, u, inst, disc):
        """``(F, f, PE, power)`` of the elements that index q or u, and of a bushing and
        the gravity, with Ball and Free in Euler-angle mode."""
        v = system.realize(rebuild(q, u, inst, disc, s0_euler), sj.Stage.VELOCITY)
        return {
            n: (*el[n].calc_force_contribution(v), el[n].calc_potential_energy(v), el[n].calc_power(v))
            for n in EULER_CHECKED
        }

    # Compile time dominates this file: the big evaluation is compiled with LLVM's cheap
    # settings (about half the time; results agree to round-off). ``udot`` is compiled plainly
    # because check_grads differentiates it (XLA options only apply to a top-level jit).
    fast = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
    return (
        jax.jit(evaluate, compiler_options=fast),
        jax.jit(udot),
        jax.jit(euler, compiler_options=fast),
        rebuild,
        names,
    )


# ----------------------------------------------------------------------------- OpenSim side


def _vec3(v):
    import opensim as osim

    return osim.Vec3(*map(float, v))


def _osim_transform(angles_p):
    import opensim as osim

    (a, p), ax = angles_p, osim.CoordinateAxis
    R = osim.Rotation(osim.BodyRotationSequence, a[0], ax(0), a[1], ax(1), a[2], ax(2))
    return osim.Transform(R, _vec3(p))


def osim_forces(spec: om.ModelSpec):
    """``(add_forces callback for om.to_opensim, dict name -> [OpenSim forces])``."""
    import opensim as osim

    made: dict[str, list] = {}

    def add(model, bodies, joints):
        B = lambda i: model.getGround() if i < 0 else bodies[i]
        coord = lambda i, w: joints[i].get_coordinates(w).getName()

        def put(name, f):
            f.setName(name + str(len(made.get(name, []))))
            model.addForce(f)
            made.setdefault(name, []).append(f)

        for name, (b1, s1, b2, s2, k, x0) in (("spring_g", SPRING_G), ("spring", SPRING)):
            put(name, osim.PointToPointSpring(B(b1), _vec3(s1), B(b2), _vec3(s2), k, x0))
        for name, (b1, s1, b2, s2, expr) in (
            ("damper", DAMPER[:4] + (f"{DAMPER[4]!r}*ddot",)),
            ("pull", PULL[:4] + (f"{-PULL[4]!r}",)),
        ):
            f = osim.ExpressionBasedPointToPointForce(
                B(b1).getName(), _vec3(s1), B(b2).getName(), _vec3(s2), expr
            )
            put(name, f)
        b, s, force = CONST_FORCE
        pf = osim.PrescribedForce("const_force", B(b))
        pf.setPointFunctions(*(osim.Constant(float(x)) for x in s))
        pf.setForceFunctions(*(osim.Constant(float(x)) for x in force))
        pf.setPointIsInGlobalFrame(False)
        pf.setForceIsInGlobalFrame(True)
        put("const_force", pf)
        b, torque = CONST_TORQUE
        pt = osim.PrescribedForce("const_torque", B(b))
        pt.setTorqueFunctions(*(osim.Constant(float(x)) for x in torque))
        pt.setForceIsInGlobalFrame(True)
        put("const_torque", pt)

        def gen_spring(name, b, w, k=0.0, q0=0.0, c=0.0):
            f = osim.SpringGeneralizedForce(coord(b, w))
            f.setStiffness(k)
            f.setRestLength(q0)
            f.setViscosity(c)
            put(name, f)

        for i, b in enumerate(spec.bodies):
            for w in range(om.JOINTS[b.joint][2]):
                gen_spring("global_damper", i, w, c=GLOBAL_C)
        for name, (b, w, k, q0) in (
            ("mob_spring_pin", MOB_SPRING_PIN),
            ("mob_spring_slider", MOB_SPRING_SLIDER),
        ):
            gen_spring(name, b, w, k=k, q0=q0)
        gen_spring("mob_damper", MOB_DAMPER[0], MOB_DAMPER[1], c=MOB_DAMPER[2])
        b, w, f = MOB_FORCE
        put("mob_force", osim.ExpressionBasedCoordinateForce(coord(b, w), f"{f!r}"))
        for name, (b1, X1, b2, X2, k, c) in (("bushing", BUSHING), ("bushing_k", BUSHING_K + ([0.0] * 6,))):
            k, c = np.asarray(k, float), np.asarray(c, float)
            bf = osim.BushingForce(
                name,
                B(b1),
                _osim_transform(X1),
                B(b2),
                _osim_transform(X2),
                _vec3(k[3:]),
                _vec3(k[:3]),
                _vec3(c[3:]),
                _vec3(c[:3]),
            )
            put(name, bf)

    return add, made


def _sv(x) -> np.ndarray:
    return np.array([x.get(a).get(k) for a in range(2) for k in range(3)])


class OpenSimSide:
    """The OpenSim model with every counterpart force; per-element evaluation."""

    def __init__(self, spec: om.ModelSpec):
        add, self.forces = osim_forces(spec)
        self.spec = spec
        self.pm = om.to_opensim(spec, add)
        self.mbi = [int(b.getMobilizedBodyIndex()) for b in self.pm.bodies]

    def _switch(self, s, on) -> None:
        for name, fs in self.forces.items():
            for f in fs:
                f.setAppliesForce(s, name in on)

    def evaluate(self, qe, u, on):
        """``(F (nb, 6) in simjax body order, f (nu,), PE, power)`` with gravity and the
        named forces on."""
        pm, m = self.pm, self.pm.model
        s = pm.set_state(self.spec, qe, u, euler=True)
        self._switch(s, on)
        m.realizeDynamics(s)
        Fo = m.getRigidBodyForces(s)
        nb = len(self.spec.bodies) + 1
        Fo = np.stack([_sv(Fo.get(i)) for i in range(nb)])
        F = np.zeros((nb, 6))
        F[0] = Fo[0]
        for i, k in enumerate(self.mbi):
            F[i + 1] = Fo[k]
        tau = m.getMobilityForces(s).to_numpy()[pm.u_perm]
        pe = float(m.calcPotentialEnergy(s))
        # BushingForce puts a SimTK::Force::LinearBushing in the force subsystem and also
        # reports that force's energy through its own OpenSim wrapper, so the model total
        # counts a bushing's energy twice: take Simbody's value once.
        pe -= sum(f.computePotentialEnergy(s) for n in on if n.startswith("bushing") for f in self.forces[n])
        V = np.stack([np.zeros(6)] + [_sv(b.getVelocityInGround(s)) for b in pm.bodies])
        U = s.getU().to_numpy()
        f_all = m.getMobilityForces(s).to_numpy()
        power = float(np.sum(F * V) + f_all @ U)
        return F, tau, pe, power

    def udot(self, qe, u, on) -> np.ndarray:
        s = self.pm.set_state(self.spec, qe, u, euler=True)
        self._switch(s, on)
        self.pm.model.realizeAcceleration(s)
        return s.getUDot().to_numpy()[self.pm.u_perm]


# ----------------------------------------------------------------------------- fixture


class CaseData:
    """The model, its random states and the compiled evaluation."""

    def __init__(self):
        self.spec = om.small_tree()
        self.system, self.matter, self.bodies, self.el = build_simjax(self.spec)
        self.s0 = self.system.realize_topology()
        self._eval, self._udot, self._euler, self.rebuild, self.names = make_evaluate(
            self.system, self.matter, self.bodies, self.el, self.s0
        )
        rng = np.random.default_rng(2024)
        self.states = [om.random_state(self.spec, rng) for _ in range(3)]
        self.qb = self.spec.q_blocks()
        self.ub = self.spec.u_blocks()
        self._osim = None

    def state(self, k: int, enable_all: bool = True) -> sj.State:
        """Random state ``k``: stops engaged (high on the tip, low on the arm) or clear."""
        _, qq, u = self.states[k]
        st = self.s0.with_q(jnp.asarray(qq)).with_u(jnp.asarray(u))
        q_tip, q_arm = qq[self.qb[3]][0], qq[self.qb[1]][0]
        st = self.el["stop_hi"].set_bounds(st, q_tip - 1.0, q_tip - 0.05)
        st = self.el["stop_lo"].set_bounds(st, q_arm + 0.1, q_arm + 1.0)
        st = self.el["stop_off"].set_bounds(st, q_tip - 0.5, q_tip + 0.5)
        if enable_all:
            st = self.el["gravity"].enable(st)
        return st

    def evaluate(self, st: sj.State) -> dict:
        """Everything ``make_evaluate`` computes, as NumPy, plus each element's generalized
        force ``J^T F + f`` and the rates ``dPE/dt = dPE/dq . qdot``."""
        out, realized = self._eval(st.q, st.u, st.instance, st.discrete)
        out = jax.tree_util.tree_map(np.asarray, out)
        out["state"] = realized  # the State realized to Velocity
        for n in self.names:
            r = out[n]
            r["gen"] = out["J"].T @ r["F"].reshape(-1) + r["tau"]
        out["pot_rate"] = out["dpot_dq"] @ out["qdot"]
        return out

    def euler(self, k: int) -> dict:
        """``make_evaluate``'s ``euler`` at random state ``k`` (same physical state)."""
        st = self.state(k)
        qe = jnp.asarray(self.states[k][0])
        out = self._euler(qe, st.u, st.instance, st.discrete)
        return jax.tree_util.tree_map(np.asarray, out)

    def udot(self, st: sj.State) -> np.ndarray:
        return np.asarray(self._udot(st.q, st.u, st.instance, st.discrete))

    @property
    def osim(self) -> OpenSimSide:
        if self._osim is None:
            pytest.importorskip("opensim")
            self._osim = OpenSimSide(self.spec)
        return self._osim

    def u_index(self, body: int, which: int) -> int:
        return self.ub[body].start + which


@pytest.fixture(scope="module")
def case():
    return CaseData()


@pytest.fixture(scope="module")
def results(case):
    """``evaluate`` at every random state (everything enabled)."""
    return [case.evaluate(case.state(k)) for k in range(len(case.states))]


# ----------------------------------------------------------------------------- 1. Simbody


@pytest.mark.oracle
def test_each_element_against_simbody(case, results):
    os_ = case.osim
    M = sum(b.mass for b in case.spec.bodies)
    g = np.linalg.norm(case.spec.gravity)
    for (qe, _, u), res in zip(case.states, results):
        F0, tau0, pe0, pw0 = os_.evaluate(qe, u, on=())
        for name in OSIM_COMPARED:
            F, tau, pe, pw = os_.evaluate(qe, u, on=(name,))
            if name not in ("uniform_gravity", "gravity"):
                F, tau, pe, pw = F - F0, tau - tau0, pe - pe0, pw - pw0
            r = res[name]
            if name == "gravity":
                pe -= M * g * G_ZERO  # Simbody's Force::Gravity offset m g z per body
            scale = max(np.abs(F).max(), np.abs(tau).max())
            _record(f"simbody {name} body forces", r["F"], F, scale)
            _record(f"simbody {name} mobility forces", r["tau"], tau, scale)
            _record(f"simbody {name} power", r["power"], pw, max(abs(pw), abs(pw0), 1e-3))
            if name.startswith("mob_spring"):  # SpringGeneralizedForce reports no energy
                b, w, k, q0 = MOB_SPRING_PIN if name == "mob_spring_pin" else MOB_SPRING_SLIDER
                pe = 0.5 * k * (qe[case.spec.q_blocks(euler=True)[b]][w] - q0) ** 2
                _record(f"analytic {name} energy", r["pe"], pe, max(pe, 1e-3))
            else:
                _record(f"simbody {name} energy", r["pe"], pe, max(abs(pe), abs(pe0), 1e-3))


@pytest.mark.oracle
def test_all_elements_udot_against_simbody(case):
    """The whole model with every element that has a counterpart (one gravity)."""
    on = [n for n in OSIM_COMPARED if n != "gravity"]
    for k, (qe, _, u) in enumerate(case.states):
        st = case.state(k, enable_all=False)
        for n in NO_OSIM:
            st = case.el[n].disable(st)
        _record("simbody udot (all elements)", case.udot(st), case.osim.udot(qe, u, on))


# ----------------------------------------------------------------------------- 2. identities


def test_euler_angle_mode_gives_the_same_forces(case, results):
    """The same physical states with Ball and Free in Euler-angle mode (OpenSim's mode):
    nq changes, so the mobility elements must find their coordinate in the new layout
    (body kinematics in Euler mode are covered by test_oracle)."""
    for k, res in enumerate(results):
        out = case.euler(k)
        for n in EULER_CHECKED:
            F, tau, pe, power = out[n]
            r = res[n]
            scale = max(1.0, np.abs(r["F"]).max(), np.abs(r["tau"]).max())
            _record("Euler mode = quaternion mode forces", F, r["F"], scale)
            _record("Euler mode = quaternion mode forces", tau, r["tau"], scale)
            _record("Euler mode = quaternion mode energy", pe, r["pe"], max(1.0, abs(r["pe"])))
            _record("Euler mode = quaternion mode power", power, r["power"], max(1.0, abs(r["power"])))


def test_conservative_elements_generalized_force_is_minus_energy_gradient(case, results):
    """``J^T F + f = -N^T dPE/dq`` and ``power = -dPE/dt``, by autodiff of the energy."""
    n = len(case.names)
    extra = {"pull": n, "const_force": n + 1}  # reference potentials -f d and -force . p
    for res in results:
        N = res["N"]
        for name in (*CONSERVATIVE, *extra):
            i = extra.get(name, case.names.index(name))
            gen, dpe, rate = res[name]["gen"], res["dpot_dq"][i], res["pot_rate"][i]
            scale = np.abs(gen).max()
            _record(f"identity {name} J^T F + f = -N^T dPE/dq", gen, -N.T @ dpe, scale)
            _record(f"identity {name} power = -dPE/dt", res[name]["power"], -rate, max(abs(rate), 1.0))
            if name in extra:
                assert res[name]["pe"] == 0.0  # as Simbody: no energy reported
            else:
                _record(f"identity {name} energy", res[name]["pe"], res["pot"][i])


def test_power_is_generalized_force_times_u(case, results):
    for (_, _, u), res in zip(case.states, results):
        for name in case.names:
            r = res[name]
            _record(f"identity {name} power = gen . u", r["power"], r["gen"] @ u, max(1.0, abs(r["power"])))
            # and, independently of calc_power, F . V + f . u with the matter's velocities
            _record(
                f"identity {name} power = F.V + f.u",
                r["power"],
                np.sum(r["F"] * res["V"]) + r["tau"] @ u,
                max(1.0, abs(r["power"])),
            )


def test_dampers_dissipate_c_rate_squared(case, results):
    n = len(case.names)
    for (_, _, u), res in zip(case.states, results):
        rate = res["pot_rate"][n + 2]  # d/dt of the damper's length (autodiff)
        _record("damper power = -c ddot^2", res["damper"]["power"], -DAMPER[4] * rate**2, 1.0)
        _record("global damper power = -c |u|^2", res["global_damper"]["power"], -GLOBAL_C * u @ u, 1.0)
        b, w, c = MOB_DAMPER
        _record("mobility damper power", res["mob_damper"]["power"], -c * u[case.u_index(b, w)] ** 2, 1.0)
        # bushing: f = -(k q + c qdot) on its own coordinates q (computed here from the poses)
        qb, qbd = res["pot"][n + 3 : n + 9], res["pot_rate"][n + 3 : n + 9]
        k, c = np.asarray(BUSHING[4]), np.asarray(BUSHING[5])
        _record("bushing energy = k q^2 / 2", res["bushing"]["pe"], 0.5 * k @ qb**2)
        _record("bushing power", res["bushing"]["power"], -(k * qb + c * qbd) @ qbd, 1.0)
        qk = res["pot"][n + 9 : n + 15]
        _record(
            "bushing_k energy = k q^2 / 2", res["bushing_k"]["pe"], 0.5 * np.asarray(BUSHING_K[4]) @ qk**2
        )
        for name in ("damper", "global_damper", "mob_damper"):
            assert res[name]["power"] <= 0.0
        assert res["bushing"]["power"] + res["pot_rate"][case.names.index("bushing")] <= 0.0


def test_elements_add_up_to_what_realize_applies(case, results):
    for res in results:
        F = sum(res[n]["F"] for n in case.names)
        tau = sum(res[n]["tau"] for n in case.names)
        _record("sum of elements = realized body forces", F, res["F"])
        _record("sum of elements = realized mobility forces", tau, res["tau"], np.abs(F).max())
        _record("sum of energies = system energy", sum(res[n]["pe"] for n in case.names), res["pe"])
        # J^T F + f per element (J from calc_system_jacobian) against the matter's
        # multiply_by_system_jacobian_transpose of the realized total
        gen = sum(res[n]["gen"] for n in case.names)
        _record("sum of elements = applied generalized force", gen, res["gen"])


def _stop_force(q, qd, k, d, lo, hi):
    """Simbody's ``Force::MobilityLinearStop`` (Force.cpp): force on the u of the same
    index as q, and energy."""
    if q > hi:
        return min(0.0, -k * (q - hi) * (1 + d * qd)), 0.5 * k * (q - hi) ** 2
    if q < lo:
        return max(0.0, -k * (q - lo) * (1 - d * qd)), 0.5 * k * (q - lo) ** 2
    return 0.0, 0.0


def test_mobility_linear_stop_matches_simbody_formula(case, results):
    """Above, below and between the bounds, approaching and leaving, and the clamp that
    keeps a fast-leaving stop from pulling."""
    st0 = case.state(0)
    k, d, lo, hi = 300.0, 0.8, -0.2, 0.15
    st0 = case.el["stop_off"].set_material_properties(st0, k, d)
    st0 = case.el["stop_off"].set_bounds(st0, lo, hi)
    iq, iu = case.qb[3].start, case.u_index(3, 0)
    i = case.names.index("stop_off")
    for q, qd in [(0.3, 0.5), (0.3, -0.5), (0.3, -2.0), (0.0, 1.0), (-0.4, -0.3), (-0.4, 0.6), (-0.4, 2.0)]:
        st = st0.with_q(st0.q.at[iq].set(q)).with_u(st0.u.at[iu].set(qd))
        res = case.evaluate(st)
        f, pe = _stop_force(q, qd, k, d, lo, hi)
        r = res["stop_off"]
        _record("stop force vs Simbody formula", r["tau"][iu], f, max(abs(f), 1.0))
        assert np.count_nonzero(r["tau"]) <= 1 and not r["F"].any()
        _record("stop energy vs Simbody formula", r["pe"], pe, max(pe, 1.0))
        # dissipation is never negative: power <= -dPE/dt
        assert r["power"] <= -res["pot_rate"][i] + 1e-12
    # and at the random states, the engaged stops
    for kk, res in enumerate(results):
        st = case.state(kk)
        for name, (b, w, k_, d_) in (("stop_hi", STOP_HI), ("stop_lo", STOP_LO)):
            inst = st.instance["forces"]
            j = 0 if name == "stop_hi" else 1
            lo_, hi_ = inst["MobilityLinearStop.q_low"][j], inst["MobilityLinearStop.q_high"][j]
            q, qd = float(st.q[case.qb[b].start + w]), float(st.u[case.u_index(b, w)])
            f, pe = _stop_force(q, qd, k_, d_, float(lo_), float(hi_))
            assert f != 0.0
            _record("stop force vs Simbody formula", res[name]["tau"][case.u_index(b, w)], f, abs(f))
            _record("stop energy vs Simbody formula", res[name]["pe"], pe, pe)


def test_gravity_zero_height_and_exclusion(case, results):
    res0 = results[0]
    st = case.state(0)
    M = sum(b.mass for b in case.spec.bodies)
    g = np.linalg.norm(case.spec.gravity)
    ug, gr = case.el["uniform_gravity"], case.el["gravity"]
    head = case.bodies[2]
    st = ug.set_zero_height(st, 0.4)
    st = gr.set_body_is_excluded(st, head, True)
    assert bool(gr.get_body_is_excluded(st, head)) and not bool(gr.get_body_is_excluded(st, case.bodies[1]))
    res = case.evaluate(st)
    # UniformGravity: PE = -sum m (g . com + h), the offset not scaled by |g| (Simbody)
    _record(
        "UniformGravity zero height", res["uniform_gravity"]["pe"], res0["uniform_gravity"]["pe"] - M * 0.4
    )
    # Force.Gravity: an excluded body gets no force and no energy (its own share removed)
    F_head = res0["gravity"]["F"][head.index]
    com = res0["com"][head.index]
    m_head = case.spec.bodies[2].mass
    expected = res0["gravity"]["pe"] + F_head[3:] @ np.asarray(com) + m_head * g * G_ZERO
    _record("Gravity exclusion energy", res["gravity"]["pe"], expected)
    F = res0["gravity"]["F"].copy()
    F[head.index] = 0.0
    _record("Gravity exclusion forces", res["gravity"]["F"], F)
    np.testing.assert_allclose(F_head[3:], m_head * case.spec.gravity, rtol=1e-14)
    # Gravity equals UniformGravity with the same vector (apart from the energy offset)
    _record("Gravity = UniformGravity forces", res0["gravity"]["F"], res0["uniform_gravity"]["F"])
    _record(
        "Gravity = UniformGravity energy",
        res0["gravity"]["pe"] + M * g * G_ZERO,
        res0["uniform_gravity"]["pe"],
    )


def test_setters_change_what_the_element_applies(case, results):
    """Each element's setters write its own Instance slot and the force follows."""
    res0, el = results[0], case.el
    g = np.asarray(case.spec.gravity)
    q_tip = float(case.state(0).q[case.qb[3].start])
    st = case.state(0)
    st = el["spring_g"].set_stiffness(st, 2 * SPRING_G[4])
    st = el["spring"].set_rest_length(st, 0.25)
    st = el["damper"].set_damping(st, 3 * DAMPER[4])
    st = el["pull"].set_force(st, -PULL[4])
    st = el["const_force"].set_force(st, 2 * np.asarray(CONST_FORCE[2]))
    st = el["const_torque"].set_torque(st, -np.asarray(CONST_TORQUE[1]))
    st = el["global_damper"].set_damping(st, 2 * GLOBAL_C)
    st = el["mob_spring_pin"].set_stiffness(st, 3 * MOB_SPRING_PIN[2])
    st = el["mob_spring_slider"].set_q_zero(st, q_tip)
    st = el["mob_damper"].set_damping(st, 2 * MOB_DAMPER[2])
    st = el["mob_force"].set_force(st, -MOB_FORCE[2])
    st = el["uniform_gravity"].set_gravity(st, 2 * g)
    st = el["gravity"].set_magnitude(el["gravity"].set_direction(st, 5 * g), 2 * np.linalg.norm(g))
    st = el["stop_hi"].set_material_properties(st, 2 * STOP_HI[2], 0.0)
    np.testing.assert_allclose(el["uniform_gravity"].get_gravity(st), 2 * g, rtol=1e-15)
    np.testing.assert_allclose(st.instance["forces"]["TwoPointLinearSpring.x0"], [SPRING_G[5], 0.25])
    res = case.evaluate(st)
    for name, factor in [
        ("spring_g", 2),
        ("damper", 3),
        ("pull", -1),
        ("const_force", 2),
        ("const_torque", -1),
        ("global_damper", 2),
        ("mob_spring_pin", 3),
        ("mob_damper", 2),
        ("mob_force", -1),
        ("uniform_gravity", 2),
        ("gravity", 2),
        ("stop_hi", 2),
    ]:
        r, r0 = res[name], res0[name]
        scale = max(np.abs(r0["F"]).max(), np.abs(r0["tau"]).max())
        _record("setters", r["F"], factor * r0["F"], scale)
        _record("setters", r["tau"], factor * r0["tau"], scale)
        if name in ("uniform_gravity", "gravity", "stop_hi"):  # energies linear in the setting
            _record("setters", r["pe"], factor * r0["pe"])
    assert not res["mob_spring_slider"]["tau"].any() and res["mob_spring_slider"]["pe"] == 0.0


def test_custom_force_equals_the_builtin_spring(case, results):
    for res in results:
        _record("Custom = TwoPointLinearSpring forces", res["custom"]["F"], res["spring_g"]["F"])
        _record("Custom = TwoPointLinearSpring energy", res["custom"]["pe"], res["spring_g"]["pe"])
    assert case.el["custom"].depends_only_on_positions()


def test_discrete_forces(case, results):
    res0 = results[0]
    disc, cf = case.el["discrete"], case.el["const_force"]
    st = case.state(0)
    assert not res0["discrete"]["F"].any() and not res0["discrete"]["tau"].any()
    # add_force_to_body_point gives the ConstantForce element's body forces
    b, s, f = CONST_FORCE
    st1 = disc.add_force_to_body_point(res0["state"], case.bodies[b], s, jnp.asarray(f))
    b2, w, fm = MOB_FORCE
    st1 = disc.set_one_mobility_force(st1, case.bodies[b2], w, fm)
    assert st1.stage < sj.Stage.DYNAMICS
    np.testing.assert_allclose(
        disc.get_all_body_forces(st1), res0["const_force"]["F"], rtol=1e-14, atol=1e-14
    )
    st1 = cf.disable(case.el["mob_force"].disable(st1))
    res1 = case.evaluate(st1)
    _record("DiscreteForces = ConstantForce", res1["discrete"]["F"], res0["const_force"]["F"])
    _record("DiscreteForces = MobilityConstantForce", res1["discrete"]["tau"], res0["mob_force"]["tau"])
    _record("DiscreteForces swapped in: same udot", case.udot(st1), case.udot(st))
    # whole arrays, and clearing
    Fb = np.random.default_rng(5).normal(size=res0["F"].shape)
    st2 = disc.set_all_body_forces(disc.set_all_mobility_forces(st, -res0["tau"]), Fb)
    res2 = case.evaluate(st2)
    np.testing.assert_array_equal(res2["discrete"]["F"], Fb)
    np.testing.assert_array_equal(res2["discrete"]["tau"], -res0["tau"])
    cleared = disc.clear_all_forces(st2)
    assert not np.asarray(disc.get_all_body_forces(cleared)).any()
    assert not np.asarray(disc.get_all_mobility_forces(cleared)).any()


def test_enable_and_disable_through_the_state(case, results):
    res0 = results[0]
    el = case.el
    s_default = case.state(0, enable_all=False)
    assert bool(el["gravity"].is_disabled(s_default))
    assert not any(bool(el[n].is_disabled(s_default)) for n in case.names if n != "gravity")
    off = case.names[::2]
    st = case.state(0)
    for n in off:
        st = el[n].disable(st)
    assert st.stage <= sj.Stage.MODEL
    res = case.evaluate(st)
    for n in case.names:
        if n in off:
            assert res[n]["disabled"]
            assert not res[n]["F"].any() and not res[n]["tau"].any()
            assert res[n]["pe"] == 0.0 and res[n]["power"] == 0.0
        else:
            assert not res[n]["disabled"]
            _record("enabled elements unchanged by disabling others", res[n]["F"], res0[n]["F"], 1.0)
    on = [n for n in case.names if n not in off]
    _record("realized forces = sum of enabled", res["F"], sum(res0[n]["F"] for n in on))
    _record("energy = sum of enabled", res["pe"], sum(res0[n]["pe"] for n in on))
    # the applied generalized force realize uses (J^T F + f of the enabled elements) drops by
    # exactly the disabled elements' share
    gen_off = sum(res0[n]["gen"] for n in off)
    _record("applied gen. force drops by the disabled", res0["gen"] - res["gen"], gen_off)
    # and enabling them again restores everything
    for n in off:
        st = el[n].enable(st)
    res_back = case.evaluate(st)
    np.testing.assert_allclose(res_back["gen"], res0["gen"], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(case.udot(st), case.udot(case.state(0)), rtol=1e-13, atol=1e-13)


# ----------------------------------------------------------------------------- 3. gradients


def test_udot_gradients_wrt_force_parameters(case):
    """check_grads (fwd and rev) of udot w.r.t. the numeric parameters of every element in
    the State's Instance dict: stiffnesses, dampings, forces, torques, rest lengths, bounds,
    gravity, stations and bushing frame offsets. Left out: the on/off flags and Gravity's
    body mask (not continuous), and, to keep compile time down, the bushing frames'
    rotation matrices."""
    st = case.state(1)
    forces = st.instance["forces"]
    keys = [k for k in forces if not k.endswith((".enabled", ".included", "_R"))]
    assert {
        "TwoPointLinearSpring.stiffness",
        "TwoPointLinearSpring.station1",
        "LinearBushing.damping",
        "LinearBushing.XM_p",
        "MobilityLinearStop.q_high",
        "UniformGravity.g",
    } <= set(keys)
    assert len({k.split(".")[0].rstrip("0123456789") for k in keys}) == 13  # every kind with parameters
    p0 = {k: forces[k] for k in keys}

    def udot(p):  # the same compiled udot as the other tests
        return case._udot(st.q, st.u, {**st.instance, "forces": {**forces, **p}}, st.discrete)

    check_grads(udot, (p0,), order=1, modes=("fwd", "rev"))
