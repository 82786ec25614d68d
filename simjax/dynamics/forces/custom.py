"""Forces the user supplies: ``DiscreteForces`` (body and mobility forces held in the State
as discrete variables) and ``Custom`` (a user object's ``calc_force(ctx)``).

Both kinds have one element per group. ``DiscreteForces``' static is the prefix of its
discrete variables (``"<prefix>.body_forces"``, ``"<prefix>.mobility_forces"`` of its
subsystem); ``Custom``'s is its implementation object, held by identity (``Identity``).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp

from .kernel import ForceKernel


@dataclass(frozen=True)
class DiscreteForces(ForceKernel):
    """The forces stored in the State's discrete variables, times the weight."""

    def calc(self, P, ctx, S, w):
        w0 = w[0]
        return w0 * ctx.discrete(f"{S[0]}.body_forces"), w0 * ctx.discrete(f"{S[0]}.mobility_forces")


@dataclass(frozen=True)
class Custom(ForceKernel):
    """The implementation's ``calc_force(ctx)`` (either part may be None) and
    ``calc_potential_energy(ctx)`` (zero if it has none)."""

    def calc(self, P, ctx, S, w):
        impl, w0 = S[0].obj, w[0]
        dt = ctx.state.q.dtype
        F, tau = impl.calc_force(ctx)
        F = jnp.zeros((ctx.num_bodies, 6), dt) if F is None else jnp.asarray(F, dt).reshape(ctx.num_bodies, 6)
        tau = jnp.zeros(ctx.nu, dt) if tau is None else jnp.asarray(tau, dt).reshape(ctx.nu)
        return w0 * F, w0 * tau

    def potential(self, P, ctx, S):
        f = getattr(S[0].obj, "calc_potential_energy", None)
        return jnp.zeros((), ctx.state.q.dtype) if f is None else jnp.asarray(f(ctx))
