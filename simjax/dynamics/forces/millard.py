"""OpenSim's ``Millard2012EquilibriumMuscle`` (Millard, Uchida, Seth and Delp 2013,
"Flexing computational muscle: modeling and simulation of musculotendon dynamics", J.
Biomech. Eng.), as OpenSim 4.6 computes it, vectorised over muscles.

Per muscle, with max isometric force ``F``, optimal fibre length ``lo``, tendon slack
length ``ls``, pennation at optimal length ``alpha0`` and path length ``L`` and speed ``V``:

* curves (:mod:`.curves`, each from its own parameters, one per muscle): active
  force-length ``fal``, passive ``fpe`` of the normalized fibre length, tendon ``fse`` of
  the normalized tendon length, force-velocity ``fv`` of the normalized fibre velocity
  and its inverse. As OpenSim's ``extendFinalizeFromProperties`` does, a damped
  (``fiber_damping >= 0.001``) or rigid-tendon muscle uses ``fal`` with minimum value 0
  and ``fv`` with zero slopes beyond vmax; an undamped elastic-tendon muscle ("classic
  Hill") uses ``fal`` with minimum value >= 0.1 and ``fv`` with end slopes >= half the
  near-vmax slopes; the inverse curve has end slopes half the near-vmax slopes.
* fixed-width pennation: height ``h = lo sin(alpha0)``, ``phi = asin(h / l)`` up to
  ``maximum_pennation_angle``; the fibre length is clamped below at
  ``max(min_norm_active_fiber_length lo, h / sin(maximum_pennation_angle))``.
* fibre length: rigid tendon, from the path with the tendon at slack length; elastic
  tendon, the state. Tendon length ``L - l cos(phi)``.
* fibre velocity: rigid, the path speed projected on the fibre (0 if the tendon is
  slack); elastic undamped, the inverse force-velocity curve of the multiplier that
  balances the tendon force; elastic damped, the root of ``a fal fv(v) + fpe + beta v =
  fse / cos(phi)`` (OpenSim: Newton; here a bracketed Newton then an implicit step so
  that derivatives are exact). A fibre at its minimum length and not lengthening is
  clamped: zero velocity and force.
* fibre force ``F (a fal fv + fpe + beta v)``; a rigid tendon's tension is the fibre force
  along it (the damping part saturated so that the fibre never pushes), an elastic
  tendon's ``F fse``.
* activation (``MuscleFirstOrderActivationDynamicModel``): ``da/dt = (e - a) / tau`` with
  ``a`` clamped to ``[minimum_activation, 1]``, ``tau = tau_a (0.5 + 1.5 a)`` when ``e >
  a`` else ``tau_d / (0.5 + 1.5 a)``.

Statics per element: ``(path, control index, activation z slot or -1, fibre-length z slot
or -1)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ...model.context import Context
from . import curves as _curves
from .kernel import Params
from .muscles import MuscleInfo, MuscleKernel, _statics, states

EPS = float(np.finfo(np.float64).eps)
SIGNIFICANT_REAL = EPS ** (7.0 / 8.0)
MIN_NONZERO_DAMPING = 0.001
DEFAULT_MINIMUM_ACTIVATION = 0.01  # MuscleFirstOrderActivationDynamicModel's default

#: The curves' parameters: (kernel parameter name, curve, OpenSim property, default);
#: NaN default = OpenSim's fitted value (optional properties left empty).
CURVE_PARAMS = (
    (
        "fal_min_norm_active_fiber_length",
        "ActiveForceLengthCurve",
        "min_norm_active_fiber_length",
        0.47 - 0.0259,
    ),
    ("fal_transition_norm_fiber_length", "ActiveForceLengthCurve", "transition_norm_fiber_length", 0.73),
    ("fal_max_norm_active_fiber_length", "ActiveForceLengthCurve", "max_norm_active_fiber_length", 1.8123),
    ("fal_shallow_ascending_slope", "ActiveForceLengthCurve", "shallow_ascending_slope", 0.8616),
    ("fal_minimum_value", "ActiveForceLengthCurve", "minimum_value", 0.1),
    ("fv_concentric_slope_at_vmax", "ForceVelocityCurve", "concentric_slope_at_vmax", 0.0),
    ("fv_concentric_slope_near_vmax", "ForceVelocityCurve", "concentric_slope_near_vmax", 0.25),
    ("fv_isometric_slope", "ForceVelocityCurve", "isometric_slope", 5.0),
    ("fv_eccentric_slope_at_vmax", "ForceVelocityCurve", "eccentric_slope_at_vmax", 0.0),
    ("fv_eccentric_slope_near_vmax", "ForceVelocityCurve", "eccentric_slope_near_vmax", 0.15),
    (
        "fv_max_eccentric_velocity_force_multiplier",
        "ForceVelocityCurve",
        "max_eccentric_velocity_force_multiplier",
        1.4,
    ),
    ("fv_concentric_curviness", "ForceVelocityCurve", "concentric_curviness", 0.6),
    ("fv_eccentric_curviness", "ForceVelocityCurve", "eccentric_curviness", 0.9),
    ("fpe_strain_at_zero_force", "FiberForceLengthCurve", "strain_at_zero_force", 0.0),
    ("fpe_strain_at_one_norm_force", "FiberForceLengthCurve", "strain_at_one_norm_force", 0.7),
    ("fpe_stiffness_at_low_force", "FiberForceLengthCurve", "stiffness_at_low_force", float("nan")),
    ("fpe_stiffness_at_one_norm_force", "FiberForceLengthCurve", "stiffness_at_one_norm_force", float("nan")),
    ("fpe_curviness", "FiberForceLengthCurve", "curviness", float("nan")),
    ("fse_strain_at_one_norm_force", "TendonForceLengthCurve", "strain_at_one_norm_force", 0.049),
    (
        "fse_stiffness_at_one_norm_force",
        "TendonForceLengthCurve",
        "stiffness_at_one_norm_force",
        float("nan"),
    ),
    ("fse_norm_force_at_toe_end", "TendonForceLengthCurve", "norm_force_at_toe_end", float("nan")),
    ("fse_curviness", "TendonForceLengthCurve", "curviness", float("nan")),
)

PARAMS = (
    "max_isometric_force",
    "optimal_fiber_length",
    "tendon_slack_length",
    "pennation_angle_at_optimal",
    "max_contraction_velocity",
    "fiber_damping",
    "activation_time_constant",
    "deactivation_time_constant",
    "minimum_activation",
    "maximum_pennation_angle",
    *(c[0] for c in CURVE_PARAMS),
)
"""The Instance-stage parameters of a muscle (the curves' as ``fal_``, ``fv_``, ``fpe_``,
``fse_`` + OpenSim's property name; NaN for an optional curve property left empty)."""


def _fitted(value, default):
    """An optional curve property: ``default`` (OpenSim's fitted value) where NaN."""
    nan = jnp.isnan(value)
    return jnp.where(nan, default, jnp.where(nan, 0.0, value))


def muscle_curves(P: Params, compliant: np.ndarray | jax.Array):
    """The five curves of each muscle (OpenSim's, after ``extendFinalizeFromProperties``
    adjusted them for the damped/rigid or the classic model): (fal, fv, fv inverse, fpe,
    fse)."""
    classic = jnp.asarray(compliant) & (P["fiber_damping"] < MIN_NONZERO_DAMPING)
    con_near, ecc_near = P["fv_concentric_slope_near_vmax"], P["fv_eccentric_slope_near_vmax"]
    con_at = jnp.where(classic, jnp.maximum(P["fv_concentric_slope_at_vmax"], 0.5 * con_near), 0.0)
    ecc_at = jnp.where(classic, jnp.maximum(P["fv_eccentric_slope_at_vmax"], 0.5 * ecc_near), 0.0)
    fv_common = (
        P["fv_isometric_slope"],
        P["fv_max_eccentric_velocity_force_multiplier"],
        P["fv_concentric_curviness"],
        P["fv_eccentric_curviness"],
    )
    iso, fmax, cc, ce = fv_common
    fal = _curves.active_force_length_curve(
        P["fal_min_norm_active_fiber_length"],
        P["fal_transition_norm_fiber_length"],
        P["fal_max_norm_active_fiber_length"],
        P["fal_shallow_ascending_slope"],
        jnp.where(classic, jnp.maximum(P["fal_minimum_value"], 0.1), 0.0),
    )
    fv = _curves.force_velocity_curve(con_at, con_near, iso, ecc_at, ecc_near, fmax, cc, ce)
    fv_inv = _curves.force_velocity_inverse_curve(
        0.5 * con_near, con_near, iso, 0.5 * ecc_near, ecc_near, fmax, cc, ce
    )
    e0, e1 = P["fpe_strain_at_zero_force"], P["fpe_strain_at_one_norm_force"]
    fpe = _curves.fiber_force_length_curve(
        e0,
        e1,
        _fitted(P["fpe_stiffness_at_low_force"], 0.2),
        _fitted(P["fpe_stiffness_at_one_norm_force"], 2.0 / (e1 - e0)),
        _fitted(P["fpe_curviness"], 0.75),
    )
    et = P["fse_strain_at_one_norm_force"]
    fse = _curves.tendon_force_length_curve(
        et,
        _fitted(P["fse_stiffness_at_one_norm_force"], 1.375 / et),
        _fitted(P["fse_norm_force_at_toe_end"], 2.0 / 3.0),
        _fitted(P["fse_curviness"], 0.5),
    )
    return fal, fv, fv_inv, fpe, fse


class _Pennation:
    """OpenSim's MuscleFixedWidthPennationModel of each muscle, with the muscle's minimum
    fibre length."""

    def __init__(self, P):
        lo, alpha0, max_phi = (
            P["optimal_fiber_length"],
            P["pennation_angle_at_optimal"],
            P["maximum_pennation_angle"],
        )
        self.pennated = alpha0 > EPS
        self.h = lo * jnp.sin(alpha0)
        self.max_phi = max_phi
        self.max_sin = jnp.sin(max_phi)
        self.min_length = jnp.where(
            max_phi > SIGNIFICANT_REAL,
            self.h / jnp.where(max_phi > SIGNIFICANT_REAL, self.max_sin, 1.0),
            0.01 * lo,
        )
        self.min_along = self.min_length * jnp.cos(max_phi)
        # the muscle's clamp: the shortest active length or the pennation model's minimum
        self.min_fiber_length = jnp.maximum(
            SIGNIFICANT_REAL, jnp.maximum(P["fal_min_norm_active_fiber_length"] * lo, self.min_length)
        )

    def angle(self, l):
        """``calcPennationAngle``."""
        above = l > self.min_length
        s = self.h / jnp.where(above, l, 1.0)
        ok = above & (s < self.max_sin)
        phi = jnp.where(ok, jnp.arcsin(jnp.where(ok, s, 0.0)), self.max_phi)
        return jnp.where(self.pennated, phi, 0.0)

    def fiber_length(self, L, lt):
        """``calcFiberLength`` from the path and tendon lengths."""
        along = L - lt
        ok = along >= self.min_along
        return jnp.where(ok, jnp.sqrt(self.h * self.h + jnp.where(ok, along, 1.0) ** 2), self.min_length)


def _damped_velocity(mask, a, fal, fpe, target, beta, fmax, fv_curve, v0, v_other, iterations=30):
    """The normalized fibre velocity ``v`` with ``a fal fv(v) + fpe + beta v = target``
    (the damped model's equilibrium, ``target = fse / cos(phi)``) where ``mask``, else
    ``v_other``, and the force-velocity multiplier ``fv(v)``: bracketed Newton from
    OpenSim's starting guess ``v0``, then one implicit step for exact derivatives (the
    multiplier's value and slope from one evaluation at the end)."""

    def g(v, a, fal, fpe, target, beta, fv_curve):
        return a * fal * _curves.evaluate(fv_curve, v) + fpe + beta * v - target

    args = jax.lax.stop_gradient((a, fal, fpe, target, beta, fv_curve))
    sa, sfal, sfpe, starget, sbeta, sfv = args
    # the root lies where beta v = target - fpe - a fal fv with 0 <= fv <= fmax
    lo = (starget - sfpe - sa * sfal * jax.lax.stop_gradient(fmax)) / sbeta - 1.0
    hi = (starget - sfpe) / sbeta + 1.0
    v0 = jnp.clip(jax.lax.stop_gradient(v0), lo, hi)

    def step(carry, _):
        v, lo, hi = carry
        r, dr = jax.jvp(lambda x: g(x, *args), (v,), (jnp.ones_like(v),))
        lo, hi = jnp.where(r < 0, v, lo), jnp.where(r < 0, hi, v)
        newton = v - r / jnp.where(dr > 0, dr, 1.0)
        ok = (newton > lo) & (newton < hi) & (dr > 0)
        return (jnp.where(ok, newton, 0.5 * (lo + hi)), lo, hi), None

    (v, _, _), _ = jax.lax.scan(step, (v0, lo, hi), None, length=iterations)
    x = jnp.where(mask, jax.lax.stop_gradient(v), v_other)
    fvx, dfv = jax.jvp(lambda y: _curves.evaluate(fv_curve, y), (x,), (jnp.ones_like(x),))
    dfv = jax.lax.stop_gradient(dfv)
    r = a * fal * fvx + fpe + beta * x - target
    dr = jax.lax.stop_gradient(a * fal * dfv + beta)
    dv = jnp.where(mask, -r / jnp.where(mask, dr, 1.0), 0.0)
    return x + dv, fvx + dfv * dv


def millard_equations(
    P,
    L: jax.Array,
    V: jax.Array,
    e: jax.Array,
    a: jax.Array,
    lm_state: jax.Array,
    compliant: np.ndarray,
    activation_dynamics: np.ndarray,
) -> MuscleInfo:
    """Every quantity of the muscles (OpenSim's getters) from their path lengths ``L``
    and speeds ``V``, excitations ``e``, activations ``a`` (the excitation where there is
    no activation dynamics) and fibre lengths ``lm_state`` (ignored where the tendon is
    rigid: ``compliant`` False)."""
    comp = jnp.asarray(compliant)
    act_dyn = jnp.asarray(activation_dynamics)
    F, lo, ls = P["max_isometric_force"], P["optimal_fiber_length"], P["tendon_slack_length"]
    vmax = P["max_contraction_velocity"] * lo
    beta = jnp.where(P["fiber_damping"] < MIN_NONZERO_DAMPING, 0.0, P["fiber_damping"])
    damped = beta > 0.0
    fal_c, fv_c, fv_inv, fpe_c, fse_c = muscle_curves(P, compliant)
    pen = _Pennation(P)
    lmin = pen.min_fiber_length

    # length
    lm_rigid = pen.fiber_length(L, ls)
    lm = jnp.maximum(jnp.where(comp, lm_state, lm_rigid), lmin)
    phi = pen.angle(lm)
    cos, sin = jnp.cos(phi), jnp.sin(phi)
    lt = L - lm * cos
    nlm = lm / lo
    fal = _curves.evaluate(fal_c, nlm)
    fpe = _curves.evaluate(fpe_c, nlm)
    fse = _curves.evaluate(fse_c, lt / ls)

    # activation, clamped as the activation model does; without activation dynamics OpenSim
    # never passes the muscle's minimum_activation to that model, which keeps its default
    a_min = jnp.where(act_dyn, P["minimum_activation"], DEFAULT_MINIMUM_ACTIVATION)
    ac = jnp.clip(a, a_min, 1.0)

    # fibre velocity, three ways
    slack = lt < ls - SIGNIFICANT_REAL
    nv_rigid = jnp.where(slack, 0.0, V * cos / vmax)
    classic = comp & ~damped
    if not isinstance(compliant, np.ndarray) or np.any(compliant):  # a rigid group skips these
        safe_a = jnp.where(classic, ac, 1.0)
        safe_fal = jnp.where(classic, fal, 1.0)
        fv_classic = (fse / cos - fpe) / (safe_a * safe_fal)
        # one inverse-curve evaluation serves both: the classic model's velocity, the
        # damped model's starting guess (OpenSim's, from the multiplier with a, fal and
        # cos(phi) kept >= 0.01, clamped to [-1, 1])
        guess = (fse / jnp.maximum(cos, 0.01) - fpe) / (jnp.maximum(ac, 0.01) * jnp.maximum(fal, 0.01))
        nv_inv = _curves.evaluate(fv_inv, jnp.where(classic, fv_classic, jnp.where(comp, guess, 1.0)))
        use_damped = comp & damped
        nv, fv_at_nv = _damped_velocity(
            use_damped,
            jnp.where(use_damped, ac, 1.0),
            jnp.where(use_damped, fal, 1.0),
            jnp.where(use_damped, fpe, 0.0),
            jnp.where(use_damped, fse / cos, 1.0),
            jnp.where(use_damped, beta, 1.0),
            P["fv_max_eccentric_velocity_force_multiplier"],
            fv_c,
            jnp.clip(nv_inv, -1.0, 1.0),
            jnp.where(comp, nv_inv, nv_rigid),
        )
        fv = jnp.where(classic, fv_classic, fv_at_nv)
    else:
        nv = nv_rigid
        fv = _curves.evaluate(fv_c, nv)
    fv = jnp.where(comp | ~slack, fv, 1.0)
    vm = nv * vmax
    dphi = jnp.where(pen.pennated, -(vm / lm) * jnp.tan(phi), 0.0)
    vm_along = vm * cos - lm * sin * dphi
    vt = jnp.where(comp, V - vm * cos + lm * sin * dphi, 0.0)
    clamped = ((lm <= lmin) & (vm <= 0.0)) | (lm < lmin)
    vm, nv, vm_along, fv = (jnp.where(clamped, 0.0, x) for x in (vm, nv, vm_along, fv))
    fv = jnp.where(clamped, 1.0, fv)
    vt = jnp.where(clamped, V, vt)

    # forces
    active = jnp.where(clamped, 0.0, F * ac * fal * fv)
    elastic = jnp.where(clamped, 0.0, F * fpe)
    damping = jnp.where(clamped, 0.0, F * beta * nv)
    fiber = active + elastic + damping
    pushes = ~comp & (fiber < 0.0)
    damping = jnp.where(pushes, -active - elastic, damping)
    fiber = jnp.where(pushes, 0.0, fiber)
    along_force = fiber * cos
    tendon = jnp.where(comp, F * fse, along_force)

    # activation dynamics
    k = 0.5 + 1.5 * ac
    tau = jnp.where(e > ac, P["activation_time_constant"] * k, P["deactivation_time_constant"] / k)
    adot = jnp.where(act_dyn, (e - ac) / tau, 0.0)
    nan = jnp.full_like(L, jnp.nan)
    return MuscleInfo(
        length=L,
        lengthening_speed=V,
        activation=ac,
        excitation=e,
        normalized_tendon_force_state=jnp.where(comp, lm_state, nan),
        tendon_length=lt,
        normalized_tendon_length=lt / ls,
        fiber_length=lm,
        normalized_fiber_length=nlm,
        fiber_length_along_tendon=lm * cos,
        pennation_angle=phi,
        cos_pennation_angle=cos,
        active_force_length_multiplier=fal,
        passive_force_multiplier=fpe,
        force_velocity_multiplier=fv,
        fiber_velocity=vm,
        normalized_fiber_velocity=nv,
        fiber_velocity_along_tendon=vm_along,
        tendon_velocity=vt,
        normalized_tendon_velocity=vt / ls,
        active_fiber_force=active,
        passive_fiber_elastic_force=elastic,
        passive_fiber_damping_force=damping,
        fiber_force=fiber,
        fiber_force_along_tendon=along_force,
        tendon_force=tendon,
        normalized_tendon_force_derivative=jnp.where(comp, vm, 0.0),
        activation_derivative=adot,
    )


def minimum_fiber_length(P: Params) -> jax.Array:
    """Each muscle's shortest fibre length (the clamp of its fibre length)."""
    return _Pennation(P).min_fiber_length


def inextensible_tendon_active_fiber_force(P: Params, L: jax.Array, V: jax.Array, a: jax.Array) -> jax.Array:
    """OpenSim's ``calcInextensibleTendonActiveFiberForce`` (static optimization's force
    per unit activation at ``a = 1``): the fibre at the path length less the tendon slack
    length, moving at the path speed projected on it, ``F a fal fv cos(phi')``, zero at or
    below the minimum fibre length. As OpenSim 4.6 does, ``phi'`` is the pennation model's
    angle of the *normalized* fibre length (``calcActiveFiberForceAlongTendon``), nearly 0."""
    # which curves (rigid/damped or classic) follows the tendon: a flag among the parameters
    comp = jnp.asarray(P.get("ignore_tendon_compliance", jnp.zeros_like(L))) < 0.5
    fal_c, fv_c, _, _, _ = muscle_curves(P, comp)
    pen = _Pennation(P)
    lo = P["optimal_fiber_length"]
    lm = pen.fiber_length(L, P["tendon_slack_length"])
    vm = V * jnp.cos(pen.angle(lm))
    ac = jnp.clip(a, P["minimum_activation"], 1.0)
    fal = _curves.evaluate(fal_c, lm / lo)
    fv = _curves.evaluate(fv_c, vm / (lo * P["max_contraction_velocity"]))
    out = P["max_isometric_force"] * ac * fal * fv * jnp.cos(pen.angle(lm / lo))
    return jnp.where(lm <= pen.min_fiber_length, 0.0, out)


def equilibrium_fiber_length(P: Params, L: jax.Array, a: jax.Array, iterations: int = 50) -> jax.Array:
    """The fibre length of static fibre-tendon equilibrium (OpenSim's
    ``computeInitialFiberEquilibrium``: fibre velocity 0, ``F (a fal + fpe) cos(phi) = F
    fse``) of elastic-tendon muscles at path lengths ``L`` and activations ``a``: a
    bracketed Newton iteration from OpenSim's starting point (the tendon stretched by 1%)
    on [minimum fibre length, fibre length at tendon slack], then one implicit step for
    exact derivatives. The minimum fibre length where the fibre pulls harder than the
    tendon even there (OpenSim's "fiber at its lower bound")."""
    fal_c, _, _, fpe_c, fse_c = muscle_curves(P, np.ones(np.shape(L), dtype=bool))
    pen = _Pennation(P)
    lo, ls = P["optimal_fiber_length"], P["tendon_slack_length"]
    lmin = pen.min_fiber_length

    def r(lm, P_lo, P_ls, a, L, fal_c, fpe_c, fse_c):
        phi = pen.angle(lm)
        cos = jnp.cos(phi)
        n = lm / P_lo
        fiber = a * _curves.evaluate(fal_c, n) + _curves.evaluate(fpe_c, n)
        return fiber * cos - _curves.evaluate(fse_c, (L - lm * cos) / P_ls)

    args = (lo, ls, a, L, fal_c, fpe_c, fse_c)
    sargs = jax.lax.stop_gradient(args)
    slmin = jax.lax.stop_gradient(lmin)
    hi = jnp.maximum(jax.lax.stop_gradient(pen.fiber_length(L, ls)), slmin)
    low = slmin
    r_low = r(low, *sargs)
    x0 = jnp.clip(jax.lax.stop_gradient(pen.fiber_length(L, 1.01 * ls)), low, hi)

    def step(carry, _):
        x, low, hi = carry
        f, df = jax.jvp(lambda v: r(v, *sargs), (x,), (jnp.ones_like(x),))
        low, hi = jnp.where(f < 0, x, low), jnp.where(f < 0, hi, x)
        newton = x - f / jnp.where(df != 0, df, 1.0)
        ok = (newton > low) & (newton < hi) & (df != 0)
        return (jnp.where(ok, newton, 0.5 * (low + hi)), low, hi), None

    (x, _, _), _ = jax.lax.scan(step, (x0, low, hi), None, length=iterations)
    x = jax.lax.stop_gradient(x)
    f, df = jax.jvp(lambda v: r(v, *args), (x,), (jnp.ones_like(x),))  # one pass: value, slope
    df = jax.lax.stop_gradient(df)
    x = x - f / jnp.where(df != 0, df, 1.0)
    return jnp.where(r_low >= 0, lmin, x)


@dataclass(frozen=True)
class Millard2012EquilibriumMuscle(MuscleKernel):
    """The module's equations over a subsystem's Millard muscles: the tendon force as the
    tension of each muscle's path; z holds the activations and the fibre lengths."""

    def equations(self, P: Params, ctx: Context, S: tuple, L: jax.Array, V: jax.Array) -> MuscleInfo:
        e, a, lm, comp = states(ctx, S)
        return millard_equations(P, L, V, e, a, lm, comp, _statics(S)[:, 2] >= 0)

    def inextensible_tendon_active_fiber_force(
        self, P: Params, L: jax.Array, V: jax.Array, a: jax.Array
    ) -> jax.Array:
        return inextensible_tendon_active_fiber_force(P, L, V, a)

    def equilibrium_tendon_state(self, P: Params, L: jax.Array, V: jax.Array, a: jax.Array) -> jax.Array:
        return equilibrium_fiber_length(P, L, a)
