"""Compliant contact as force elements: Simbody's ``HuntCrossleyForce`` and OpenSim's
``SmoothSphereHalfSpaceForce``.

Both evaluate their surface pairs with the collision driver
(:func:`simjax.dynamics.detection.pair_contacts`, the pairs being candidates of the
Model's static list) and the force laws of :mod:`simjax.dynamics.contact`. Every pair is
evaluated in every State and masked (no Python branch on a traced value), so a batch of
States with different contacts compiles once; the parameters are Instance-stage arrays of
the State (``jax.grad`` reaches them).

``HuntCrossley`` (one element per group): parameters ``stiffness``, ``dissipation``,
``static_friction``, ``dynamic_friction``, ``viscous_friction`` (one per surface of the
element) and ``transition_velocity``; statics per element ``(surfaces, bodies, centres,
radii, pairs, stop_at_release)``: the surfaces in the force's order, their bodies, their
bounding-sphere centres in their bodies and radii (infinite for a half-space), the pairs
(positions in ``surfaces``) and whether Simbody's end of the loop at a releasing contact
is reproduced (see :class:`HuntCrossley`).

``SmoothSphereHalfSpace`` (all elements of a subsystem stacked): the nine parameters of
:class:`simjax.dynamics.contact.SmoothContactParams`, one per element; statics per element
``(sphere, half_space)`` surface indices.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ... import _spatial as sp
from ..contact import (
    HuntCrossleyParams,
    SmoothContactParams,
    hertz_energy,
    hunt_crossley_released,
    smooth_hertz_energy,
    smooth_sphere_half_space,
)
from ..detection import pair_contacts
from .kernel import ForceKernel, scatter_point_forces

HC_SURFACE_PARAMS = HuntCrossleyParams._fields


def _radius(kind: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Effective radius of curvature per pair: the sphere's against a plane, ``r1 r2/(r1 +
    r2)`` for two spheres (static)."""
    r1, r2 = size[:, 0, 0], size[:, 1, 0]
    return np.where(kind[:, 0] == "plane", r2, r1 * r2 / np.where(kind[:, 0] == "plane", 1.0, r1 + r2))


def _velocity(ctx, b: np.ndarray, x: jax.Array) -> jax.Array:
    """Velocity in Ground of the material points of bodies ``b`` at ``x`` (n, 3)."""
    V, p = ctx.V_GB, ctx.p_GB
    return V[b, 3:] + sp.cross(V[b, :3], x - p[b])


def _hc_pairs(P, ctx, S):
    """The pairs of one Hunt–Crossley element: contacts, local surface positions of
    geometry 1 and 2, their parameters and the effective radii."""
    surfs, _, _, _, pairs, _ = S
    pc = ctx.state.position_cache
    c = pair_contacts(
        ctx._model.contact,
        tuple((surfs[a], surfs[b]) for a, b in pairs),
        pc.R_GB,
        pc.p_GB,
        "HuntCrossleyForce",
    )
    local = {s: i for i, s in enumerate(surfs)}
    i1 = np.asarray([local[int(s)] for s in c.surface[:, 0]], dtype=int)
    i2 = np.asarray([local[int(s)] for s in c.surface[:, 1]], dtype=int)
    p1 = HuntCrossleyParams(*(P[k][0][i1] for k in HC_SURFACE_PARAMS))
    p2 = HuntCrossleyParams(*(P[k][0][i2] for k in HC_SURFACE_PARAMS))
    return c, p1, p2, jnp.asarray(_radius(c.kind, c.size), pc.p_GB.dtype)


def simbody_order(ctx, S, released: jax.Array) -> jax.Array:
    """Which pairs Simbody applies, (m,) bool: its ``HuntCrossleyForce`` walks the contacts
    of its contact set in the order its sweep-and-prune finds them and *ends the walk* at the
    first one that releases (in contact, normal force ``<= 0``), so the contacts after it get
    no force in that State. The order: the surfaces' bounding spheres (centres in Ground)
    sorted by their lower end along the Ground axis on which the centres spread most (sum of
    absolute deviations from their mean; ties to the lower axis), then the pairs by the
    sorted position of their first and then second surface. (Ties in the sort, which
    Simbody's unstable sort may order either way, have measure zero.)"""
    _, bodies, centres, radii, pairs, _ = S
    n = len(bodies)
    pc = ctx.state.position_cache
    b = np.asarray(bodies, dtype=int)
    cen = jax.lax.stop_gradient(pc.p_GB[b] + jnp.einsum("nij,nj->ni", pc.R_GB[b], jnp.asarray(centres)))
    var = jnp.sum(jnp.abs(cen - jnp.mean(cen, axis=0, keepdims=True)), axis=0)
    axis = jnp.where(var[0] > var[1], 0, 1)
    axis = jnp.where(var[2] > var[axis], 2, axis)
    start = jnp.take(cen, axis, axis=1) - jnp.asarray(radii, cen.dtype)
    rank = jnp.argsort(jnp.argsort(start))
    pa = np.asarray([a for a, _ in pairs], dtype=int)
    pb = np.asarray([c for _, c in pairs], dtype=int)
    key = jnp.minimum(rank[pa], rank[pb]) * n + jnp.maximum(rank[pa], rank[pb])
    stopped = jnp.any(released[None, :] & (key[None, :] < key[:, None]), axis=1)
    return ~stopped


@dataclass(frozen=True)
class HuntCrossley(ForceKernel):
    """Simbody's ``HuntCrossleyForce`` over one element's surface pairs (groups of one
    element): each pair's force from :func:`simjax.dynamics.contact.hunt_crossley` with
    the two surfaces' parameters, applied to geometry 2's body at the force point and
    opposite to geometry 1's. With ``stop_at_release`` (Simbody's and OpenSim's behaviour)
    a pair after a releasing one in Simbody's contact order gets no force
    (:func:`simbody_order`)."""

    def calc(self, P, ctx, S, w):
        if not S or not S[0][4]:
            return None, None
        (s,) = S
        c, p1, p2, radius = _hc_pairs(P, ctx, s)
        b1, b2 = c.body[:, 0], c.body[:, 1]
        v_rel = _velocity(ctx, b1, c.pos) - _velocity(ctx, b2, c.pos)
        w_rel = ctx.V_GB[b1, :3] - ctx.V_GB[b2, :3]
        vt = P["transition_velocity"][0]
        law = jax.vmap(hunt_crossley_released, in_axes=(0, 0, 0, 0, 0, 0, 0, 0, None))
        f, point, released = law(c.dist, c.normal, c.pos, radius, v_rel, w_rel, p1, p2, vt)
        keep = simbody_order(ctx, s, released) if s[5] else jnp.ones(released.shape, bool)
        f = f * (w[0] * keep)[:, None]
        nb, p = ctx.num_bodies, ctx.p_GB
        F = scatter_point_forces(nb, b2, point - p[b2], f) + scatter_point_forces(nb, b1, point - p[b1], -f)
        return F, None

    def potential(self, P, ctx, S):
        """Simbody's ``2/5 fH d`` summed over the element's pairs in contact (all of them:
        the end of Simbody's walk at a releasing contact depends on velocities)."""
        out = []
        for s in S:
            if not s[4]:
                out.append(jnp.zeros((), ctx.state.q.dtype))
                continue
            c, p1, p2, radius = _hc_pairs(P, ctx, s)
            out.append(jnp.sum(jax.vmap(hertz_energy)(c.dist, radius, p1, p2)))
        return jnp.stack(out)


@dataclass(frozen=True)
class SmoothSphereHalfSpace(ForceKernel):
    """OpenSim's ``SmoothSphereHalfSpaceForce`` over a group of elements, one sphere and one
    half-space each: :func:`simjax.dynamics.contact.smooth_sphere_half_space` on the sphere's
    body at the contact point, its opposite on the half-space's body."""

    def calc(self, P, ctx, S, w):
        pc = ctx.state.position_cache
        pairs = tuple((h, sph) for sph, h in S)
        c = pair_contacts(ctx._model.contact, pairs, pc.R_GB, pc.p_GB, "SmoothSphereHalfSpaceForce")
        b1, b2 = c.body[:, 0], c.body[:, 1]  # half-space, sphere
        radius = jnp.asarray(c.size[:, 1, 0], pc.p_GB.dtype)
        v_rel = _velocity(ctx, b1, c.pos) - _velocity(ctx, b2, c.pos)
        params = SmoothContactParams(**{k: P[k] for k in SmoothContactParams._fields})
        f, point = jax.vmap(smooth_sphere_half_space)(c.dist, c.normal, c.pos, radius, v_rel, params)
        f = f * w[:, None]
        nb, p = ctx.num_bodies, ctx.p_GB
        F = scatter_point_forces(nb, b2, point - p[b2], f) + scatter_point_forces(nb, b1, point - p[b1], -f)
        return F, None

    def potential(self, P, ctx, S):
        """Simbody's ``2/5 fH d`` per element, with the smoothed Hertz force."""
        pc = ctx.state.position_cache
        pairs = tuple((h, sph) for sph, h in S)
        c = pair_contacts(ctx._model.contact, pairs, pc.R_GB, pc.p_GB, "SmoothSphereHalfSpaceForce")
        radius = jnp.asarray(c.size[:, 1, 0], pc.p_GB.dtype)
        params = SmoothContactParams(**{k: P[k] for k in SmoothContactParams._fields})
        return jax.vmap(smooth_hertz_energy)(c.dist, radius, params)
