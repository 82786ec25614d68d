"""Time integration with Simbody's coordinate projection, on diffrax solvers.

The continuous state ``y = (q, u, z)`` evolves by ``ydot = (N u, udot, zdot)`` from
``realize(Stage.ACCELERATION)``. After every accepted step the state is projected back
onto the constraint manifold (``project_q`` Gauss-Newton steps, quaternion
normalisation, then ``project_u``), as Simbody's integrators do.

Integrators:

* ``"rk4"``: classical fixed-step Runge-Kutta 4.
* ``"euler"``: semi-explicit (symplectic) Euler, ``u1 = u0 + h udot(q0, u0)``,
  ``q1 = q0 + h N(q0) u1`` (Simbody's ``SemiExplicitEulerIntegrator``).
* ``"tsit5"``, ``"dopri5"``: adaptive explicit (diffrax) with error control from
  ``accuracy`` (relative) and ``atol``.
* ``"kvaerno5"``, ``"kvaerno3"``: adaptive implicit (diffrax, L-stable SDIRK) for stiff
  springs and dampers.

Fixed-step loops are a ``lax.scan``; adaptive loops a checkpointed bounded while loop.
Every step is ``jax.checkpoint``-ed, so reverse-mode memory is one carry per step, not
the solver internals. Everything jits, vmaps over initial States and parameters, and
differentiates.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import diffrax as dfx
import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np

from . import _projection as pj
from . import _realize as rz
from ._stage import Stage
from ._state import State

if TYPE_CHECKING:
    from ._model import Model
    from ._system import MultibodySystem

_ADAPTIVE = {
    "tsit5": dfx.Tsit5,
    "dopri5": dfx.Dopri5,
    "kvaerno3": dfx.Kvaerno3,
    "kvaerno5": dfx.Kvaerno5,
}
_FIXED = ("rk4", "euler")


class Trajectory(eqx.Module):
    """Output of ``simulate``: the variables at the requested times, and statistics.

    Attributes:
        t: Output times (n,).
        q, u, z: Variables at those times, (n, nq), (n, nu), (n, nz).
        final_state: The State at the last output time (Stage.TIME).
        num_steps: Accepted steps taken.
        num_rejected: Rejected step attempts (adaptive integrators).
        max_position_error: Largest RMS position-constraint error after projection.
    """

    t: jax.Array
    q: jax.Array
    u: jax.Array
    z: jax.Array
    final_state: State
    num_steps: jax.Array
    num_rejected: jax.Array
    max_position_error: jax.Array

    @property
    def states(self) -> State:
        """The outputs as one batched State (leading axis = time), at Stage.TIME; realize
        them with ``jax.vmap(lambda s: system.realize(s, stage))(traj.states)``."""
        base = self.final_state

        def one(t, q, u, z):
            return base.with_time(t).with_q(q).with_u(u).with_z(z)

        return jax.vmap(one)(self.t, self.q, self.u, self.z)

    def __len__(self) -> int:
        return int(self.t.shape[0])


class _Config(eqx.Module):
    integrator: str = eqx.field(static=True)
    dt: float | None = eqx.field(static=True)
    accuracy: float = eqx.field(static=True)
    atol: float = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    project: bool = eqx.field(static=True)
    projection_iterations: int = eqx.field(static=True)


def _state_of(base: State, t, y) -> State:
    q, u, z = y
    return base.with_time(t).with_q(q).with_u(u).with_z(z)


def _ydot(model: Model, base: State, t, y):
    s = model.realize(_state_of(base, t, y), Stage.ACCELERATION)
    return s.qdot, s.udot, s.zdot


def _project(model: Model, base: State, t, y, cfg: _Config):
    """Project (q, u) onto the constraints; returns y and the RMS position error."""
    mp, mv, _ = model.constraint_counts(base.use_euler_angles)
    s = _state_of(base, t, y)
    if mp + mv == 0 or not cfg.project:
        q = pj._normalize_quaternions(model, s, y[0])
        return (q, y[1], y[2]), jnp.zeros((), y[0].dtype)
    s = pj.project_q(model, s, cfg.projection_iterations)
    s = pj.project_u(model, s)
    s = model.realize(s, Stage.VELOCITY)
    return (s.q, s.u, y[2]), pj.rms(s.position_cache.qerr[:mp])


def _rk4(model, base, t, y, h):
    f = lambda tt, yy: _ydot(model, base, tt, yy)
    add = lambda yy, k, c: jax.tree.map(lambda a, b: a + c * b, yy, k)
    k1 = f(t, y)
    k2 = f(t + h / 2, add(y, k1, h / 2))
    k3 = f(t + h / 2, add(y, k2, h / 2))
    k4 = f(t + h, add(y, k3, h))
    return jax.tree.map(lambda a, b1, b2, b3, b4: a + h / 6 * (b1 + 2 * b2 + 2 * b3 + b4), y, k1, k2, k3, k4)


def _semi_explicit_euler(model, base, t, y, h):
    s = model.realize(_state_of(base, t, y), Stage.ACCELERATION)
    u1 = y[1] + h * s.udot
    qdot = rz.calc_qdot(model, s.with_u(u1))
    return (y[0] + h * qdot, u1, y[2] + h * s.zdot)


def _fixed_interval(model, base, t0, h, n, nmax: int, y, cfg: _Config):
    """``n`` steps of size ``h`` from ``t0`` (``n <= nmax``; steps past ``n`` are no-ops)."""
    stepper = _rk4 if cfg.integrator == "rk4" else _semi_explicit_euler

    @jax.checkpoint
    def step(carry, i):
        yy, err = carry
        t = t0 + i * h
        y1 = stepper(model, base, t, yy, h)
        y1, e = _project(model, base, t + h, y1, cfg)
        live = i < n
        y1 = jax.tree.map(lambda a, b: jnp.where(live, a, b), y1, yy)
        return (y1, jnp.where(live, jnp.maximum(err, e), err)), None

    (y, err), _ = jax.lax.scan(step, (y, jnp.zeros((), y[0].dtype)), jnp.arange(nmax))
    return y, err, n, jnp.zeros((), n.dtype)


def _adaptive_interval(model, base, t0, t1, y, dt0, cfg: _Config):
    cls = _ADAPTIVE[cfg.integrator]
    if cfg.integrator.startswith("kvaerno"):
        # the Newton (chord) tolerances diffeqsolve would take from its step controller
        solver = cls(root_finder=dfx.VeryChord(rtol=cfg.accuracy, atol=cfg.atol))
    else:
        solver = cls()
    term = dfx.ODETerm(lambda t, yy, args: _ydot(model, base, t, yy))
    order = solver.order(term)
    sstate = solver.init(term, t0, t1, y, None)
    dtype = y[0].dtype

    def cond(c):
        t, _, _, _, n, _, _ = c
        return (t1 - t > 1e-12 * jnp.maximum(1.0, jnp.abs(t1))) & (n < cfg.max_steps)

    @jax.checkpoint
    def body(c):
        t, yy, dt, ss, n, nrej, err = c
        h = jnp.minimum(dt, t1 - t)
        y1, yerr, _, ss1, _ = solver.step(term, t, t + h, yy, None, ss, made_jump=True)
        scale = jax.tree.map(
            lambda a, b: cfg.atol + cfg.accuracy * jnp.maximum(jnp.abs(a), jnp.abs(b)), yy, y1
        )
        ratios = jax.tree.leaves(jax.tree.map(lambda e, sc: (e / sc) ** 2, yerr, scale))
        count = sum(r.size for r in ratios)
        enorm = jnp.sqrt(sum(jnp.sum(r) for r in ratios) / max(count, 1))
        ok = enorm <= 1.0
        factor = jnp.clip(0.9 * jnp.where(enorm > 0, enorm, 1e-10) ** (-1.0 / (order + 1)), 0.2, 5.0)
        y1p, e = _project(model, base, t + h, y1, cfg)
        yn = jax.tree.map(lambda a, b: jnp.where(ok, a, b), y1p, yy)
        tn = jnp.where(ok, t + h, t)
        # a step clipped to hit t1 doesn't shrink the step size carried on
        dtn = jnp.where(ok & (h < dt), dt, h * factor)
        return (tn, yn, dtn, ss1, n + ok, nrej + (1 - ok), jnp.where(ok, jnp.maximum(err, e), err))

    init = (
        jnp.asarray(t0, dtype),
        y,
        jnp.asarray(dt0, dtype),
        sstate,
        jnp.asarray(0),
        jnp.asarray(0),
        jnp.zeros((), dtype),
    )
    t, y, dt, _, n, nrej, err = eqxi.while_loop(
        cond, body, init, max_steps=cfg.max_steps, kind="checkpointed"
    )
    return y, err, n, nrej, dt


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
    t0: float | None = None,
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
        accuracy: Relative error tolerance of the adaptive integrators.
        atol: Absolute tolerance (default ``accuracy``).
        project: Project onto the constraints after every step (Simbody's scheme).
        projection_iterations: Gauss-Newton steps of each position projection.
        max_steps: Bound on the steps of each output interval (adaptive integrators).
        t0: Start time; default ``state.t``. Under ``vmap``/``jit`` the State's time is
            traced, so pass the (common) start time here.

    Output times and ``t1`` are static (Python numbers or NumPy arrays); the State may be
    traced, so ``jax.jit(jax.vmap(lambda s: simulate(system, s, 1.0, dt=1e-3)))`` works,
    as does ``jax.grad`` through the whole rollout.
    """
    integrator = integrator.lower()
    if integrator not in _FIXED and integrator not in _ADAPTIVE:
        raise ValueError(f"unknown integrator {integrator!r}; choose one of {list(_FIXED) + list(_ADAPTIVE)}")
    if integrator in _FIXED and (dt is None or not dt > 0):
        raise ValueError(f"integrator {integrator!r} has a fixed step: give dt > 0 (e.g. dt=1e-3)")
    model = system.model_for(state)
    t0 = _static_time(state.t) if t0 is None else float(t0)
    times = _save_times(save_at, t0, float(t1))
    cfg = _Config(
        integrator=integrator,
        dt=dt,
        accuracy=float(accuracy),
        atol=float(atol if atol is not None else accuracy),
        max_steps=int(max_steps),
        project=bool(project),
        projection_iterations=int(projection_iterations),
    )
    return _simulate(model, state, t0, tuple(float(x) for x in times), cfg)


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
def _simulate(model: Model, state: State, t0: float, times: tuple[float, ...], cfg: _Config) -> Trajectory:
    base = model.realize(state, Stage.INSTANCE)
    dtype = state.q.dtype
    y = (state.q, state.u, state.z)
    # start on the manifold (Simbody projects the initial state too)
    y, err0 = _project(model, base, t0, y, cfg)
    tb = np.asarray(times)
    ta = np.concatenate([[t0], tb[:-1]])
    # One compiled interval body, scanned over the output intervals.
    if cfg.integrator in _FIXED:
        n = np.maximum(np.ceil((tb - ta) / cfg.dt - 1e-9), 0).astype(int)
        nmax = int(max(n.max(), 1))
        h = np.where(n > 0, (tb - ta) / np.maximum(n, 1), 0.0)
        xs = (jnp.asarray(ta, dtype), jnp.asarray(h, dtype), jnp.asarray(n))

        def interval(carry, x):
            yy, err, ns, nr = carry
            a, hh, nn = x
            yy, e, k, r = _fixed_interval(model, base, a, hh, nn, nmax, yy, cfg)
            return (yy, jnp.maximum(err, e), ns + k, nr + r), yy

        (y, err, n_steps, n_rej), ys = jax.lax.scan(interval, (y, err0, jnp.asarray(0), jnp.asarray(0)), xs)
    else:
        dt0 = jnp.asarray((tb[-1] - t0) / 100 if cfg.dt is None else cfg.dt, dtype)
        xs = (jnp.asarray(ta, dtype), jnp.asarray(tb, dtype))

        def interval(carry, x):
            yy, err, ns, nr, dt = carry
            a, b = x
            yy, e, k, r, dt = _adaptive_interval(model, base, a, b, yy, dt, cfg)
            return (yy, jnp.maximum(err, e), ns + k, nr + r, dt), yy

        (y, err, n_steps, n_rej, _), ys = jax.lax.scan(
            interval, (y, err0, jnp.asarray(0), jnp.asarray(0), dt0), xs
        )
    final = _state_of(base, jnp.asarray(times[-1], dtype), y)
    return Trajectory(
        t=jnp.asarray(times, dtype),
        q=ys[0],
        u=ys[1],
        z=ys[2],
        final_state=final,
        num_steps=n_steps,
        num_rejected=n_rej,
        max_position_error=err,
    )


class TimeStepper:
    """Step-by-step simulation (Simbody ``TimeStepper``), functional: ``step_to`` returns
    the new State instead of mutating one. Each call is one compiled ``simulate`` segment.

    >>> ts = sj.TimeStepper(system, integrator="rk4", dt=1e-3)
    >>> state = ts.initialize(state)          # projected onto the constraints
    >>> state = ts.step_to(state, 0.5)
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
        return self.system.project(state, tol=self.options.get("accuracy", 1e-6))

    def step_to(self, state: State, t: float) -> State:
        """The State at time ``t`` (> ``state.t``)."""
        opts = {k: v for k, v in self.options.items() if k != "save_at"}
        return simulate(self.system, state, t, integrator=self.integrator, **opts).final_state
