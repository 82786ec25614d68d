"""``CoordinateLimitForce`` (OpenSim's): a soft stop past each end of a coordinate's range.

With ``S(x) = 10x^3 - 15x^4 + 6x^5`` (Simbody's smooth step, clamped to [0, 1]) rising
over ``transition`` past each limit, ``k_up = upper_stiffness S((q - upper_limit) /
transition)`` and ``k_lo = lower_stiffness S((lower_limit - q) / transition)``, the
generalized force is

    ``-k_up (q - upper_limit) + k_lo (lower_limit - q) - damping (S_up + S_lo) qdot``

(zero inside the range), and the potential energy is the integral of the elastic part.
Statics per element: ``(body, which)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from .kernel import mobility_forces, mobility_slots
from .springs import MobilityKernel


def smooth_step(x: jax.Array) -> jax.Array:
    """``10x^3 - 15x^4 + 6x^5`` of ``x`` clamped to [0, 1]."""
    x = jnp.clip(x, 0.0, 1.0)
    return x**3 * (10.0 - 15.0 * x + 6.0 * x * x)


@dataclass(frozen=True)
class CoordinateLimitForce(MobilityKernel):
    """The module's equations over a group of limit forces."""

    def calc(self, P, ctx, S, w):
        qi, ui = mobility_slots(ctx, S)
        q, qd = ctx.q[qi], ctx.u[ui]
        tr = P["transition"]
        s_up = smooth_step((q - P["upper_limit"]) / tr)
        s_lo = smooth_step((P["lower_limit"] - q) / tr)
        f = (
            -P["upper_stiffness"] * s_up * (q - P["upper_limit"])
            + P["lower_stiffness"] * s_lo * (P["lower_limit"] - q)
            - P["damping"] * (s_up + s_lo) * qd
        )
        return None, mobility_forces(ctx, ui, w * f)

    def potential(self, P, ctx, S):
        qi, _ = mobility_slots(ctx, S)
        q, tr = ctx.q[qi], P["transition"]

        def energy(k, delta):
            # integral of k S(s / tr) s ds from 0 to delta
            x = jnp.clip(delta / tr, 0.0, 1.0)
            inside = k * x**3 * (2.0 - 2.5 * x + (6.0 / 7.0) * x * x) * delta**2
            past = k * (0.5 * delta**2 - (1.0 / 7.0) * tr**2)
            return jnp.where(delta <= 0, 0.0, jnp.where(delta >= tr, past, inside))

        return energy(P["upper_stiffness"], q - P["upper_limit"]) + energy(
            P["lower_stiffness"], P["lower_limit"] - q
        )
