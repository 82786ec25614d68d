"""DART (dartpy) builders for the coordinate-limit cross-checks (``test_unilateral_dart.py``).

The chain of ``tests/test_unilateral.py::chain`` rebuilt in DART: ``n`` RevoluteJoints about
z, link ``i`` of mass 1 with its center of mass at ``(0.15, 0, 0)`` in the body frame and
central inertia ``diag(1e-3, 8e-3, 8e-3)``, joint 0 at the world origin, joint ``i > 0``
at ``(0.3, 0, 0)`` in the parent body frame, gravity ``(0, -9.81, 0)``.

Conventions mapped (dartpy 6.20):

* simjax ``Pin(parent, X_PF, body, X_BM)`` is DART's RevoluteJoint with
  ``setTransformFromParentBodyNode(X_PF)`` and ``setTransformFromChildBodyNode(X_BM)``
  (both name the joint frame, in the parent and in the child body frame), axis z; both
  give ``X_PB = X_PF Rz(q) X_BM^-1``, so ``q``, ``u`` and generalized forces map one to one.
* ``dynamics.Inertia(mass, com, moment)``: ``com`` in the body frame, ``moment`` about the
  center of mass in body axes, as ``sj.MassProperties.from_com_inertia``.
* DART steps ``u1 = u0 + h udot(q0, u0)`` (free), then one boxed LCP (Dantzig) over every
  joint whose limit is violated or would be crossed within the step, then
  ``q1 = q0 + h u1``: semi-explicit Euler, as simjax's ``integrator="euler"``.
* ``Skeleton.getConstraintForces()`` is the generalized constraint impulse of the last
  step divided by the step: same sign as simjax's ``E * multiplier`` (a force that pushes
  ``q`` up is positive).
* A limit row is active when the joint is past its limit (then the LCP asks for the
  velocity that removes the whole violation in one step, capped at
  ``JointConstraint.getMaxErrorReductionVelocity()`` = 10 rad/s; the ERP of 0.01 is not
  used by 6.20's JointConstraint) or when the free velocity would carry it past the limit
  within the step (then ``u1 >= (lower - q0) / h``): a falling joint lands exactly on its
  limit and rests there, with no deadband.
* World deactivation ("sleeping" of slow skeletons, ``World.getDeactivationOptions()``,
  enabled by default in dartpy 6.20) is switched off so that a chain at rest keeps being
  stepped and keeps reporting its forces (a precaution: on this chain the results are
  the same with it on).
"""

from __future__ import annotations

import dartpy as dart
import numpy as np

G = 9.81
LINK = 0.3
COM = (0.15, 0.0, 0.0)
MOMENT = (1e-3, 8e-3, 8e-3)


def _isometry(p=(0.0, 0.0, 0.0)):
    T = dart.math.Isometry3()
    T.set_translation(np.asarray(p, dtype=float))
    return T


def build_chain(n: int, half: float | None, gravity=(0.0, -G, 0.0), dt: float = 1e-3):
    """A ``(world, skeleton, joints)`` triple; limits ``[-half, half]`` enforced on every
    joint, or none when ``half`` is None."""
    world = dart.simulation.World()
    world.setTimeStep(dt)
    world.setGravity(np.asarray(gravity, dtype=float))
    opts = world.getDeactivationOptions()
    opts.mEnabled = False
    world.setDeactivationOptions(opts)
    skel = dart.dynamics.Skeleton(f"chain{n}")
    parent, joints = None, []
    for i in range(n):
        if parent is None:
            joint, body = skel.createRevoluteJointAndBodyNodePair()
        else:
            joint, body = skel.createRevoluteJointAndBodyNodePair(parent)
        joint.setName(f"j{i}")
        joint.setAxis(np.array([0.0, 0.0, 1.0]))
        joint.setTransformFromParentBodyNode(_isometry((0.0, 0.0, 0.0) if i == 0 else (LINK, 0.0, 0.0)))
        joint.setTransformFromChildBodyNode(_isometry())
        body.setInertia(dart.dynamics.Inertia(1.0, np.array(COM), np.diag(MOMENT)))
        if half is not None:
            joint.setPositionLowerLimit(0, -half)
            joint.setPositionUpperLimit(0, half)
            joint.setLimitEnforcement(True)
        else:
            joint.setLimitEnforcement(False)
        joints.append(joint)
        parent = body
    world.addSkeleton(skel)
    return world, skel, joints


def dynamics_at(n: int, q, u) -> dict:
    """DART's mass matrix, ``C(q, u) + g`` (``M udot + C = tau``) and free ``udot`` at
    ``(q, u)`` for the chain without limits."""
    _, skel, _ = build_chain(n, None)
    skel.setPositions(np.asarray(q, dtype=float))
    skel.setVelocities(np.asarray(u, dtype=float))
    skel.setForces(np.zeros(n))
    skel.computeForwardDynamics()
    return {
        "M": np.array(skel.getMassMatrix()),
        "Cg": np.array(skel.getCoriolisAndGravityForces()),
        "g": np.array(skel.getGravityForces()),
        "udot": np.array(skel.getAccelerations()),
    }


def dart_chain(n: int, half: float | None, q0, u0, t1: float, dt: float) -> dict:
    """Simulate the chain from ``(q0, u0)`` to ``t1`` with ``world.step()``.

    Returns ``t`` (k+1,), ``q``, ``u`` and ``force`` (k+1, n) (row 0 is the initial state,
    with zero force; row j the state after step j and the generalized constraint force of
    step j), and ``q_final``, ``u_final``, ``force_final``."""
    world, skel, _ = build_chain(n, half, dt=dt)
    skel.setPositions(np.asarray(q0, dtype=float))
    skel.setVelocities(np.asarray(u0, dtype=float))
    steps = int(round(t1 / dt))
    t = np.zeros(steps + 1)
    q = np.zeros((steps + 1, n))
    u = np.zeros((steps + 1, n))
    force = np.zeros((steps + 1, n))
    q[0], u[0] = skel.getPositions(), skel.getVelocities()
    for k in range(1, steps + 1):
        world.step()
        t[k] = world.getTime()
        q[k] = skel.getPositions()
        u[k] = skel.getVelocities()
        force[k] = skel.getConstraintForces()
    return {
        "t": t,
        "q": q,
        "u": u,
        "force": force,
        "q_final": q[-1].copy(),
        "u_final": u[-1].copy(),
        "force_final": force[-1].copy(),
    }
