"""Springs, dampers and constant forces: between two stations (``TwoPoint*``), on one
body (``ConstantForce``, ``ConstantTorque``), on one coordinate or speed (``Mobility*``,
``MobilityLinearStop``) and on every speed (``GlobalDamper``).

Statics per element: ``(body1, body2)`` for two-point kinds, ``body`` for one-body kinds,
``(body, which)`` for mobility kinds. Body forces are ``[torque about the body origin;
force]`` in Ground.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from ... import _spatial as sp
from ...model.context import Context
from .kernel import (
    ForceKernel,
    Params,
    mobility_forces,
    mobility_slots,
    no_moving_forces,
    scatter_point_forces,
)

# ------------------------------------------------------------------------------ two-point


def two_point_geometry(P: Params, ctx: Context, S: tuple):
    """``(b, r1, r2, d, L, e)``: body pairs (n, 2), stations' offsets from their body
    origins in Ground, separation ``p2 - p1``, its length and unit direction."""
    b = np.asarray(S, dtype=int).reshape(-1, 2)
    pc = ctx.state.position_cache
    R1, R2 = pc.R_GB[b[:, 0]], pc.R_GB[b[:, 1]]
    r1 = jnp.einsum("nij,nj->ni", R1, P["station1"])
    r2 = jnp.einsum("nij,nj->ni", R2, P["station2"])
    p1 = pc.p_GB[b[:, 0]] + r1
    p2 = pc.p_GB[b[:, 1]] + r2
    d = p2 - p1
    L = sp.safe_norm(d)
    e = sp.safe_normalize(d)
    return b, r1, r2, d, L, e


def _rel_speed(ctx: Context, b, r1, r2, e):
    V = ctx.V_GB
    v1 = V[b[:, 0], 3:] + sp.cross(V[b[:, 0], :3], r1)
    v2 = V[b[:, 1], 3:] + sp.cross(V[b[:, 1], :3], r2)
    return jnp.sum((v2 - v1) * e, axis=1)


def _apply(ctx: Context, b, r1, r2, f2):
    """Force ``f2`` on body 2's point and ``-f2`` on body 1's point."""
    nb = ctx.num_bodies
    return scatter_point_forces(nb, b[:, 0], r1, -f2) + scatter_point_forces(nb, b[:, 1], r2, f2)


@dataclass(frozen=True)
class TwoPointLinearSpring(ForceKernel):
    """Tension ``stiffness (L - x0)`` along the line; energy ``stiffness (L - x0)^2 / 2``."""

    def calc(self, P, ctx, S, w):
        b, r1, r2, d, L, e = two_point_geometry(P, ctx, S)
        tension = w * P["stiffness"] * (L - P["x0"])
        return _apply(ctx, b, r1, r2, -tension[:, None] * e), None

    def potential(self, P, ctx, S):
        _, _, _, _, L, _ = two_point_geometry(P, ctx, S)
        return 0.5 * P["stiffness"] * (L - P["x0"]) ** 2


@dataclass(frozen=True)
class TwoPointLinearDamper(ForceKernel):
    """Force ``-damping * (rate of separation)`` along the line."""

    def calc(self, P, ctx, S, w):
        b, r1, r2, d, L, e = two_point_geometry(P, ctx, S)
        s = _rel_speed(ctx, b, r1, r2, e)
        return _apply(ctx, b, r1, r2, -(w * P["damping"] * s)[:, None] * e), None


@dataclass(frozen=True)
class TwoPointConstantForce(ForceKernel):
    """``force`` along the line, positive pushing the stations apart; no energy."""

    def calc(self, P, ctx, S, w):
        b, r1, r2, d, L, e = two_point_geometry(P, ctx, S)
        return _apply(ctx, b, r1, r2, (w * P["force"])[:, None] * e), None


# ------------------------------------------------------------------------------ one body


@dataclass(frozen=True)
class ConstantForce(ForceKernel):
    """``force`` (in Ground) at ``station`` of the body; no energy."""

    def calc(self, P, ctx, S, w):
        b = np.asarray(S, dtype=int)
        pc = ctx.state.position_cache
        r = jnp.einsum("nij,nj->ni", pc.R_GB[b], P["station"])
        return scatter_point_forces(ctx.num_bodies, b, r, w[:, None] * P["force"]), None


@dataclass(frozen=True)
class ConstantTorque(ForceKernel):
    """``torque`` (in Ground) on the body; no energy."""

    def calc(self, P, ctx, S, w):
        b = np.asarray(S, dtype=int)
        T = w[:, None] * P["torque"]
        F = jnp.concatenate([T, jnp.zeros_like(T)], axis=1)
        return jnp.zeros((ctx.num_bodies, 6), T.dtype).at[b].add(F), None


# ------------------------------------------------------------------------------ mobility


@dataclass(frozen=True)
class MobilityKernel(ForceKernel):
    """Kinds with mobility forces alone: zeros on the moving rows."""

    def calc_moving(self, P, ctx, S, w):
        return no_moving_forces(ctx)


@dataclass(frozen=True)
class GlobalDamper(MobilityKernel):
    """Mobility force ``-damping u`` on every speed (the elements' dampings summed)."""

    def calc(self, P, ctx, S, w):
        return None, -jnp.sum(w * P["damping"]) * ctx.u


@dataclass(frozen=True)
class MobilityLinearSpring(MobilityKernel):
    """``-stiffness (q - q_zero)`` on one coordinate; energy ``stiffness (q - q_zero)^2 / 2``."""

    def calc(self, P, ctx, S, w):
        qi, ui = mobility_slots(ctx, S)
        f = -w * P["stiffness"] * (ctx.q[qi] - P["q_zero"])
        return None, mobility_forces(ctx, ui, f)

    def potential(self, P, ctx, S):
        qi, _ = mobility_slots(ctx, S)
        return 0.5 * P["stiffness"] * (ctx.q[qi] - P["q_zero"]) ** 2


@dataclass(frozen=True)
class MobilityLinearDamper(MobilityKernel):
    """``-damping u`` on one speed."""

    def calc(self, P, ctx, S, w):
        _, ui = mobility_slots(ctx, S)
        return None, mobility_forces(ctx, ui, -w * P["damping"] * ctx.u[ui])


@dataclass(frozen=True)
class MobilityConstantForce(MobilityKernel):
    """``force`` on one speed."""

    def calc(self, P, ctx, S, w):
        _, ui = mobility_slots(ctx, S)
        return None, mobility_forces(ctx, ui, w * P["force"])


@dataclass(frozen=True)
class MobilityLinearStop(MobilityKernel):
    """Past a bound by ``x``: ``-stiffness x (1 + dissipation xdot)`` pushing back (never
    pulling); energy ``stiffness x^2 / 2``. Simbody's ``MobilityLinearStop``."""

    def calc(self, P, ctx, S, w):
        qi, ui = mobility_slots(ctx, S)
        q, qd = ctx.q[qi], ctx.u[ui]
        k, d = P["stiffness"], P["dissipation"]
        x_hi = jnp.maximum(q - P["q_high"], 0.0)
        x_lo = jnp.minimum(q - P["q_low"], 0.0)
        f_hi = jnp.minimum(-k * x_hi * (1 + d * qd), 0.0)
        f_lo = jnp.maximum(-k * x_lo * (1 - d * qd), 0.0)
        return None, mobility_forces(ctx, ui, w * (f_hi + f_lo))

    def potential(self, P, ctx, S):
        qi, _ = mobility_slots(ctx, S)
        q = ctx.q[qi]
        x = jnp.maximum(q - P["q_high"], 0.0) + jnp.minimum(q - P["q_low"], 0.0)
        return 0.5 * P["stiffness"] * x**2
