"""``CoordinateActuator``: an actuator on one speed, driven by one control in the State.

With control ``c`` (clamped to ``control_range``), activation ``a`` (``a = c`` without
activation dynamics, else the actuator's entry of its subsystem's z, clamped to
``activation_range``), length ``l = gear q`` and velocity ``v = gear u``, the actuator's
force is ``s = (g0 + g1 l + g2 v) a + (b0 + b1 l + b2 v)`` (``gain``, ``bias``) clamped to
``force_range``, and the generalized force on the speed is ``gear s``.

On a tendon (``tendon`` >= 0 in the statics), ``l = gear L`` and ``v = gear dL/dt`` of the
tendon, and the force acts along it: ``J^T gear s`` (:mod:`simjax.dynamics.forces.tendons`).

Statics per element: ``(body, which, dynamics, z_slot, has_length, tendon)``, ``dynamics`` 0 (none),
1 (integrator, ``da/dt = c``) or 2 (filter, ``da/dt = (c - a) / time_constant``). The
controls of a subsystem's actuators are its discrete variable ``CONTROLS`` (the coordinate
actuators' first, then the muscles'); ``calc_zdot`` gives rates over the whole subsystem's z
(zero outside the actuators' slots).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ...model.context import Context
from .kernel import Params, mobility_forces, mobility_slots
from .springs import MobilityKernel
from .tendons import apply_tendon_tensions, tendon_geometry

CONTROLS = "controls"
"""Name of the discrete variable holding a force subsystem's actuator controls."""

DYNAMICS = {"none": 0, "integrator": 1, "filter": 2, "filterexact": 2}
"""Activation dynamics by name -> the code in the statics."""


def controls(P: Params, ctx: Context) -> jax.Array:
    """Each actuator's control clamped to its ``control_range`` (n,)."""
    n = P["gear"].shape[0]
    c = ctx.discrete(CONTROLS)[:n]  # the coordinate actuators' controls come first
    return jnp.clip(c, P["control_range"][:, 0], P["control_range"][:, 1])


def activations(P: Params, ctx: Context, S: tuple) -> jax.Array:
    """Each actuator's activation (n,): its clamped control, or its clamped z entry."""
    s = np.asarray(S, dtype=int).reshape(-1, 6)
    c = controls(P, ctx)
    dyn = np.flatnonzero(s[:, 2])
    if not len(dyn):
        return c
    z = ctx.get_z()[s[dyn, 3]]
    ar = P["activation_range"][dyn]
    return c.at[dyn].set(jnp.clip(z, ar[:, 0], ar[:, 1]))


def actuation(P: Params, ctx: Context, S: tuple) -> jax.Array:
    """Each actuator's force ``s`` before the gear (n,) (needs Velocity)."""
    qi, ui = mobility_slots(ctx, S)
    gear = P["gear"]
    has_length = np.asarray([s[4] for s in S], dtype=bool)
    length = gear * jnp.where(has_length, ctx.q[np.where(has_length, qi, 0)], 0.0)
    velocity = gear * ctx.u[ui]
    tendon = np.asarray([s[5] for s in S], dtype=int)
    if np.any(tendon >= 0):
        tendons = ctx._model.tendons
        assert tendons is not None  # a tendon actuator's Model has its tendon
        geo = tendon_geometry(tendons, ctx)
        on = tendon >= 0
        length = jnp.where(on, gear * geo.length[np.maximum(tendon, 0)], length)
        velocity = jnp.where(on, gear * geo.speed[np.maximum(tendon, 0)], velocity)
    g, b = P["gain"], P["bias"]
    a = activations(P, ctx, S)
    s = (
        (g[:, 0] + g[:, 1] * length + g[:, 2] * velocity) * a
        + b[:, 0]
        + b[:, 1] * length
        + b[:, 2] * velocity
    )
    return jnp.clip(s, P["force_range"][:, 0], P["force_range"][:, 1])


@dataclass(frozen=True)
class CoordinateActuator(MobilityKernel):
    """The module's equations over a subsystem's actuators."""

    def calc(self, P, ctx, S, w):
        _, ui = mobility_slots(ctx, S)
        force = w * P["gear"] * actuation(P, ctx, S)
        tendon = np.asarray([s[5] for s in S], dtype=int)
        on = tendon >= 0
        tau = mobility_forces(ctx, ui, jnp.where(on, 0.0, force))
        if not np.any(on):
            return jnp.zeros((ctx.num_bodies, 6), tau.dtype), tau
        tendons = ctx._model.tendons
        assert tendons is not None  # a tendon actuator's Model has its tendon
        T = jnp.zeros(tendons.num_tendons, force.dtype).at[tendon[on]].add(force[np.flatnonzero(on)])
        F, tau_t = apply_tendon_tensions(tendons, ctx, tendon_geometry(tendons, ctx), T)
        return F, tau + tau_t

    def calc_moving(self, P, ctx, S, w):
        """Zeros on the moving rows, unless an actuator pulls on a tendon (then None: its
        body forces come from ``calc``)."""
        if any(s[5] >= 0 for s in S):
            return None
        return super().calc_moving(P, ctx, S, w)

    def calc_zdot(self, P, ctx, S):
        """``da/dt`` of the actuators with activation dynamics, in z order; each rate is
        zeroed where the activation is at a bound of its range and the rate points out."""
        s = np.asarray(S, dtype=int).reshape(-1, 6)
        dyn = np.flatnonzero(s[:, 2])
        c = controls(P, ctx)[dyn]
        z = ctx.get_z()[s[dyn, 3]]
        rate = jnp.where(s[dyn, 2] == 1, c, (c - z) / P["time_constant"][dyn])
        ar = P["activation_range"][dyn]
        stop = ((z >= ar[:, 1]) & (rate > 0)) | ((z <= ar[:, 0]) & (rate < 0))
        out = jnp.where(stop, 0.0, rate)
        return jnp.zeros(ctx.get_z().shape[0], out.dtype).at[s[dyn, 3]].set(out)
