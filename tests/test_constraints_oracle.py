"""simjax's constrained forward dynamics against Simbody 3.9 (through OpenSim 4.6).

Closed loops and couplers, gravity on, full (non-symmetric) inertias, tilted body frames,
non-zero velocities, float64. Compared: ``udot`` and the Lagrange multipliers of
``M udot + G^T lambda = f`` (1e-9 relative to the largest entry), the position errors
``qerr`` at a configuration that is *not* assembled, the velocity errors ``uerr`` and
the Ball reaction forces.

Models (each built once in simjax and once in OpenSim from the same ``oracle_models``
spec; q/u slots of OpenSim found by probing):

* ``fourbar``: planar four-bar, three Pin links (crank on Ground, coupler, rocker), the
  rocker's tip closed to Ground with a Ball (OpenSim ``PointConstraint``). The Ball's
  z row is redundant (its G row is round-off); Simbody gives it lambda = 0.
* ``fourbar_rod``: the same three links, the rocker's tip tied to a Ground point off the
  plane by a Rod (OpenSim ``ConstantDistanceConstraint``); 2 dofs.
* ``loop3d``: Pin (base) - Ball - Universal - Pin chain from Ground closed to Ground with
  a Ball, plus a second Ball between a body of that chain and a Universal-Pin branch of
  the base, whose common ancestor is the moving base (multipliers and errors are in the
  ancestor's frame).
* ``coupler``: open Pin-Pin-Slider-Universal chain with two ``CoordinateCoupler``s
  (OpenSim ``CoordinateCouplerConstraint``, ``C = f(q_indep) - q_dep``): a linear one
  (``LinearFunction``) between a rotation and a translation, and a cubic one
  (``PolynomialFunction``) between the two coordinates of the Universal joint.
* ``weld``: two loops closed by Welds (OpenSim ``WeldConstraint`` with offset
  transforms), tilted and offset frames on both bodies: Pin (base) - Ball - Universal -
  Pin welded to a Universal - Pin branch of the base (ancestor: the moving base), and a
  Pin - Ball - Universal - Ball chain from Ground welded to Ground (Ground is body 2).

Conventions checked here (Simbody's, matched by simjax):

* Ball ``perr = p_S2 - p_S1`` expressed in the ancestor frame; the force on body 2 at
  its station is ``-lambda`` (in the ancestor frame). Simbody's Ball velocity error is
  measured in body 1's frame, ``v_S2 - v_C`` with C body 1's material point at S2, so it
  equals simjax's ``d/dt perr`` minus ``w_A1 x perr``: they agree at assembled states
  (and always when body 1 is Ground); the difference is checked explicitly.
* Rod: ``perr = |p_S2 - p_S1| - length`` in both (not ``(r.r - L^2)/2``), so its
  multiplier is the rod tension itself (force on body 2 is ``-lambda`` along S1->S2).
* Simbody solves ``M udot + G^T lambda = f``; OpenSim's ``Constraint.calcConstraintForces``
  returns the body forces of ``G^T lambda`` (minus the physical constraint forces).
* The four-bar's redundant z multiplier: Simbody ~1e-16; simjax's regularised solve
  amplifies the ~1e-17 round-off in that row of G and b to ~1e-8 (relative ~6e-9), so
  the x, y multipliers are compared at 1e-9 and the z one must vanish (a round-off row of
  G is dropped exactly, as Simbody's rank-revealing solve does).
* Weld: ``perr = [RF.x.RB.y, RF.y.RB.z, RF.z.RB.x, p_F2 - p_F1]`` in the ancestor frame
  (``RB``/``RF``: axes of the frame on body 1/2); multipliers [3 rotational; 3
  translational]; ``G^T lambda`` puts the torque ``sum_i lambda_i (u_i x v_i)`` ((u, v) =
  (RF.x, RB.y), (RF.y, RB.z), (RF.z, RB.x)) and the force ``lambda[3:6]`` at F2's origin
  on body 2, their negatives on body 1. The rotational velocity errors are exact
  derivatives in both; the translational ones differ off the loop as for Ball.
* ``q`` of Ball joints: simjax uses quaternions, OpenSim X-Y-Z Euler angles; ``u`` is the
  same. simjax's ``qerr`` then has one quaternion-norm entry per ball after the ``mp``
  constraint rows; only the constraint rows are compared.

Run ``pytest tests/test_constraints_oracle.py -s`` to print the largest errors.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np
import pytest

import simjax as sj

sys.path.insert(0, str(Path(__file__).parent))
import oracle_models as om

pytestmark = pytest.mark.oracle
osim = pytest.importorskip("opensim")

RTOL = 1e-9
#: quantity -> largest error seen, relative to max(1, max|Simbody's|) (printed at the end)
ERRORS: dict[str, float] = {}


def _check(actual, desired, key: str, rtol: float = RTOL, extra_atol: float = 0.0):
    actual, desired = np.asarray(actual, float), np.asarray(desired, float)
    assert actual.shape == desired.shape, (key, actual.shape, desired.shape)
    scale = max(1.0, float(np.abs(desired).max()) if desired.size else 1.0)
    err = float(np.abs(actual - desired).max()) / scale if desired.size else 0.0
    ERRORS[key] = max(ERRORS.get(key, 0.0), err)
    np.testing.assert_allclose(actual, desired, rtol=0, atol=rtol * scale + extra_atol, err_msg=key)


@pytest.fixture(scope="module", autouse=True)
def _report_errors():
    yield
    if ERRORS:
        print("\nlargest errors vs Simbody (max|simjax - simbody| / max(1, max|simbody|)):")
        for k, e in sorted(ERRORS.items()):
            print(f"  {k:40s} {e:.2e}")
    _pair.cache_clear()


# ----------------------------------------------------------------------------- kinematics


def _fk(spec: om.ModelSpec, q: np.ndarray, euler: bool = False):
    """``(R_GB, p_GB)`` per spec body, in numpy (independent of both engines)."""
    out = []
    for b, (R, p, _) in zip(spec.bodies, om.joint_poses(spec, q, euler)):
        X_GP = (np.eye(3), np.zeros(3)) if b.parent < 0 else out[b.parent]
        X = om._compose(om._compose(X_GP, (b.R_PF, b.p_PF)), (R, p))
        out.append(om._compose(X, om._inv((b.R_BM, b.p_BM))))
    return out


def _station(X, p_B):
    return X[1] + X[0] @ np.asarray(p_B, float)


def _mat33(R) -> np.ndarray:
    return np.array([[R.get(i, j) for j in range(3)] for i in range(3)])


def _vec3(v) -> np.ndarray:
    return np.array([v.get(i) for i in range(3)])


# ----------------------------------------------------------------------------- constraints


@dataclass(frozen=True)
class BallSpec:
    body1: int  # spec index, -1 = Ground
    point1: np.ndarray
    body2: int
    point2: np.ndarray


@dataclass(frozen=True)
class RodSpec:
    body1: int
    point1: np.ndarray
    body2: int
    point2: np.ndarray
    length: float


@dataclass(frozen=True)
class CouplerSpec:
    """``f(q_indep) - q_dep = 0``; ``coords`` = ``(body, which q)`` with the dependent last;
    ``kind`` ``"linear"`` (``coef = (slope, intercept)``, OpenSim ``LinearFunction``) or
    ``"poly"`` (one coordinate, coefficients of decreasing powers, ``PolynomialFunction``).

    (OpenSim 4.6's ``MultivariatePolynomialFunction`` is not usable here: its
    ``calcDerivative`` returns the first derivative for every second-derivative request,
    so Simbody's acceleration-level coupler equation is wrong with it.)"""

    coords: tuple[tuple[int, int], ...]
    kind: str
    coef: tuple[float, ...]

    def value(self, x, xp=np):
        c = self.coef
        if self.kind == "linear":
            return c[0] * x[0] + c[1]
        v = 0.0 * x[0]
        for ck in c:
            v = v * x[0] + ck
        return v

    def opensim_function(self):
        if self.kind == "linear":
            return osim.LinearFunction(*self.coef)
        return osim.PolynomialFunction(osim.Vector.createFromMat(np.array(self.coef)))


@dataclass(frozen=True)
class WeldSpec:
    """Frame F2 = ``(R2, p2)`` on body 2 coincides with F1 = ``(R1, p1)`` on body 1
    (OpenSim ``WeldConstraint`` with offset transforms)."""

    body1: int
    R1: np.ndarray
    p1: np.ndarray
    body2: int
    R2: np.ndarray
    p2: np.ndarray


def _osim_transform(R, p):
    m = osim.Mat33()
    for i in range(3):
        for j in range(3):
            m.set(i, j, float(R[i, j]))
    return osim.Transform(osim.Rotation(m), osim.Vec3(*np.asarray(p, float)))


# ----------------------------------------------------------------------------- the twin models


class Pair:
    """One model in simjax and in OpenSim, evaluated at the same ``(q, u)`` (simjax layout,
    quaternions for Ball joints)."""

    def __init__(self, spec: om.ModelSpec, constraints: list, q_default: np.ndarray):
        self.spec = spec
        self.constraints = constraints
        # ---------------------------------------------------------------- simjax
        system, matter, bodies = om.to_simjax(spec)
        body = lambda i: matter.Ground() if i < 0 else bodies[i]
        sjc = []
        for c in constraints:
            if isinstance(c, BallSpec):
                sjc.append(sj.Constraint.Ball(body(c.body1), c.point1, body(c.body2), c.point2))
            elif isinstance(c, RodSpec):
                sjc.append(sj.Constraint.Rod(body(c.body1), c.point1, body(c.body2), c.point2, c.length))
            elif isinstance(c, WeldSpec):
                sjc.append(
                    sj.Constraint.Weld(
                        body(c.body1),
                        sj.Transform(R=c.R1, p=c.p1),
                        body(c.body2),
                        sj.Transform(R=c.R2, p=c.p2),
                    )
                )
            else:
                n = len(c.coords) - 1
                fn = lambda x, c=c, n=n: c.value(x[:n], jnp) - x[n]
                sjc.append(
                    sj.Constraint.CoordinateCoupler(
                        matter, fn, [bodies[b] for b, _ in c.coords], [k for _, k in c.coords]
                    )
                )
        self.system, self.matter, self.bodies, self.sjc = system, matter, bodies, sjc
        s0 = system.realize_topology()
        balls = [k for k, c in enumerate(sjc) if isinstance(c, sj.Constraint.Ball)]
        rods = [c for c in sjc if isinstance(c, sj.Constraint.Rod)]

        def f(q, u):
            s = system.realize(s0.with_q(q).with_u(u), sj.Stage.ACCELERATION)
            R, _ = matter.get_body_transforms(s)
            react = [sjc[k].get_ball_reaction_force_on_body2(s) for k in balls]
            return dict(
                udot=s.udot,
                lam=s.multipliers,
                qerr=s.qerr,
                uerr=s.uerr,
                udoterr=s.udoterr,
                G=matter.calc_g(s),
                R=R,
                tension=jnp.stack([c.get_rod_tension(s) for c in rods]) if rods else jnp.zeros(0),
                react=jnp.stack(react) if react else jnp.zeros((0, 3)),
            )

        self._f = jax.jit(f)
        # ---------------------------------------------------------------- OpenSim
        poses = om.joint_poses(spec, q_default, euler=False)

        def add(model, obodies, joints):
            ob = lambda i: model.getGround() if i < 0 else obodies[i]
            for J, (_, _, coords) in zip(joints, poses):
                for k, v in enumerate(coords):  # initSystem() then has nothing to assemble
                    J.upd_coordinates(k).setDefaultValue(float(v))
            for k, c in enumerate(constraints):
                if isinstance(c, BallSpec):
                    oc = osim.PointConstraint(
                        ob(c.body1), osim.Vec3(*c.point1), ob(c.body2), osim.Vec3(*c.point2)
                    )
                elif isinstance(c, RodSpec):
                    oc = osim.ConstantDistanceConstraint(
                        ob(c.body1), osim.Vec3(*c.point1), ob(c.body2), osim.Vec3(*c.point2), c.length
                    )
                elif isinstance(c, WeldSpec):
                    oc = osim.WeldConstraint(
                        f"c{k}",
                        ob(c.body1),
                        _osim_transform(c.R1, c.p1),
                        ob(c.body2),
                        _osim_transform(c.R2, c.p2),
                    )
                else:
                    names = [joints[b].get_coordinates(w).getName() for b, w in c.coords]
                    oc = osim.CoordinateCouplerConstraint()
                    indep = osim.ArrayStr()
                    for nm in names[:-1]:
                        indep.append(nm)
                    oc.setIndependentCoordinateNames(indep)
                    oc.setDependentCoordinateName(names[-1])
                    oc.setFunction(c.opensim_function())
                oc.setName(f"c{k}")
                model.addConstraint(oc)

        self.osm = om.to_opensim(spec, add_forces=add)

    # -------------------------------------------------------------------- evaluation
    def simjax(self, q, u) -> dict:
        return {k: np.asarray(v) for k, v in self._f(jnp.asarray(q), jnp.asarray(u)).items()}

    def opensim(self, q, u) -> dict:
        o = self.osm
        s = o.set_state(self.spec, np.asarray(q), np.asarray(u), euler=False)
        Q0 = s.getQ().to_numpy()
        o.model.realizeAcceleration(s)
        np.testing.assert_array_equal(s.getQ().to_numpy(), Q0)  # nothing re-assembled
        np.testing.assert_array_equal(s.getU().to_numpy()[o.u_perm], u)
        cs = o.model.getConstraintSet()
        # per constraint: OpenSim's calcConstraintForces on each constrained body (ancestor
        # frame); these are the body forces of G^T lambda, i.e. minus the physical forces
        forces = []
        for k in range(cs.getSize()):
            bf, mf = osim.VectorOfSpatialVec(), osim.Vector()
            cs.get(k).calcConstraintForces(s, bf, mf)
            c = self.constraints[k]
            if isinstance(c, (BallSpec, RodSpec)):
                forces.append([_vec3(bf.get(j).get(1)) for j in range(2)])
            elif isinstance(c, WeldSpec):  # (torque about the body origin, force)
                forces.append([(_vec3(bf.get(j).get(0)), _vec3(bf.get(j).get(1))) for j in range(2)])
            else:
                forces.append([])
        G = osim.Matrix()
        o.model.getMatterSubsystem().calcG(s, G)
        return dict(
            udot=s.getUDot().to_numpy()[o.u_perm],
            lam=s.getMultipliers().to_numpy(),
            qerr=s.getQErr().to_numpy(),
            uerr=s.getUErr().to_numpy(),
            udoterr=s.getUDotErr().to_numpy(),
            R=[np.eye(3)] + [_mat33(b.getTransformInGround(s).R()) for b in o.bodies],
            W=[np.zeros(3)] + [_vec3(b.getAngularVelocityInGround(s)) for b in o.bodies],
            forces=forces,
            G=G.to_numpy()[:, o.u_perm],
        )

    def consistent_u(self, q, u_guess) -> np.ndarray:
        """``u_guess`` projected onto the null space of Simbody's ``G(q)``."""
        G = self.opensim(q, np.zeros(self.spec.nu))["G"]
        return u_guess - np.linalg.pinv(G, rcond=1e-12) @ (G @ u_guess)

    @property
    def mp(self) -> int:
        return sum({BallSpec: 3, RodSpec: 1, CouplerSpec: 1, WeldSpec: 6}[type(c)] for c in self.constraints)


def _ancestor(spec: om.ModelSpec, b1: int, b2: int) -> int:
    def path(b):
        out = [b]
        while b >= 0:
            b = spec.bodies[b].parent
            out.append(b)
        return out

    p1 = path(b1)
    return next(b for b in path(b2) if b in p1)


# ----------------------------------------------------------------------------- four-bar

_fourbar_spec = om.fourbar_spec
fourbar_assemble = om.fourbar_assemble


#: Ground point of the Rod variant: off the four-bar's plane
_ROD_OFFSET = np.array([0.05, 0.1, 0.2])
_FOURBAR_STATES = [(0.9, 1.3), (2.6, -0.8), (-1.7, 2.1)]


@functools.cache
def _pair(name: str) -> Pair:
    if name == "fourbar":
        spec, tip, gp = _fourbar_spec()
        q0, _ = fourbar_assemble(*_FOURBAR_STATES[0])
        return Pair(spec, [BallSpec(-1, gp, 2, tip)], q0)
    if name == "fourbar_rod":
        spec, tip, gp = _fourbar_spec()
        q0, _ = fourbar_assemble(*_FOURBAR_STATES[0])
        p1 = gp + _ROD_OFFSET
        length = float(np.linalg.norm(_station(_fk(spec, q0)[2], tip) - p1))
        return Pair(spec, [RodSpec(-1, p1, 2, tip, length)], q0)
    if name == "loop3d":
        spec, q0, cons = _loop3d()
        return Pair(spec, cons, q0)
    if name == "coupler":
        spec, q0, cons = _coupler()
        return Pair(spec, cons, q0)
    if name == "weld":
        spec, q0, cons, _ = _weld_model()
        return Pair(spec, cons, q0)
    raise KeyError(name)


# ----------------------------------------------------------------------------- 3D loops


def _loop3d():
    """base (Pin on Ground) - a1 (Ball) - a2 (Universal) - a3 (Pin), a3's station closed
    to Ground by a Ball; b1 (Universal on base) - b2 (Pin), a Ball between a1 and b2
    (common ancestor: base). The constraint stations are placed where the bodies are at a
    random configuration, so that configuration is assembled exactly."""
    rng = np.random.default_rng(21)
    B = om._body
    bodies = [
        B(rng, "base", -1, "pin", p_PF=[0.0, 1.0, 0.0], rot_scale=np.pi),
        B(rng, "a1", 0, "ball", rot_scale=np.pi),
        B(rng, "a2", 1, "universal", rot_scale=np.pi),
        B(rng, "a3", 2, "pin", rot_scale=np.pi),
        B(rng, "b1", 0, "universal", p_PF=[0.3, -0.2, 0.1], rot_scale=np.pi),
        B(rng, "b2", 4, "pin", rot_scale=np.pi),
    ]
    spec = om.ModelSpec("loop3d", bodies, gravity=np.array([0.3, -9.81, -0.2]))
    _, q, _ = om.random_state(spec, rng)
    X = _fk(spec, q)
    s3 = np.array([0.05, -0.35, 0.02])  # on a3
    s_b2 = np.array([-0.03, -0.3, 0.04])  # on b2
    p_b2 = _station(X[5], s_b2)
    R1, p1 = X[1]
    cons = [
        BallSpec(-1, _station(X[3], s3), 3, s3),
        BallSpec(1, R1.T @ (p_b2 - p1), 5, s_b2),
    ]
    return spec, q, cons


# ----------------------------------------------------------------------------- couplers


def _coupler():
    """c0 (Pin on Ground) - c1 (Pin) - c2 (Slider) - c3 (Universal); couplers
    ``q_c2 = 0.3 q_c0 + 0.1`` (a rotation drives a translation, two mobilizers) and
    ``q_c3[1] = cubic(q_c3[0])`` (two coordinates of one mobilizer)."""
    rng = np.random.default_rng(33)
    B = om._body
    bodies = [
        B(rng, "c0", -1, "pin", p_PF=[0.0, 1.0, 0.0], rot_scale=np.pi),
        B(rng, "c1", 0, "pin", rot_scale=np.pi),
        B(rng, "c2", 1, "slider", rot_scale=np.pi),
        B(rng, "c3", 2, "universal", rot_scale=np.pi),
    ]
    spec = om.ModelSpec("coupler", bodies, gravity=np.array([0.3, -9.81, -0.2]))
    cons = [
        CouplerSpec(((0, 0), (2, 0)), "linear", (0.3, 0.1)),
        CouplerSpec(((3, 0), (3, 1)), "poly", (0.6, -0.5, 0.7, 0.1)),
    ]
    q = rng.uniform(-1.0, 1.0, spec.nq())
    q = _close_couplers(spec, cons, q)
    return spec, q, cons


def _close_couplers(spec, cons, q):
    q = np.array(q, float)
    starts = [sl.start for sl in spec.q_blocks()]
    for c in cons:
        x = np.array([q[starts[b] + w] for b, w in c.coords[:-1]])
        b, w = c.coords[-1]
        q[starts[b] + w] = c.value(x)
    return q


# ----------------------------------------------------------------------------- helpers


def _compare_dynamics(pair: Pair, q, u, tag: str, rows=slice(None)):
    """udot, the multipliers (``rows`` of them) and ``G udot - b = 0`` in both."""
    ours, ref = pair.simjax(q, u), pair.opensim(q, u)
    _check(ours["udot"], ref["udot"], f"{tag} udot")
    _check(ours["lam"][rows], ref["lam"][rows], f"{tag} multipliers")
    _check(ours["udoterr"], 0 * ref["udoterr"], f"{tag} simjax G udot - b", rtol=1e-10)
    np.testing.assert_allclose(ref["udoterr"], 0, atol=1e-10)
    return ours, ref


def _force_on_body2_in_body2(pair: Pair, ref: dict, k: int) -> np.ndarray:
    """Simbody's physical force on body 2 of constraint ``k`` in body 2's frame: minus
    OpenSim's ``calcConstraintForces`` (G^T lambda, in the ancestor frame) re-expressed."""
    c = pair.constraints[k]
    anc = _ancestor(pair.spec, c.body1, c.body2)
    R_GA, R_GB2 = ref["R"][anc + 1], ref["R"][c.body2 + 1]
    return -(R_GB2.T @ R_GA @ ref["forces"][k][1])


# ----------------------------------------------------------------------------- tests: four-bar


@pytest.mark.parametrize("name", ["fourbar", "loop3d"])
def test_simbody_sign_convention(name):
    """Simbody solves ``M udot + G^T lambda = f`` (f: M times udot with the constraints
    switched off), so a Ball's physical force on body 2 is -lambda (simjax's convention)."""
    pair = _pair(name)
    q, u = fourbar_assemble(*_FOURBAR_STATES[0]) if name == "fourbar" else _loop3d_states(pair)[0]
    o = pair.osm
    s = o.set_state(pair.spec, q, u, euler=False)
    o.model.realizeAcceleration(s)
    mat = o.model.getMatterSubsystem()
    udot, lam = s.getUDot().to_numpy(), s.getMultipliers().to_numpy()
    M, G = osim.Matrix(), osim.Matrix()
    mat.calcM(s, M)
    mat.calcG(s, G)
    M, G = M.to_numpy(), G.to_numpy()
    cs = o.model.getConstraintSet()
    for k in range(cs.getSize()):
        cs.get(k).setIsEnforced(s, False)
    o.model.realizeAcceleration(s)
    f = M @ s.getUDot().to_numpy()
    for k in range(cs.getSize()):
        cs.get(k).setIsEnforced(s, True)
    o.model.realizeAcceleration(s)
    scale = np.abs(f).max()
    assert np.abs(M @ udot + G.T @ lam - f).max() < 1e-12 * scale
    assert np.abs(M @ udot - G.T @ lam - f).max() > 1e-2 * scale


def test_fourbar_closed_form_assembly():
    """The closed-form assembly closes the loop (checked in Simbody) to round-off."""
    pair = _pair("fourbar")
    for phi1, w1 in _FOURBAR_STATES:
        q, u = fourbar_assemble(phi1, w1)
        ref = pair.opensim(q, u)
        assert np.abs(ref["qerr"]).max() < 1e-14
        assert np.abs(ref["uerr"]).max() < 1e-14


#: the four-bar Ball's rows: x, y (independent) and z (normal to the plane, redundant)
_XY, _Z = [0, 1], 2


def _record(key: str, value: float) -> float:
    ERRORS[key] = max(ERRORS.get(key, 0.0), value)
    return value


@pytest.mark.parametrize("k", range(len(_FOURBAR_STATES)))
def test_fourbar_ball_dynamics(k):
    """udot, the two independent multipliers and the reaction on the rocker. The
    redundant z multiplier is 0 in Simbody; simjax's is round-off amplified by its
    regularised solve (exact zero, also in the test below)."""
    pair = _pair("fourbar")
    q, u = fourbar_assemble(*_FOURBAR_STATES[k])
    ours, ref = _compare_dynamics(pair, q, u, "fourbar ball", rows=_XY)
    lam_scale = float(np.abs(ref["lam"]).max())
    assert abs(ref["lam"][_Z]) < 1e-14 * lam_scale
    lz = abs(float(ours["lam"][_Z]))
    _record("fourbar ball |lambda_z| simjax / |lambda|", lz / lam_scale)
    assert lz < 1e-12 * lam_scale
    # reaction on body 2 in its frame: -(Simbody's G^T lambda body force), = -lambda in G
    np.testing.assert_allclose(ref["forces"][0][1], ref["lam"], atol=1e-12 * lam_scale)
    f2 = _force_on_body2_in_body2(pair, ref, 0)
    _check(ours["react"][0], f2, "fourbar ball reaction on body 2", extra_atol=lz)


def test_fourbar_redundant_multiplier_is_zero():
    pair = _pair("fourbar")
    for phi1, w1 in _FOURBAR_STATES:
        q, u = fourbar_assemble(phi1, w1)
        ours, ref = pair.simjax(q, u), pair.opensim(q, u)
        scale = max(1.0, float(np.abs(ref["lam"]).max()))
        assert abs(ours["lam"][_Z]) <= RTOL * scale
        _check(ours["react"][0], _force_on_body2_in_body2(pair, ref, 0), "fourbar ball reaction (strict)")


def test_fourbar_ball_errors():
    """qerr and uerr (sign and frame) at a configuration off the loop, and uerr at an
    assembled q with velocities that violate the constraint."""
    pair = _pair("fourbar")
    rng = np.random.default_rng(5)
    q, u = fourbar_assemble(*_FOURBAR_STATES[0])
    qb, ub = q + rng.normal(0, 0.1, 3), u + rng.normal(0, 0.5, 3)
    ours, ref = pair.simjax(qb, ub), pair.opensim(qb, ub)
    assert np.abs(ref["qerr"][:2]).min() > 1e-3  # really not assembled
    _check(ours["qerr"], ref["qerr"], "fourbar ball qerr (not assembled)")
    # body 1 is Ground: Simbody's uerr is d/dt perr here as well
    _check(ours["uerr"], ref["uerr"], "fourbar ball uerr (not assembled)")
    ours, ref = pair.simjax(q, ub), pair.opensim(q, ub)
    assert np.abs(ref["uerr"][:2]).min() > 1e-3
    _check(ours["uerr"], ref["uerr"], "fourbar ball uerr (assembled q)")
    _check(ours["udot"], ref["udot"], "fourbar ball udot (inconsistent u)")
    _check(ours["lam"][_XY], ref["lam"][_XY], "fourbar ball multipliers (inconsistent u)")


# ----------------------------------------------------------------------------- tests: rod


def _rod_state(pair: Pair, k: int):
    """The assembled four-bar q at the first crank angle (the rod's length was taken
    there), velocities in the 2-d null space of the rod's G."""
    q, _ = fourbar_assemble(*_FOURBAR_STATES[0])
    u = pair.consistent_u(q, np.random.default_rng(100 + k).normal(0, 1.5, 3))
    return q, u


@pytest.mark.parametrize("k", range(2))
def test_fourbar_rod_dynamics(k):
    pair = _pair("fourbar_rod")
    q, u = _rod_state(pair, k)
    ours, ref = _compare_dynamics(pair, q, u, "fourbar rod")
    assert np.abs(ref["qerr"]).max() < 1e-14 and np.abs(ref["uerr"]).max() < 1e-13
    # Simbody's rod multiplier is the rod tension: the force on body 2 is -lambda along
    # the unit vector from S1 to S2 (not -lambda * (S2 - S1), as with (r.r - L^2)/2);
    # OpenSim's calcConstraintForces reports G^T lambda, i.e. +lambda along it
    c = pair.constraints[0]
    X = _fk(pair.spec, q)
    r = _station(X[c.body2], c.point2) - c.point1
    np.testing.assert_allclose(ref["forces"][0][1], ref["lam"][0] * r / np.linalg.norm(r), atol=1e-12)
    _check(ours["tension"], ref["lam"], "fourbar rod tension")


def test_fourbar_rod_errors():
    """Rod ``perr = |r| - L`` and ``uerr = d/dt |r|`` in both (even off the loop); udot
    and lambda agree off the loop too (Simbody's rod errors are exact derivatives)."""
    pair = _pair("fourbar_rod")
    rng = np.random.default_rng(6)
    q, u = _rod_state(pair, 0)
    qb, ub = q + rng.normal(0, 0.1, 3), u + rng.normal(0, 0.5, 3)
    ours, ref = pair.simjax(qb, ub), pair.opensim(qb, ub)
    assert abs(ref["qerr"][0]) > 1e-3
    c = pair.constraints[0]
    r = _station(_fk(pair.spec, qb)[c.body2], c.point2) - c.point1
    np.testing.assert_allclose(ref["qerr"][0], np.linalg.norm(r) - c.length, atol=1e-14)
    _check(ours["qerr"], ref["qerr"], "fourbar rod qerr (not assembled)")
    _check(ours["uerr"], ref["uerr"], "fourbar rod uerr (not assembled)")
    _check(ours["udot"], ref["udot"], "fourbar rod udot (not assembled)")
    _check(ours["lam"], ref["lam"], "fourbar rod multipliers (not assembled)")


# ----------------------------------------------------------------------------- tests: 3D loops


def _loop3d_states(pair: Pair):
    q = _loop3d()[1]
    rng = np.random.default_rng(44)
    return [(q, pair.consistent_u(q, rng.normal(0, 1.5, pair.spec.nu))) for _ in range(2)]


def test_loop3d_dynamics():
    pair = _pair("loop3d")
    for q, u in _loop3d_states(pair):
        ours, ref = _compare_dynamics(pair, q, u, "loop3d")
        assert np.abs(ref["qerr"]).max() < 1e-14 and np.abs(ref["uerr"]).max() < 1e-13
        # Ball multipliers are in the ancestor frame (Ground for 0, the moving base for 1);
        # the force on body 2 is -lambda there; reactions compared in body 2's frame
        for k in range(2):
            np.testing.assert_allclose(ref["forces"][k][1], ref["lam"][3 * k : 3 * k + 3], atol=1e-12)
            _check(ours["react"][k], _force_on_body2_in_body2(pair, ref, k), "loop3d ball reaction on body 2")


def test_loop3d_errors():
    """qerr off the loop (ancestor frames), uerr at the assembled q with violating u; off
    the loop, Simbody's uerr is simjax's minus ``w_A1 x perr`` (in A) per Ball."""
    pair = _pair("loop3d")
    rng = np.random.default_rng(8)
    q, u = _loop3d_states(pair)[0]
    ub = u + rng.normal(0, 0.5, pair.spec.nu)
    ours, ref = pair.simjax(q, ub), pair.opensim(q, ub)
    assert np.abs(ref["uerr"]).min() > 1e-3
    _check(ours["uerr"], ref["uerr"], "loop3d uerr (assembled q)")
    _check(ours["udot"], ref["udot"], "loop3d udot (inconsistent u)")
    _check(ours["lam"], ref["lam"], "loop3d multipliers (inconsistent u)")

    _, qb, _ = om.random_state(pair.spec, rng)  # a random configuration: loops open
    ours, ref = pair.simjax(qb, ub), pair.opensim(qb, ub)
    mp = pair.mp
    assert np.abs(ref["qerr"]).min() > 1e-3
    _check(ours["qerr"][:mp], ref["qerr"], "loop3d qerr (not assembled)")
    np.testing.assert_allclose(ours["qerr"][mp:], 0, atol=1e-14)  # quaternion norms
    expected = ours["uerr"].copy()
    for k, c in enumerate(pair.constraints):
        anc = _ancestor(pair.spec, c.body1, c.body2)
        R_GA = ref["R"][anc + 1]
        w_A1 = R_GA.T @ (ref["W"][c.body1 + 1] - ref["W"][anc + 1])
        expected[3 * k : 3 * k + 3] -= np.cross(w_A1, ref["qerr"][3 * k : 3 * k + 3])
    # Ball 0 hangs from Ground (no difference); Ball 1's body 1 turns in its ancestor
    np.testing.assert_array_equal(expected[:3], ours["uerr"][:3])
    assert np.abs(expected[3:] - ours["uerr"][3:]).max() > 1e-2
    _check(expected, ref["uerr"], "loop3d uerr - w_A1 x perr (not assembled)")


# ----------------------------------------------------------------------------- tests: couplers


def test_coordinate_coupler_function_matches_opensim():
    """The JAX coupler functions are OpenSim's (coefficient order of the polynomial)."""
    rng = np.random.default_rng(9)
    for c in _coupler()[2]:
        f = c.opensim_function()
        n = len(c.coords) - 1
        for _ in range(3):
            x = rng.uniform(-1, 1, n)
            v = f.calcValue(osim.Vector.createFromMat(x))
            assert abs(v - c.value(x)) < 1e-14


def test_coordinate_coupler():
    pair = _pair("coupler")
    spec, q, cons = _coupler()
    rng = np.random.default_rng(10)
    for _ in range(2):
        u = pair.consistent_u(q, rng.normal(0, 1.5, spec.nu))
        _compare_dynamics(pair, q, u, "coupler")
        ref = pair.opensim(q, u)
        assert np.abs(ref["qerr"]).max() < 1e-14 and np.abs(ref["uerr"]).max() < 1e-13
    # off the constraint manifold: perr = f(q_indep) - q_dep in both, uerr its rate
    qb, ub = q + rng.normal(0, 0.1, spec.nq()), rng.normal(0, 1.0, spec.nu)
    ours, ref = pair.simjax(qb, ub), pair.opensim(qb, ub)
    assert np.abs(ref["qerr"]).min() > 1e-3 and np.abs(ref["uerr"]).min() > 1e-3
    starts = [sl.start for sl in spec.q_blocks()]
    for k, c in enumerate(cons):
        x = np.array([qb[starts[b] + w] for b, w in c.coords])
        np.testing.assert_allclose(ref["qerr"][k], c.value(x[:-1]) - x[-1], atol=1e-14)
    _check(ours["qerr"], ref["qerr"], "coupler qerr (not assembled)")
    _check(ours["uerr"], ref["uerr"], "coupler uerr (not assembled)")
    _check(ours["udot"], ref["udot"], "coupler udot (not assembled)")
    _check(ours["lam"], ref["lam"], "coupler multipliers (not assembled)")


# ----------------------------------------------------------------------------- tests: Weld


def _weld_model():
    """Two closed loops made by Welds, in one model (one compilation):

    * c0, across two branches: base (Pin on Ground) - a1 (Ball) - a2 (Universal) - a3
      (Pin) and base - b1 (Universal) - b2 (Pin); body 1 = a3, body 2 = b2, common
      ancestor the moving base (9 loop u - 6 rows: 3 dofs, plus the base's).
    * c1, to Ground: w1 (Pin on Ground) - w2 (Ball) - w3 (Universal) - w4 (Ball); body 1 =
      w4, body 2 = Ground (9 u - 6 rows: 3 dofs).

    19 u, 12 rows. Both frames of each Weld are tilted and offset: F1 is random on body
    1, F2 on body 2 is where F1 is at a random configuration, so that configuration
    closes both loops exactly. Returns ``(spec, q, constraints, q_euler)``."""
    rng = np.random.default_rng(61)
    B = om._body
    bodies = [
        B(rng, "base", -1, "pin", p_PF=[0.0, 1.0, 0.0], rot_scale=np.pi),
        B(rng, "a1", 0, "ball", rot_scale=np.pi),
        B(rng, "a2", 1, "universal", rot_scale=np.pi),
        B(rng, "a3", 2, "pin", rot_scale=np.pi),
        B(rng, "b1", 0, "universal", p_PF=[0.3, -0.2, 0.1], rot_scale=np.pi),
        B(rng, "b2", 4, "pin", rot_scale=np.pi),
        B(rng, "w1", -1, "pin", p_PF=[0.8, 0.9, -0.3], rot_scale=np.pi),
        B(rng, "w2", 6, "ball", rot_scale=np.pi),
        B(rng, "w3", 7, "universal", rot_scale=np.pi),
        B(rng, "w4", 8, "ball", rot_scale=np.pi),
    ]
    spec = om.ModelSpec("weld", bodies, gravity=np.array([0.3, -9.81, -0.2]))
    qe, q, _ = om.random_state(spec, rng)
    X = _fk(spec, q)
    X_G = lambda i: (np.eye(3), np.zeros(3)) if i < 0 else X[i]
    cons = []
    for b1, b2 in [(3, 5), (9, -1)]:
        R1, p1 = om.random_rotation(rng), rng.normal(0, 0.1, 3) + [0.05, -0.3, 0.02]
        R2, p2 = om._compose(om._inv(X_G(b2)), om._compose(X_G(b1), (R1, p1)))
        cons.append(WeldSpec(b1, R1, p1, b2, R2, p2))
    return spec, q, cons, qe


def _quat_layout(spec: om.ModelSpec, qe: np.ndarray) -> np.ndarray:
    """simjax's q (quaternions for Ball joints) from X-Y-Z Euler-angle coordinates."""
    out = []
    for b, sl in zip(spec.bodies, spec.q_blocks(euler=True)):
        out.append(om.quat_from_rot(om.body_xyz(qe[sl])) if b.joint == "ball" else qe[sl])
    return np.concatenate(out)


def _weld_frames(spec: om.ModelSpec, c: WeldSpec, q: np.ndarray):
    """``(R_GA, RB, RF, p_S1, p_S2, p_B1, p_B2)``: the ancestor's orientation, the weld
    frames' axes in A (``RB = R_A1 R1``, ``RF = R_A2 R2``) and, in Ground, their origins
    and the two body origins."""
    X = _fk(spec, q)
    X_G = lambda i: (np.eye(3), np.zeros(3)) if i < 0 else X[i]
    R_GA = X_G(_ancestor(spec, c.body1, c.body2))[0]
    X1, X2 = X_G(c.body1), X_G(c.body2)
    RB, RF = R_GA.T @ X1[0] @ c.R1, R_GA.T @ X2[0] @ c.R2
    return R_GA, RB, RF, _station(X1, c.p1), _station(X2, c.p2), X1[1], X2[1]


def _weld_errors_numpy(spec: om.ModelSpec, c: WeldSpec, q: np.ndarray) -> np.ndarray:
    """The documented Simbody Weld position errors, in the ancestor frame A:
    ``[RF.x.RB.y, RF.y.RB.z, RF.z.RB.x, p_F2 - p_F1]``."""
    R_GA, RB, RF, p_S1, p_S2, _, _ = _weld_frames(spec, c, q)
    rot = [RF[:, 0] @ RB[:, 1], RF[:, 1] @ RB[:, 2], RF[:, 2] @ RB[:, 0]]
    return np.r_[rot, R_GA.T @ (p_S2 - p_S1)]


def test_weld_dynamics():
    """At the closed configuration with u in the null space of simjax's G: G itself, udot
    and the twelve multipliers (per Weld [3 rotational; 3 translational], ancestor
    frame), and what they mean (Simbody's body forces of G^T lambda); then udot, lambda
    and uerr with velocities that violate the constraints."""
    pair = _pair("weld")
    spec, q, cons, _ = _weld_model()
    assert [_ancestor(spec, c.body1, c.body2) for c in cons] == [0, -1]
    rng = np.random.default_rng(70)
    for _ in range(2):
        ug = rng.normal(0, 1.5, spec.nu)
        G = pair.simjax(q, ug)["G"]
        assert G.shape == (12, spec.nu)
        sv = np.linalg.svd(G, compute_uv=False)
        assert sv.min() > 1e-2 * sv.max()  # 12 independent rows: 7 dofs left
        u = ug - np.linalg.pinv(G) @ (G @ ug)
        ours, ref = _compare_dynamics(pair, q, u, "weld")
        assert np.abs(ref["qerr"]).max() < 1e-14 and np.abs(ref["uerr"]).max() < 1e-13
        assert np.abs(ours["qerr"]).max() < 1e-14 and np.abs(ours["uerr"]).max() < 1e-13
        _check(ours["G"], ref["G"], "weld G")
        assert np.abs(ref["lam"]).min() > 1e-3  # every row carries load
        # Simbody's G^T lambda (calcConstraintForces: per body, torque about its origin
        # and force, in A): on body 2 the force lambda[3:6] at F2's origin S2 and the
        # torque tau = sum_i lambda_i (u_i x v_i), (u, v) = (RF.x, RB.y), (RF.y, RB.z),
        # (RF.z, RB.x); on body 1 their negatives at S2 (= S1 here)
        for k, c in enumerate(cons):
            lam = ref["lam"][6 * k : 6 * k + 6]
            R_GA, RB, RF, _, p_S2, p_B1, p_B2 = _weld_frames(spec, c, q)
            tau = sum(lam[i] * np.cross(RF[:, i], RB[:, (i + 1) % 3]) for i in range(3))
            (t1, f1), (t2, f2) = ref["forces"][k]
            atol = 1e-12 * np.abs(lam).max()
            np.testing.assert_allclose(f2, lam[3:], atol=atol)
            np.testing.assert_allclose(f1, -lam[3:], atol=atol)
            np.testing.assert_allclose(t2, tau + np.cross(R_GA.T @ (p_S2 - p_B2), lam[3:]), atol=atol)
            np.testing.assert_allclose(t1, -tau - np.cross(R_GA.T @ (p_S2 - p_B1), lam[3:]), atol=atol)
    ub = u + rng.normal(0, 0.5, spec.nu)
    ours, ref = pair.simjax(q, ub), pair.opensim(q, ub)
    assert np.abs(ref["uerr"]).min() > 1e-3
    _check(ours["uerr"], ref["uerr"], "weld uerr (closed q)")
    _check(ours["udot"], ref["udot"], "weld udot (inconsistent u)")
    _check(ours["lam"], ref["lam"], "weld multipliers (inconsistent u)")


def test_weld_errors():
    """qerr at a slightly perturbed (open) configuration: Simbody's equals the documented
    formula (rows, frame, sign) and simjax's (its 12 rows come before the quaternion-norm
    rows). Off the loop, Simbody's translational uerr is simjax's d/dt perr minus
    ``w_A1 x perr`` (as for Ball); the rotational rows are exact derivatives in both."""
    pair = _pair("weld")
    spec, _, cons, qe = _weld_model()
    rng = np.random.default_rng(71)
    qb = _quat_layout(spec, qe + rng.normal(0, 0.05, qe.size))
    ub = rng.normal(0, 1.0, spec.nu)
    ours, ref = pair.simjax(qb, ub), pair.opensim(qb, ub)
    assert ref["qerr"].shape == (12,)
    assert np.abs(ref["qerr"]).min() > 1e-4  # really not closed
    expected = np.concatenate([_weld_errors_numpy(spec, c, qb) for c in cons])
    np.testing.assert_allclose(ref["qerr"], expected, rtol=0, atol=1e-14)
    _check(ours["qerr"][:12], ref["qerr"], "weld qerr (not closed)")
    np.testing.assert_allclose(ours["qerr"][12:], 0, atol=1e-14)  # quaternion norms
    expected = ours["uerr"].copy()
    for k, c in enumerate(cons):
        anc = _ancestor(spec, c.body1, c.body2)
        w_A1 = ref["R"][anc + 1].T @ (ref["W"][c.body1 + 1] - ref["W"][anc + 1])
        expected[6 * k + 3 : 6 * k + 6] -= np.cross(w_A1, ref["qerr"][6 * k + 3 : 6 * k + 6])
    assert np.abs(expected - ours["uerr"]).max() > 1e-3
    _check(expected, ref["uerr"], "weld uerr - w_A1 x perr (not closed)")
