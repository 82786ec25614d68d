"""Muscles along paths: OpenSim's ``DeGrooteFregly2016Muscle`` (De Groote et al. 2016,
"Evaluation of direct collocation optimal control problem formulations for solving the
muscle redundancy problem", Ann. Biomed. Eng.), with OpenSim's modifications.

Per muscle, with max isometric force ``F``, optimal fibre length ``lo``, tendon slack
length ``ls``, pennation at optimal length ``alpha0`` (constant fibre width
``w = lo sin alpha0``) and path length ``L`` and lengthening speed ``V``:

* tendon: normalized tendon length ``lt = ln((f + c3) / c1) / kT + c2`` from the
  normalized tendon force ``f`` (a state; ``lt = 1`` for a rigid tendon),
  ``kT = ln((1 + c3) / c1) / (1 + tendon_strain_at_one_norm_force - c2)``;
* fibre: ``x = L - ls lt`` along the tendon, length ``lm = sqrt(x^2 + w^2)``, pennation
  ``asin(w / lm)``;
* curves of the normalized fibre length: active force-length, a sum of three
  Gaussian-like terms ``b1 exp(-(x - b2)^2 / (2 (b3 + b4 x)^2))`` on a width-scaled
  length; passive ``(exp(kPE (l - 1) / e0) - exp(kPE (0.2 - 1) / e0)) / (exp(kPE) -
  exp(kPE (0.2 - 1) / e0))``; force-velocity ``d1 ln(d2 v + d3 + sqrt((d2 v + d3)^2 +
  1)) + d4`` and its inverse;
* fibre velocity: rigid tendon, the path's speed projected on the fibre; compliant tendon
  (OpenSim's explicit mode), the inverse force-velocity curve of the multiplier that makes
  the fibre force along the tendon (damping left out) equal the tendon force; then
  ``df/dt = (tendon velocity / ls) dfT/dlt``;
* fibre force ``F (a fl fv + fpe + fiber_damping v)``; the tendon force is ``F f``
  (compliant) or the fibre force along the tendon (rigid): the tension of the path.
* activation: ``da/dt = (e - a) (k_act (tanh(b (e - a)) / 2 + 1/2) + k_deact (1/2 -
  tanh(b (e - a)) / 2))`` with ``k_act = 1 / (tau_a (1/2 + 3a/2))``, ``k_deact = (1/2 +
  3a/2) / tau_d`` and ``b`` the activation dynamics smoothing; without activation
  dynamics ``a = e``.

Statics per element: ``(path, control index, activation z slot or -1, tendon-force z slot
or -1)``. The excitations are the subsystem's ``controls`` from ``control index`` on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...model.context import Context
from .actuators import CONTROLS
from .kernel import ForceKernel, Params
from .paths import apply_tensions, path_geometry

# Curve constants (OpenSim's DeGrooteFregly2016Muscle; b11 as OpenSim modified it so
# that the active curve peaks at 1 at the optimal length).
_B = (
    (0.8150671134243542, 1.055033428970575, 0.162384573599574, 0.063303448465465),
    (0.433004984392647, 0.716775413397760, -0.029947116970696, 0.200356847296188),
    (0.1, 1.0, 0.353553390593274, 0.0),
)
KPE = 4.0
C1, C2, C3 = 0.2, 1.0, 0.2
D1, D2, D3, D4 = -0.3211346127989808, -8.149, -0.374, 0.8825327733249912
MIN_NORM_FIBER_LENGTH = 0.2
MAX_NORM_TENDON_FORCE = 5.0

PARAMS = (
    "max_isometric_force",
    "optimal_fiber_length",
    "tendon_slack_length",
    "pennation_angle_at_optimal",
    "max_contraction_velocity",
    "activation_time_constant",
    "deactivation_time_constant",
    "active_force_width_scale",
    "fiber_damping",
    "passive_fiber_strain_at_one_norm_force",
    "tendon_strain_at_one_norm_force",
    "activation_dynamics_smoothing",
    "ignore_passive_fiber_force",
)
"""The Instance-stage parameters of a muscle (``ignore_passive_fiber_force`` as 0 or 1)."""


def active_force_length(l: jax.Array, width_scale: jax.Array) -> jax.Array:
    """Active force-length multiplier of the normalized fibre length."""
    x = (l - 1.0) / width_scale + 1.0
    out = jnp.zeros_like(x)
    for b1, b2, b3, b4 in _B:
        out = out + b1 * jnp.exp(-0.5 * (x - b2) ** 2 / (b3 + b4 * x) ** 2)
    return out


def passive_force_length(l: jax.Array, e0: jax.Array) -> jax.Array:
    """Passive force-length multiplier (zero at the minimum normalized length 0.2)."""
    offset = jnp.exp(KPE * (MIN_NORM_FIBER_LENGTH - 1.0) / e0)
    return (jnp.exp(KPE * (l - 1.0) / e0) - offset) / (jnp.exp(KPE) - offset)


def force_velocity(v: jax.Array) -> jax.Array:
    """Force-velocity multiplier of the normalized fibre velocity (lengthening > 0)."""
    t = D2 * v + D3
    return D1 * jnp.log(t + jnp.sqrt(t * t + 1.0)) + D4


def force_velocity_inverse(fv: jax.Array) -> jax.Array:
    """Normalized fibre velocity of a force-velocity multiplier."""
    return (jnp.sinh((fv - D4) / D1) - D3) / D2


def tendon_stiffness_parameter(strain: jax.Array) -> jax.Array:
    """``kT`` of the tendon curve ``c1 exp(kT (lt - c2)) - c3``."""
    return jnp.log((1.0 + C3) / C1) / (1.0 + strain - C2)


class MuscleInfo(NamedTuple):
    """Every muscle's length, velocity and force quantities (each (n,)), as OpenSim's
    MuscleLengthInfo, FiberVelocityInfo and MuscleDynamicsInfo hold them."""

    length: jax.Array
    lengthening_speed: jax.Array
    activation: jax.Array
    excitation: jax.Array
    normalized_tendon_force_state: jax.Array
    tendon_length: jax.Array
    normalized_tendon_length: jax.Array
    fiber_length: jax.Array
    normalized_fiber_length: jax.Array
    fiber_length_along_tendon: jax.Array
    pennation_angle: jax.Array
    cos_pennation_angle: jax.Array
    active_force_length_multiplier: jax.Array
    passive_force_multiplier: jax.Array
    force_velocity_multiplier: jax.Array
    fiber_velocity: jax.Array
    normalized_fiber_velocity: jax.Array
    fiber_velocity_along_tendon: jax.Array
    tendon_velocity: jax.Array
    normalized_tendon_velocity: jax.Array
    active_fiber_force: jax.Array
    passive_fiber_elastic_force: jax.Array
    passive_fiber_damping_force: jax.Array
    fiber_force: jax.Array
    fiber_force_along_tendon: jax.Array
    tendon_force: jax.Array
    normalized_tendon_force_derivative: jax.Array
    activation_derivative: jax.Array


def _statics(S: tuple) -> np.ndarray:
    return np.asarray(S, dtype=int).reshape(-1, 4)


def muscle_equations(
    P: Params,
    L: jax.Array,
    V: jax.Array,
    e: jax.Array,
    a: jax.Array,
    f: jax.Array,
    compliant: np.ndarray,
    explicit: bool = True,
    f_dot: jax.Array | None = None,
) -> MuscleInfo:
    """Every quantity of the muscles from their path lengths ``L`` and speeds ``V``,
    excitations ``e``, activations ``a`` and normalized tendon forces ``f`` (ignored where
    the tendon is rigid: ``compliant`` False). With ``explicit=False`` the fibre velocity
    comes from the tendon force's rate ``f_dot`` instead (OpenSim's implicit form, which
    its equilibrium solve uses with ``f_dot = 0``)."""
    Fmax, lo, ls = P["max_isometric_force"], P["optimal_fiber_length"], P["tendon_slack_length"]
    vmax = P["max_contraction_velocity"] * lo
    width = lo * jnp.sin(P["pennation_angle_at_optimal"])
    kT = tendon_stiffness_parameter(P["tendon_strain_at_one_norm_force"])
    comp = jnp.asarray(compliant)
    f_safe = jnp.where(comp, f, 1.0)
    lt = jnp.where(comp, jnp.log((f_safe + C3) / C1) / kT + C2, 1.0)
    lT = ls * lt
    along = L - lT
    lm = jnp.sqrt(along * along + width * width)
    nlm = lm / lo
    cos = along / lm
    penn = jnp.arcsin(width / lm)
    fpe = passive_force_length(nlm, P["passive_fiber_strain_at_one_norm_force"])
    fpe = fpe * (1.0 - P["ignore_passive_fiber_force"])
    fal = active_force_length(nlm, P["active_force_width_scale"])
    dfT = C1 * kT * jnp.exp(kT * (lt - C2))  # dfT/dlt
    if explicit:
        # compliant: the multiplier that balances the tendon force (OpenSim's explicit form)
        a_c = jnp.where(comp, a, 1.0)  # a rigid tendon's lanes stay finite (and their gradients)
        fv_c = (f_safe / cos - fpe) / (a_c * fal)
        nv_c = force_velocity_inverse(fv_c)
        vm_c = nv_c * vmax
        vt_c = V - vm_c / cos
    else:
        fd = jnp.zeros_like(L) if f_dot is None else f_dot
        vt_c = ls * fd / dfT
    vt = jnp.where(comp, vt_c, 0.0)
    v_along = V - vt
    vm_r = v_along * cos
    nv_r = vm_r / vmax
    if explicit:
        vm = jnp.where(comp, vm_c, vm_r)
        nv = jnp.where(comp, nv_c, nv_r)
        fv = jnp.where(comp, fv_c, force_velocity(nv_r))
    else:
        vm, nv, fv = vm_r, nv_r, force_velocity(nv_r)
    active = Fmax * a * fal * fv
    passive = Fmax * fpe
    damping = Fmax * P["fiber_damping"] * nv
    fiber = active + passive + damping
    along_force = fiber * cos
    tendon = jnp.where(comp, Fmax * f_safe, along_force)
    f_rate = jnp.where(comp, vt / ls * dfT, 0.0)
    # activation dynamics (OpenSim's smoothed switch between activation and deactivation)
    k = 0.5 + 1.5 * a
    sw = 0.5 * jnp.tanh(P["activation_dynamics_smoothing"] * (e - a))
    rate = 1.0 / (P["activation_time_constant"] * k) * (sw + 0.5) + k / P["deactivation_time_constant"] * (
        0.5 - sw
    )
    return MuscleInfo(
        length=L,
        lengthening_speed=V,
        activation=a,
        excitation=e,
        normalized_tendon_force_state=f,
        tendon_length=lT,
        normalized_tendon_length=lt,
        fiber_length=lm,
        normalized_fiber_length=nlm,
        fiber_length_along_tendon=along,
        pennation_angle=penn,
        cos_pennation_angle=cos,
        active_force_length_multiplier=fal,
        passive_force_multiplier=fpe,
        force_velocity_multiplier=fv,
        fiber_velocity=vm,
        normalized_fiber_velocity=nv,
        fiber_velocity_along_tendon=V - vt,
        tendon_velocity=vt,
        normalized_tendon_velocity=vt / ls,
        active_fiber_force=active,
        passive_fiber_elastic_force=passive,
        passive_fiber_damping_force=damping,
        fiber_force=fiber,
        fiber_force_along_tendon=along_force,
        tendon_force=tendon,
        normalized_tendon_force_derivative=f_rate,
        activation_derivative=rate * (e - a),
    )


def excitations(ctx: Context, S: tuple) -> jax.Array:
    """Each muscle's excitation (n,): its entry of the subsystem's controls (unclamped, as
    OpenSim's ``getControl``)."""
    s = _statics(S)
    return ctx.discrete(CONTROLS)[s[:, 1]]


def states(ctx: Context, S: tuple) -> tuple[jax.Array, jax.Array, jax.Array, np.ndarray]:
    """Each muscle's excitation, activation (the excitation without activation dynamics)
    and normalized tendon force state (NaN for a rigid tendon), and which are compliant."""
    s = _statics(S)
    e = excitations(ctx, S)
    z = ctx.get_z()
    nan = jnp.full(e.shape, jnp.nan, e.dtype)
    a = e if not len(z) else jnp.where(s[:, 2] >= 0, z[np.maximum(s[:, 2], 0)], e)
    f = nan if not len(z) else jnp.where(s[:, 3] >= 0, z[np.maximum(s[:, 3], 0)], nan)
    return e, a, f, s[:, 3] >= 0


def inextensible_tendon_active_fiber_force(P: Params, L: jax.Array, V: jax.Array, a: jax.Array) -> jax.Array:
    """OpenSim's ``calcInextensibleTendonActiveFiberForce``: the active fibre force
    ``F a fl fv`` (not projected on the tendon) with the tendon taken as rigid, at path
    lengths ``L``, speeds ``V`` and activations ``a`` (each (n,)). Static optimization's
    force per unit activation (``a = 1``)."""
    rigid = np.zeros(np.shape(L), dtype=bool)
    return muscle_equations(P, L, V, a, a, jnp.full_like(L, jnp.nan), rigid).active_fiber_force


def equilibrium_tendon_force(
    P: Params, L: jax.Array, V: jax.Array, a: jax.Array, iterations: int = 40
) -> jax.Array:
    """Normalized tendon force at fibre-tendon equilibrium (OpenSim's
    ``computeInitialFiberEquilibrium``: the tendon force equals the fibre force along the
    tendon with the tendon's length not changing) for every muscle, by a safeguarded
    Newton iteration on [0, 5] (bisection where a Newton step leaves the bracket). NaN for
    a muscle with no equilibrium in [0, 5] (where OpenSim's bisection raises)."""
    comp = np.ones(L.shape, dtype=bool)

    def residual(f: jax.Array) -> jax.Array:
        m = muscle_equations(P, L, V, a, a, f, comp, explicit=False)
        return f - m.fiber_force_along_tendon / P["max_isometric_force"]

    lo = jnp.zeros_like(L)
    hi = jnp.full_like(L, MAX_NORM_TENDON_FORCE)
    r_lo = residual(lo)

    def step(carry, _):
        x, lo, hi, r_lo = carry
        r, dr = jax.jvp(residual, (x,), (jnp.ones_like(x),))
        same = jnp.sign(r) == jnp.sign(r_lo)
        lo, hi = jnp.where(same, x, lo), jnp.where(same, hi, x)
        r_lo = jnp.where(same, r, r_lo)
        newton = x - r / jnp.where(dr != 0, dr, 1.0)
        ok = (newton > lo) & (newton < hi) & (dr != 0)
        x = jnp.where(ok, newton, 0.5 * (lo + hi))
        return (x, lo, hi, r_lo), None

    x0 = jnp.full_like(L, 0.5)
    no_root = jnp.sign(r_lo) == jnp.sign(residual(hi))  # OpenSim raises here
    (x, _, _, _), _ = jax.lax.scan(step, (x0, lo, hi, r_lo), None, length=iterations)
    return jnp.where(no_root, jnp.nan, x)


@dataclass(frozen=True)
class MuscleKernel(ForceKernel):
    """What every muscle model's kernel provides beyond a ForceKernel's ``calc`` and
    ``calc_zdot``, so that the handles, equilibrium, static optimization and muscle analysis
    work over any mix of muscle models. Statics per element: ``(path, control index,
    activation z slot or -1, tendon-state z slot or -1)``; the tendon state is the model's
    second state (DeGroote-Fregly: the normalized tendon force; Thelen, Millard: the fibre
    length)."""

    def equations(self, P: Params, ctx: Context, S: tuple, L: jax.Array, V: jax.Array) -> MuscleInfo:
        """Every muscle of a group at path lengths ``L`` and speeds ``V`` (n,), its
        excitations and states from ``ctx`` (``MuscleInfo``'s ``normalized_tendon_force_state``
        holds the tendon-state value, NaN for a rigid tendon, and
        ``normalized_tendon_force_derivative`` its derivative)."""
        raise TypeError(f"{type(self).__name__} does not define equations()")

    def info(self, P: Params, ctx: Context, S: tuple) -> MuscleInfo:
        """Every muscle of a group at a Context realized to Velocity."""
        paths = ctx._model.paths
        assert paths is not None  # a muscle's Model has its path
        idx = _statics(S)[:, 0]
        g = path_geometry(paths, ctx)
        return self.equations(P, ctx, S, g.length[idx], g.speed[idx])

    def calc(self, P: Params, ctx: Context, S: tuple, w: jax.Array):
        """The tendon force as the tension of each muscle's path."""
        paths = ctx._model.paths
        assert paths is not None  # a muscle's Model has its path
        idx = _statics(S)[:, 0]
        g = path_geometry(paths, ctx)
        m = self.equations(P, ctx, S, g.length[idx], g.speed[idx])
        T = jnp.zeros(paths.num_paths, m.tendon_force.dtype).at[idx].add(w * m.tendon_force)
        return apply_tensions(paths, ctx, g, T)

    def calc_zdot(self, P: Params, ctx: Context, S: tuple) -> jax.Array | None:
        """Each activation's and tendon state's rate into its z slot."""
        s = _statics(S)
        z = ctx.get_z()
        out = jnp.zeros(z.shape[0], z.dtype)
        act, ten = np.flatnonzero(s[:, 2] >= 0), np.flatnonzero(s[:, 3] >= 0)
        if not len(act) and not len(ten):
            return None
        m = self.info(P, ctx, S)
        if len(act):
            out = out.at[s[act, 2]].set(m.activation_derivative[act])
        if len(ten):
            out = out.at[s[ten, 3]].set(m.normalized_tendon_force_derivative[ten])
        return out

    def inextensible_tendon_active_fiber_force(
        self, P: Params, L: jax.Array, V: jax.Array, a: jax.Array
    ) -> jax.Array:
        """OpenSim's ``calcInextensibleTendonActiveFiberForce`` at path lengths ``L``,
        speeds ``V`` and activations ``a`` (each (n,))."""
        raise TypeError(f"{type(self).__name__} does not define inextensible_tendon_active_fiber_force()")

    def equilibrium_tendon_state(self, P: Params, L: jax.Array, V: jax.Array, a: jax.Array) -> jax.Array:
        """The tendon-state value at fibre-tendon equilibrium for every muscle (OpenSim's
        ``computeInitialFiberEquilibrium``), NaN where there is none."""
        raise TypeError(f"{type(self).__name__} does not define equilibrium_tendon_state()")


@dataclass(frozen=True)
class DeGrooteFregly2016Muscle(MuscleKernel):
    """The module's equations over a subsystem's muscles: the tendon force as the tension
    of each muscle's path."""

    def equations(self, P: Params, ctx: Context, S: tuple, L: jax.Array, V: jax.Array) -> MuscleInfo:
        e, a, f, comp = states(ctx, S)
        return muscle_equations(P, L, V, e, a, f, comp)

    def inextensible_tendon_active_fiber_force(
        self, P: Params, L: jax.Array, V: jax.Array, a: jax.Array
    ) -> jax.Array:
        return inextensible_tendon_active_fiber_force(P, L, V, a)

    def equilibrium_tendon_state(self, P: Params, L: jax.Array, V: jax.Array, a: jax.Array) -> jax.Array:
        return equilibrium_tendon_force(P, L, V, a)
