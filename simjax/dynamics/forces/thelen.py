"""OpenSim's ``Thelen2003Muscle`` (Thelen 2003, "Adjustment of muscle mechanics model
parameters to simulate dynamic contractions in older adults", J. Biomech. Eng.), as
OpenSim 4.6 computes it (with Millard's modifications: a linearly extrapolated
force-velocity curve, the fixed-width pennation model's clamps, the exact toe strain).

Per muscle, with max isometric force ``F``, optimal fibre length ``lo``, tendon slack
length ``ls``, pennation at optimal length ``alpha0`` (constant fibre height
``h = lo sin alpha0``), path length ``L`` and lengthening speed ``V``:

* fibre length: the state ``lce`` (fibre length, not along the tendon) clamped below at
  the minimum fibre length ``h / sin(maximum_pennation_angle)`` (``0.01 lo`` for a zero
  maximum angle); pennation ``asin(h / lce)`` capped at the maximum angle (zero for
  ``alpha0 <= eps``); tendon length ``L - lce cos(phi)``;
* curves: active force-length ``exp(-(l - 1)^2 / KshapeActive)``; passive
  ``(exp(KshapePassive (l - 1) / FmaxMuscleStrain) - 1) / (exp(KshapePassive) - 1)`` for
  ``l > 1`` (else 0); tendon: zero for strain ``x <= 0``, exponential toe
  ``0.33 (exp(3 x / eToe) - 1) / (exp(3) - 1)`` up to ``eToe = 99 e0 e^3 / (166 e^3 -
  67)``, then linear with slope ``0.67 / (e0 - eToe)`` (``e0 = FmaxTendonStrain``);
* fibre velocity (compliant tendon): the active force ``Fm = fse / cos(phi) - fpe`` that
  balances the tendon gives the normalized fibre velocity through Thelen's equations 6-7
  (``(0.25 + 0.75 a) (Fm - a fal) / b``, with ``b = a fal + Fm / Af`` when shortening and
  ``b = (2 + 2 / Af) (a fal Flen - Fm) / (Flen - 1)`` when lengthening), extended linearly
  below ``Fm = 0`` and above ``fv_linear_extrap_threshold a fal Flen``; the force-velocity
  multiplier is ``Fm / (a fal)``. A fibre at its minimum length that would shorten is
  held (zero velocity, no fibre force, ``fv = 1``);
* forces: tendon ``F fse`` (the tension of the path), active fibre ``F a fal fv``, fibre
  ``F (a fal fv + fpe)``;
* activation: ``da/dt = (e - a) / tau`` with ``tau = tau_act (1/2 + 3a/2)`` when ``e > a``,
  else ``tau_deact / (1/2 + 3a/2)``, the activation clamped to ``[minimum_activation,
  1]`` wherever it is used.

OpenSim 4.6 refuses ``ignore_tendon_compliance`` and ``ignore_activation_dynamics`` for
this muscle; here a rigid tendon is the muscle of OpenSim's
``calcInextensibleTendonActiveFiberForce`` (tendon at its slack length, fibre velocity the
path's projected on the fibre, the force-velocity multiplier from inverting Thelen's
curve), and without activation dynamics the activation is the clamped excitation.

Statics per element: ``(path, control index, activation z slot or -1, fibre length z slot
or -1)``. The excitations are the subsystem's ``controls`` from ``control index`` on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ...model.context import Context
from .kernel import Params
from .muscles import MuscleInfo, MuscleKernel, excitations

# SimTK's constants (Simbody's NTraits<double>): the branches of OpenSim's code use them.
EPS = float(np.finfo(np.float64).eps)
SIGNIFICANT_REAL = EPS**0.875
SQRT_EPS = math.sqrt(EPS)

# Tendon curve constants (Thelen 2003 with the toe strain exact, as OpenSim computes it).
K_TOE = 3.0
F_TOE = 0.33
_E3 = math.exp(3.0)
TOE_STRAIN_OVER_E0 = 99.0 * _E3 / (166.0 * _E3 - 67.0)

PARAMS = (
    "max_isometric_force",
    "optimal_fiber_length",
    "tendon_slack_length",
    "pennation_angle_at_optimal",
    "max_contraction_velocity",
    "activation_time_constant",
    "deactivation_time_constant",
    "fmax_tendon_strain",
    "fmax_muscle_strain",
    "kshape_active",
    "kshape_passive",
    "af",
    "flen",
    "fv_linear_extrap_threshold",
    "maximum_pennation_angle",
    "minimum_activation",
)
"""The Instance-stage parameters of a muscle (OpenSim's property names in snake_case)."""


def _safe(x: jax.Array, ok: jax.Array) -> jax.Array:
    """``x`` where ``ok``, else 1 (a denominator that keeps unused lanes and their
    gradients finite)."""
    return jnp.where(ok, x, 1.0)


def active_force_length(lceN: jax.Array, kshape_active: jax.Array) -> jax.Array:
    """Active force-length multiplier of the normalized fibre length (OpenSim's
    ``calcfal``)."""
    return jnp.exp(-((lceN - 1.0) ** 2) / kshape_active)


def passive_force_length(lceN: jax.Array, e0: jax.Array, kpe: jax.Array) -> jax.Array:
    """Passive force-length multiplier (``calcfpe``): zero at or below the optimal length."""
    stretched = lceN > 1.0
    x = jnp.where(stretched, lceN - 1.0, 0.0)
    return jnp.where(stretched, (jnp.exp(kpe * x / e0) - 1.0) / (jnp.exp(kpe) - 1.0), 0.0)


def tendon_force_length(tlN: jax.Array, e0: jax.Array) -> jax.Array:
    """Normalized tendon force of the normalized tendon length (``calcfse``): zero when
    slack, an exponential toe, then linear."""
    x = tlN - 1.0
    e_toe = TOE_STRAIN_OVER_E0 * e0
    k_lin = 0.67 / (e0 - e_toe)
    toe = x > 0.0
    xt = jnp.where(toe, jnp.minimum(x, e_toe), 0.0)
    f_toe = F_TOE / (math.exp(K_TOE) - 1.0) * (jnp.exp(K_TOE * xt / e_toe) - 1.0)
    lin = k_lin * (x - e_toe) + F_TOE
    return jnp.where(x > e_toe, lin, jnp.where(toe, f_toe, 0.0))


def _fv_pieces(a, fal, af, flen, thr):
    """Thelen's equation 6 pieces: ``k = 0.25 + 0.75 a``, the active force at the
    isometric point ``afl``, the lengthening coefficient ``c`` (``b = c (afl Flen - Fm)``),
    and the value and slope of the normalized velocity at the two ends of the curve
    (``Fm = 0`` and ``Fm = thr afl Flen``) where it is continued linearly."""
    k = 0.25 + 0.75 * a
    afl = a * fal
    c = (2.0 + 2.0 / af) / (flen - 1.0)
    # Fm = 0: b = afl, db/dFm = 1 / af
    v_lo = -k
    s_lo = k / afl + k * afl / afl**2 / af
    # Fm = Fm1 = thr afl flen: b = c (afl flen - Fm1), db/dFm = -c
    Fm1 = thr * afl * flen
    b1 = c * (afl * flen - Fm1)
    v_hi = k * (Fm1 - afl) / b1
    s_hi = k / b1 + k * (Fm1 - afl) / b1**2 * c
    return k, afl, c, v_lo, s_lo, Fm1, v_hi, s_hi


def fiber_velocity_of_force(
    a: jax.Array, fal: jax.Array, Fm: jax.Array, af: jax.Array, flen: jax.Array, thr: jax.Array
) -> jax.Array:
    """Normalized fibre velocity (optimal lengths per max contraction velocity) at
    activation ``a``, active force-length multiplier ``fal`` and normalized active fibre
    force ``Fm = a fal fv`` (OpenSim's ``calcdlceN``)."""
    k, afl, c, v_lo, s_lo, Fm1, v_hi, s_hi = _fv_pieces(a, fal, af, flen, thr)
    inside = (Fm > 0.0) & (Fm < Fm1)
    shortening = Fm <= afl
    b = jnp.where(shortening, afl + Fm / af, c * (afl * flen - Fm))
    curve = k * (Fm - afl) / _safe(b, inside)
    line = jnp.where(Fm <= 0.0, v_lo + s_lo * Fm, v_hi + s_hi * (Fm - Fm1))
    return jnp.where(inside, curve, line)


def force_velocity_inverse(
    a: jax.Array, fal: jax.Array, dlceN: jax.Array, af: jax.Array, flen: jax.Array, thr: jax.Array
) -> jax.Array:
    """Force-velocity multiplier at normalized fibre velocity ``dlceN`` (OpenSim's
    ``calcfvInv``, which finds it by Newton's method; here each piece inverted in closed
    form), clamped at zero."""
    k, afl, c, v_lo, s_lo, Fm1, v_hi, s_hi = _fv_pieces(a, fal, af, flen, thr)
    below, above = dlceN <= v_lo, dlceN >= v_hi
    shortening = dlceN <= 0.0
    # k (Fm - afl) = v b, b linear in Fm: solve for Fm on each piece of the curve
    Fm_short = afl * (k + dlceN) / _safe(k - dlceN / af, ~below & shortening)
    Fm_long = afl * (k + dlceN * c * flen) / _safe(k + dlceN * c, ~above & ~shortening)
    Fm = jnp.where(shortening, Fm_short, Fm_long)
    Fm = jnp.where(below, (dlceN - v_lo) / s_lo, jnp.where(above, Fm1 + (dlceN - v_hi) / s_hi, Fm))
    return jnp.maximum(0.0, Fm / afl)


def minimum_fiber_length(P: Params) -> jax.Array:
    """The pennation model's minimum fibre length: the fibre at the maximum pennation
    angle, or 1% of the optimal length when that angle is zero."""
    lo = P["optimal_fiber_length"]
    h = lo * jnp.sin(P["pennation_angle_at_optimal"])
    max_sin = jnp.sin(P["maximum_pennation_angle"])
    pennable = P["maximum_pennation_angle"] > SIGNIFICANT_REAL
    return jnp.where(pennable, h / _safe(max_sin, pennable), 0.01 * lo)


def pennation_angle(P: Params, lce: jax.Array, lmin: jax.Array) -> jax.Array:
    """Pennation angle of fibre length ``lce`` (the fixed-width model's
    ``calcPennationAngle``: capped at the maximum angle, zero for a parallel muscle)."""
    h = P["optimal_fiber_length"] * jnp.sin(P["pennation_angle_at_optimal"])
    phi_max = P["maximum_pennation_angle"]
    s = h / _safe(lce, lce > 0.0)
    free = (lce > lmin) & (s < jnp.sin(phi_max))
    phi = jnp.where(free, jnp.arcsin(jnp.where(free, s, 0.0)), phi_max)
    return jnp.where(P["pennation_angle_at_optimal"] > EPS, phi, 0.0)


def activation_derivative(P: Params, a: jax.Array, e: jax.Array) -> jax.Array:
    """da/dt of OpenSim's ``MuscleFirstOrderActivationDynamicModel`` (activation clamped to
    ``[minimum_activation, 1]``)."""
    a = jnp.clip(a, P["minimum_activation"], 1.0)
    k = 0.5 + 1.5 * a
    tau = jnp.where(e > a, P["activation_time_constant"] * k, P["deactivation_time_constant"] / k)
    return (e - a) / tau


def thelen_equations(
    P: Params,
    L: jax.Array,
    V: jax.Array,
    e: jax.Array,
    a: jax.Array,
    lce_state: jax.Array,
    compliant: np.ndarray,
) -> MuscleInfo:
    """Every quantity of the muscles from their path lengths ``L`` and speeds ``V``,
    excitations ``e``, activation states ``a`` and fibre length states ``lce_state``
    (ignored where the tendon is rigid: ``compliant`` False), as OpenSim's
    ``calcMuscleLengthInfo``, ``calcFiberVelocityInfo`` and ``calcMuscleDynamicsInfo``."""
    Fmax, lo, ls = P["max_isometric_force"], P["optimal_fiber_length"], P["tendon_slack_length"]
    af, flen, thr = P["af"], P["flen"], P["fv_linear_extrap_threshold"]
    vmax = P["max_contraction_velocity"] * lo
    h = lo * jnp.sin(P["pennation_angle_at_optimal"])
    lmin = minimum_fiber_length(P)
    comp = jnp.asarray(compliant)
    # rigid tendon: the fixed-width model's fibre of a tendon at its slack length
    x_rigid = L - ls
    lmin_along = lmin * jnp.cos(P["maximum_pennation_angle"])
    lce_rigid = jnp.where(x_rigid >= lmin_along, jnp.sqrt(h * h + x_rigid * x_rigid), lmin)
    raw = jnp.where(comp, lce_state, lce_rigid)
    lce = jnp.maximum(lmin, raw)
    lceN = lce / lo
    phi = pennation_angle(P, lce, lmin)
    cos, sin = jnp.cos(phi), jnp.sin(phi)
    tl = jnp.where(comp, L - lce * cos, ls)
    tlN = tl / ls
    fal = active_force_length(lceN, P["kshape_active"])
    fpe = passive_force_length(lceN, P["fmax_muscle_strain"], P["kshape_passive"])
    act = jnp.clip(a, P["minimum_activation"], 1.0)
    # compliant: the fibre velocity whose force balances the tendon
    fse_c = tendon_force_length(tlN, P["fmax_tendon_strain"])
    Fm_c = fse_c / cos - fpe
    dlceN_c = fiber_velocity_of_force(act, fal, Fm_c, af, flen, thr)
    fv_c = Fm_c / (act * fal)
    # rigid: the path's speed projected on the fibre, the multiplier from the curve
    dlceN_r = V * cos / vmax
    fv_r = force_velocity_inverse(act, fal, dlceN_r, af, flen, thr)
    dlceN = jnp.where(comp, dlceN_c, dlceN_r)
    fv = jnp.where(comp, fv_c, fv_r)
    # a fibre at its minimum length that would shorten is held there (OpenSim's clamp);
    # a rigid tendon's fibre at its minimum length makes no force (its inextensible force)
    held = jnp.where(comp, (raw <= lmin) & (dlceN <= 0.0), lce <= lmin)
    dlceN = jnp.where(held, 0.0, dlceN)
    fv = jnp.where(held, 1.0, fv)
    dlce = dlceN * vmax
    dphi = jnp.where(P["pennation_angle_at_optimal"] > EPS, -(dlce / lce) * jnp.tan(phi), 0.0)
    dlce_along = dlce * cos - lce * sin * dphi
    dtl = jnp.where(comp, V - dlce_along, 0.0)
    active = jnp.where(held, 0.0, Fmax * act * fal * fv)
    fiber = jnp.where(held, 0.0, Fmax * (act * fal * fv + fpe))
    along = fiber * cos
    tendon = jnp.where(comp, Fmax * fse_c, along)
    return MuscleInfo(
        length=L,
        lengthening_speed=V,
        activation=act,
        excitation=e,
        normalized_tendon_force_state=jnp.where(comp, lce_state, jnp.nan),
        tendon_length=tl,
        normalized_tendon_length=tlN,
        fiber_length=lce,
        normalized_fiber_length=lceN,
        fiber_length_along_tendon=lce * cos,
        pennation_angle=phi,
        cos_pennation_angle=cos,
        active_force_length_multiplier=fal,
        passive_force_multiplier=fpe,
        force_velocity_multiplier=fv,
        fiber_velocity=dlce,
        normalized_fiber_velocity=dlceN,
        fiber_velocity_along_tendon=dlce_along,
        tendon_velocity=dtl,
        normalized_tendon_velocity=dtl / ls,
        active_fiber_force=active,
        passive_fiber_elastic_force=Fmax * fpe,
        passive_fiber_damping_force=jnp.zeros_like(L),
        fiber_force=fiber,
        fiber_force_along_tendon=along,
        tendon_force=tendon,
        normalized_tendon_force_derivative=jnp.where(comp, dlce, 0.0),
        activation_derivative=activation_derivative(P, a, e),
    )


def inextensible_tendon_active_fiber_force(P: Params, L: jax.Array, V: jax.Array, a: jax.Array) -> jax.Array:
    """OpenSim's ``Thelen2003Muscle::calcInextensibleTendonActiveFiberForce``: with the
    tendon at its slack length, the active fibre force along the tendon ``F a fal fv
    cos(phi)`` (zero for a fibre at its minimum length), at path lengths ``L``, speeds
    ``V`` and activations ``a`` (each (n,)). Static optimization's force per unit
    activation (``a = 1``)."""
    rigid = np.zeros(np.shape(L), dtype=bool)
    m = thelen_equations(P, L, V, a, a, jnp.full_like(L, jnp.nan), rigid)
    return m.active_fiber_force * m.cos_pennation_angle


def _equilibrium_residual(P: Params, L, V, a, lce, fv):
    """OpenSim's ``initMuscleState`` pieces at fibre length ``lce`` and force-velocity
    multiplier ``fv``: the force error ``F ((a fal fv + fpe) cos - fse)`` and the
    force-velocity multiplier its velocity heuristic gives (the path's speed shared between
    fibre and tendon by their stiffnesses)."""
    Fmax, lo, ls = P["max_isometric_force"], P["optimal_fiber_length"], P["tendon_slack_length"]
    lmin = minimum_fiber_length(P)
    phi = pennation_angle(P, lce, lmin)
    cos = jnp.cos(phi)
    tl = L - lce * cos

    def forces(lce):
        phi = pennation_angle(P, lce, lmin)
        cos = jnp.cos(phi)
        lceN = lce / lo
        fal = active_force_length(lceN, P["kshape_active"])
        fpe = passive_force_length(lceN, P["fmax_muscle_strain"], P["kshape_passive"])
        Fm_along = Fmax * (a * fal * fv + fpe) * cos
        return Fm_along, fal

    (Fm_along, fal), (dFmAT_dlce, _) = jax.jvp(forces, (lce,), (jnp.ones_like(lce),))
    e0 = P["fmax_tendon_strain"]

    def tendon(tl):
        return Fmax * tendon_force_length(tl / ls, e0)

    Ft, dFt_dtl = jax.jvp(tendon, (tl,), (jnp.ones_like(tl),))
    dFmAT_dlceAT = dFmAT_dlce * cos
    ksum = dFmAT_dlceAT + dFt_dtl
    share = (jnp.abs(ksum) > SIGNIFICANT_REAL) & (tl > ls)
    dtl = jnp.where(share, dFmAT_dlceAT / _safe(ksum, share) * V, V)
    dlceN = (V - dtl) * cos / (P["max_contraction_velocity"] * lo)
    fv_new = force_velocity_inverse(a, fal, dlceN, P["af"], P["flen"], P["fv_linear_extrap_threshold"])
    return Fm_along - Ft, fv_new


def equilibrium_fiber_length(
    P: Params, L: jax.Array, V: jax.Array, a: jax.Array, iterations: int = 60
) -> jax.Array:
    """Fibre length at fibre-tendon equilibrium (OpenSim's
    ``computeInitialFiberEquilibrium``: the fibre force along the tendon equals the tendon
    force, with the force-velocity multiplier of the path's speed shared between fibre and
    tendon by their stiffnesses) for every muscle: Newton's method on the force error with
    that multiplier updated at each step, safeguarded by bisection between the minimum
    fibre length and the length at which the tendon goes slack (OpenSim backtracks its
    Newton steps instead; both find the root between). The minimum fibre length where the
    fibre is too long there already (OpenSim warns and returns it too); NaN where the
    iteration does not converge (OpenSim raises)."""
    a = jnp.clip(a, P["minimum_activation"], 1.0)
    lmin = minimum_fiber_length(P)
    ls = P["tendon_slack_length"]
    h = P["optimal_fiber_length"] * jnp.sin(P["pennation_angle_at_optimal"])
    x_slack = jnp.maximum(L - ls, 0.0)
    hi0 = jnp.maximum(jnp.sqrt(h * h + x_slack * x_slack), lmin)
    # OpenSim's first guess: the tendon 1% stretched
    x0 = jnp.maximum(L - 1.01 * ls, 0.0)
    lce0 = jnp.clip(jnp.sqrt(h * h + x0 * x0), lmin, hi0)

    def step(carry, _):
        lce, fv, lo, hi = carry
        _, fv = _equilibrium_residual(P, L, V, a, lce, fv)

        def r(x):
            return _equilibrium_residual(P, L, V, a, x, fv)[0]

        err, derr = jax.jvp(r, (lce,), (jnp.ones_like(lce),))
        lo, hi = jnp.where(err < 0.0, lce, lo), jnp.where(err < 0.0, hi, lce)
        newton = lce - err / _safe(derr, derr != 0.0)
        inside = (newton > lo) & (newton < hi) & jnp.isfinite(newton)
        return (jnp.where(inside, newton, 0.5 * (lo + hi)), fv, lo, hi), None

    carry = (lce0, jnp.ones_like(L), lmin, hi0)
    (lce, fv, _, _), _ = jax.lax.scan(step, carry, None, length=iterations)
    err, _ = _equilibrium_residual(P, L, V, a, lce, fv)
    err_min, _ = _equilibrium_residual(P, L, V, a, lmin, fv)
    tol = jnp.maximum(1e-8 * P["max_isometric_force"], 10.0 * SIGNIFICANT_REAL)
    lce = jnp.where(err_min >= 0.0, lmin, lce)
    ok = (jnp.abs(err) < tol) | (lce <= lmin)
    return jnp.where(ok, lce, jnp.nan)


def _statics(S: tuple) -> np.ndarray:
    return np.asarray(S, dtype=int).reshape(-1, 4)


def states(ctx: Context, S: tuple) -> tuple[jax.Array, jax.Array, jax.Array, np.ndarray]:
    """Each muscle's excitation, activation state (the excitation without activation
    dynamics) and fibre length state (NaN for a rigid tendon), and which are compliant."""
    s = _statics(S)
    e = excitations(ctx, S)
    z = ctx.get_z()
    nan = jnp.full(e.shape, jnp.nan, e.dtype)
    a = e if not len(z) else jnp.where(s[:, 2] >= 0, z[np.maximum(s[:, 2], 0)], e)
    lce = nan if not len(z) else jnp.where(s[:, 3] >= 0, z[np.maximum(s[:, 3], 0)], nan)
    return e, a, lce, s[:, 3] >= 0


@dataclass(frozen=True)
class Thelen2003Muscle(MuscleKernel):
    """The module's equations over a subsystem's muscles: the tendon force as the tension
    of each muscle's path; the tendon state is the fibre length."""

    def equations(self, P: Params, ctx: Context, S: tuple, L: jax.Array, V: jax.Array) -> MuscleInfo:
        e, a, lce, comp = states(ctx, S)
        return thelen_equations(P, L, V, e, a, lce, comp)

    def inextensible_tendon_active_fiber_force(
        self, P: Params, L: jax.Array, V: jax.Array, a: jax.Array
    ) -> jax.Array:
        return inextensible_tendon_active_fiber_force(P, L, V, a)

    def equilibrium_tendon_state(self, P: Params, L: jax.Array, V: jax.Array, a: jax.Array) -> jax.Array:
        return equilibrium_fiber_length(P, L, V, a)
