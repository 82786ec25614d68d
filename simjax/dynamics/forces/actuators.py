"""``CoordinateActuator``: an actuator on one speed, driven by one control in the State.

With control ``c`` (clamped to ``control_range``), activation ``a`` (``a = c`` without
activation dynamics, else the actuator's entry of its subsystem's z, clamped to
``activation_range``), length ``l = gear q`` and velocity ``v = gear u``, the actuator's
force is ``s = (g0 + g1 l + g2 v) a + (b0 + b1 l + b2 v)`` (``gain``, ``bias``) clamped to
``force_range``, and the generalized force on the speed is ``gear s``.

On a tendon (``tendon`` >= 0 in the statics), ``l = gear L`` and ``v = gear dL/dt`` of the
tendon, and the force acts along it: ``J^T gear s`` (:mod:`simjax.dynamics.forces.tendons`).

MuJoCo's muscle (``gain_kind``/``bias_kind`` 1, ``dynamics`` 3): the gain is
:func:`muscle_gain` (``-F0 FL(L) FV(V)``), the bias :func:`muscle_bias` (the passive
``-F0 fpmax FP(L)``), the activation rate :func:`muscle_activation_rate`, as MuJoCo's
``mju_muscleGain``, ``mju_muscleBias`` and ``mju_muscleDynamics`` compute them from the
parameters ``muscle_gain``/``muscle_bias`` (MuJoCo's ``gainprm``/``biasprm``: range[2],
force, scale, lmin, lmax, vmax, fpmax, fvmax), ``length_range`` and ``acc0``.

Statics per element: ``(body, which, dynamics, z_slot, has_length, tendon, gain_kind,
bias_kind)``, ``dynamics`` 0 (none), 1 (integrator, ``da/dt = c``), 2 (filter, ``da/dt =
(c - a) / time_constant``) or 3 (muscle); ``gain_kind``/``bias_kind`` 0 (affine) or 1
(muscle). The
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

DYNAMICS = {"none": 0, "integrator": 1, "filter": 2, "filterexact": 2, "muscle": 3}
"""Activation dynamics by name -> the code in the statics."""

NSTATIC = 8
"""Statics per element (see the module docstring)."""

MINVAL = 1e-15
"""MuJoCo's ``mjMINVAL``: the floor of its divisors in the muscle equations."""


def _div(a: jax.Array, b: jax.Array) -> jax.Array:
    return a / jnp.maximum(MINVAL, b)


def _norm_length(length: jax.Array, length_range: jax.Array, prm: jax.Array) -> tuple[jax.Array, jax.Array]:
    """MuJoCo's muscle ``(L, L0)``: the length normalised so that ``length_range`` maps onto
    ``range`` (``prm[:2]``), and the optimal length ``L0``."""
    L0 = _div(length_range[..., 1] - length_range[..., 0], prm[..., 1] - prm[..., 0])
    return prm[..., 0] + _div(length - length_range[..., 0], L0), L0


def _peak_force(prm: jax.Array, acc0: jax.Array) -> jax.Array:
    """``force``, or ``scale / acc0`` when ``force`` < 0 (MuJoCo's automatic scaling)."""
    return jnp.where(prm[..., 2] < 0, _div(prm[..., 3], acc0), prm[..., 2])


def muscle_length_curve(L: jax.Array, lmin: jax.Array, lmax: jax.Array) -> jax.Array:
    """MuJoCo's ``mju_muscleGainLength``: four half-quadratics from 0 at ``lmin`` to 1 at
    ``L = 1`` and back to 0 at ``lmax`` (0 outside)."""
    a, b = 0.5 * (lmin + 1), 0.5 * (1 + lmax)
    x1 = _div(L - lmin, a - lmin)
    x2 = _div(1 - L, 1 - a)
    x3 = _div(L - 1, b - 1)
    x4 = _div(lmax - L, lmax - b)
    inner = jnp.where(
        L <= a,
        0.5 * x1**2,
        jnp.where(L <= 1, 1 - 0.5 * x2**2, jnp.where(L <= b, 1 - 0.5 * x3**2, 0.5 * x4**2)),
    )
    return jnp.where((lmin <= L) & (L <= lmax), inner, 0.0)


def muscle_gain(
    length: jax.Array, velocity: jax.Array, length_range: jax.Array, acc0: jax.Array, prm: jax.Array
) -> jax.Array:
    """MuJoCo's ``mju_muscleGain``: ``-F0 FL(L) FV(V)`` with ``V = velocity / (L0 vmax)``,
    ``FV`` 0 below ``V = -1``, ``(V + 1)^2`` up to 0, then rising to ``fvmax``."""
    L, L0 = _norm_length(length, length_range, prm)
    V = _div(velocity, L0 * prm[..., 6])
    FL = muscle_length_curve(L, prm[..., 4], prm[..., 5])
    fvmax = prm[..., 8]
    y = fvmax - 1
    FV = jnp.where(
        V <= -1, 0.0, jnp.where(V <= 0, (V + 1) ** 2, jnp.where(V <= y, fvmax - _div((y - V) ** 2, y), fvmax))
    )
    return -_peak_force(prm, acc0) * FL * FV


def muscle_bias(length: jax.Array, length_range: jax.Array, acc0: jax.Array, prm: jax.Array) -> jax.Array:
    """MuJoCo's ``mju_muscleBias``: the passive force ``-F0 fpmax FP(L)``, ``FP`` 0 up to
    ``L = 1``, half-quadratic up to ``b = (1 + lmax) / 2``, linear beyond."""
    L, _ = _norm_length(length, length_range, prm)
    b = 0.5 * (1 + prm[..., 5])
    x1 = _div(L - 1, b - 1)
    x2 = _div(L - b, b - 1)
    FP = jnp.where(L <= 1, 0.0, jnp.where(L <= b, 0.5 * x1**2, 0.5 + x2))
    return -_peak_force(prm, acc0) * prm[..., 7] * FP


def _smoothstep(x: jax.Array) -> jax.Array:
    """MuJoCo's ``mju_sigmoid``: ``6x^5 - 15x^4 + 10x^3`` on [0, 1], 0 below, 1 above."""
    x = jnp.clip(x, 0.0, 1.0)
    return x**3 * (3 * x * (2 * x - 5) + 10)


def muscle_activation_rate(ctrl: jax.Array, act: jax.Array, prm: jax.Array) -> jax.Array:
    """MuJoCo's ``mju_muscleDynamics`` (``prm`` = tau_act, tau_deact, tausmooth):
    ``(c - a) / tau`` with ``c`` clamped to [0, 1]; ``tau = tau_act (0.5 + 1.5 a)`` when
    ``c > a``, else ``tau_deact / (0.5 + 1.5 a)`` (``a`` clamped to [0, 1]); with
    ``tausmooth`` > 0 the switch is the smooth step of ``(c - a) / tausmooth + 1/2``."""
    c = jnp.clip(ctrl, 0.0, 1.0)
    ac = jnp.clip(act, 0.0, 1.0)
    tau_act = prm[..., 0] * (0.5 + 1.5 * ac)
    tau_deact = prm[..., 1] / (0.5 + 1.5 * ac)
    w = prm[..., 2]
    d = c - act
    hard = jnp.where(d > 0, tau_act, tau_deact)
    smooth = tau_deact + (tau_act - tau_deact) * _smoothstep(d / jnp.maximum(w, MINVAL) + 0.5)
    tau = jnp.where(w < MINVAL, hard, smooth)
    return _div(d, tau)


def controls(P: Params, ctx: Context) -> jax.Array:
    """Each actuator's control clamped to its ``control_range`` (n,)."""
    n = P["gear"].shape[0]
    c = ctx.discrete(CONTROLS)[:n]  # the coordinate actuators' controls come first
    return jnp.clip(c, P["control_range"][:, 0], P["control_range"][:, 1])


def activations(P: Params, ctx: Context, S: tuple) -> jax.Array:
    """Each actuator's activation (n,): its clamped control, or its clamped z entry."""
    s = np.asarray(S, dtype=int).reshape(-1, NSTATIC)
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
    gain = g[:, 0] + g[:, 1] * length + g[:, 2] * velocity
    bias = b[:, 0] + b[:, 1] * length + b[:, 2] * velocity
    st = np.asarray(S, dtype=int).reshape(-1, NSTATIC)
    if np.any(st[:, 6]):
        mg = muscle_gain(length, velocity, P["length_range"], P["acc0"], P["muscle_gain"])
        gain = jnp.where(st[:, 6] == 1, mg, gain)
    if np.any(st[:, 7]):
        mb = muscle_bias(length, P["length_range"], P["acc0"], P["muscle_bias"])
        bias = jnp.where(st[:, 7] == 1, mb, bias)
    s = gain * a + bias
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
        s = np.asarray(S, dtype=int).reshape(-1, NSTATIC)
        dyn = np.flatnonzero(s[:, 2])
        c = controls(P, ctx)[dyn]
        z = ctx.get_z()[s[dyn, 3]]
        rate = jnp.where(s[dyn, 2] == 1, c, (c - z) / P["time_constant"][dyn])
        if np.any(s[dyn, 2] == 3):
            mus = muscle_activation_rate(c, z, P["muscle_dynamics"][dyn])
            rate = jnp.where(s[dyn, 2] == 3, mus, rate)
        ar = P["activation_range"][dyn]
        stop = ((z >= ar[:, 1]) & (rate > 0)) | ((z <= ar[:, 0]) & (rate < 0))
        out = jnp.where(stop, 0.0, rate)
        return jnp.zeros(ctx.get_z().shape[0], out.dtype).at[s[dyn, 3]].set(out)
