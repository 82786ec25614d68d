"""Time integration with Simbody's coordinate projection, on diffrax solvers.

The continuous state ``y = (q, u, z)`` evolves by ``ydot = (N u, udot, zdot)`` from
``realize(Stage.ACCELERATION)``. After every accepted step the state is projected back
onto the constraint manifold (``project_q`` Gauss-Newton steps, quaternion
normalisation, then ``project_u``), as Simbody's integrators do.

Integrators:

* ``"rk4"``: classical fixed-step Runge-Kutta 4 (its four stages are one loop over one
  forward-dynamics evaluation, so a rollout's program holds forward dynamics once).
* ``"euler"``: semi-explicit (symplectic) Euler, ``u1 = u0 + h udot(q0, u0)``,
  ``q1 = q0 + h N(q0) u1`` (Simbody's ``SemiExplicitEulerIntegrator``).
  With coordinate limits (``Constraint.CoordinateLimit``, unilateral constraints) it is
  ArtiSynth's velocity-level step instead (:mod:`simjax.forward.stepper`): ``u1`` from a
  complementarity solve with the engaged limits, ``q1 = q0 + h N(q0) u1``, engagement
  update, mass-weighted position correction with the deadband. It is the only integrator
  that enforces limits; the others refuse a System that has them.
* ``"tsit5"``, ``"dopri5"``: adaptive explicit (diffrax) with error control from
  ``accuracy`` (relative) and ``atol``.
* ``"kvaerno5"``, ``"kvaerno3"``: adaptive implicit (diffrax, L-stable SDIRK) for stiff
  springs and dampers.

Fixed-step loops are a ``lax.scan``; adaptive loops a checkpointed bounded while loop.
Reverse mode stores no solver internals: each evaluation of forward dynamics, the
projection and the controls of a fixed step are ``jax.checkpoint``-ed (a few vectors per
step), a fixed step with limits or triggered events and every adaptive step whole (one
carry per step). Everything jits, vmaps over initial States and parameters, and
differentiates.

Failures (a non-finite state; an adaptive integrator out of ``max_steps`` or of step
size; constraints left unmet by the projection, ``RESULTS.constraints_unsatisfiable``)
stop the run at the last good state and are reported in ``Trajectory.result`` (an
``sj.RESULTS`` item); ``simulate(..., throw=True)`` (the default) raises them, also under
``jit``, through ``equinox.error_if``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from functools import partial
from typing import Any, Literal, cast

import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .. import _batching
from .._lazy import LazyModule
from .._results import RESULTS, all_finite, simulation_ok
from .._stage import Stage
from ..dynamics import stages as rz
from ..forward import projection as pj
from ..forward import stepper as us
from ..forward.realize import realize
from ..model.model import Model
from ..model.state import Cache, State
from ..system import diagnose as dg
from ..system.system import MultibodySystem

dfx = LazyModule("diffrax")  # imported by the first simulation that needs it

# integrator name -> diffrax solver class name
_ADAPTIVE = {"tsit5": "Tsit5", "dopri5": "Dopri5", "kvaerno3": "Kvaerno3", "kvaerno5": "Kvaerno5"}
_FIXED = ("rk4", "euler")
# simulate's adjoint -> the kind of the adaptive integrators' loops (equinox.internal's
# while_loop; diffrax's RecursiveCheckpointAdjoint, ForwardMode and DirectAdjoint)
_LOOP_KIND: dict[str, Literal["checkpointed", "lax", "bounded"]] = {
    "reverse": "checkpointed",
    "forward": "lax",
    "direct": "bounded",
}


class Trajectory(eqx.Module):
    """Output of ``simulate``: the variables at the requested times, and statistics.

    Attributes:
        t: Output times (n,).
        q, u, z: Variables at those times, (n, nq), (n, nu), (n, nz).
        discrete: Discrete variables at those times (``{subsystem: {name: (n, ...)}}``).
        final_state: The State at the last output time (Stage.TIME).
        num_steps: Accepted steps taken.
        num_rejected: Rejected step attempts (adaptive integrators).
        max_position_error: Largest RMS position-constraint error after projection.
        num_events: Triggered and scheduled events handled.
        terminated: Whether a terminating event stopped the simulation (later outputs
            repeat the state at termination).
        termination_time: When it stopped: at a terminating event, or the time reached
            when it failed (the final time otherwise).
        reports: ``{name: (n, ...)}`` values of the reporters at the output times.
        result: An ``sj.RESULTS`` item: ``successful``, ``event_occurred`` (stopped by a
            terminating event), ``events_unresolved`` (ran to the end, but a witness
            changed faster than a step's samples resolve: see ``events_unresolved``), or a
            failure: ``simulation_nonfinite``, ``max_steps_reached``,
            ``step_size_too_small``, ``unilateral_solve_failed``,
            ``constraints_unsatisfiable`` (after projection the RMS position or velocity
            error, the latter relative to ``1 + max |u|``, stayed above 10 x
            max(``accuracy``, 100 machine epsilons), or a coordinate limit stayed
            penetrated past twice its deadband: contradictory constraints, such as two
            Balls holding one point at two places or a ConstantCoordinate outside a
            CoordinateLimit's range; failed at ``t0`` when the initial State cannot be
            projected), ``gimbal_lock`` (a mobilizer with Euler angles at its singularity;
            ``final_state`` is there). After a failure the outputs later than
            ``termination_time`` are NaN and ``final_state`` is the last good State, at
            ``termination_time``.
        events_unresolved: One bool per ``TriggeredEvent`` (in the order given): in some
            step its witness changed faster than ``event_samples`` samples resolve, or it
            crossed more often than a fixed step handles, so crossings may have been
            missed. Use a smaller step (``dt``) or more samples (``event_samples``).
    """

    t: Float[Array, " n"]
    q: Float[Array, "n nq"]
    u: Float[Array, "n nu"]
    z: Float[Array, "n nz"]
    final_state: State
    num_steps: jax.Array
    num_rejected: jax.Array
    max_position_error: jax.Array
    num_events: jax.Array
    terminated: jax.Array
    termination_time: jax.Array
    reports: dict[str, Any]
    discrete: Any
    result: RESULTS
    events_unresolved: jax.Array

    @property
    def states(self) -> State:
        """The outputs as one batched State (leading axis = time), at Stage.TIME; realize
        them with ``jax.vmap(lambda s: system.realize(s, stage))(traj.states)``."""
        base = self.final_state

        def one(t, q, u, z, d):
            return _with_disc(base, d).with_time(t).with_q(q).with_u(u).with_z(z)

        return jax.vmap(one)(self.t, self.q, self.u, self.z, self.discrete)

    def __len__(self) -> int:
        return int(self.t.shape[0])


class _Config(eqx.Module):
    integrator: str = eqx.field(static=True)
    dt: float | None = eqx.field(static=True)
    accuracy: float = eqx.field(static=True)
    atol: float = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    max_step: float = eqx.field(static=True)
    project: bool = eqx.field(static=True)
    projection_iterations: int = eqx.field(static=True)
    adjoint: str = eqx.field(static=True, default="reverse")
    event_samples: int = eqx.field(static=True, default=4)


def _with_disc(base: State, disc: Any) -> State:
    """``base`` with other discrete variables (stage dropped to Model: any stage may use them)."""
    return base.replace(discrete=disc, stage=min(base.stage, Stage.MODEL), cache=Cache())


def _state_of(base: State, t, y) -> State:
    q, u, z = y
    return base.with_time(t).with_q(q).with_u(u).with_z(z)


def _ydot(model: Model, base: State, t, y):
    s = realize(model, _state_of(base, t, y), Stage.ACCELERATION)
    return s.qdot, s.udot, s.zdot


def _ydot_remat(model: Model, base: State, t, y):
    """``_ydot``, checkpointed: reverse mode keeps ``(t, y)`` and evaluates forward dynamics
    again, instead of storing its intermediates (in a loop, stacked per iteration)."""
    return jax.checkpoint(partial(_ydot, model, base))(t, y)


def _project(model: Model, base: State, t, y, cfg: _Config):
    """Project (q, u) onto the constraints; returns y and the RMS position error."""
    return _project_checked(model, base, t, y, cfg)[:2]


#: A run fails (``RESULTS.constraints_unsatisfiable``) where the errors after projection
#: stay above this many times ``_constraint_tol``.
_UNSATISFIED = 10.0


def _constraint_tol(cfg: _Config, dtype: Any) -> float:
    """The constraint tolerance of a run: ``accuracy``, but no tighter than 100 machine
    epsilons of ``dtype`` (what a few Gauss-Newton steps reach)."""
    return max(cfg.accuracy, 100 * float(jnp.finfo(dtype).eps))


def _project_checked(model: Model, base: State, t, y, cfg: _Config):
    """``_project``, and whether the constraints are met after it: RMS position error and
    RMS velocity error (relative to ``1 + max |u|``) within ``_UNSATISFIED`` x
    ``_constraint_tol``. They are not where the constraints contradict each other (no q or
    u satisfies them all) or the projection did not converge."""
    mp, mv, _ = model.constraint_counts(base.use_euler_angles)
    s = _state_of(base, t, y)
    if mp + mv == 0 or not cfg.project:
        q = rz.normalize_quaternions(model, s, y[0])
        return (q, y[1], y[2]), jnp.zeros((), y[0].dtype), jnp.asarray(True)
    s = pj.project_q(model, s, cfg.projection_iterations)
    s = pj.project_u(model, s)
    s = realize(model, s, Stage.VELOCITY)
    err = pj.rms(s.position_cache.qerr[:mp])
    bound = _UNSATISFIED * _constraint_tol(cfg, y[0].dtype)
    verr = pj.rms(s.velocity_cache.uerr) / (1 + jnp.max(jnp.abs(s.u), initial=0.0))
    met = (err <= bound) & (verr <= bound)
    return (s.q, s.u, y[2]), err, jax.lax.stop_gradient(met)


def _rk4(model, base, t, y, h):
    """One classical Runge-Kutta 4 step. The four stages are one loop over a single
    evaluation of the dynamics (stage ``i`` at ``t + c_i h`` from ``y + c_i h k_{i-1}``, with
    ``c = 0, 1/2, 1/2, 1`` and ``k_0`` unused), so the compiled step holds one copy of
    forward dynamics instead of four: a rollout compiles in a fraction of the time. Each
    evaluation is checkpointed (``_ydot_remat``): reverse mode keeps the stage's input (a
    few vectors), where the loop would otherwise stack every intermediate of forward
    dynamics four deep (about 1300 buffer writes per step on the four-bar)."""
    dt = y[0].dtype
    c = jnp.asarray([0.0, 0.5, 0.5, 1.0], dt) * h
    w = jnp.asarray([1.0, 2.0, 2.0, 1.0], dt) / 6

    def stage(i, carry):
        acc, k = carry
        yi = jax.tree.map(lambda a, b: a + c[i] * b, y, k)
        ki = _ydot_remat(model, base, t + c[i], yi)
        return jax.tree.map(lambda a, b: a + w[i] * b, acc, ki), ki

    zero = jax.tree.map(jnp.zeros_like, y)
    acc, _ = jax.lax.fori_loop(0, 4, stage, (zero, zero))
    return jax.tree.map(lambda a, b: a + h * b, y, acc)


def _semi_explicit_euler(model, base, t, y, h):
    _, udot, zdot = _ydot_remat(model, base, t, y)
    u1 = y[1] + h * udot
    qdot = rz.calc_qdot(model, _state_of(base, t, y).with_u(u1))
    return (y[0] + h * qdot, u1, y[2] + h * zdot)


def _select(pred, a, b):
    return jax.tree.map(lambda x, y: jnp.where(pred, x, y), a, b)


class _Controls(eqx.Module):
    """What drives the actuators during a run: a policy ``fn(t, state)`` or a sequence
    ``U`` (one row per fixed step)."""

    U: Any
    fn: Any = eqx.field(static=True)
    slots: tuple[tuple[str, int], ...] = eqx.field(static=True)

    def _put(self, disc: Any, c: jax.Array) -> Any:
        disc = {k: dict(v) for k, v in disc.items()}
        start = 0
        for sub, k in self.slots:
            old = disc[sub]["controls"]
            disc[sub]["controls"] = jnp.asarray(c[start : start + k], old.dtype)
            start += k
        return disc

    def at(self, model: Model, base: State, t, y, step) -> Any:
        """The discrete variables with the controls of time ``t`` (state ``y``, ``step``)."""
        if self.fn is None:
            return self._put(base.discrete, self.U[jnp.minimum(step, self.U.shape[0] - 1)])
        st = realize(model, _state_of(base, t, y), Stage.VELOCITY)
        c = jnp.asarray(self.fn(t, st))
        n = sum(k for _, k in self.slots)
        if c.shape != (n,):
            raise ValueError(
                f"simulate: the controls function returned shape {c.shape}, but this System has {n} "
                f"actuators: return a vector of length {n}"
            )
        return self._put(base.discrete, c)


# ---------------------------------------------------------------------------- events


class TriggeredEvent(eqx.Module):
    """An event that occurs when ``witness(state)`` crosses zero (Simbody's triggered
    event with its witness function).

    Args:
        witness: Scalar function of a State realized to ``stage``.
        handler: ``handler(state) -> state`` (or ``(state, terminate)``), given the State
            at the located event time realized to Acceleration; it may change q, u, z and
            discrete variables. ``None``: only record (with ``terminate``: stop).
        direction: ``"rising"`` (negative to zero or positive), ``"falling"`` (positive
            to zero or negative) or ``"both"``. Leaving zero is not a crossing (Simbody's
            rule), so a zero the witness arrives at, touches or stays on is one event.
        terminate: Stop the simulation at this event.
        stage: Stage the witness needs (default Acceleration).

    Every step samples the witness (value and rate) at ``event_samples + 1`` points along
    its interpolant, plus the lowest and highest point of a cubic model between them, and
    the sign changes are located in time order (Illinois regula falsi; on the integrator's
    own sub-steps where a handler may change the state, so the State handed over is just
    past the root). The value at a step's end is carried as the next step's start, so a
    zero on a step boundary is one crossing. Several crossings in one step are all found:
    a fixed step handles up to ``event_samples`` and takes the rest of the step again after
    each handler; an adaptive step ends at the first and the next step goes on from it. A
    witness that changes faster than the samples resolve (judged from values and rates)
    shortens adaptive steps, and makes a fixed-step run report
    ``RESULTS.events_unresolved`` with ``Trajectory.events_unresolved`` (and a warning,
    eagerly) instead of ``successful``. Crossings of one witness closer than 1e-9 of a step
    are one event. The witness should be continuous in time: a jump or kink near zero is
    reported as unresolved.
    """

    witness: Any = eqx.field(static=True)
    handler: Any = eqx.field(static=True, default=None)
    direction: str = eqx.field(static=True, default="both")
    terminate: bool = eqx.field(static=True, default=False)
    stage: Stage = eqx.field(static=True, default=Stage.ACCELERATION)

    def __check_init__(self):
        if self.direction not in ("rising", "falling", "both"):
            raise ValueError(
                f"TriggeredEvent: direction must be 'rising', 'falling' or 'both', got {self.direction!r}"
            )
        if not callable(self.witness):
            raise TypeError("TriggeredEvent: witness must be a function of the State")


class ScheduledEvent(eqx.Module):
    """An event at given times (Simbody's scheduled event): ``handler(state) -> state``
    (or ``(state, terminate)``) runs at each time, on the State realized to Acceleration."""

    times: tuple[float, ...] = eqx.field(static=True)
    handler: Any = eqx.field(static=True, default=None)
    terminate: bool = eqx.field(static=True, default=False)

    def __init__(self, times: Any, handler: Any = None, terminate: bool = False):
        self.times = tuple(float(x) for x in np.atleast_1d(np.asarray(times, dtype=float)))
        self.handler = handler
        self.terminate = bool(terminate)


def _apply_handler(model, base, disc, t, y, handler, terminate: bool):
    """Run a handler on the realized State; returns (y, disc, terminate)."""
    s = realize(model, _state_of(_with_disc(base, disc), t, y), Stage.ACCELERATION)
    out = s
    term: bool | jax.Array = terminate
    if handler is not None:
        res = handler(s)
        if isinstance(res, tuple):
            out, term = res[0], jnp.logical_or(res[1], terminate)
        else:
            out = res
        if not isinstance(out, State):
            raise TypeError("an event handler must return the (changed) State, or (State, terminate)")
    return (out.q, out.u, out.z), out.discrete, jnp.asarray(term)


def _scheduled_in_range(events: Sequence[Any], t0: float, t1: float) -> list[tuple[float, int]]:
    """``(time, event index)`` of the scheduled events due in ``(t0, t1]``; times outside it
    are named in a warning (an event at the start time does not occur: apply its handler to
    the State first; one after ``t1`` occurs in a later run from the final State)."""
    sched: list[tuple[float, int]] = []
    outside: list[tuple[float, int]] = []
    for k, e in enumerate(events):
        if isinstance(e, ScheduledEvent):
            for tt in e.times:
                (sched if t0 < tt <= t1 else outside).append((tt, k))
    if outside:
        warnings.warn(
            f"simulate: scheduled event times {sorted({tt for tt, _ in outside})} lie outside this "
            f"run's (t0, t1] = ({t0:g}, {t1:g}] and do not occur in it (one at t0: apply its handler "
            "to the State before simulate; one after t1: it occurs in a later run from the final State)",
            stacklevel=3,
        )
    return sched


# Witnesses within a step. Each step samples every witness (its value, and its rate along
# the step's interpolant by forward-mode derivative) at ``event_samples + 1`` evenly
# spaced points, adds in each sub-interval the extreme of its cubic Hermite model, and
# locates the sign changes between consecutive points in time order. The first point's
# value is the one carried from the end of the previous step, so a zero on a step boundary
# is one crossing, seen once. A value exactly zero follows Simbody
# (``Event::classifyTransition``): arriving at zero is a crossing, leaving it is not.
_EVENT_GRID = 15  # points of each sub-interval's cubic searched for its extreme
_ROOT_ITERATIONS = 10  # Illinois iterations locating one crossing
# A sub-interval's witness is unresolved where its trapezoid defect
# |w1 - w0 - d (w0' + w1') / 2| exceeds this fraction of its variation
# d (|w0'| + |w1'|) / 2 + |w1 - w0| while it may reach zero: about (omega d)^2 / 12 for an
# oscillation of angular frequency omega sampled d apart (0.12 at four samples per period),
# near 1 where it is aliased.
_UNRESOLVED = 0.25
# Crossings of one witness closer in time than this fraction of the step are one event
# (round-off at the located root, or a handler that leaves the witness at its zero).
_EVENT_WINDOW = 1e-9


def _transition_masks(trig: Sequence[TriggeredEvent]) -> tuple[np.ndarray, np.ndarray]:
    """Which witnesses report rising and which falling crossings."""
    rising = np.array([e.direction in ("rising", "both") for e in trig])
    falling = np.array([e.direction in ("falling", "both") for e in trig])
    return rising, falling


def _crossed(w0, w1, masks):
    """Which witnesses cross from ``w0`` to ``w1`` in their direction (negative to zero or
    positive: rising; positive to zero or negative: falling; from zero: neither);
    broadcasts over leading axes."""
    lead = (1,) * (jnp.ndim(w0) - 1)
    rising, falling = (jnp.asarray(m).reshape(lead + m.shape) for m in masks)
    return ((w0 < 0) & (w1 >= 0) & rising) | ((w0 > 0) & (w1 <= 0) & falling)


def _witness_fn(model: Model, base: State, trig: Sequence[TriggeredEvent], policy: Any = None):
    """``W(t, y, disc) -> (n,)``: every witness at one state, realized once to the highest
    stage they need. ``policy``: a controls function evaluated at ``(t, y)`` (adaptive
    integrators, whose derivatives see it at every evaluation)."""
    stage = max(e.stage for e in trig)

    def W(tt, yy, disc):
        b = _with_disc(base, disc)
        if policy is not None:
            b = _with_disc(b, policy.at(model, b, tt, yy, None))
        st = realize(model, _state_of(b, tt, yy), stage)
        out = []
        for e in trig:
            w = jnp.asarray(e.witness(st), yy[0].dtype)
            if w.size != 1:
                raise ValueError(
                    f"TriggeredEvent ({getattr(e.witness, '__name__', 'witness')}): the witness must "
                    f"return one number (a scalar whose sign change is the event), got shape "
                    f"{w.shape}; use one TriggeredEvent per component, or reduce it (e.g. the "
                    "minimum of the values)"
                )
            out.append(jnp.reshape(w, ()))
        return jnp.stack(out)

    return W


def _hermite(y0, y1, f0, f1, h):
    """The cubic Hermite interpolant ``theta -> y(t + theta h)`` of a step from its end
    values and derivatives (exact at both ends)."""

    def interp(th):
        h00, h10 = (1 + 2 * th) * (1 - th) ** 2, th * (1 - th) ** 2
        h01, h11 = th**2 * (3 - 2 * th), th**2 * (th - 1)
        return jax.tree.map(
            lambda a, b, fa, fb: h00 * a + (h10 * h) * fa + h01 * b + (h11 * h) * fb, y0, y1, f0, f1
        )

    return interp


def _linear(y0, y1):
    """The linear interpolant of a step (exact at both ends)."""
    return lambda th: jax.tree.map(lambda a, b: (1 - th) * a + th * b, y0, y1)


def _sample(W, interp, t, h, disc, w0, scale, nsub: int):
    """The points of one step ``[t, t + h]`` searched for crossings: ``nsub + 1`` evenly
    spaced ones and, between them, the lowest and the highest point of each witness's
    cubic Hermite model (from the values and rates at the sub-interval's ends; values there
    are the model's), so a witness that dips through zero and back between two samples is
    bracketed. ``w0``: the value carried to the start (None: the value there). ``scale``:
    the largest magnitude of each witness so far; variations within its round-off are not
    judged. Returns thetas ``(nsub (2 n + 1) + 1,)`` (every ``2 n + 1``-th sampled), values
    ``(nsub (2 n + 1) + 1, n)``, which witnesses are unresolved ``(n,)``, the largest
    defect ratio near zero, and the scale updated."""
    dt = jnp.result_type(t, h)
    th = jnp.arange(nsub + 1, dtype=dt) / nsub
    v, r = jax.vmap(lambda x: jax.jvp(lambda s: W(t + s * h, interp(s), disc), (x,), (jnp.ones((), dt),)))(th)
    d = 1.0 / nsub
    va, vb, ra, rb = v[:-1], v[1:], d * r[:-1], d * r[1:]
    defect = jnp.abs(vb - va - (ra + rb) / 2)
    var = (jnp.abs(ra) + jnp.abs(rb)) / 2 + jnp.abs(vb - va)
    scale = jnp.maximum(scale, jnp.max(jnp.abs(v), axis=0))
    eps = float(jnp.finfo(v.dtype).eps)
    near = jnp.minimum(jnp.abs(va), jnp.abs(vb)) <= var + defect
    judged = near & (var > 2**12 * eps * scale[None])
    ratio = jnp.where(judged, defect / jnp.where(var > 0, var, 1.0), 0.0)
    unresolved = jnp.any(ratio > _UNRESOLVED, axis=0)
    tau = jnp.arange(1, _EVENT_GRID + 1, dtype=dt) / (_EVENT_GRID + 1)
    h00, h10 = 2 * tau**3 - 3 * tau**2 + 1, tau**3 - 2 * tau**2 + tau
    h01, h11 = -2 * tau**3 + 3 * tau**2, tau**3 - tau**2
    cub = (  # (nsub, grid, n)
        h00[None, :, None] * va[:, None]
        + h10[None, :, None] * ra[:, None]
        + h01[None, :, None] * vb[:, None]
        + h11[None, :, None] * rb[:, None]
    )
    # each witness's lowest and highest point, in time order; every witness's model there
    at = jnp.sort(jnp.concatenate([jnp.argmin(cub, axis=1), jnp.argmax(cub, axis=1)], axis=1), axis=1)
    w_x = jnp.take_along_axis(cub, at[:, :, None], axis=1)  # (nsub, 2 n, n)
    th_x = th[:-1, None] + d * tau[at]
    n = v.shape[1]
    thetas = jnp.concatenate([jnp.concatenate([th[:-1, None], th_x], axis=1).reshape(-1), th[-1:]])
    ws = jnp.concatenate([jnp.concatenate([va[:, None], w_x], axis=1).reshape(-1, n), v[-1:]])
    if w0 is not None:
        ws = ws.at[0].set(w0)
    return thetas, ws, unresolved, jnp.max(ratio), scale


def _locate(g, a, b, wa, wb, sampled_b, masks):
    """The first crossing in ``[a, b]``, from the values ``wa`` at ``a`` and ``wb`` at
    ``b``: Illinois regula falsi on ``g(theta) -> (values (n,), aux)``, following whichever
    witness crosses first (an iterate at which another one has crossed becomes the far end,
    and that witness is followed). ``sampled_b``: ``wb`` was evaluated there (a point's
    value is computed once: another evaluation may differ in the last bit, enough to move
    a zero on the point across it); otherwise it is a model's, and ``g(b)`` replaces it.
    Returns the far end ``b``, the values and ``aux`` there, and which witnesses cross
    between the final ends (none: the bracket held no crossing)."""
    wg, aux = g(b)
    wb = jnp.where(sampled_b, wb, wg)

    def first(w0, w1):
        cr = _crossed(w0, w1, masks)
        return cr, jnp.argmin(jnp.where(cr, w0 / jnp.where(w0 != w1, w0 - w1, 1.0), jnp.inf))

    _, k = first(wa, wb)

    def body(_, c):
        a, b, wa, wb, aux, fa, fb, k, side = c
        den = jnp.where(fb != fa, fb - fa, 1.0)
        x = jnp.clip((a * fb - b * fa) / den, a + 1e-3 * (b - a), b - 1e-3 * (b - a))
        wx, ax = g(x)
        cr, kx = first(wa, wx)
        hit = jnp.any(cr)  # a crossing in [a, x]: x is the new far end
        k2 = jnp.where(hit, kx, k)
        fa_hit = jnp.where(k2 == k, jnp.where(side == 1, fa / 2, fa), wa[k2])
        fb_miss = jnp.where(side == -1, fb / 2, fb)
        return (
            jnp.where(hit, a, x),
            jnp.where(hit, x, b),
            jnp.where(hit, wa, wx),
            jnp.where(hit, wx, wb),
            _select(hit, ax, aux),
            jnp.where(hit, fa_hit, wx[k]),
            jnp.where(hit, wx[k2], fb_miss),
            k2,
            jnp.where(hit, 1, -1),
        )

    init = (a, b, wa, wb, aux, wa[k], wb[k], k, jnp.asarray(0))
    _, b, wa, wb, aux, *_ = jax.lax.fori_loop(0, _ROOT_ITERATIONS, body, init)
    return b, wb, aux, _crossed(wa, wb, masks)


def _fire(model, base, cfg, trig, te, y, disc, fired):
    """Run the handlers of the ``fired`` events at ``te``, in the order the events were
    given, then project. Returns (y, disc, terminate)."""
    term = jnp.asarray(False)
    for i, e in enumerate(trig):
        if e.handler is None and not e.terminate:
            continue

        def run(c, e=e):
            y2, d2, t2 = _apply_handler(model, base, c[1], te, c[0], e.handler, e.terminate)
            return y2, d2, c[2] | t2

        y, disc, term = jax.lax.cond(fired[i], run, lambda c: c, (y, disc, term))
    y, _ = _project(model, _with_disc(base, disc), te, y, cfg)
    return y, disc, term


class _Witnessed(eqx.Module):
    """The triggered events' part of the integration carry (one entry per witness)."""

    w: jax.Array  # values at the current state: the "before" side of the next step
    scale: jax.Array  # largest magnitude seen (round-off below it is not judged)
    t_ev: jax.Array  # time of each witness's last event
    unresolved: jax.Array  # a step did not resolve this witness


def _fixed_events(model, base, cfg, trig, W, adv, interp_of, t, h, y0, y1, disc, ev: _Witnessed):
    """The triggered events of a fixed step ``y0 -> y1`` on ``[t, t + h]``, in time order:
    each crossing is located (Illinois, on the interpolant; on the integrator's own
    sub-steps when a handler may change the state), its handler runs, the rest of the step
    is taken again from there and searched anew. Up to ``cfg.event_samples`` events per
    step; crossings left over mark their witness unresolved. Returns (y, disc, terminated,
    t_end, events handled, carry)."""
    masks = _transition_masks(trig)
    nsub = cfg.event_samples
    every = 2 * len(trig) + 1  # every this many points is sampled (the others: models)
    nbr = nsub * every  # brackets between the points
    window = _EVENT_WINDOW * h
    handlers = any(e.handler is not None or e.terminate for e in trig)
    interp0 = interp_of(t, y0, y1, h, disc)
    thetas, ws, bad, _, scale = _sample(W, interp0, t, h, disc, ev.w, ev.scale, nsub)

    def remaining(c):
        cross = _crossed(c["ws"][:-1], c["ws"][1:], masks)
        return cross & (jnp.arange(nbr) >= c["jpos"])[:, None] & ~c["term"]

    def handle(c, cross):
        ts, hs, dd = c["ts"], c["hs"], c["disc"]
        j = jnp.argmax(jnp.any(cross, axis=1))

        def sub_step(th):  # the integrator's own sub-step: the state handed over is past the root
            yy = adv(ts, c["ys"], th * hs, dd)
            return W(ts + th * hs, yy, dd), yy

        def interpolated(th):  # nothing changes the state: the interpolant the crossings were seen on
            return W(ts + th * hs, interp0(th), dd), None

        g = sub_step if handlers else interpolated
        th, ws = c["thetas"], c["ws"]
        b, wb, yb, crossed = _locate(g, th[j], th[j + 1], ws[j], ws[j + 1], (j + 1) % every == 0, masks)
        te = ts + b * hs
        fired = crossed & (te - c["t_ev"] > window)
        # the search goes on from the far end; past a bracket that held no crossing, from
        # the value found at its end
        seen = jnp.any(crossed)
        c = dict(
            c,
            thetas=th.at[j].set(jnp.where(seen, b, th[j])),
            ws=ws.at[j].set(jnp.where(seen, wb, ws[j])).at[j + 1].set(jnp.where(seen, ws[j + 1], wb)),
            jpos=jnp.where(seen, j, j + 1),
            count=c["count"] + jnp.sum(fired),
            t_ev=jnp.where(fired, te, c["t_ev"]),
        )
        if not handlers:
            return c

        def reintegrate(c):
            ye, d2, term = _fire(model, base, cfg, trig, te, yb, dd, fired)
            rest = t + h - te
            yr, _ = _project(model, _with_disc(base, d2), t + h, adv(te, ye, rest, d2), cfg)
            interp = interp_of(te, ye, yr, rest, d2)
            th2, ws2, bad2, _, scale = _sample(W, interp, te, rest, d2, None, c["scale"], nsub)
            return dict(
                c,
                ts=te,
                hs=rest,
                ys=ye,
                ye=_select(term, ye, yr),
                thetas=th2,
                ws=ws2,
                jpos=jnp.where(term, nbr, 0),
                disc=d2,
                term=term,
                t_end=jnp.where(term, te, c["t_end"]),
                unresolved=c["unresolved"] | bad2,
                scale=scale,
            )

        return jax.lax.cond(jnp.any(fired), reintegrate, lambda c: c, c)

    def slot(_, c):
        cross = remaining(c)
        return jax.lax.cond(jnp.any(cross), handle, lambda c, _: c, c, cross)

    c = dict(
        ts=t,
        hs=h,
        ys=y0,
        ye=y1,
        thetas=thetas,
        ws=ws,
        jpos=jnp.asarray(0),
        disc=disc,
        term=jnp.asarray(False),
        t_end=t + h,
        count=jnp.asarray(0),
        unresolved=ev.unresolved | bad,
        t_ev=ev.t_ev,
        scale=scale,
    )
    c = jax.lax.fori_loop(0, nsub, slot, c)
    unresolved = c["unresolved"] | jnp.any(remaining(c), axis=0)  # more crossings than slots
    carry = _Witnessed(w=c["ws"][-1], scale=c["scale"], t_ev=c["t_ev"], unresolved=unresolved)
    return c["ye"], c["disc"], c["term"], c["t_end"], c["count"], carry


def _adaptive_events(model, base, cfg, trig, W, adv, interp, t, h, y0, y1, disc, ev: _Witnessed):
    """The triggered events of an adaptive step ``y0 -> y1`` on ``[t, t + h]``: the first
    crossing is located on the integrator's own sub-steps, its handler runs and the step
    ends there (the loop goes on from it, where the next crossing is found). Returns
    (y, disc, terminated, t_end, events handled, carry, reject, ratio): ``reject`` asks for
    a shorter step where a witness is unresolved (down to the time resolution, where it is
    marked unresolved instead); ``ratio`` is the largest defect ratio, which bounds the
    next step."""
    masks = _transition_masks(trig)
    thetas, ws, bad, ratio, scale = _sample(W, interp, t, h, disc, ev.w, ev.scale, cfg.event_samples)
    cross = _crossed(ws[:-1], ws[1:], masks)
    eps = float(jnp.finfo(ws.dtype).eps)
    floor = h <= 2**16 * eps * jnp.maximum(1.0, jnp.abs(t))
    reject = jnp.any(bad) & ~floor

    def on_event(_):
        j = jnp.argmax(jnp.any(cross, axis=1))

        def g(th):  # the witnesses after the integrator's own sub-step, and its state
            yy = adv(t, y0, th * h, disc)
            return W(t + th * h, yy, disc), yy

        sampled = (j + 1) % (2 * len(trig) + 1) == 0
        b, _, yb, crossed = _locate(g, thetas[j], thetas[j + 1], ws[j], ws[j + 1], sampled, masks)
        te = t + b * h
        fired = crossed & (te - ev.t_ev > _EVENT_WINDOW * h)
        ye, d2, term = _fire(model, base, cfg, trig, te, yb, disc, fired)
        return ye, d2, term, te, jnp.sum(fired), W(te, ye, d2), jnp.where(fired, te, ev.t_ev)

    def no_event(_):
        return y1, disc, jnp.asarray(False), t + h, jnp.asarray(0), ws[-1], ev.t_ev

    out = jax.lax.cond(jnp.any(cross), on_event, no_event, None)
    y_end, d2, term, t_end, count, w_end, t_ev = out
    carry = _Witnessed(w=w_end, scale=scale, t_ev=t_ev, unresolved=ev.unresolved | (bad & floor))
    return y_end, d2, term, t_end, count, carry, reject, jnp.where(floor, 0.0, ratio)


class _Loop(eqx.Module):
    """The integration carry: variables, discrete variables, status and statistics."""

    y: Any
    disc: Any
    done: jax.Array  # stopped by a terminating event
    t_done: jax.Array  # when it stopped (event or failure)
    err: jax.Array
    n_steps: jax.Array
    n_rej: jax.Array
    n_events: jax.Array
    result: RESULTS  # successful, or the failure that stopped it
    ev: _Witnessed  # the triggered events' witnesses


def _unlocked(model: Model, base: State, y) -> jax.Array:
    """False where a mobilizer with Euler angles is at gimbal lock in ``y`` (a Gimbal's mass
    matrix, or a quaternion kind's qdot in Euler-angle mode, is singular there)."""
    topo = model.topology(base.use_euler_angles)
    if not len(topo.euler_lock_q):
        return jnp.asarray(True)
    return ~jnp.any(topo.at_gimbal_lock(y[0]))


def _stopped(L: _Loop) -> jax.Array:
    return L.done | (L.result != RESULTS.successful)


def _failed(L: _Loop, t, result: RESULTS) -> _Loop:
    """``L`` (the last good state) marked as failed at time ``t``."""
    return eqx.tree_at(lambda x: (x.t_done, x.result), L, (jnp.asarray(t, L.t_done.dtype), result))


def _accepted(L: _Loop, y, disc, term, t_end, err, fired, ev: _Witnessed) -> _Loop:
    """``L`` after an accepted step to ``y`` (``term``: a terminating event fired at
    ``t_end``; ``fired`` events were handled; ``ev``: the witnesses after it)."""
    return _Loop(
        y=y,
        disc=disc,
        done=L.done | term,
        t_done=jnp.where(term, t_end, L.t_done),
        err=jnp.maximum(L.err, err),
        n_steps=L.n_steps + 1,
        n_rej=L.n_rej,
        n_events=L.n_events + fired,
        result=L.result,
        ev=ev,
    )


def _fixed_interval(model, base, t0, h, n, nmax: int, L: _Loop, cfg: _Config, events, ctl=None) -> _Loop:
    """``n`` steps of size ``h`` from ``t0`` (``n <= nmax``; steps past ``n`` are no-ops).
    ``ctl``: controls set at the start of each step and held over it."""
    stepper = _rk4 if cfg.integrator == "rk4" else _semi_explicit_euler

    def advance(t, yy, hh, b=None):
        return stepper(model, base if b is None else b, t, yy, hh)

    limits = bool(model.limits)
    project = jax.checkpoint(lambda b, t, y: _project_checked(model, b, t, y, cfg))
    controls = jax.checkpoint(lambda b, t, y, n: ctl.at(model, b, t, y, n))
    trig = [e for e in events if isinstance(e, TriggeredEvent)]
    W: Any = _witness_fn(model, base, trig) if trig else None

    def interp_of(ts, ys, ye, hs, dd):
        if cfg.integrator != "rk4":  # first order: the straight line
            return _linear(ys, ye)
        bd = _with_disc(base, dd)
        return _hermite(ys, ye, _ydot_remat(model, bd, ts, ys), _ydot_remat(model, bd, ts + hs, ye), hs)

    def step(L: _Loop, i):
        t = t0 + i * h
        L0 = L
        if ctl is not None:  # zero-order hold: the step's controls, from its start
            L = eqx.tree_at(lambda x: x.disc, L, controls(_with_disc(base, L.disc), t, L.y, L.n_steps))
        bd = _with_disc(base, L.disc)
        ok = jnp.asarray(True)
        if limits:  # velocity-level step with complementarity (simjax.forward.stepper)
            y1, dm, e, ok = us.limit_step(model, bd, t, L.y, h, cfg.projection_iterations)
            disc0 = {**L.disc, "matter": dm}
            bound = _UNSATISFIED * _constraint_tol(cfg, e.dtype)
            met = (e <= bound) & ~us.limits_penetrated(bd, dm, bound)

            def adv(tt, yy, hh, b=None):
                return us.velocity_step(model, bd if b is None else b, tt, yy, hh)[0]

        else:
            y1 = advance(t, L.y, h, bd)
            y1, e, met = project(bd, t + h, y1)
            disc0 = L.disc

            def adv(tt, yy, hh, b=None):
                return advance(tt, yy, hh, bd if b is None else b)

        if trig:

            def adv_d(tt, yy, hh, dd):
                return adv(tt, yy, hh, _with_disc(base, dd))

            y1, disc, term, t_end, fired, ev = _fixed_events(
                model, base, cfg, trig, W, adv_d, interp_of, t, h, L.y, y1, disc0, L.ev
            )
        else:
            disc, term, t_end, fired, ev = disc0, jnp.asarray(False), t + h, jnp.asarray(0), L.ev
        live = (i < n) & ~_stopped(L)
        new = _accepted(L, y1, disc, term, t_end, e, fired, ev)
        # mypy types eqx.Enumeration items as str (a metaclass conflict in equinox's stub)
        new = _select(ok, new, _failed(L, t, RESULTS.unilateral_solve_failed))  # type: ignore[arg-type]
        new = _select(met, new, _failed(L, t, RESULTS.constraints_unsatisfiable))  # type: ignore[arg-type]
        # a step to a non-finite state is not taken: stop at the last good one
        # mypy types eqx.Enumeration items as str (a metaclass conflict in equinox's stub)
        new = _select(all_finite(y1), new, _failed(L, t, RESULTS.simulation_nonfinite))  # type: ignore[arg-type]
        new = _select(_unlocked(model, base, L.y), new, _failed(L, t, RESULTS.gimbal_lock))  # type: ignore[arg-type]
        return _select(live, new, L0), None

    # Reverse mode keeps a few vectors per step: forward dynamics (each RK4 stage, each
    # Euler step), the projection and the controls are checkpointed, so their insides are
    # evaluated again instead of stored. A step with unilateral limits or triggered events
    # is checkpointed whole (one carry per step).
    if limits or any(isinstance(e, TriggeredEvent) for e in events):
        step = jax.checkpoint(step)
    L, _ = jax.lax.scan(step, L, jnp.arange(nmax))
    return L


def _adaptive_interval(model, base, t0, t1, L: _Loop, dt0, cfg: _Config, events, ctl=None):
    cls = getattr(dfx, _ADAPTIVE[cfg.integrator])
    # diffrax loops over the stages with a checkpointed (reverse-only) loop unless told
    kw: dict[str, Any] = {} if cfg.adjoint == "reverse" else {"scan_kind": _LOOP_KIND[cfg.adjoint]}
    if cfg.integrator.startswith("kvaerno"):
        # the Newton (chord) tolerances diffeqsolve would take from its step controller
        kw["root_finder"] = dfx.VeryChord(rtol=cfg.accuracy, atol=cfg.atol)
    solver = cls(**kw)

    def rhs(b, t, yy):
        if ctl is not None:  # a policy: evaluated at every derivative evaluation
            b = _with_disc(b, ctl.at(model, b, t, yy, None))
        return _ydot(model, b, t, yy)

    term_of = lambda b: dfx.ODETerm(lambda t, yy, args: rhs(b, t, yy))
    order = solver.order(term_of(base))
    sstate = solver.init(term_of(base), t0, t1, L.y, None)
    n0 = L.n_steps  # max_steps bounds each interval
    eps = float(jnp.finfo(L.err.dtype).eps)
    trig = [e for e in events if isinstance(e, TriggeredEvent)]
    W: Any = _witness_fn(model, base, trig, ctl) if trig else None

    def unfinished(t):
        return t1 - t > 1e-12 * jnp.maximum(1.0, jnp.abs(t1))

    def cond(c):
        t, L, _, _ = c
        return unfinished(t) & (L.n_steps - n0 < cfg.max_steps) & ~_stopped(L)

    @jax.checkpoint
    def body(c):
        t, L, dt, ss = c
        bd = _with_disc(base, L.disc)
        h = jnp.minimum(jnp.minimum(dt, cfg.max_step), t1 - t)
        y1, yerr, dense, ss1, _ = solver.step(term_of(bd), t, t + h, L.y, None, ss, made_jump=True)
        scale = jax.tree.map(
            lambda a, b: cfg.atol + cfg.accuracy * jnp.maximum(jnp.abs(a), jnp.abs(b)), L.y, y1
        )
        ratios = jax.tree.leaves(jax.tree.map(lambda e, sc: (e / sc) ** 2, yerr, scale))
        count = sum(r.size for r in ratios)
        # the step-size control is not differentiated (as diffrax's PIDController): the
        # derivative is the one of the steps taken; through the error norm it was NaN at
        # zero error and crashed kvaerno5's reverse pass (issue 16)
        enorm = jax.lax.stop_gradient(jnp.sqrt(sum(jnp.sum(r) for r in ratios) / max(count, 1)))
        factor = jnp.clip(0.9 * jnp.where(enorm > 0, enorm, 1e-10) ** (-1.0 / (order + 1)), 0.2, 5.0)
        y1p, e, met = _project_checked(model, bd, t + h, y1, cfg)

        def adv(tt, yy, hh, b=None):
            return solver.step(term_of(bd if b is None else b), tt, tt + hh, yy, None, ss, made_jump=True)[0]

        if trig:
            # the step's dense output, moved onto the projected end (exact at both ends)
            dense_y = solver.interpolation_cls(t0=t, t1=t + h, **dense)
            corr = jax.tree.map(jnp.subtract, y1p, dense_y.evaluate(t + h))

            def interp(th):
                return jax.tree.map(lambda a, c: a + th * c, dense_y.evaluate(t + th * h), corr)

            def adv_d(tt, yy, hh, dd):
                return adv(tt, yy, hh, _with_disc(base, dd))

            y_end, disc, term, t_end, fired, ev, w_reject, w_ratio = _adaptive_events(
                model, base, cfg, trig, W, adv_d, interp, t, h, L.y, y1p, L.disc, L.ev
            )
            # a step no longer than its witnesses resolve (the defect ratio grows as h^2)
            w_ratio = jax.lax.stop_gradient(w_ratio)
            factor = jnp.minimum(factor, jnp.sqrt(_UNRESOLVED / (2 * jnp.maximum(w_ratio, 1e-12))))
        else:
            y_end, disc, term, t_end, fired, ev = y1p, L.disc, jnp.asarray(False), t + h, jnp.asarray(0), L.ev
            w_reject = jnp.asarray(False)
        new = _accepted(L, y_end, disc, term, t_end, e, fired, ev)
        # a non-finite error estimate or end state rejects the step and shrinks it by 5; an
        # unresolved witness, by 4
        finite = jnp.isfinite(enorm) & all_finite(y_end)
        ok = (enorm <= 1.0) & finite & ~w_reject
        factor = jnp.where(finite, jnp.where(w_reject, 0.25, jnp.clip(factor, 0.2, 5.0)), 0.2)
        rejected = eqx.tree_at(lambda x: x.n_rej, L, L.n_rej + 1)
        Ln = _select(ok, new, rejected)
        # an accepted step whose projection left the constraints unmet ends the run there
        # mypy types eqx.Enumeration items as str (a metaclass conflict in equinox's stub)
        Ln = _select(ok & ~met, _failed(L, t, RESULTS.constraints_unsatisfiable), Ln)  # type: ignore[arg-type]
        tn = jnp.where(ok, jnp.where(term, t1, t_end), t)
        # a step clipped to hit t1 doesn't shrink the step size carried on
        dtn = jnp.where(ok & (h < dt), dt, h * factor)
        # failed: no finite state to go on from, or a rejected step at the time resolution
        bad_state = ~all_finite(L.y)
        tiny = ~ok & ~(h > 64 * eps * jnp.maximum(1.0, jnp.abs(t)))
        # mypy types eqx.Enumeration items as str (a metaclass conflict in equinox's stub)
        nonfinite = bad_state | ~finite
        why = RESULTS.where(nonfinite, RESULTS.simulation_nonfinite, RESULTS.step_size_too_small)  # type: ignore[arg-type]
        Ln = _select(bad_state | tiny, _failed(L, t, why), Ln)
        Ln = _select(_unlocked(model, base, L.y), Ln, _failed(L, t, RESULTS.gimbal_lock))  # type: ignore[arg-type]
        return (tn, Ln, dtn, ss1)

    init = (jnp.asarray(t0, L.err.dtype), L, jax.lax.stop_gradient(jnp.asarray(dt0, L.err.dtype)), sstate)
    kind = _LOOP_KIND[cfg.adjoint]
    t, L, dt, _ = eqxi.while_loop(cond, body, init, max_steps=cfg.max_steps, kind=kind)
    # out of steps before the end of the interval
    short = unfinished(t) & ~_stopped(L)
    # mypy types eqx.Enumeration items as str (a metaclass conflict in equinox's stub)
    L = _select(short, _failed(L, t, RESULTS.max_steps_reached), L)  # type: ignore[arg-type]
    return L, dt


def simulate(
    system: MultibodySystem,
    state: State,
    t1: float,
    *,
    save_at: Any = None,
    integrator: str = "rk4",
    dt: float | None = None,
    accuracy: float = 1e-6,
    atol: float | None = None,
    project: bool = True,
    projection_iterations: int = 2,
    max_steps: int = 100_000,
    max_step: float | None = None,
    t0: float | None = None,
    events: Any = (),
    reporters: dict[str, Any] | None = None,
    throw: bool = True,
    adjoint: str = "reverse",
    controls: Any = None,
    event_samples: int = 4,
) -> Trajectory:
    """Simulate from ``state`` (at ``state.t``) to ``t1``; returns a ``Trajectory``.

    Args:
        save_at: Output times (increasing, within ``[state.t, t1]``), or an int ``n``
            for ``n`` equally spaced times ending at ``t1``; default: only ``t1``. The
            integrator steps exactly onto every output time.
        integrator: ``"rk4"``, ``"euler"`` (semi-explicit), ``"tsit5"``, ``"dopri5"``,
            ``"kvaerno3"`` or ``"kvaerno5"`` (implicit, for stiff systems).
        dt: Step size of the fixed-step integrators (required for them), or the initial
            step of the adaptive ones.
        accuracy: Relative error tolerance of the adaptive integrators. At least
            ``MIN_ACCURACY_EPS`` (4) machine epsilons of the State's dtype: 8.9e-16 in
            float64, 4.8e-7 in float32. Round-off in the error estimate is of that size, so
            a tighter request cannot be met (the run would report success for an accuracy
            it did not deliver): it is refused with a ``ValueError``.
        atol: Absolute tolerance (default ``accuracy``).
        project: Project onto the constraints after every step (Simbody's scheme); the
            run fails (``constraints_unsatisfiable``) where the errors stay above 10 x
            max(``accuracy``, 100 machine epsilons) after it (see ``Trajectory.result``).
        projection_iterations: Gauss-Newton steps of each position projection.
        max_steps: Bound on the steps of each output interval (adaptive integrators).
        max_step: Largest step the adaptive integrators may take (Simbody's
            ``setMaximumStepSize``); default unbounded. With triggered events, adaptive
            steps are also kept short enough for the witnesses' samples to resolve them
            (``event_samples``).
        events: ``TriggeredEvent``s and ``ScheduledEvent``s; handlers may change q, u, z
            and discrete variables, and may terminate the run.
        reporters: ``{name: fn(state)}`` evaluated at the output times on the State
            realized to Acceleration (Simbody's periodic reporters); in ``traj.reports``.
        t0: Start time; default ``state.t``. Under ``vmap``/``jit`` the State's time is
            traced, so pass the (common) start time here.
        throw: Raise if the run failed (``traj.result`` a failure: a non-finite state,
            an adaptive integrator out of ``max_steps`` or of step size, constraints left
            unmet), naming the
            time reached and what to change; under ``jit``/``vmap``/``grad`` too, through
            ``equinox.error_if`` (a ``RuntimeError``; the time to within 1% of the run
            there, and under ``vmap`` if any member failed). ``throw=False`` never raises:
            check ``traj.result`` (and ``traj.termination_time``).
        adjoint: How the adaptive integrators are differentiated (diffrax's word):
            ``"reverse"`` (default; a checkpointed loop: ``jax.grad``, ``vjp``,
            ``jacrev``, at memory O(sqrt(steps)); one reverse pass, not differentiated
            again), ``"forward"`` (a plain loop: ``jax.jvp``, ``jacfwd`` to any order,
            over a few inputs; not reverse mode) or ``"direct"`` (a bounded loop, diffrax's
            ``DirectAdjoint``: every mode and order, ``jax.hessian`` and
            ``jacrev(jacrev(f))`` included; its program holds ``max_steps`` steps per output
            interval, so set ``max_steps`` to a small bound of them). A mode the adjoint does
            not serve is refused with an error naming the one that does. The step sizes are
            not differentiated: derivatives are those of the steps taken. Fixed-step
            integrators differentiate in every mode and order either way.
        controls: What drives the actuators (``Force.CoordinateActuator``; default: the
            controls in ``state``, held): a vector ``(ncontrols,)`` held over the run; a
            sequence ``(nsteps, ncontrols)``, row ``k`` over fixed step ``k`` (fixed-step
            integrators; ``nsteps`` is the number of steps the run takes); or a policy
            ``controls(t, state) -> (ncontrols,)`` given the State realized to Velocity.
            Fixed-step integrators evaluate a policy at the start of each step and hold it
            over the step (as MuJoCo holds ``ctrl`` over ``mj_step``); the adaptive ones at
            every derivative evaluation (a continuous-time controller). All three are
            traced: ``vmap`` over a batch of sequences, ``grad`` with respect to them.
        event_samples: Sub-intervals of each step at which triggered events' witnesses
            are sampled (values and rates along the step's interpolant: a cubic Hermite for
            ``"rk4"``, the line for ``"euler"``, the dense output for the adaptive ones),
            and the most crossings one fixed step handles. Each sample costs one
            forward-mode evaluation of the witnesses; about four per period of the fastest
            oscillation of a witness near zero resolve it. See ``TriggeredEvent``.

    Output times and ``t1`` are static (Python numbers or NumPy arrays); the State may be
    traced, so ``jax.jit(jax.vmap(lambda s: simulate(system, s, 1.0, dt=1e-3)))`` works,
    as does ``jax.grad`` through the whole rollout. Under a ``jax.vmap`` of more than 128
    States on a single CPU device, each chunk of 128 runs its whole rollout in turn, as
    ``sj.vmap`` does (its working set stays in cache); derivatives are unchanged.
    """
    integrator = integrator.lower()
    if integrator not in _FIXED and integrator not in _ADAPTIVE:
        raise ValueError(f"unknown integrator {integrator!r}; choose one of {list(_FIXED) + list(_ADAPTIVE)}")
    if isinstance(t1, jax.core.Tracer) or (integrator in _FIXED and isinstance(dt, jax.core.Tracer)):
        which = "t1" if isinstance(t1, jax.core.Tracer) else "dt"
        raise TypeError(
            f"simulate: {which} is traced (an argument of a jit-compiled function), but the number "
            "of steps and the output times are fixed when simjax compiles; pass it as a Python "
            "number (close over it, or jax.jit(f, static_argnames=...)). To vary the end time "
            "across a batch, simulate to the latest and read each member's time from save_at"
        )
    if integrator in _FIXED and (dt is None or not dt > 0):
        raise ValueError(f"integrator {integrator!r} has a fixed step: give dt > 0 (e.g. dt=1e-3)")
    if integrator in _ADAPTIVE:
        _check_positive("accuracy", accuracy, "e.g. accuracy=1e-6 (relative)")
        if atol is not None:
            _check_positive("atol", atol, "or leave it None to use accuracy")
        if dt is not None:
            _check_positive("dt", dt, "the initial step of an adaptive integrator, or None")
        if max_step is not None:
            _check_positive("max_step", max_step, "or None for no bound")
    if adjoint not in _LOOP_KIND:
        raise ValueError(
            f"simulate: adjoint must be 'reverse' (jax.grad, the default), 'forward' "
            f"(jax.jvp/jacfwd through an adaptive integrator) or 'direct' (every mode and order, "
            f"with a small max_steps), got {adjoint!r}"
        )
    if not (isinstance(max_steps, (int, np.integer)) and max_steps >= 1):
        raise ValueError(f"simulate: max_steps must be an integer >= 1, got {max_steps!r}")
    if not (isinstance(event_samples, (int, np.integer)) and event_samples >= 1):
        raise ValueError(f"simulate: event_samples must be an integer >= 1, got {event_samples!r}")
    model = system.model_for(state)
    if integrator in _ADAPTIVE:
        _check_reachable_accuracy(integrator, float(accuracy), state.q.dtype)
    if model.limits and integrator != "euler":
        names = ", ".join(lim.name for lim in model.limits[:3])
        more = f" and {len(model.limits) - 3} more" if len(model.limits) > 3 else ""
        raise ValueError(
            f"simulate: this System has {len(model.limits)} coordinate limits ({names}{more}), "
            f"hard one-sided constraints that integrator {integrator!r} cannot enforce. They are "
            "stepped at the velocity level with complementarity: use integrator='euler' with a step dt "
            "(e.g. dt=1e-3); or, for a loaded model whose ranges you do not want enforced, load it "
            "with limits=False (sj.io.load_mjcf/load_urdf/load_osim keep the ranges as data then)"
        )
    t0 = _static_time(state.t) if t0 is None else float(t0)
    times = _save_times(save_at, t0, float(t1))
    cfg = _Config(
        integrator=integrator,
        dt=dt,
        accuracy=float(accuracy),
        atol=float(atol if atol is not None else accuracy),
        max_steps=int(max_steps),
        max_step=float("inf") if max_step is None else float(max_step),
        project=bool(project),
        projection_iterations=int(projection_iterations),
        adjoint=adjoint,
        event_samples=int(event_samples),
    )
    ctl = None
    if controls is not None:
        state, ctl = _controls_for(system, model, state, controls, integrator)
    events = tuple(events) if isinstance(events, (list, tuple)) else (events,)
    for e in events:
        if not isinstance(e, (TriggeredEvent, ScheduledEvent)):
            raise TypeError(f"simulate: events must be sj.TriggeredEvent or sj.ScheduledEvent, got {e!r}")
    reps = tuple((str(k), v) for k, v in (reporters or {}).items())
    for k, v in reps:
        if not callable(v):
            raise TypeError(f"simulate: reporter {k!r} must be a function of the State")
    args = (model, state, t0, tuple(float(x) for x in times), cfg, events, reps, ctl)
    traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((state, ctl)))
    # An eager call runs the rollout compiled, and compiled once per model, options, events
    # and controls function: eagerly, each loop primitive would be traced and compiled anew at
    # every call (seconds each). Under the caller's jit/vmap/grad it is traced in place.
    traj = _run(*args) if traced else _run_compiled(*args)
    if dg.debug_nans_enabled():
        _diagnose_nonfinite(system, traj, cfg.dt if cfg.dt else (float(times[-1]) - t0) / 1000)
    _warn_unresolved(traj, events, cfg)
    if not throw:
        return traj
    topo = model.topology(state.use_euler_angles)
    locks = ", ".join(f"{topo.names[b]!r} ({m.kind})" for b, m in topo.lock_bodies())
    return _raise_if_failed(traj, t0, float(times[-1]), cfg, locks)


def _run(
    model: Model,
    state: State,
    t0: float,
    times: tuple[float, ...],
    cfg: _Config,
    events: tuple[Any, ...],
    reps: tuple[tuple[str, Any], ...],
    ctl: _Controls | None,
) -> Trajectory:
    """The rollout of ``simulate`` (its arguments checked), batched in chunks under a
    plain ``jax.vmap`` and refusing the differentiation its loop does not serve."""
    integrator, adjoint = cfg.integrator, cfg.adjoint
    try:
        # Under a plain ``jax.vmap`` of more than ``sj.vmap``'s chunk of States on a single
        # CPU device, the whole rollout runs in chunks (``_batching.chunked_jvp``; what it
        # closes over, ``ctl`` and a policy's traced numbers too, is batched as usual), each
        # chunk's working set in cache for every step, and an adaptive chunk's loop ends
        # with its own slowest member; its derivatives are unchanged. The adaptive
        # integrators' checkpointed loop (adjoint='reverse') is a custom_vjp, which a jvp
        # rule cannot go through: reverse mode's rule (``chunked_vjp``) serves it.
        run = lambda s: _simulate(model, s, t0, times, cfg, events, reps, ctl)
        if integrator in _ADAPTIVE and adjoint == "reverse":
            again = lambda: _adjoint_refusal(integrator, adjoint, "a second reverse pass")  # noqa: E731
            traj = _batching.chunked_vjp(run, again)(state)
        elif integrator in _ADAPTIVE and adjoint == "forward":
            refusal = lambda: _adjoint_refusal(integrator, adjoint, "reverse-mode differentiation")  # noqa: E731
            traj = _batching.chunked_forward(run, refusal)(state)
        else:
            traj = _batching.chunked_jvp(run)(state)
    except TypeError as err:
        # jvp of the checkpointed loop (a custom_vjp) is refused by JAX with a bare message
        if integrator not in _ADAPTIVE or adjoint != "reverse" or "forward-mode" not in str(err):
            raise
        raise _adjoint_refusal(integrator, adjoint, "forward-mode differentiation") from None
    return traj


_run_compiled = eqx.filter_jit(_run)


_HOW_TO_DIFFERENTIATE = (
    "adjoint='reverse' (the default, a checkpointed loop) serves one reverse pass (jax.grad, "
    "jax.vjp, jax.jacrev); adjoint='forward' (a plain loop) forward mode to any order (jax.jvp, "
    "jax.jacfwd, jax.jacfwd(jax.jacfwd(f))); adjoint='direct' (a bounded loop, diffrax's "
    "DirectAdjoint) every mode and order, jax.hessian and jax.jacrev(jax.jacrev(f)) too, with "
    "max_steps set to a bound of the steps of one output interval (e.g. max_steps=256: the "
    "program's time and memory grow with it); the fixed-step integrators ('rk4', 'euler') "
    "differentiate in every mode and order"
)


def _adjoint_refusal(integrator: str, adjoint: str, what: str) -> TypeError:
    """The error for ``what`` (a kind of differentiation) through an adaptive run whose
    ``adjoint`` does not serve it."""
    modes = {
        "forward-mode differentiation": " (jax.jvp, jax.jacfwd, jax.hessian: jacfwd of jacrev)",
        "reverse-mode differentiation": " (jax.grad, jax.vjp, jax.jacrev, jax.hessian)",
        "a second reverse pass": " (jax.jacrev(jax.jacrev(f)), jax.grad of a gradient)",
    }
    return TypeError(
        f"simulate: {what}{modes.get(what, '')} through the adaptive integrator {integrator!r} "
        f"is not served by adjoint={adjoint!r}: {_HOW_TO_DIFFERENTIATE}"
    )


def _warn_unresolved(traj: Trajectory, events: Sequence[Any], cfg: _Config) -> None:
    """An eager run whose witnesses a step did not resolve warns, naming them (under
    ``jit`` ``traj.result`` and ``traj.events_unresolved`` say so)."""
    flags = traj.events_unresolved
    if isinstance(flags, jax.core.Tracer) or not np.any(np.asarray(flags)):
        return
    trig = [e for e in events if isinstance(e, TriggeredEvent)]
    which = np.any(np.asarray(flags).reshape(-1, len(trig)), axis=0)
    names = ", ".join(
        f"#{i} ({getattr(e.witness, '__name__', 'witness')})" for i, e in enumerate(trig) if which[i]
    )
    step = f"dt, now {cfg.dt:g}" if cfg.integrator in _FIXED else "accuracy or max_step"
    warnings.warn(
        f"simulate: the witness of TriggeredEvent {names} changed faster than the "
        f"{cfg.event_samples} samples per step resolve (or crossed more often than a step "
        "handles), so some of its crossings may have been missed (traj.events_unresolved). "
        f"Use a smaller step ({step}) or more samples per step (event_samples, now "
        f"{cfg.event_samples})",
        stacklevel=3,
    )


def _controls_for(
    system: MultibodySystem, model: Model, state: State, controls: Any, integrator: str
) -> tuple[State, _Controls | None]:
    """``simulate``'s ``controls``: a held vector goes into the State; a sequence or a
    policy becomes the run's ``_Controls``."""
    slots = tuple(system._control_subsystems())
    n = sum(k for _, k in slots)
    if callable(controls):
        if not n:
            raise ValueError("simulate: a controls function was given, but this System has no actuators")
        return state, _Controls(U=None, fn=controls, slots=slots)
    U = jnp.asarray(controls)
    if U.ndim <= 1:
        return system.set_controls(state, U), None
    if U.ndim != 2 or U.shape[1] != n:
        raise ValueError(
            f"simulate: controls of shape {U.shape}: give (ncontrols,) = ({n},) held, "
            f"(nsteps, {n}) one row per step, or a function controls(t, state)"
        )
    if integrator not in _FIXED:
        raise ValueError(
            f"simulate: a control sequence (one row per step) needs a fixed-step integrator "
            f"('rk4' or 'euler'), not {integrator!r}; for an adaptive one, give a function "
            "controls(t, state), e.g. interpolating the sequence"
        )
    if not jnp.issubdtype(U.dtype, jnp.floating):
        U = U.astype(state.q.dtype)
    return state, _Controls(U=U, fn=None, slots=slots)


def _diagnose_nonfinite(system: MultibodySystem, traj: Trajectory, h: float) -> None:
    """In ``sj.debug_nans()`` mode, an eager run that went non-finite raises naming the
    first stage and element that is non-finite at its last good State, or that the step
    from it diverged."""
    t = traj.termination_time
    if isinstance(t, jax.core.Tracer) or np.ndim(t) != 0:
        return  # traced or batched: nothing single to inspect
    if not bool(traj.result == RESULTS.simulation_nonfinite):
        return
    last = traj.final_state
    why = dg.find_nonfinite(system, last)
    big = max(float(jnp.max(jnp.abs(x), initial=0.0)) for x in (last.q, last.u))
    head = (
        f"simulate: the state became non-finite in the step after t = {float(t):.6g} (largest "
        f"|q|, |u| at the last good State: {big:.3g}); "
    )
    if why:
        raise dg.NonFiniteError(head + "at the last good State: " + why)
    # finite there: look one small explicit step ahead, where the step went
    a = system.realize(last, Stage.ACCELERATION)
    probe = last.with_time(last.t + h).with_q(last.q + h * a.qdot).with_u(last.u + h * a.udot)
    ahead = dg.find_nonfinite(system, probe)
    if ahead:
        raise dg.NonFiniteError(
            head + f"at the last good State everything is finite; one explicit step of {h:g} ahead: {ahead}"
        )
    raise dg.NonFiniteError(
        head + "at the last good State and one small explicit step ahead everything is finite "
        "up to Acceleration, so the step diverged: use a smaller step (dt, or a tighter "
        "accuracy for the adaptive integrators), or an implicit integrator "
        "(integrator='kvaerno5') for stiff forces; sj.find_nonfinite(system, state) inspects "
        "any State you suspect"
    )


_FAILURES = (
    RESULTS.simulation_nonfinite,
    RESULTS.max_steps_reached,
    RESULTS.step_size_too_small,
    RESULTS.unilateral_solve_failed,
    RESULTS.constraints_unsatisfiable,
    RESULTS.gimbal_lock,
)
_TIME_BINS = 100  # under jit the message names the time reached to 1/100 of the run


def _failure_message(kind: int, where: str, t1: float, cfg: _Config, locks: str = "") -> str:
    """The message of failure ``_FAILURES[kind]`` at ``where`` (e.g. "at t = 0.5")."""
    check = "check the model (stiff or singular forces, NaN parameters) and the initial q, u and z"
    if kind == 0 and cfg.integrator in _FIXED:
        what = "the state became non-finite (NaN/inf)"
        fix = (
            f"use a smaller step than dt={cfg.dt:g} or an adaptive integrator (integrator='tsit5', or "
            f"'kvaerno5' for stiff systems), and {check}"
        )
    elif kind == 0:
        what = "the state or its derivatives became non-finite (NaN/inf)"
        tols = f"{cfg.accuracy:g}/{cfg.atol:g}"
        fix = f"{check}; tighten accuracy/atol (now {tols}) or use integrator='kvaerno5'"
    elif kind == 1:
        what = f"the {cfg.integrator!r} integrator used up max_steps={cfg.max_steps} step attempts"
        what += " in one output interval"
        fix = (
            "raise max_steps, loosen accuracy/atol, add output times (save_at), or use an implicit "
            "integrator (integrator='kvaerno5') if the system is stiff"
        )
    elif kind == 4:
        tol = _UNSATISFIED * max(cfg.accuracy, 100 * float(np.finfo(np.float64).eps))
        what = (
            "the constraints could not be satisfied: after projection their RMS error stayed above "
            f"10 x max(accuracy, 100 machine epsilons) ({tol:.3g} in float64; "
            "Trajectory.max_position_error), "
            "or a coordinate limit stayed penetrated past twice its deadband"
        )
        fix = (
            "remove or disable constraints that contradict each other (a point held at two places, one "
            "speed demanded at two values, a ConstantCoordinate outside a CoordinateLimit's range), start "
            f"from an assembled State (sj.Assembler), or raise projection_iterations (now "
            f"{cfg.projection_iterations}) or shorten the step"
        )
    elif kind == 5:
        what = "a mobilizer with Euler angles reached gimbal lock (its middle angle at +-90 degrees)"
        what += ", where a Gimbal's mass matrix, or the qdot of a Ball/Free in Euler-angle mode, is singular"
        fix = (
            "use quaternions, as Simbody advises: a Ball (sj.MobilizedBody.Ball) instead of a Gimbal, and "
            "matter.set_use_euler_angles(state, False) (the default) for Ball/Free"
        )
        if locks:
            fix += f" (Euler angles here: {locks})"
    elif kind == 3:
        what = "the complementarity solve of the coordinate limits did not settle"
        fix = (
            f"use a smaller step (dt, now {cfg.dt}), and remove limits that contradict each other or the "
            "constraints (a range no configuration can meet)"
        )
    else:
        what = f"the {cfg.integrator!r} integrator's step size shrank to the time resolution"
        what += " without an acceptable step"
        fix = (
            "the system may be extremely stiff or discontinuous there: use integrator='kvaerno5', loosen "
            f"accuracy/atol, or {check}"
        )
    return (
        f"simulate failed {where} (of t1={t1:g}): {what}. Fix: {fix}. (throw=False returns the "
        "Trajectory instead: see traj.result and traj.termination_time.)"
    )


def _raise_if_failed(traj: Trajectory, t0: float, t1: float, cfg: _Config, locks: str = "") -> Trajectory:
    """``throw=True``: raise through ``equinox.error_if`` if ``traj.result`` is a failure.
    ``locks``: the bodies whose mobilizers have Euler angles (named by a gimbal lock)."""
    bad = ~simulation_ok(traj.result)
    kind = jnp.asarray(0)
    for i, r in enumerate(_FAILURES):
        kind = jnp.where(traj.result == r, i, kind)
    t = traj.termination_time
    if not isinstance(bad, jax.core.Tracer):  # concrete: the exact time reached
        if not bool(jnp.any(bad)):
            return traj
        first = int(np.argmax(np.ravel(bad)))
        where = f"at t = {float(np.ravel(t)[first]):.6g}"
        return eqx.error_if(traj, bad, _failure_message(int(np.ravel(kind)[first]), where, t1, cfg, locks))
    # traced: a message per failure and time bin
    span = t1 - t0
    edges = [t0 + span * k / _TIME_BINS for k in range(_TIME_BINS + 1)]
    msgs = [
        _failure_message(i, f"at t between {edges[k]:.6g} and {edges[k + 1]:.6g}", t1, cfg, locks)
        for i in range(len(_FAILURES))
        for k in range(_TIME_BINS)
    ]
    b = jnp.clip(jnp.floor((t - t0) / span * _TIME_BINS), 0, _TIME_BINS - 1)
    index = kind * _TIME_BINS + jnp.where(jnp.isfinite(b), b, 0).astype(kind.dtype)
    # under vmap the message is the largest index of the batch: count failures only
    return eqx.branched_error_if(traj, bad, jnp.where(bad, index, 0), msgs)


def _check_positive(name: str, value: Any, hint: str) -> None:
    """``value`` must be a finite number > 0 (a tolerance or step of the integrators)."""
    try:
        ok = bool(np.isfinite(value) and value > 0)
    except (TypeError, jax.errors.ConcretizationTypeError):
        raise TypeError(f"simulate: {name} must be a Python number > 0, got {value!r}") from None
    if not ok:
        raise ValueError(f"simulate: {name} must be finite and > 0, got {value!r}; {hint}")


#: The tightest relative ``accuracy`` an adaptive integrator accepts, in machine epsilons
#: of the State's dtype (float64: 8.9e-16; float32: 4.8e-7).
MIN_ACCURACY_EPS = 4.0


def _check_reachable_accuracy(integrator: str, accuracy: float, dtype: Any) -> None:
    """Refuse a relative accuracy below what ``dtype`` resolves (``MIN_ACCURACY_EPS``
    epsilons): round-off in the error estimate is that large, so the run's success would
    claim an accuracy it did not deliver."""
    eps = float(jnp.finfo(dtype).eps)
    floor = MIN_ACCURACY_EPS * eps
    if accuracy < floor:
        raise ValueError(
            f"simulate: accuracy={accuracy:g} is below what {jnp.dtype(dtype).name} can deliver: "
            f"integrator {integrator!r} needs accuracy >= {floor:.2g} ({MIN_ACCURACY_EPS:g} machine "
            f"epsilons of {jnp.dtype(dtype).name}), since round-off in its error estimate is that "
            "large. Ask for accuracy >= that"
            + (", or run in float64 (jax.config.update('jax_enable_x64', True))" if eps > 1e-10 else "")
        )


def _static_time(t: Any) -> float:
    if isinstance(t, jax.core.Tracer):
        raise ValueError(
            "simulate: the State's time is traced (inside jit/vmap), but output times are "
            "static; pass the start time as simulate(..., t0=0.0)"
        )
    return float(t)


def _save_times(save_at: Any, t0: float, t1: float) -> np.ndarray:
    if not t1 > t0:
        raise ValueError(f"simulate: t1 = {t1} must be after the State's time {t0}")
    if save_at is None:
        return np.array([t1])
    if isinstance(save_at, (int, np.integer)) and not isinstance(save_at, bool):
        if save_at < 1:
            raise ValueError("simulate: save_at as an int must be >= 1")
        return t0 + (t1 - t0) * np.arange(1, save_at + 1) / save_at
    ts = np.asarray(save_at, dtype=float).reshape(-1)
    if ts.size == 0 or np.any(np.diff(ts) <= 0) or ts[0] < t0 or ts[-1] > t1 + 1e-12:
        raise ValueError(f"simulate: save_at must be strictly increasing times within [{t0}, {t1}], got {ts}")
    return ts


@eqx.filter_jit
def _unchanged(L: _Loop) -> _Loop:
    return L


def _simulate(
    model: Model,
    state: State,
    t0: float,
    times: tuple[float, ...],
    cfg: _Config,
    events: tuple[Any, ...],
    reporters: tuple[tuple[str, Any], ...],
    ctl: _Controls | None = None,
) -> Trajectory:
    base = realize(model, state, Stage.INSTANCE)
    dtype = state.q.dtype
    y = (state.q, state.u, state.z)
    # start on the manifold (Simbody projects the initial state too)
    y, err0, met0 = _project_checked(model, base, t0, y, cfg)
    if model.limits:  # rows that start inside their region are engaged before the first step
        disc0 = dict(base.discrete)
        disc0["matter"] = us.initial_engagement(model, _state_of(base, t0, y))
        base = _with_disc(base, disc0)
    trig = [e for e in events if isinstance(e, TriggeredEvent)]
    # the witnesses' values at the start: the "before" side of the first step (with the
    # controls of the first step; a policy's at every evaluation for adaptive integrators)
    policy = ctl if cfg.integrator not in _FIXED else None
    W: Any = _witness_fn(model, base, trig, policy) if trig else None
    if trig:
        disc_first = base.discrete
        if ctl is not None and cfg.integrator in _FIXED:
            disc_first = ctl.at(model, base, t0, y, jnp.asarray(0))
        w_start = W(t0, y, disc_first)
    else:
        w_start = jnp.zeros((0,), dtype)
    ev0 = _Witnessed(
        w=w_start,
        scale=jnp.abs(w_start),
        t_ev=jnp.full((len(trig),), -jnp.inf, dtype),
        unresolved=jnp.zeros((len(trig),), bool),
    )
    sched = _scheduled_in_range(events, t0, float(times[-1]))
    bounds = sorted(set(times) | {tt for tt, _ in sched})
    tb = np.asarray(bounds)
    ta = np.concatenate([[t0], tb[:-1]])
    # handlers due at each boundary, in the order the events were given (-1: none)
    per: list[list[int]] = [[] for _ in bounds]
    for tt, k in sched:
        per[bounds.index(tt)].append(k)
    width = max([len(x) for x in per] + [1])
    which = np.array([x + [-1] * (width - len(x)) for x in per], dtype=int)
    save_rows = np.array([bounds.index(tt) for tt in times])
    L = _Loop(
        y=y,
        disc=base.discrete,
        done=jnp.asarray(False),
        t_done=jnp.where(met0, jnp.asarray(times[-1], dtype), jnp.asarray(t0, dtype)),
        err=err0,
        n_steps=jnp.asarray(0),
        n_rej=jnp.asarray(0),
        n_events=jnp.asarray(0),
        # unmet after the first projection: failed at t0
        result=RESULTS.where(met0, RESULTS.successful, RESULTS.constraints_unsatisfiable),  # type: ignore[arg-type]
        ev=ev0,
    )
    sched_events = [e for e in events if isinstance(e, ScheduledEvent)]
    sched_index = {id(e): i for i, e in enumerate(sched_events)}
    which_s = np.array(
        [[-1 if k < 0 else sched_index[id(events[k])] for k in row] for row in which], dtype=int
    )

    def scheduled(L: _Loop, b, ks):
        if not sched_events:
            return L
        for j in range(ks.shape[0]):  # every handler due at b, in order
            L = one_scheduled(L, b, ks[j])
        return L

    def after_scheduled(L: _Loop, b, e) -> _Loop:
        y2, d2, term = _apply_handler(model, base, L.disc, b, L.y, e.handler, e.terminate)
        ev = L.ev
        if trig:  # the handler may have moved the witnesses: their values after it
            ev = eqx.tree_at(lambda x: x.w, ev, W(b, y2, d2))
        return eqx.tree_at(
            lambda x: (x.y, x.disc, x.done, x.t_done, x.n_events, x.ev),
            L,
            (y2, d2, L.done | term, jnp.where(term & ~L.done, b, L.t_done), L.n_events + 1, ev),
        )

    def one_scheduled(L: _Loop, b, k):
        branches = [_unchanged] + [partial(after_scheduled, b=b, e=e) for e in sched_events]
        out = jax.lax.switch(k + 1, branches, L)
        return _select(_stopped(L), L, out)

    # One compiled interval body, scanned over the intervals between boundaries.
    if cfg.integrator in _FIXED:
        n = np.maximum(np.ceil((tb - ta) / cfg.dt - 1e-9), 0).astype(int)
        nmax = int(max(n.max(), 1))
        if ctl is not None and ctl.fn is None and ctl.U.shape[0] != int(n.sum()):
            raise ValueError(
                f"simulate: the control sequence has {ctl.U.shape[0]} rows, but this run takes "
                f"{int(n.sum())} steps of dt={cfg.dt:g} from t={t0:g} to t={times[-1]:g}: "
                "give one row per step"
            )
        h = np.where(n > 0, (tb - ta) / np.maximum(n, 1), 0.0)
        xs: tuple[jax.Array, ...] = (
            jnp.asarray(ta, dtype),
            jnp.asarray(tb, dtype),
            jnp.asarray(h, dtype),
            jnp.asarray(n),
            jnp.asarray(which_s),
        )

        def interval(L, x):
            a, b, hh, nn, k = x
            L = _fixed_interval(model, base, a, hh, nn, nmax, L, cfg, events, ctl)
            L = scheduled(L, b, k)
            return L, (L.y, L.disc)

        L, (ys, ds) = jax.lax.scan(interval, L, xs)
    else:
        dt0 = jnp.asarray((tb[-1] - t0) / 100 if cfg.dt is None else cfg.dt, dtype)
        xs = (jnp.asarray(ta, dtype), jnp.asarray(tb, dtype), jnp.asarray(which_s))

        def interval(carry, x):
            L, dt = carry
            a, b, k = x
            L, dt = _adaptive_interval(model, base, a, b, L, dt, cfg, events, ctl)
            L = scheduled(L, b, k)
            return (L, dt), (L.y, L.disc)

        (L, _), (ys, ds) = jax.lax.scan(interval, (L, dt0), xs)
    rows = jnp.asarray(save_rows)
    ys = jax.tree.map(lambda x: x[rows], ys)
    ds = jax.tree.map(lambda x: x[rows], ds)
    okay = L.result == RESULTS.successful
    # mypy types eqx.Enumeration items as str (a metaclass conflict in equinox's stub)
    result = RESULTS.where(okay & L.done, RESULTS.event_occurred, L.result)  # type: ignore[arg-type]
    unresolved = jnp.any(L.ev.unresolved)
    # mypy types eqx.Enumeration items as str (a metaclass conflict in equinox's stub)
    result = RESULTS.where(
        (result == RESULTS.successful) & unresolved,
        RESULTS.events_unresolved,  # type: ignore[arg-type]
        result,
    )
    t_out = jnp.asarray(times, dtype)
    # after a failure, the outputs it did not reach are NaN; the final State is the last good one
    lost = ~okay & (t_out > L.t_done)
    ys = jax.tree.map(lambda x: jnp.where(lost.reshape((-1,) + (1,) * (x.ndim - 1)), jnp.nan, x), ys)
    t_final = jnp.where(okay, jnp.asarray(times[-1], dtype), L.t_done)
    final_disc = L.disc
    if ctl is not None and ctl.fn is not None:  # a policy's controls at the final time
        final_disc = ctl.at(model, _with_disc(base, L.disc), t_final, L.y, None)
    final = _state_of(_with_disc(base, final_disc), t_final, L.y)
    reports = {}
    if reporters:
        b_out = _with_disc(base, L.disc)

        def report(t, y, d):
            bb = _with_disc(b_out, d)
            if ctl is not None and ctl.fn is not None:
                bb = _with_disc(bb, ctl.at(model, bb, t, y, None))
            st = realize(model, _state_of(bb, t, y), Stage.ACCELERATION)
            return {name: fn(st) for name, fn in reporters}

        reports = jax.vmap(report)(t_out, ys, ds)
    return Trajectory(
        t=t_out,
        q=ys[0],
        u=ys[1],
        z=ys[2],
        final_state=final,
        num_steps=L.n_steps,
        num_rejected=L.n_rej,
        max_position_error=L.err,
        num_events=L.n_events,
        terminated=L.done,
        termination_time=L.t_done,
        reports=reports,
        discrete=ds,
        result=result,
        events_unresolved=L.ev.unresolved,
    )


class TimeStepper:
    """Step-by-step simulation (Simbody ``TimeStepper``), functional: ``step_to`` returns
    the new State instead of mutating one. Each call is one compiled ``simulate`` segment.

    >>> ts = sj.TimeStepper(system, integrator="rk4", dt=1e-3)
    >>> state = ts.initialize(state)          # projected onto the constraints
    >>> state = ts.step_to(state, 0.5)

    ``options`` are ``simulate``'s (``throw=True`` by default: ``step_to`` raises if the
    segment failed; with ``throw=False`` it returns the last good State, at the time
    reached).
    """

    def __init__(self, system: MultibodySystem, integrator: str = "rk4", **options: Any):
        self.system = system
        self.integrator = integrator
        self.options = options

    def initialize(self, state: State) -> State:
        """Project the initial State onto the constraints (as Simbody does)."""
        model = self.system.model_for(state)
        mp, mv, _ = model.constraint_counts(state.use_euler_angles)
        if mp + mv == 0:
            return state
        return cast(State, self.system.project(state, tol=self.options.get("accuracy", 1e-6)))

    def step_to(self, state: State, t: float) -> State:
        """The State at time ``t`` (> ``state.t``)."""
        opts = {k: v for k, v in self.options.items() if k != "save_at"}
        return simulate(self.system, state, t, integrator=self.integrator, **opts).final_state
