"""Compliant contact force laws: Simbody's ``HuntCrossleyForce`` and OpenSim's
``SmoothSphereHalfSpaceForce``, as pure functions of one contact.

Both laws use the geometry convention of :mod:`simjax.dynamics.collision` (and MuJoCo's):

- ``dist``: signed surface distance (m); the penetration depth is ``-dist``.
- ``normal``: (3,) unit normal pointing from geometry 1 to geometry 2 (for a plane and a
  sphere: the plane's outward normal).
- ``pos``: (3,) the contact point midway between the surfaces.
- ``v_rel``: (3,) velocity of the material point of body 1 at ``pos`` minus that of body 2
  (m/s), both in world: ``v_rel = (v1 + w1 x (pos - o1)) - (v2 + w2 x (pos - o2))``.

Each returns the force (N, world) that acts on body 2 at the returned point; body 1 gets
the opposite force at the same point. In :func:`hunt_crossley` geometry 1 and 2 can be
exchanged (flip ``normal``, ``v_rel`` and ``w_rel``, swap the parameters) and the forces
are the same, as in Simbody; in :func:`smooth_sphere_half_space` geometry 1 is the
half-space.

Everything is elementwise on one contact: ``jax.vmap`` over contacts and states.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class HuntCrossleyParams(NamedTuple):
    """Material parameters of one contact surface (Simbody's ``setBodyParameters``,
    OpenSim's ``HuntCrossleyForce::ContactParameters``).

    Attributes:
        stiffness: Hertz stiffness ``E`` (N/m^2, a Young's-modulus-like number); Simbody
            uses ``E^(2/3)``. Positive.
        dissipation: Hunt–Crossley dissipation ``c`` (s/m). Non-negative.
        static_friction: Static friction coefficient ``us`` (-).
        dynamic_friction: Dynamic friction coefficient ``ud`` (-).
        viscous_friction: Viscous friction coefficient ``uv`` (s/m).
    """

    stiffness: jax.Array | float
    dissipation: jax.Array | float = 0.0
    static_friction: jax.Array | float = 0.0
    dynamic_friction: jax.Array | float = 0.0
    viscous_friction: jax.Array | float = 0.0


def _harmonic(a, b):
    """``2ab/(a+b)``, 0 when both are 0 (Simbody's combination of friction coefficients)."""
    s = a + b
    return jnp.where(s == 0, 0.0, 2 * a * b / jnp.where(s == 0, 1.0, s))


def _friction(f, vtangent, vslip, us, ud, uv, vt):
    """Simbody's friction law: Stribeck-like static/dynamic blend plus viscous, times the
    normal force ``f``, along ``vtangent / vslip``."""
    vrel = vslip / vt
    mu = jnp.minimum(vrel, 1.0) * (ud + 2 * (us - ud) / (1 + vrel * vrel)) + uv * vslip
    return f * mu * vtangent / vslip


def hunt_crossley(
    dist,
    normal,
    pos,
    radius,
    v_rel,
    w_rel,
    params1: HuntCrossleyParams,
    params2: HuntCrossleyParams,
    transition_velocity=0.01,
) -> tuple[jax.Array, jax.Array]:
    """Simbody's ``HuntCrossleyForce`` on one point contact.

    With depth ``d = -dist`` and ``ki = Ei^(2/3)``: ``s1 = k2/(k1+k2)``, ``k = k1 s1``,
    ``c = c1 s1 + c2 (1-s1)``; the force acts at ``pos + d (1/2 - s1) normal`` (the point
    moves towards the softer surface); Hertz ``fH = 4/3 k d sqrt(R k d)``, normal force
    ``f = fH (1 + 3/2 c vn)`` with ``vn = v_rel·normal`` (approach speed); friction
    ``f [min(vs/vt, 1) (ud + 2 (us-ud)/(1 + (vs/vt)^2)) + uv vs]`` along the tangential
    part of ``v_rel`` (``vs`` its norm), with ``us``, ``ud``, ``uv`` the harmonic means
    ``2 a b/(a+b)`` of the two surfaces'. No force at all when ``d <= 0`` or ``f <= 0``
    (the contact is pulling apart faster than ``2/(3c)``).

    Args:
        dist: Signed distance (m), negative in penetration.
        normal: (3,) unit normal from geometry 1 to geometry 2.
        pos: (3,) contact point midway between the surfaces (m).
        radius: Effective radius of curvature ``R`` (m): the sphere's radius against a
            half-space, ``r1 r2/(r1 + r2)`` for two spheres.
        v_rel: (3,) velocity of body 1's material point at ``pos`` minus body 2's (m/s).
        w_rel: (3,) angular velocity of body 1 minus body 2 (rad/s), to carry ``v_rel`` to
            the shifted force point.
        params1, params2: Surface parameters of geometry 1 and 2.
        transition_velocity: Slip speed ``vt`` of peak static friction (m/s), positive.

    Returns:
        ``(force, point)``: the force (N) on body 2, applied at ``point`` (m); body 1 gets
        ``-force`` there. Zero force out of contact. The force is continuous at
        ``d = 0``, but its gradient there is not (``d^(3/2)``), nor at slip speed ``vt``
        or at ``f = 0``.

    Simbody (and so OpenSim 4.6) differs in two places that a driver matching it must
    reproduce: its loop over one ``HuntCrossleyForce``'s contacts *stops* at the first
    contact with ``f <= 0`` (``return``, not ``continue``), so the contacts after it in
    Simbody's contact order get no force in that state (measured: a second sphere pressing
    1 cm into the floor gets 0 N while the first lifts off faster than ``2/(3c)``); and
    two spheres with coincident centres make no contact (MuJoCo's kernel still returns
    one, with a fallback normal).
    """
    force, point, _ = hunt_crossley_released(
        dist, normal, pos, radius, v_rel, w_rel, params1, params2, transition_velocity
    )
    return force, point


def hunt_crossley_released(
    dist,
    normal,
    pos,
    radius,
    v_rel,
    w_rel,
    params1: HuntCrossleyParams,
    params2: HuntCrossleyParams,
    transition_velocity=0.01,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """:func:`hunt_crossley` and whether the contact *releases*: in contact (``d > 0``)
    but with normal force ``f <= 0`` (pulling apart faster than ``2/(3c)``), the
    condition on which Simbody stops its loop over a force's contacts."""
    s1, in_contact, fh = _hertz(dist, radius, params1, params2)
    c = params1.dissipation * s1 + params2.dissipation * (1 - s1)
    point = pos - dist * (0.5 - s1) * normal
    v = v_rel + jnp.cross(w_rel, point - pos)
    vn = v @ normal
    f = fh * (1 + 1.5 * c * vn)
    active = in_contact & (f > 0)
    vtangent = v - vn * normal
    vs2 = vtangent @ vtangent
    sliding = vs2 > 0
    vslip = jnp.sqrt(jnp.where(sliding, vs2, 1.0))
    us = _harmonic(params1.static_friction, params2.static_friction)
    ud = _harmonic(params1.dynamic_friction, params2.dynamic_friction)
    uv = _harmonic(params1.viscous_friction, params2.viscous_friction)
    friction = jnp.where(sliding, _friction(f, vtangent, vslip, us, ud, uv, transition_velocity), 0.0)
    force = jnp.where(active, f * normal + friction, 0.0)
    return force, point, in_contact & (f <= 0)


def hertz_energy(dist, radius, params1: HuntCrossleyParams, params2: HuntCrossleyParams) -> jax.Array:
    """Simbody's potential energy of one Hunt–Crossley contact, ``2/5 fH d`` (0 out of
    contact), with the Hertz force ``fH`` and the combined stiffness of
    :func:`hunt_crossley`."""
    _, in_contact, fh = _hertz(dist, radius, params1, params2)
    return 0.4 * fh * jnp.where(in_contact, -dist, 0.0)


def _hertz(dist, radius, params1: HuntCrossleyParams, params2: HuntCrossleyParams):
    """The Hertz part shared by the force and the energy: ``(s1, in_contact, fH)`` with
    ``ki = Ei^(2/3)``, ``s1 = k2/(k1+k2)``, ``k = k1 s1`` and ``fH = 4/3 k d sqrt(R k d)``
    at depth ``d = -dist`` (0 out of contact, with a finite derivative there)."""
    k1 = jnp.asarray(params1.stiffness) ** (2.0 / 3.0)
    k2 = jnp.asarray(params2.stiffness) ** (2.0 / 3.0)
    s1 = k2 / (k1 + k2)
    k = k1 * s1
    in_contact = dist < 0
    d = jnp.where(in_contact, -dist, 0.0)
    fh = (4.0 / 3.0) * k * d * jnp.sqrt(radius * k * d + jnp.where(in_contact, 0.0, 1.0))
    return s1, in_contact, fh


class SmoothContactParams(NamedTuple):
    """Parameters of OpenSim's ``SmoothSphereHalfSpaceForce`` (its property names).

    Attributes:
        stiffness: ``E`` (N/m^2); the law uses ``k = E^(2/3)/2`` (two equal surfaces).
        dissipation: ``c`` (s/m), non-negative; 0 (OpenSim's default) leaves the
            Hunt–Crossley smoothing factor at 1 (``2/(3c)`` is infinite) and the
            derivative with respect to ``c`` undefined.
        static_friction, dynamic_friction: ``us``, ``ud`` (-).
        viscous_friction: ``uv`` (s/m).
        transition_velocity: ``vt`` (m/s).
        constant_contact_force: ``cf`` (N-like smoothing constant; OpenSim's default 1e-5).
        hertz_smoothing: ``bd`` (1/m; default 300).
        hunt_crossley_smoothing: ``bv`` (s/m; default 50).
    """

    stiffness: jax.Array | float = 1.0
    dissipation: jax.Array | float = 0.0
    static_friction: jax.Array | float = 0.0
    dynamic_friction: jax.Array | float = 0.0
    viscous_friction: jax.Array | float = 0.0
    transition_velocity: jax.Array | float = 0.01
    constant_contact_force: jax.Array | float = 1e-5
    hertz_smoothing: jax.Array | float = 300.0
    hunt_crossley_smoothing: jax.Array | float = 50.0


def _step(x):
    """OpenSim's smooth step ``(1 + tanh(x))/2``, evaluated as the equal ``1/(1 + e^(-2x))``
    which keeps its relative accuracy (and its derivative's) where the step is near 0."""
    return jax.nn.sigmoid(2.0 * x)


def smooth_sphere_half_space(
    dist, normal, pos, radius, v_rel, params: SmoothContactParams
) -> tuple[jax.Array, jax.Array]:
    """OpenSim's ``SmoothSphereHalfSpaceForce`` on one sphere against a half-space.

    Geometry 1 is the half-space (``normal`` its outward normal), geometry 2 the sphere;
    ``dist``/``pos`` as :func:`simjax.dynamics.collision.plane_sphere` gives them (OpenSim's
    contact point is the same midpoint). With indentation ``d = -dist``,
    ``k = E^(2/3)/2``: ``fH = 4/3 k sqrt(R k) (d^2 + cf)^(3/4) (1 + tanh(bd d))/2``,
    ``f = fH (1 + 3/2 c vn) (1 + tanh(bv (vn + 2/(3c))))/2`` with ``vn = v_rel·normal``,
    and friction as Simbody's with slip speed ``vs = sqrt(|v_t|^2 + cf)``.

    The force is defined everywhere (a small attraction-free force also out of contact)
    and infinitely differentiable in every argument, except across slip speed ``vs = vt``
    where OpenSim's ``min(vs/vt, 1)`` leaves the friction force continuous but its
    derivative not.

    Args:
        dist: Signed distance (m), negative in penetration.
        normal: (3,) half-space outward unit normal (towards the sphere).
        pos: (3,) contact point (m).
        radius: Sphere radius (m).
        v_rel: (3,) velocity of the half-space's material point at ``pos`` minus the
            sphere's (m/s).
        params: The force's parameters.

    Returns:
        ``(force, point)``: the force (N) on the sphere's body at ``point`` (= ``pos``); the
        half-space's body gets ``-force`` there.
    """
    p = params
    depth = -dist
    k = 0.5 * jnp.asarray(p.stiffness) ** (2.0 / 3.0)
    cf = p.constant_contact_force
    fh_pos = (4.0 / 3.0) * k * jnp.sqrt(radius * k) * (depth * depth + cf) ** 0.75
    fh = fh_pos * _step(p.hertz_smoothing * depth)
    c = jnp.asarray(p.dissipation)
    vn = v_rel @ normal
    f = fh * (1 + 1.5 * c * vn)
    f = f * _step(p.hunt_crossley_smoothing * (vn + 2.0 / (3.0 * c)))
    vtangent = v_rel - vn * normal
    vslip = jnp.sqrt(vtangent @ vtangent + cf)
    friction = _friction(
        f,
        vtangent,
        vslip,
        p.static_friction,
        p.dynamic_friction,
        p.viscous_friction,
        p.transition_velocity,
    )
    return f * normal + friction, pos


def smooth_hertz_energy(dist, radius, params: SmoothContactParams) -> jax.Array:
    """Simbody's (and so OpenSim's) potential energy of a ``SmoothSphereHalfSpaceForce``:
    ``2/5 fH d`` with the smoothed Hertz force ``fH`` of :func:`smooth_sphere_half_space`
    and the indentation ``d = -dist`` (so slightly negative out of contact)."""
    p = params
    depth = -dist
    k = 0.5 * jnp.asarray(p.stiffness) ** (2.0 / 3.0)
    fh = (4.0 / 3.0) * k * jnp.sqrt(radius * k) * (depth * depth + p.constant_contact_force) ** 0.75
    return 0.4 * fh * _step(p.hertz_smoothing * depth) * depth


def check_hunt_crossley(name: str, params: HuntCrossleyParams, transition_velocity) -> None:
    """Raise ``ValueError`` naming ``name`` and the field when a HuntCrossley surface's
    parameters are out of range: stiffness must be positive, the dissipation and the
    friction coefficients non-negative and finite, the transition velocity positive.
    For concrete (loader-time) values; the law itself does not check."""
    check_field(name, "stiffness", params.stiffness, positive=True)
    for field in ("dissipation", "static_friction", "dynamic_friction", "viscous_friction"):
        check_field(name, field, getattr(params, field))
    check_field(name, "transition_velocity", transition_velocity, positive=True)


def check_smooth(name: str, params: SmoothContactParams) -> None:
    """Raise ``ValueError`` naming ``name`` and the field when a SmoothSphereHalfSpaceForce's
    parameters are out of range: stiffness, transition velocity, constant contact force and
    both smoothings positive; dissipation and friction coefficients non-negative; all
    finite."""
    for field in SmoothContactParams._fields:
        positive = not (field.endswith("_friction") or field == "dissipation")
        check_field(name, field, getattr(params, field), positive=positive)


def check_field(name, field, value, positive=False) -> None:
    """Raise ``ValueError`` naming ``name`` and ``field`` unless ``value`` is finite and
    non-negative (positive with ``positive``), saying what to set it to."""
    v = np.asarray(value, dtype=float)
    bad = ~np.isfinite(v) | (v <= 0 if positive else v < 0)
    if np.any(bad):
        need = "positive" if positive else "non-negative"
        raise ValueError(
            f"{name}: {field} must be finite and {need}, got {value!r}; set {field} to a {need} value"
        )
