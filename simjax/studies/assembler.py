"""``Assembler``: assembly and inverse kinematics (Simbody ``Assembler``) as gradient-based
optimisation in JAX.

The problem is Simbody's: find the free q's (in the Euler-angle form of the State) that
satisfy every *error* condition (weight infinity; by default the System's enabled
position constraints) to the error tolerance, and minimise the weighted sum of the *goal*
conditions (finite weights), with locked q's held at their starting values and restricted
q's kept within bounds.

The solver is a Levenberg-Marquardt / sequential-quadratic-programming hybrid written in
plain JAX (one ``lax.while_loop``, so it jits and vmaps over frames):

* goals are least squares ``1/2 |r(x)|^2`` (plus optional general scalar goals), linearised
  by forward-mode autodiff (Gauss-Newton Hessian ``J^T J``);
* error conditions ``e(x) = 0`` are kept *exactly* in every linearised step through the KKT
  system ``[H + mu I, A^T; A, -delta I] [dx; nu] = [-g; -e]`` (``A = de/dx``); the
  tiny ``delta`` plus iterative refinement gives the minimum-norm answer when constraints
  are redundant (a planar four-bar closed by a Ball);
* robustness from a poor start: steps are accepted on the augmented-Lagrangian merit
  ``goal + nu.e + rho/2 |e|^2`` (``nu`` the step's multipliers, ``rho`` the smallest
  penalty for which the model predicts a decrease); rejected steps raise the
  Levenberg-Marquardt damping ``mu`` (Nielsen's update) and shrink a trust radius on the
  step length, so the iteration falls back to gradient descent on the goal and damped
  Newton on the errors;
* bounds by a primal-dual interior-point barrier, as IPOPT (which Simbody's Assembler and
  OpenSim's IK use for bounded problems): bounded q's start 1% of their range inside,
  ``-mu sum log(slack)`` joins the goal with ``mu`` first 0.1 x the starting goal
  (``set_initial_barrier``) and reduced (x0.2, then superlinearly) each time its
  subproblem is solved, steps stop 0.5% short of a bound (fraction to the boundary). A
  q that starts on a bound thus leaves it when the goal prefers the interior; q's that
  end within the barrier's reach of a bound with a multiplier pushing into it are put
  exactly on it and reported (``info.on_bounds``); locked q's are not variables.

It stops when the error norm is below ``accuracy * tolerance`` (one more Newton step is
cheap), the barrier is at its final weight (``accuracy/100`` x the starting goal) and the
Gauss-Newton model predicts less than ``accuracy`` relative improvement of the goal.
``info.result``, an ``sj.RESULTS`` item, says what happened: converged (``successful``,
``assembly_on_bounds``), feasible but out of iterations (``assembly_max_iterations``) or
stalled (``assembly_stalled``), infeasible (``assembly_infeasible``), no data
(``assembly_no_data``), non-finite (``assembly_nonfinite``). Results instead of exceptions
under ``jit``/``vmap``; the unbatched calls raise
``AssemblyFailed`` naming the worst condition. Tolerance, accuracy, iteration limit,
bounds, barrier and weights are runtime data: changing them does not recompile.

Derivatives of the solution with respect to everything in the data (observations,
stations, weights, target values) and the State's Instance variables (model parameters)
come from the implicit function theorem applied to the KKT conditions at the solution
(exact Hessian of the Lagrangian by autodiff), never from unrolled iterations.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, overload

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from .. import _config
from .._results import RESULTS
from .._stage import Stage
from ..constraints import kernels as cn
from ..forward import projection as pj
from ..forward.realize import realize
from ..model.state import State
from ..tree.kinds import joint_inputs, map_kinds
from . import _branches as br
from . import _interior_point as ip
from . import _traces
from .conditions import AssemblyCondition, SystemConstraints, _as_body_index, _Observed

INF = math.inf

#: Results whose q's satisfy the error conditions to the tolerance (``AssemblyInfo.feasible``).
FEASIBLE = (
    RESULTS.successful,
    RESULTS.assembly_max_iterations,
    RESULTS.assembly_on_bounds,
    RESULTS.assembly_stalled,
)
#: Results that mean the goal converged: the solution is a minimum to the accuracy
#: (``AssemblyInfo.success``).
CONVERGED = (RESULTS.successful, RESULTS.assembly_on_bounds)

#: The integer ``AssemblyInfo.status`` codes of earlier versions and the ``RESULTS`` item
#: each became (for migrating code that compared with the integers).
LEGACY_STATUS_CODES = {
    0: RESULTS.successful,
    1: RESULTS.assembly_max_iterations,
    2: RESULTS.assembly_infeasible,
    3: RESULTS.assembly_no_data,
    4: RESULTS.assembly_nonfinite,
    5: RESULTS.assembly_on_bounds,
    6: RESULTS.assembly_stalled,
}


def _is_one_of(result: RESULTS, items: tuple[Any, ...]) -> jax.Array:
    """Where ``result`` (batched or not) is one of ``items``."""
    out = jnp.zeros(jnp.shape(result._value), bool)  # type: ignore[attr-defined]
    for item in items:
        out = out | (result == item)
    return out


class AssemblyFailed(RuntimeError):
    """Raised by the unbatched ``assemble``/``track`` when the tolerance cannot be met."""


class AssemblyInfo(eqx.Module):
    """What one assembly solve achieved (batched along leading axes after ``track``).

    Attributes:
        goal: weighted sum of the goals at the solution (``calc_current_goal``);
            differentiable with respect to the parameters and the State's Instance
            variables (implicitly through q and directly), e.g. for model scaling.
        error_norm: norm of the error conditions (infinity norm, or RMS), comparable with
            the error tolerance.
        errors: all error-condition entries at the solution (the System's constraint
            errors first).
        iterations: solver iterations taken.
        num_evaluations: evaluations of goals, errors, gradient and Jacobian (each
            iteration evaluates all four together once).
        result: what the solve achieved, an ``sj.RESULTS`` item: ``successful``
            (converged), ``assembly_on_bounds`` (converged with q's on their bounds),
            ``assembly_max_iterations`` (feasible, but the goal did not converge within
            the maximum iterations), ``assembly_stalled`` (feasible, but no step makes
            progress although the goal has not converged), ``assembly_infeasible`` (error
            tolerance not met; also where the tolerance is below what the dtype resolves
            for the model, ``2 eps (1 + max |p_GB|)``: about 1e-6 in float32, whatever
            error is computed), ``assembly_no_data``, ``assembly_nonfinite``. Compare with
            ``==`` (``info.result == sj.RESULTS.successful``, a bool array when batched);
            ``sj.RESULTS[info.result]`` is its message, ``info.success`` and
            ``info.feasible`` group them.
        on_bounds: per free q (``Assembler.get_q_index_of_free_q``), -1 on its lower
            bound, +1 on its upper bound, 0 inside (``Assembler.describe_bounds`` names
            them).
    """

    goal: jax.Array
    error_norm: jax.Array
    errors: jax.Array
    iterations: jax.Array
    num_evaluations: jax.Array
    result: RESULTS
    on_bounds: jax.Array

    @property
    def status(self) -> RESULTS:
        """The same ``sj.RESULTS`` item as ``result``.

        Earlier versions held integer codes here; ``LEGACY_STATUS_CODES`` maps them:
        0 ``successful``, 1 ``assembly_max_iterations``, 2 ``assembly_infeasible``,
        3 ``assembly_no_data``, 4 ``assembly_nonfinite``, 5 ``assembly_on_bounds``,
        6 ``assembly_stalled``. Comparing an item with an integer raises; compare with
        the item (``info.status == sj.RESULTS.successful``) or use ``info.success`` /
        ``info.feasible``."""
        return self.result

    @property
    def success(self) -> jax.Array:
        """True where the solve converged (``successful``, or ``assembly_on_bounds``)."""
        return _is_one_of(self.result, CONVERGED)

    @property
    def feasible(self) -> jax.Array:
        """True where the errors are within tolerance (the goal may not have converged)."""
        return _is_one_of(self.result, FEASIBLE)

    def status_message(self) -> str | list[str]:
        """``sj.RESULTS``' message of ``result`` (a list when batched)."""
        v = np.asarray(self.result._value)  # type: ignore[attr-defined]
        one = lambda j: jax.tree.map(lambda a: np.asarray(a).reshape(-1)[j : j + 1].reshape(()), self.result)  # noqa: E731
        messages = [RESULTS[one(j)] for j in range(v.size)]  # type: ignore[misc]
        return messages[0] if v.ndim == 0 else messages


@dataclass(eq=False)
class _Plan:
    """Static description of one compiled assembly problem."""

    model: Any
    free: np.ndarray  # Euler-mode q indices that may change
    goals: tuple[tuple[int, AssemblyCondition], ...]
    errors: tuple[tuple[int, AssemblyCondition], ...]
    numerical_jacobian: bool
    nr: int = 0
    ne: int = 0
    has_scalar: bool = False
    error_sizes: tuple[int, ...] = ()
    branches: br.BranchPlan | None = None  # whole turns and Euler branches (_branches)


class Assembler:
    """Assembly and inverse kinematics (Simbody ``Assembler``), batched and differentiable.

    ``assemble(state)`` returns ``(state, info)`` with the q's changed to satisfy the error
    conditions and minimise the goals; ``track(state, frames)`` solves a whole trajectory
    of observation frames in one compiled call (``vmap``); ``track(frame_time)`` continues
    sequentially from the internal State, as in Simbody. ``solve(state, params)`` is the
    pure function underneath (jit, vmap and grad; gradients by implicit differentiation).

    The internal State uses Euler angles for Ball-like joints (as Simbody's does), so
    ``lock_q``/``restrict_q``/``QValue`` coordinates are numbered as in the Euler-angle
    State; results are converted back to the caller's State form. Of a solution's
    equivalent values (whole turns, Euler branches) the one in range, else nearest the
    start or the frame before, is reported (see :meth:`track`).
    """

    def __init__(self, system: Any):
        self._system = system
        state = system.get_default_state()
        self._model = system.model_for(state)
        self._matter = system.get_matter_subsystem()
        self._conditions: list[AssemblyCondition] = []
        self._weights: list[float] = []
        self._tol = 0.0
        self._acc = 0.0
        self._rms = False
        self._max_iterations = 100
        self._batch_size: int | None = None
        self._barrier = 0.1
        self._warm_push = 1e-6
        self._retry_push: float | None = 0.25
        self._numerical_gradient = False
        self._numerical_jacobian = False
        self._locked_mobods: set[int] = set()
        self._locked_qs: set[tuple[int, int]] = set()
        self._bounds: dict[tuple[int, int], tuple[float, float]] = {}
        self._preferred: dict[tuple[int, int], tuple[float, float]] = {}
        self._reporters: list[Callable[[State], Any]] = []
        self._internal = self._matter.set_use_euler_angles(state, True)
        self._plan: _Plan | None = None
        self._fns: dict[Any, Any] = {}
        self._trace_fps: dict[Any, str | None] = {}  # fingerprints of the solvers' trace keys
        self._branch_memo: tuple[list[Any], Any] | None = None  # (Instance arrays, their moves)
        self._num_initializations = 0
        self.reset_stats()
        sc = SystemConstraints()
        self._conditions.append(sc)
        self._weights.append(INF)
        sc._bind(self, 0)

    # ------------------------------------------------------------------ accessors
    def get_multibody_system(self) -> Any:
        """The System this Assembler works on."""
        return self._system

    def get_matter_subsystem(self) -> Any:
        """The System's matter subsystem."""
        return self._matter

    # ------------------------------------------------------------------ tolerance/accuracy
    def set_error_tolerance(self, tolerance: float = 0.0) -> None:
        """Error tolerance for success; 0 restores the default (accuracy/10 if accuracy
        was set, else 1e-4)."""
        t = float(tolerance)
        if not t >= 0 or not math.isfinite(t):
            raise ValueError(
                f"Assembler.set_error_tolerance: tolerance must be finite and >= 0, got {tolerance}"
            )
        self._tol = t

    def get_error_tolerance_in_use(self) -> float:
        """The tolerance the next solve will use."""
        if self._tol > 0:
            return self._tol
        return self._acc / 10 if self._acc > 0 else 1e-4

    def set_accuracy(self, accuracy: float = 0.0) -> None:
        """Relative accuracy of the goal at which to stop (e.g. 1e-3: within 0.1% of the
        minimum); 0 restores the default 1e-3. Also sets the default tolerance to
        accuracy/10."""
        a = float(accuracy)
        if not a >= 0 or not math.isfinite(a):
            raise ValueError(f"Assembler.set_accuracy: accuracy must be finite and >= 0, got {accuracy}")
        self._acc = a

    def get_accuracy_in_use(self) -> float:
        """The accuracy the next solve will use."""
        return self._acc if self._acc > 0 else 1e-3

    def set_use_rms_error_norm(self, yes: bool) -> None:
        """RMS instead of the default infinity norm for the error conditions."""
        self._rms = bool(yes)

    def is_using_rms_error_norm(self) -> bool:
        """Whether the RMS error norm is used."""
        return self._rms

    def set_max_iterations(self, n: int) -> None:
        """Iteration limit of one solve (default 100)."""
        if int(n) < 1:
            raise ValueError("Assembler.set_max_iterations: need at least 1")
        self._max_iterations = int(n)

    def set_track_batch_size(self, n: int | None) -> None:
        """Segments of the trial the batched ``track`` solves side by side (one ``vmap``
        lane each; default ``None``: about the square root of the number of frames).

        ``track`` splits the frames into this many consecutive segments; within a segment
        every frame starts from its predecessor's solution (as Simbody's sequential
        tracking), the segments run in parallel, and a segment whose first frame is
        solved better from the previous segment's last frame is solved again from there.
        More segments: fewer sequential rounds, more cold starts. On a GPU use many.
        A new size compiles a new ``track`` (the settings do not)."""
        if n is not None and int(n) < 1:
            raise ValueError("Assembler.set_track_batch_size: need a positive size or None")
        self._batch_size = None if n is None else int(n)

    def set_track_retry(self, push: float | None = 0.25) -> None:
        """``track`` solves every frame from two starts, its warm start and the same start
        with every bounded q moved at least ``push * max(1, |bound|)`` (at most its range)
        inside its bounds (IPOPT's bound push: 0.25 rad from an elbow's bound at 0), and
        keeps the better: a frame caught in a local minimum held by a bound (a straight
        elbow on a humerus turned about its axis, the elbow unable to bend backwards)
        leaves it. About twice the solve time, no extra compile. ``None`` solves once per
        frame (a recompile)."""
        if push is not None and not 0.0 < float(push) < 0.5:
            raise ValueError(f"Assembler.set_track_retry: push must be in (0, 0.5) or None, got {push}")
        self._retry_push = None if push is None else float(push)

    def set_initial_barrier(self, weight: float = 0.1) -> None:
        """Initial weight of the interior-point barrier that keeps q's inside their
        bounds, relative to the goal at the start (default 0.1, IPOPT's ``mu_init``).

        Bounded q's start 1% of their range inside their bounds and are pulled toward
        mid-range by a log barrier that is reduced as the solve converges, so a q
        that starts on a bound leaves it when the goal prefers the interior (as Simbody's
        Assembler and OpenSim's IK, which use IPOPT). 0 turns the barrier off (steps
        only stop short of the bounds). ``track`` uses it for each segment's first frame
        and a small barrier for the warm-started frames."""
        w = float(weight)
        if not w >= 0 or not math.isfinite(w):
            raise ValueError(f"Assembler.set_initial_barrier: need a finite weight >= 0, got {weight}")
        self._barrier = w

    def set_force_numerical_gradient(self, yes: bool) -> None:
        """Debugging: central differences instead of autodiff for the goal derivatives."""
        self._numerical_gradient = bool(yes)
        self.uninitialize()

    def set_force_numerical_jacobian(self, yes: bool) -> None:
        """Debugging: central differences instead of autodiff for the error Jacobian."""
        self._numerical_jacobian = bool(yes)
        self.uninitialize()

    # ------------------------------------------------------------------ conditions
    def set_system_constraints_weight(self, weight: float) -> None:
        """Weight of the System's enabled constraints: infinity (default) makes them
        errors, a finite weight a goal ``1/2 |qerr|^2``, 0 ignores them."""
        self.set_assembly_condition_weight(0, weight)

    def get_system_constraints_weight(self) -> float:
        """Current weight of the System's constraints (default infinity)."""
        return self._weights[0]

    def _check_weight(self, weight: float) -> float:
        w = float(weight)
        if not w >= 0:
            raise ValueError(f"Assembler: a weight must be >= 0 (0 off, inf an error), got {weight}")
        return w

    def set_assembly_condition_weight(self, condition: int | AssemblyCondition, weight: float) -> None:
        """0 ignores the condition, infinity makes it an error, anything else a goal."""
        i = self._cond_index(condition)
        self._weights[i] = self._check_weight(weight)
        self.uninitialize()

    def get_assembly_condition_weight(self, condition: int | AssemblyCondition) -> float:
        """Weight of a condition."""
        return self._weights[self._cond_index(condition)]

    def _cond_index(self, condition: int | AssemblyCondition) -> int:
        if isinstance(condition, AssemblyCondition):
            for i, c in enumerate(self._conditions):
                if c is condition:
                    return i
            raise ValueError(f"{condition!r} was not adopted by this Assembler")
        i = int(condition)
        if not 0 <= i < len(self._conditions):
            raise IndexError(f"Assembler: no assembly condition {i} (have {len(self._conditions)})")
        return i

    def adopt_assembly_error(self, condition: AssemblyCondition) -> int:
        """Add a condition that must be satisfied to tolerance; returns its index."""
        return self._adopt(condition, INF)

    def adopt_assembly_goal(self, condition: AssemblyCondition, weight: float = 1.0) -> int:
        """Add a goal with a weight (0 ignores it, infinity makes it an error)."""
        return self._adopt(condition, self._check_weight(weight))

    def _adopt(self, condition: AssemblyCondition, weight: float) -> int:
        if not isinstance(condition, AssemblyCondition):
            raise TypeError(
                "Assembler: expected an AssemblyCondition (sj.Markers, sj.QValue, ...), "
                f"got {type(condition).__name__}"
            )
        if any(c is condition for c in self._conditions):
            raise ValueError(f"{condition!r} was already adopted by this Assembler")
        i = len(self._conditions)
        condition._bind(self, i)
        self._conditions.append(condition)
        self._weights.append(weight)
        self.uninitialize()
        return i

    def get_num_assembly_conditions(self) -> int:
        """Number of conditions, the System's constraints (index 0) included."""
        return len(self._conditions)

    def get_assembly_condition(self, index: int) -> AssemblyCondition:
        """A condition by index."""
        return self._conditions[self._cond_index(index)]

    # ------------------------------------------------------------------ locks and bounds
    def _body(self, mobod: Any) -> int:

        b = _as_body_index(self._system, mobod, "Assembler")
        if b == 0:
            raise ValueError("Assembler: Ground has no q's to lock or restrict")
        return b

    def _check_qx(self, b: int, qx: int) -> int:
        nq = int(self._model.topology(True).nq_body[b])
        if not 0 <= int(qx) < nq:
            raise ValueError(
                f"Assembler: q index {qx} out of range for body {self._matter._mobods[b].name!r}, whose "
                f"mobilizer has {nq} q's in the Euler-angle State the Assembler uses"
            )
        return int(qx)

    def lock_mobilizer(self, mobod: Any) -> None:
        """Hold all of this mobilizer's q's at their starting values."""
        self._locked_mobods.add(self._body(mobod))
        self.uninitialize()

    def unlock_mobilizer(self, mobod: Any) -> None:
        """Undo ``lock_mobilizer`` (q's locked one by one stay locked)."""
        self._locked_mobods.discard(self._body(mobod))
        self.uninitialize()

    def lock_q(self, mobod: Any, qx: int) -> None:
        """Hold one q (Euler-angle numbering) at its starting value."""
        b = self._body(mobod)
        self._locked_qs.add((b, self._check_qx(b, qx)))
        self.uninitialize()

    def unlock_q(self, mobod: Any, qx: int) -> None:
        """Undo ``lock_q``."""
        b = self._body(mobod)
        self._locked_qs.discard((b, self._check_qx(b, qx)))
        self.uninitialize()

    def restrict_q(self, mobod: Any, qx: int, lower: float, upper: float) -> None:
        """Keep one q within ``[lower, upper]`` (``+-inf`` for one-sided)."""
        b = self._body(mobod)
        lo, hi = float(lower), float(upper)
        if math.isnan(lo) or math.isnan(hi) or lo > hi:
            raise ValueError(f"Assembler.restrict_q: need lower <= upper, got [{lower}, {upper}]")
        self._bounds[(b, self._check_qx(b, qx))] = (lo, hi)

    def unrestrict_q(self, mobod: Any, qx: int) -> None:
        """Remove a restriction."""
        b = self._body(mobod)
        self._bounds.pop((b, self._check_qx(b, qx)), None)

    def prefer_q_range(self, mobod: Any, qx: int, lower: float = -INF, upper: float = INF) -> None:
        """The range ``[lower, upper]`` a q's reported value is put in when a whole-turn
        equivalent of the solution lies there (OpenSim's ``<range>`` of an unclamped
        coordinate): not a bound, the solver does not enforce it. A restricted q uses its
        bounds; ``+-inf`` (the default) removes the preference. See :meth:`track` for
        which of a solution's equivalent values is reported."""
        b = self._body(mobod)
        lo, hi = float(lower), float(upper)
        if not lo <= hi:
            raise ValueError(f"Assembler.prefer_q_range: lower {lo} > upper {hi}")
        key = (b, self._check_qx(b, qx))
        if math.isinf(lo) and math.isinf(hi):
            self._preferred.pop(key, None)
        else:
            self._preferred[key] = (lo, hi)

    # ------------------------------------------------------------------ internal state
    def set_internal_state(self, state: State) -> None:
        """Copy a State (converted to Euler angles) into the Assembler."""
        self._system.model_for(state)
        self._internal = self._canonical(self._matter.set_use_euler_angles(state, True))

    def _canonical(self, state: State) -> State:
        """The State realized to exactly Time (one compiled solve for any input stage)."""
        st = state.with_q(state.q) if state.stage > Stage.TIME else state
        return realize(self._model, st, Stage.TIME)

    def get_internal_state(self) -> State:
        """The internal (Euler-angle) State."""
        return self._internal

    def update_from_internal_state(self, state: State) -> State:
        """``state`` with its q's (and time) replaced by the internal State's, converted to
        quaternions if ``state`` uses them."""
        self._system.model_for(state)
        q = self._to_mode(self._internal.q, state.use_euler_angles)
        return state.with_time(self._internal.t).with_q(q)

    def _to_mode(self, q_euler: jax.Array, euler: bool) -> jax.Array:
        if euler:
            return q_euler
        return self._matter.set_use_euler_angles(self._internal.with_q(q_euler), False).q

    def add_reporter(self, reporter: Callable[[State], Any]) -> None:
        """Call ``reporter(internal_state)`` after every unbatched assemble/track."""
        self._reporters.append(reporter)

    # ------------------------------------------------------------------ initialization
    def uninitialize(self) -> None:
        """Forget the compiled problem (done automatically on every change)."""
        self._plan = None
        self._fns = {}
        self._trace_fps = {}
        self._branch_memo = None

    def is_initialized(self) -> bool:
        """Whether the problem is compiled for the current settings."""
        return self._plan is not None

    def initialize(self, state: State | None = None) -> None:
        """Build the problem (free q's, bounds, conditions); optional new internal State."""
        self._refresh_topology()
        if state is not None:
            self.set_internal_state(state)
        if self._plan is not None:
            return
        topo = self._model.topology(True)
        locked = np.zeros(topo.nq, bool)
        for b in self._locked_mobods:
            locked[int(topo.q_start[b]) : int(topo.q_start[b]) + int(topo.nq_body[b])] = True
        for b, qx in self._locked_qs:
            locked[int(topo.q_start[b]) + qx] = True
        free = np.flatnonzero(~locked)
        mp, _, _ = self._model.constraint_counts(True)
        goals: list[tuple[int, Any]] = []
        errors: list[tuple[int, Any]] = []
        for i, (c, w) in enumerate(zip(self._conditions, self._weights)):
            if w == 0 or (i == 0 and mp == 0):
                continue
            if isinstance(c, _Observed) and c._n() == 0:
                raise ValueError(f"Assembler: condition {c.name!r} has no {c._item}s; add some or remove it")
            (errors if w == INF else goals).append((i, c))
        plan = _Plan(
            model=self._model,
            free=free,
            goals=tuple(goals),
            errors=tuple(errors),
            numerical_jacobian=self._numerical_jacobian or self._numerical_gradient,
        )
        _size_plan(plan, self._internal, self.get_parameters())
        plan.branches = br.branch_plan(self._model, free, [c for _, c in (*goals, *errors)])
        self._plan = plan
        self._num_initializations += 1
        self._fns = {}
        self._trace_fps = {}
        self._branch_memo = None

    def _refresh_topology(self) -> None:
        """Follow a System changed (and re-realized) after this Assembler was made."""
        if self._system._model is not None and self._system._model is self._model:
            return
        state = self._system.get_default_state()
        self._model = self._system.model_for(state)
        self._internal = self._canonical(self._matter.set_use_euler_angles(state, True))
        self.uninitialize()
        for i, c in enumerate(self._conditions):
            c._bind(self, i)

    def _require_plan(self) -> _Plan:
        self.initialize()
        assert self._plan is not None
        return self._plan

    # ------------------------------------------------------------------ free q bookkeeping
    def get_num_free_qs(self) -> int:
        """Number of q's the Assembler may change."""
        return len(self._require_plan().free)

    def get_q_index_of_free_q(self, free_q: int) -> int:
        """Euler-mode q index of a free q."""
        return int(self._require_plan().free[free_q])

    def get_free_q_index_of_q(self, q_index: int) -> int | None:
        """Free-q index of an (Euler-mode) q, None if it is locked."""
        hit = np.flatnonzero(self._require_plan().free == int(q_index))
        return int(hit[0]) if len(hit) else None

    def get_free_q_bounds(self, free_q: int) -> tuple[float, float]:
        """``(lower, upper)`` of a free q (``+-inf`` when unrestricted)."""
        lo, hi = self._free_bounds()
        return float(lo[free_q]), float(hi[free_q])

    def _free_bounds(self, which: str = "bounds") -> tuple[np.ndarray, np.ndarray]:
        """``(lower, upper)`` of every free q: its bounds, or (``which="preferred"``) its
        preferred range (:meth:`prefer_q_range`)."""
        plan = self._require_plan()
        topo = self._model.topology(True)
        lo = np.full(len(plan.free), -np.inf)
        hi = np.full(len(plan.free), np.inf)
        pos = {int(q): k for k, q in enumerate(plan.free)}
        for (b, qx), (lo_b, hi_b) in (self._bounds if which == "bounds" else self._preferred).items():
            k = pos.get(int(topo.q_start[b]) + qx)
            if k is not None:
                lo[k], hi[k] = lo_b, hi_b
        return lo, hi

    def _settings(self, barrier: float | None = None) -> dict[str, Any]:
        """The solver's runtime settings (data, not compile-time constants)."""
        lo, hi = self._free_bounds()
        rlo, rhi = self._free_bounds("preferred")
        acc = self.get_accuracy_in_use()
        return {
            "lo": lo,
            "hi": hi,
            "range_lo": rlo,
            "range_hi": rhi,
            "tol": np.float64(self.get_error_tolerance_in_use()),
            "acc": np.float64(acc),
            "rms": np.bool_(self._rms),
            "max_iterations": np.int32(self._max_iterations),
            "barrier": np.float64(self._barrier if barrier is None else barrier),
            "warm_barrier": np.float64(min(self._barrier, 1e-2 * acc)),
            "push": np.float64(1e-2),
            "warm_push": np.float64(self._warm_push),
            "retry_push": np.float64(self._retry_push or 0.0),
        }

    def describe_bounds(self, info: AssemblyInfo) -> list[str] | list[list[str]]:
        """Names of the q's ``info`` found on their bounds (``"body q2 at lower 0"``), a
        list per frame when ``info`` is batched."""
        plan = self._require_plan()
        lo, hi = self._free_bounds()
        topo = self._model.topology(True)
        ob = np.asarray(info.on_bounds)

        def one(row: np.ndarray) -> list[str]:
            out = []
            for k in np.flatnonzero(row):
                q = int(plan.free[k])
                # The last body whose q's start at or before q: the one that owns q
                # (bodies without q's share their q_start with the next body).
                b = int(np.searchsorted(topo.q_start, q, side="right") - 1)
                name = self._matter._mobods[b].name
                side, v = ("lower", lo[k]) if row[k] < 0 else ("upper", hi[k])
                out.append(f"{name} q{q - int(topo.q_start[b])} at {side} {v:g}")
            return out

        if ob.ndim == 1:
            return one(ob)
        return [one(r) for r in ob.reshape(-1, ob.shape[-1])]

    # ------------------------------------------------------------------ statistics
    def reset_stats(self) -> None:
        """Zero the counters (not the number of initializations)."""
        self._stats = {"goal": 0, "error": 0, "gradient": 0, "jacobian": 0, "steps": 0}

    def get_num_goal_evals(self) -> int:
        """Goal evaluations since the last reset."""
        return self._stats["goal"]

    def get_num_error_evals(self) -> int:
        """Error-condition evaluations."""
        return self._stats["error"]

    def get_num_goal_gradient_evals(self) -> int:
        """Goal-gradient evaluations."""
        return self._stats["gradient"]

    def get_num_error_jacobian_evals(self) -> int:
        """Error-Jacobian evaluations."""
        return self._stats["jacobian"]

    def get_num_assembly_steps(self) -> int:
        """Solves (assemble/track frames) since the last reset."""
        return self._stats["steps"]

    def get_num_initializations(self) -> int:
        """Times the problem was (re)built."""
        return self._num_initializations

    def _count(self, info: AssemblyInfo) -> None:
        n = int(np.sum(np.asarray(info.num_evaluations)))
        for k in ("goal", "error", "gradient", "jacobian"):
            self._stats[k] += n
        self._stats["steps"] += int(np.size(np.asarray(info.result._value)))  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ data
    def get_parameters(self) -> dict[str, Any]:
        """The numbers the solve depends on, as a pytree: ``{"conditions": [data of each
        condition], "weights": array of condition weights}``. Change, trace or
        differentiate them and pass them to :meth:`solve`/:meth:`track`."""
        w = np.array([0.0 if math.isinf(x) else x for x in self._weights])
        return {"conditions": [c.get_data() for c in self._conditions], "weights": jnp.asarray(w)}

    def _params_with_frames(
        self, params: dict[str, Any], frames: Any
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Per-frame data by ``"<condition index>:<data key>"`` (observations of Markers
        and OrientationSensors, target values of QValue)."""
        if isinstance(frames, dict):
            per = {self._cond_index(k): v for k, v in frames.items()}
        else:
            observed = [
                i for i, c in enumerate(self._conditions) if isinstance(c, _Observed) and self._weights[i] > 0
            ]
            if len(observed) != 1:
                raise ValueError(
                    "Assembler.track: pass frames as {condition: array} when there is not exactly one "
                    f"observed condition (Markers/OrientationSensors); found {len(observed)}"
                )
            per = {observed[0]: frames}
        out = {}
        lengths = set()
        for i, fr in per.items():
            c = self._conditions[i]
            if c._frame_key is None:
                raise ValueError(
                    f"Assembler.track: condition {c.name!r} takes no per-frame data (Markers, "
                    "OrientationSensors and QValue do)"
                )
            out[f"{i}:{c._frame_key}"] = c._check_frames(fr)
            lengths.add(int(np.shape(fr)[0]))
        if len(lengths) > 1:
            raise ValueError(
                f"Assembler.track: the per-frame data have different numbers of frames {sorted(lengths)}"
            )
        return params, out

    # ------------------------------------------------------------------ solving
    def _get_fn(
        self, kind: str, segments: int = 1, length: int = 1, progress: bool = False, top: bool = False
    ):
        """The jitted program of ``kind``; ``top``: its variant for top-level calls, compiled
        with the solvers' XLA options (``_compiler_options``; a ``jit`` given compiler
        options cannot be nested in another, so nested and exported calls use the plain one)."""
        plan = self._require_plan()
        retry = self._retry_push is not None
        key = (kind, segments, length, progress, retry, top)
        if key not in self._fns:
            opts = _compiler_options(kind)
            if top:
                inner = self._get_fn(kind, segments, length, progress)
                self._fns[key] = inner if opts is None else jax.jit(inner, compiler_options=opts)
            elif kind == "single":
                self._fns[key] = jax.jit(_make_solver(plan, self._matter))
            elif kind == "realize":
                self._fns[key] = jax.jit(partial(_realize_frames, model=plan.model))
            elif kind == "branches":
                self._fns[key] = jax.jit(partial(_branch_data, plan=plan, matter=self._matter))
            else:
                solve = _make_solver(plan, self._matter)
                self._fns[key] = jax.jit(
                    partial(_track, solve=solve, S=segments, Ls=length, progress=progress, retry=retry)
                )
        return self._fns[key]

    def _program(
        self, kind: str, args: tuple[Any, ...], segments: int = 1, length: int = 1
    ) -> dict[str, Any]:
        """``_traces.call``'s arguments for ``kind`` on ``args``: the plain program, its key,
        its XLA options and what runs where the program is not kept (the top-level variant
        unless the arguments are traced)."""
        fn = self._get_fn(kind, segments, length)
        traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(args))
        return dict(
            fn=fn,
            static_key=self._trace_fingerprint(kind, segments, length),
            compiler_options=_compiler_options(kind),
            fallback=fn if traced else self._get_fn(kind, segments, length, top=True),
        )

    def _call(
        self, kind: str, args: tuple[Any, ...], owner: State, segments: int = 1, length: int = 1
    ) -> Any:
        """The compiled solve (``kind`` "single" or "batched", no progress bar) on ``args``;
        at the top level its trace is kept on disk for the next process (``_traces``). The
        settings (last of ``args``) get the moves of ``_branches`` allowed in the State's
        model (a program of its own, compiled on a second core while the solver is traced)."""
        args = self._with_branches(args, owner, lambda spec: self._program(kind, spec, segments, length))
        return _traces.call(args=args, owner=owner, **self._program(kind, args, segments, length))

    def _branch_spec(self, state: State) -> dict[str, Any]:
        """The shapes of ``_branches.branch_data``'s answer for ``state``."""
        bp = self._require_plan().branches
        assert bp is not None
        n, nt, dt = bp.n, len(bp.triples), state.q.dtype
        S = jax.ShapeDtypeStruct
        return dict(period=S((n,), dt), tri_ok=S((nt,), jnp.bool_), tri_mid=S((nt,), dt))

    def _with_branches(
        self, args: tuple[Any, ...], owner: State, solver: Callable[[tuple[Any, ...]], dict[str, Any]]
    ) -> tuple[Any, ...]:
        """``args`` (State first, settings last) with ``settings["branches"]`` computed from
        the State. Its program is prepared first and compiles while ``solver(args with its
        shapes)``'s program is traced (where ``_traces`` keeps programs)."""
        state, settings = args[0], args[-1]
        if "branches" in settings:
            return args
        leaves = jax.tree.leaves(state.instance)
        memo = self._branch_memo
        if memo is not None and len(memo[0]) == len(leaves) and all(a is b for a, b in zip(memo[0], leaves)):
            return (*args[:-1], dict(settings, branches=memo[1]))  # the same model numbers
        program = self._program("branches", (state,))
        _traces.compile_ahead(args=(state,), **program)
        spec = (*args[:-1], dict(settings, branches=self._branch_spec(state)))
        _traces.compile_ahead(args=spec, **solver(spec))
        data = _traces.call(args=(state,), owner=owner, **program)
        if not any(isinstance(x, jax.core.Tracer) for x in leaves):
            self._branch_memo = (leaves, data)
        return (*args[:-1], dict(settings, branches=data))

    def _track_call(self, args: tuple[Any, ...], owner: State, T: int, S: int, Ls: int) -> Any:
        """The batched solve and the realization of its States: two programs (``_traces``;
        a first call's compilation is most of what a user waits for). The small one is
        traced first and compiles on a second core while this thread traces the solver,
        which then compiles alone (XLA:CPU's code generation uses every core)."""
        state = args[0]
        q_spec = jax.ShapeDtypeStruct((T, *state.q.shape), state.q.dtype)
        _traces.compile_ahead(args=(state, q_spec), **self._program("realize", (state, q_spec)))
        args = self._with_branches(args, owner, lambda spec: self._program("batched", spec, S, Ls))
        solver = self._program("batched", args, S, Ls)
        qs, infos = _traces.call(args=args, owner=owner, **solver)
        return _traces.call(args=(state, qs), owner=owner, **self._program("realize", (state, qs))), infos

    def _trace_fingerprint(self, kind: str, segments: int, length: int) -> str | None:
        """The fingerprint of :meth:`_trace_key`, kept with the compiled functions (a
        per-frame ``track(frame_time)`` loop does not hash the model on every call)."""
        key = (kind, segments, length, self._retry_push is not None)  # as _get_fn's key
        if key not in self._trace_fps:
            static = self._trace_key(kind, segments, length)
            self._trace_fps[key] = None if static is None else _traces.fingerprint(static)
        return self._trace_fps[key]

    def _trace_key(self, kind: str, segments: int, length: int) -> Any:
        """What shapes the traced solver besides its arguments (None: not known)."""
        plan = self._require_plan()
        if kind == "realize":
            return ("Assembler", kind, plan.model.structure_key)
        conds = tuple((i, c._trace_key()) for i, c in (*plan.goals, *plan.errors))
        if any(k is None for _, k in conds):
            return None
        return (
            "Assembler",
            kind,
            segments,
            length,
            self._retry_push is not None,
            plan.model.structure_key,
            plan.free,
            plan.numerical_jacobian,
            (plan.nr, plan.ne, plan.has_scalar, plan.error_sizes),
            tuple(i for i, _ in plan.goals),
            tuple(i for i, _ in plan.errors),
            conds,
        )

    def solve(self, state: State, params: dict[str, Any] | None = None) -> tuple[State, AssemblyInfo]:
        """Pure solve: ``(state with assembled q's, realized to Position; info)``.

        jit-, vmap- and grad-friendly; never raises on failure (see ``info.result``).
        Gradients flow to ``params`` (see :meth:`get_parameters`) and to the State's
        Instance variables by implicit differentiation; locked q's are taken from
        ``state``.
        """
        self._system.model_for(state)
        p = self.get_parameters() if params is None else params
        return self._call("single", (self._canonical(state), p, self._settings()), state)

    @overload
    def assemble(self, state: State) -> tuple[State, AssemblyInfo]: ...

    @overload
    def assemble(self, state: None = None) -> AssemblyInfo: ...

    def assemble(self, state: State | None = None) -> tuple[State, AssemblyInfo] | AssemblyInfo:
        """Assemble from ``state`` (or the internal State): returns ``(state, info)``, or
        just ``info`` when called without a State (the internal State is updated either
        way). Raises ``AssemblyFailed`` if the error tolerance cannot be met."""
        given = state is not None
        if state is not None:
            self.set_internal_state(state)
        base = state if state is not None else self._internal
        out, info = self.solve(base)
        self._after_single(out, info, "assemble")
        return (out, info) if given else info

    def track(
        self,
        state: State | float | None = None,
        frames: Any = None,
        params: dict[str, Any] | None = None,
        *,
        progress: bool | None = None,
    ):
        """Inverse kinematics.

        * ``track(state, frames)``: every frame solved in one compiled call. ``frames`` is
          ``(T, n_obs, 3)`` for the Markers (or ``(T, n, 3, 3)`` for OrientationSensors),
          or ``{condition: frames}``. The trial is split into segments solved side by side
          (``set_track_batch_size``); each segment's first frame starts from ``state``
          (no need to assemble it first), every later frame from its predecessor's
          solution, and segments are re-solved from their neighbour where that is better,
          so consecutive frames stay in the same basin. Returns ``(states, infos)``
          batched along T; failed frames are reported in ``infos.result``, not raised.
          ``progress``: a ``tqdm`` bar on stderr (compiling, frames solved, seams);
          default on when stderr is a terminal and the call is not being traced
          (``SIMJAX_PROGRESS=0``/``1`` overrides the default).
        * ``track(frame_time=-1)``: Simbody's sequential use; solve the current
          observations warm-started from the internal State, set its time if >= 0, and
          return the info (raises ``AssemblyFailed`` on failure).

        The angles are usable as they are (a ``.mot`` to filter, inverse dynamics): of the
        values that give a solution's pose (an angle plus whole turns; the other Euler
        branch ``(a + pi, pi - b, c + pi)`` of a three-rotation joint) each frame reports
        the one in the q's range (its bounds, else :meth:`prefer_q_range`) where one is,
        else the one nearest the frame before: the first frame, and every single solve
        (``assemble``, ``solve``), nearest its start, as OpenSim's IK. Only moves checked
        numerically to leave every mobilizer transform, constraint error and condition
        unchanged are made: an angle coupled through a spline or a coupler, or driving a
        translation, is reported as solved (``simjax.studies._branches``).
        """
        if isinstance(state, State):
            if frames is None:
                out, info = self.assemble(state)
                return out, info
            self._system.model_for(state)
            p = self.get_parameters() if params is None else params
            p, per = self._params_with_frames(p, frames)
            T = int(next(iter(per.values())).shape[0])
            if T == 0:
                raise ValueError("Assembler.track: no frames to track")
            S = self._batch_size or max(1, math.isqrt(T - 1) + 1)
            S = min(S, T)
            Ls = -(-T // S)
            S = -(-T // Ls)
            show = _want_progress(progress, state, p, per)
            args = (self._canonical(state), p, per, self._settings())
            if not show:
                states, infos = self._track_call(args, state, T, S, Ls)
                if not infos.result.is_traced():  # type: ignore[attr-defined]
                    self._count(infos)
                return states, infos
            # A program kept on disk has no progress reports (host callbacks cannot be
            # exported): the bar then shows the clock and the end, not each frame.
            kept = _traces.directory() is not None and self._trace_fingerprint("batched", S, Ls) is not None
            with _ProgressBar(T, "IK track") as bar:
                if kept:
                    states, infos = self._track_call(args, state, T, S, Ls)
                else:
                    batched = lambda spec: self._program("batched", spec, S, Ls)  # noqa: E731
                    args = self._with_branches(args, state, batched)
                    qs, infos = self._get_fn("batched", S, Ls, True, top=True)(*args)
                    states = self._get_fn("realize")(args[0], qs)
                self._count(infos)  # waits for the result
                bar.finish(int(np.sum(np.asarray(infos.success))))
            return states, infos
        if frames is not None:
            raise TypeError("Assembler.track(state, frames): the first argument must be a State")
        t = -1.0 if state is None else float(state)
        base = self._internal if t < 0 else self._internal.with_time(t)
        settings = self._settings()
        settings["barrier"] = settings["warm_barrier"]  # warm-started from the last frame
        settings["push"] = np.float64(1e-6)
        p = self.get_parameters() if params is None else params
        out, info = self._call("single", (self._canonical(base), p, settings), base)
        self._after_single(out, info, "track")
        return info

    def _after_single(self, out: State, info: AssemblyInfo, what: str) -> None:
        if info.result.is_traced():  # type: ignore[attr-defined]
            return
        self._count(info)
        self._internal = self._canonical(
            out if out.use_euler_angles else self._matter.set_use_euler_angles(out, True)
        )
        for r in self._reporters:
            r(self._internal)
        if not bool(info.feasible):
            raise AssemblyFailed(self._failure_message(info, what))

    def _failure_message(self, info: AssemblyInfo, what: str) -> str:
        plan = self._require_plan()
        head = f"Assembler.{what}() failed: "
        if bool(info.result == RESULTS.assembly_no_data):
            names = [c.name for _, c in plan.goals if isinstance(c, _Observed)]
            return (
                head + f"goal {', '.join(map(repr, names))} has nothing to fit: every observation is missing "
                "(NaN) or has zero weight in this frame. Provide observations or skip the frame"
            )
        if bool(info.result == RESULTS.assembly_nonfinite):
            return (
                head + "a non-finite value (NaN/inf) appeared in the solve; check the initial q's, the "
                "observations (use NaN only for whole missing markers) and the model parameters"
            )
        errs = np.asarray(info.errors)
        worst = int(np.argmax(np.abs(errs))) if errs.size else 0
        name, k = "?", 0
        for ci, c in plan.errors:
            n = _num_errors(plan, c)
            if k <= worst < k + n:
                enames = c._error_names()
                entry = f" ({enames[worst - k]})" if enames and worst - k < len(enames) else ""
                name = f"{ci} {c.name!r}{entry}"
            k += n
        norm = "RMS" if self._rms else "infinity"
        tol = self.get_error_tolerance_in_use()
        if float(info.error_norm) <= tol:  # infeasible although the error is within tol
            dtype = np.asarray(info.errors).dtype.name
            return head + (
                f"the error tolerance {tol:g} is below what {dtype} resolves for this model (2 eps x "
                "(1 + the largest body distance from Ground)), so the assembly error "
                f"{norm} norm {float(info.error_norm):.3g} cannot show that it is met. Loosen "
                "Assembler.set_error_tolerance(...) (by default accuracy/10: set_accuracy(...)), or "
                "compute in float64 (jax.config.update('jax_enable_x64', True))"
            )
        return (
            head + f"the assembly error {norm} norm {float(info.error_norm):.3g} exceeds the tolerance "
            f"{self.get_error_tolerance_in_use():g}; the worst error is in condition {name}: "
            f"{errs[worst] if errs.size else 0:.3g}. "
            "The error conditions may contradict each other or the locks/bounds, or be unreachable "
            "from this start; make one a goal (finite weight), unlock q's, or start closer"
            + (
                f". The tolerance is also below what {errs.dtype.name} resolves (at least 2 eps = "
                f"{2 * np.finfo(errs.dtype).eps:.2g}): loosen it or compute in float64"
                if errs.size and tol < 2 * np.finfo(errs.dtype).eps
                else ""
            )
            + (
                f". It stopped at the maximum of {self._max_iterations} iterations: raise "
                "Assembler.set_max_iterations(...) if it was still converging"
                if int(info.iterations) >= self._max_iterations
                else ""
            )
        )

    # ------------------------------------------------------------------ current values
    def calc_current_goal(self, state: State | None = None) -> jax.Array:
        """Weighted sum of the goals at ``state`` (default: the internal State)."""
        plan = self._require_plan()
        s = self._internal if state is None else self._matter.set_use_euler_angles(state, True)
        r, e, g, _ = _evaluate(
            plan, s.q[plan.free], realize(self._model, s, Stage.TIME), self.get_parameters()
        )
        return 0.5 * r @ r + g

    def calc_current_error_norm(self, state: State | None = None) -> jax.Array:
        """Norm of the error conditions at ``state`` (default: the internal State)."""
        plan = self._require_plan()
        s = self._internal if state is None else self._matter.set_use_euler_angles(state, True)
        _, e, _, _ = _evaluate(
            plan, s.q[plan.free], realize(self._model, s, Stage.TIME), self.get_parameters()
        )
        return ip.error_norm(e, jnp.asarray(self._rms))


# ----------------------------------------------------------------------------- the problem


def _num_errors(plan: _Plan, cond: AssemblyCondition) -> int:
    for (_, c), n in zip(plan.errors, plan.error_sizes):
        if c is cond:
            return n
    return 0


def _n_pinv(model: Any, state: State) -> jax.Array:
    """The (nu, nq) matrix ``N(q)^+`` with ``u = N^+ qdot`` (block diagonal by mobilizer;
    exact where N is invertible, e.g. Euler angles away from gimbal lock)."""
    topo = model.topology(state.use_euler_angles)
    dt = state.q.dtype
    out = jnp.zeros((topo.nu, topo.nq), dt)

    def one(m, q, par):
        Nq = m.N(q, par)
        if Nq is None:
            return jnp.eye(m.nu, dtype=dt)
        return jnp.linalg.solve(Nq.T @ Nq, Nq.T).astype(dt)

    inputs = lambda g: joint_inputs(state, g, "q", "params")
    rows, cols, vals = [], [], []
    for g, blocks in map_kinds(topo, one, inputs, skip=lambda m: m.nu == 0):  # (k, nu, nq) blocks
        u_idx, q_idx = np.asarray(g.u_idx), np.asarray(g.q_idx)
        rows.append(np.broadcast_to(u_idx[:, :, None], blocks.shape).reshape(-1))
        cols.append(np.broadcast_to(q_idx[:, None, :], blocks.shape).reshape(-1))
        vals.append(blocks.reshape(-1))
    if not vals:
        return out
    # One scatter for every kind's blocks (a scatter per kind compiles to a kernel each).
    return out.at[np.concatenate(rows), np.concatenate(cols)].set(jnp.concatenate(vals))


@eqx.filter_custom_jvp
def _fast_poses(q, R_GB, p_GB, cdof, *, model, state):
    """Identity on the body poses; derivative w.r.t. q by velocity kinematics
    (``dR = [w]x R``, ``dp = v``), much cheaper than forward-mode through the tree pass.
    Only the q-derivative is provided (solver iterations only)."""
    return R_GB, p_GB


@_fast_poses.def_jvp
def _fast_poses_jvp(primals, tangents, *, model, state):
    q, R, p, cdof = primals
    tq = tangents[0]
    if tq is None:
        return (R, p), (jnp.zeros_like(R), jnp.zeros_like(p))
    topo = model.topology(state.use_euler_angles)
    # Body Jacobians once from the primal (body b moves with dof j iff j's body is b or
    # an ancestor of b), then one small matmul per tangent.
    D = topo.dof_ancestor
    Jq = (D[:, :, None] * cdof[None, :, :]).transpose(0, 2, 1) @ _n_pinv(
        model, state.with_q(q)
    )  # (nb, 6, nq)
    V = Jq @ tq
    w, vO = V[:, :3], V[:, 3:]
    dR = jnp.cross(w[:, :, None], R, axis=1)  # [w]x R, column by column
    dp = vO + jnp.cross(w, p)
    # (a float32 State solved in a float64 session: the tangents in the poses' precision)
    return (R, p), (dR.astype(R.dtype), dp.astype(p.dtype))


def _evaluate(plan: _Plan, x: jax.Array, base: State, params: dict[str, Any], fast: bool = False):
    """Residuals r (goal = 1/2 |r|^2 + g), errors e, scalar goals g, data flag ok.

    ``fast``: body poses differentiate w.r.t. x only, by velocity kinematics (the solver's
    Jacobians); otherwise plain autodiff (implicit differentiation, parameter gradients).
    """
    q = base.q.at[plan.free].set(x.astype(base.q.dtype))
    if not fast:
        s = realize(plan.model, base.with_q(q), Stage.POSITION)
    else:
        # The tree pass without tangents (its forward derivative, differentiated again for
        # every column of the Jacobian, is what tracing spent most on); the poses' derivatives
        # come from velocity kinematics, the constraint errors' from those poses.
        sg = jax.lax.stop_gradient
        s = realize(plan.model, base.with_q(sg(q)), Stage.POSITION)
        pc = s.position_cache
        R, p = _fast_poses(q, pc.R_GB, pc.p_GB, pc.cdof, model=plan.model, state=sg(base))
        s = eqx.tree_at(lambda st: (st.q, st.cache.position.R_GB, st.cache.position.p_GB), s, (q, R, p))
        mp, _, _ = plan.model.constraint_counts(s.use_euler_angles)
        if mp:  # (the rest of qerr, quaternion norms, is empty: the solver uses Euler angles)
            qerr = pc.qerr.at[:mp].set(cn.position_errors(plan.model, s))
            s = eqx.tree_at(lambda st: st.cache.position.qerr, s, qerr)
    dt = s.position_cache.p_GB.dtype
    rs, es = [jnp.zeros(0, dt)], [jnp.zeros(0, dt)]
    g = jnp.zeros((), dt)
    ok = jnp.asarray(True)
    w_all = params["weights"]
    for i, c in plan.goals:
        r, gs, okc = c._goal_terms(s, params["conditions"][i])
        w = jnp.asarray(w_all[i], dt)
        if r is not None:
            rs.append(jnp.sqrt(w) * jnp.asarray(r, dt).reshape(-1))
        if gs is not None:
            g = g + w * gs
        ok = ok & okc
    for i, c in plan.errors:
        es.append(jnp.asarray(c._errors(s, params["conditions"][i]), dt).reshape(-1))
    return jnp.concatenate(rs), jnp.concatenate(es), g, ok


def _size_plan(plan: _Plan, internal: State, params: dict[str, Any]) -> None:
    """Sizes of the residuals and errors: known to the built-in conditions, otherwise found
    by one abstract evaluation (a trace of the kinematics)."""
    goal_sizes = [c._sizes(plan.model) for _, c in plan.goals]
    error_sizes = [c._sizes(plan.model) for _, c in plan.errors]
    known = [z for z in goal_sizes + error_sizes if z is not None]
    if len(known) == len(plan.goals) + len(plan.errors):
        plan.nr = sum(int(z[0]) for z in known[: len(plan.goals)])
        plan.has_scalar = False
        plan.error_sizes = tuple(int(z[1]) for z in known[len(plan.goals) :])
        plan.ne = sum(plan.error_sizes)
        return
    base = realize(plan.model, internal, Stage.TIME)

    def sizes(b, p):
        s = realize(plan.model, b, Stage.POSITION)
        goals = [c._goal_terms(s, p["conditions"][i]) for i, c in plan.goals]
        errors = [c._errors(s, p["conditions"][i]) for i, c in plan.errors]
        return goals, errors

    goals, errors = jax.eval_shape(sizes, base, params)
    plan.nr = sum(int(np.prod(r.shape)) for r, _, _ in goals if r is not None)
    plan.has_scalar = any(g is not None for _, g, _ in goals)
    plan.error_sizes = tuple(int(np.prod(e.shape)) for e in errors)
    plan.ne = sum(plan.error_sizes)


def _linearize(plan: _Plan, x, base, params):
    """Values and derivatives at x: r, e, g, ok, J = dr/dx, A = de/dx, grad g, hess g."""
    nr = plan.nr

    def stacked(xx):
        r, e, g, ok = _evaluate(plan, xx, base, params, fast=True)
        return jnp.concatenate([r, e]), (r, e, g, ok)

    if plan.numerical_jacobian:
        r, e, g, ok = _evaluate(plan, x, base, params)
        h = jnp.sqrt(jnp.finfo(x.dtype).eps) * (1 + jnp.abs(x))

        def col(k):
            dx = jnp.zeros_like(x).at[k].set(h[k])
            return (stacked(x + dx)[0] - stacked(x - dx)[0]) / (2 * h[k])

        JA = jax.vmap(col, out_axes=1)(jnp.arange(x.shape[0]))
    else:
        JA, (r, e, g, ok) = jax.jacfwd(stacked, has_aux=True)(x)
    J, A = JA[:nr], JA[nr:]
    if plan.has_scalar:

        def gfun(xx):
            return _evaluate(plan, xx, base, params)[2]

        gg = jax.grad(gfun)(x)
        # Exact Hessian of the scalar goals, its negative curvature clipped: the step
        # model stays convex so every step is a descent direction.
        gH = jax.hessian(gfun)(x)
        ev, V = jnp.linalg.eigh(0.5 * (gH + gH.T))
        gH = (V * jnp.maximum(ev, 0.0)[None, :]) @ V.T
    else:
        gg = jnp.zeros_like(x)
        gH = jnp.zeros((x.shape[0], x.shape[0]), x.dtype)
    return ip.Linearization(r=r, e=e, g=g, ok=ok, J=J, A=A, gg=gg, gH=gH)


def _compiler_options(kind: str) -> dict[str, Any] | None:
    """XLA options of the Assembler's programs (``simjax._config``): the solvers'
    (``single``, ``batched``) run without loop-invariant code motion; the realization of
    ``track``'s States, brief, without LLVM's optimisations."""
    light = kind in ("realize", "branches")
    opts = _config.light_compiler_options() if light else _config.solver_compiler_options()
    return opts or None


class _Setup(eqx.Module):
    """One solve's data besides the interior-point problem: the State (as given and in
    Euler form), the State realized to Time, the parameters, the starting free q's and what
    ``_branches`` allows."""

    problem: ip.Problem
    state: State
    internal: State
    base: State
    params: dict[str, Any]
    xq: jax.Array
    branches: dict[str, jax.Array]
    ranges: tuple[jax.Array, jax.Array]


def _euler(matter: Any, state: State) -> State:
    return matter.set_use_euler_angles(state, True) if not state.use_euler_angles else state


def _setup(
    plan: _Plan,
    matter: Any,
    bp: br.BranchPlan,
    state: State,
    params: dict[str, Any],
    settings: dict[str, Any],
) -> _Setup:
    """Everything one solve needs besides its loop (arrays and States, no functions)."""
    internal = _euler(matter, state)
    base = realize(plan.model, internal, Stage.TIME)
    dt = base.q.dtype
    xq = base.q[plan.free]
    problem = ip.make_problem(
        xq,
        settings["lo"],
        settings["hi"],
        settings["tol"],
        settings["acc"],
        settings["rms"],
        settings["barrier"],
        settings["max_iterations"],
        settings["push"],
    )
    inf = jnp.full(len(plan.free), jnp.inf, dt)
    rlo = jnp.asarray(settings.get("range_lo", -inf), dt)
    rhi = jnp.asarray(settings.get("range_hi", inf), dt)
    if "branches" in settings:
        branches = settings["branches"]
    else:
        branches = br.branch_data(bp, plan.model, internal)
    return _Setup(
        problem=problem,
        state=state,
        internal=internal,
        base=base,
        params=params,
        xq=xq,
        branches=branches,
        ranges=br.ranges(problem.lo, problem.hi, rlo, rhi),
    )


def _linearization(plan: _Plan, k: _Setup, x: jax.Array) -> ip.Linearization:
    return _linearize(plan, x, k.base, k.params)


def _init(plan: _Plan, k: _Setup) -> ip.Carry:
    return ip.init(k.problem, plan.nr, plan.ne)


def _step(plan: _Plan, k: _Setup, c: ip.Carry) -> ip.Carry:
    return ip.step(partial(_linearization, plan, k), k.problem, c)


def _active(k: _Setup, c: ip.Carry) -> jax.Array:
    return ~ip.terminate(k.problem, c)


def _assembly_result(sol: ip.Solution, finite, infeasible) -> RESULTS:
    """The ``RESULTS`` item of a finished solve (the first that applies): non-finite, no
    data, infeasible, converged (on bounds or not), stalled, out of iterations."""
    R = RESULTS
    on_bounds = jnp.any(sol.on_lo | sol.on_hi)
    # (mypy types eqx.Enumeration items as str: a metaclass conflict in equinox's stub)
    ok: Any = R.where(on_bounds, R.assembly_on_bounds, R.successful)  # type: ignore[arg-type]
    not_conv: Any = R.where(sol.stalled, R.assembly_stalled, R.assembly_max_iterations)  # type: ignore[arg-type]
    out: Any = R.where(sol.converged, ok, not_conv)
    out = R.where(infeasible, R.assembly_infeasible, out)  # type: ignore[arg-type]
    out = R.where(~sol.lin.ok, R.assembly_no_data, out)  # type: ignore[arg-type]
    return R.where(~finite, R.assembly_nonfinite, out)  # type: ignore[arg-type]


def _finish(plan: _Plan, matter: Any, bp: br.BranchPlan, k: _Setup, sol: ip.Solution):
    """The solution's q (in the State's form) and its ``AssemblyInfo``: the interior-point
    solution moved onto its active bounds and to the equivalent angles ``_branches``
    picks, with the implicit-function derivative."""
    p, base, n = k.problem, k.base, len(plan.free)
    dt = base.q.dtype
    delta = ip.kkt_delta(dt)
    xs, Lf, Sf, on_lo, on_hi = sol.x, sol.lin, sol.step, sol.on_lo, sol.on_hi
    # Active bounds exactly on the bound (this lowers the goal: the gradient points into
    # the bound there); of the solution's equivalents (whole turns, Euler branches), the one
    # in range, else nearest the start (_branches); the pose, goal and errors are the same.
    x_star = jnp.where(on_lo, p.lo, jnp.where(on_hi, p.hi, xs))
    r_lo, r_hi = k.ranges
    x_star = br.nearest_branch(x_star, k.xq, k.branches, r_lo, r_hi, on_lo | on_hi, bp.triples)
    x_star = x_star.astype(dt)
    mf = jnp.where(on_lo | on_hi, 0.0, 1.0).astype(dt)
    goal = Lf.goal()
    err = Lf.error_norm(p.rms)
    lam = _error_multipliers(plan, Lf.A, Sf.grad, mf, delta)
    x_out = _implicit(x_star, lam, mf, base, k.params, plan=plan, delta=delta)[0] if n else x_star
    # The goal at the solution, differentiable w.r.t. params and model parameters
    # (through x_out and directly): the loss of bilevel fits such as model scaling.
    goal_out = _goal_at(goal, x_out, base, k.params, plan=plan)
    finite = jnp.isfinite(goal) & jnp.isfinite(err) & jnp.all(jnp.isfinite(xs))
    # A tolerance below what the dtype resolves here is not met, whatever error is
    # computed (Simbody reports an accuracy it cannot reach as a failure).
    unresolved = jnp.asarray(False)
    if plan.ne:
        q_sg = base.q.at[plan.free].set(x_star.astype(base.q.dtype))
        unresolved = p.tol < pj.resolvable_tolerance(realize(plan.model, base.with_q(q_sg), Stage.POSITION))
    q_e = base.q.at[plan.free].set(x_out.astype(base.q.dtype))
    if k.state.use_euler_angles:
        q_user = q_e
    else:
        q_user = matter.set_use_euler_angles(k.internal.with_q(q_e), False).q
    info = AssemblyInfo(
        goal=goal_out,
        error_norm=err,
        errors=Lf.e,
        iterations=sol.iterations.astype(jnp.int32),
        num_evaluations=sol.evaluations.astype(jnp.int32),
        result=_assembly_result(sol, finite, (err > p.tol) | unresolved),
        on_bounds=(jnp.where(on_hi, 1, 0) - jnp.where(on_lo, 1, 0)).astype(jnp.int8),
    )
    return q_user, info


def _error_multipliers(plan: _Plan, A: jax.Array, grad: jax.Array, mf: jax.Array, delta: float) -> jax.Array:
    """Least-squares multipliers of the error conditions at the solution (``A^T lam =
    -grad`` on the free q's; for implicit differentiation)."""
    n, dt = grad.shape[0], grad.dtype
    if not (plan.ne and n):
        return jnp.zeros(plan.ne, dt)
    Am = A * mf[None, :]
    Sm = Am @ Am.T
    Sm = Sm + delta * jnp.maximum(jnp.max(jnp.abs(jnp.diag(Sm))), 1.0) * jnp.eye(Sm.shape[0], dtype=dt)
    return -jax.scipy.linalg.cho_solve((jnp.linalg.cholesky(Sm), True), Am @ (grad * mf))


class _Solver:
    """The pure solves of one plan (jit, vmap and grad).

    ``solver(state, params, settings) -> (state, info)``; ``solve_q`` returns the solution's
    q (in the state's form) instead of the realized State, for callers that realize later
    or not at all, and ``solve_q_lanes`` is ``vmap(solve_q)`` with the loop over lanes
    written out (``track``'s rounds)."""

    def __init__(self, plan: _Plan, matter: Any):
        self.plan = plan
        self.matter = matter
        self.branch_plan = (
            plan.branches if plan.branches is not None else br.branch_plan(plan.model, plan.free, [])
        )

    def branches(self, state: State) -> dict[str, jax.Array]:
        """The whole turns and Euler branches allowed in ``state``'s model (``_branches``)."""
        return br.branch_data(self.branch_plan, self.plan.model, _euler(self.matter, state))

    def _setup(self, state: State, params: dict[str, Any], settings: dict[str, Any]) -> _Setup:
        return _setup(self.plan, self.matter, self.branch_plan, state, params, settings)

    def _finish(self, k: _Setup, sol: ip.Solution):
        return _finish(self.plan, self.matter, self.branch_plan, k, sol)

    def _finish_carry(self, k: _Setup, c: ip.Carry):
        return self._finish(k, ip.finish(k.problem, c))

    def solve_q(self, state: State, params: dict[str, Any], settings: dict[str, Any]):
        k, plan = self._setup(state, params, settings), self.plan
        return self._finish(k, ip.solve(partial(_linearization, plan, k), k.problem, plan.nr, plan.ne))

    def solve_q_lanes(self, make: Callable[..., Any], *lanes: Any):
        """``solve_q`` of every lane (the leading axis of ``lanes``; ``make(*lane)`` gives
        its ``(state, params, settings)``) with one loop over all of them, written out: what
        ``vmap(solve_q)`` computes (the loop runs until every lane is done; a lane that is
        done keeps its values), traced once instead of traced and then re-traced by JAX's
        batching rule for ``while`` loops (~40% of tracing a full-body ``track``)."""
        plan = self.plan
        ks = jax.vmap(lambda *a: self._setup(*make(*a)))(*lanes)
        carry0 = jax.vmap(partial(_init, plan))(ks)
        active = partial(jax.vmap(_active), ks)
        cf = jax.lax.while_loop(lambda c: jnp.any(active(c)), partial(_step_lanes, plan, ks, active), carry0)
        return jax.vmap(self._finish_carry)(ks, cf)

    def __call__(self, state: State, params: dict[str, Any], settings: dict[str, Any]):
        q, info = self.solve_q(state, params, settings)
        return realize(self.plan.model, state.with_q(q), Stage.POSITION), info


def _step_lanes(plan: _Plan, ks: _Setup, active: Callable[[ip.Carry], jax.Array], c: ip.Carry) -> ip.Carry:
    """One step of every lane still active (the others keep their carry)."""
    on = active(c)
    new = jax.vmap(partial(_step, plan))(ks, c)

    def pick(a, b):
        return jax.lax.select(jnp.broadcast_to(on.reshape(on.shape + (1,) * (a.ndim - 1)), a.shape), a, b)

    return jax.tree.map(pick, new, c)


def _make_solver(plan: _Plan, matter: Any) -> _Solver:
    """The pure solve ``(state, params, settings) -> (state, info)`` of one plan (``_Solver``)."""
    return _Solver(plan, matter)


@eqx.filter_custom_jvp
def _goal_at(goal, x, base, params, *, plan):
    """The goal's value at the solution (already computed by the solver); its derivative
    is that of ``_evaluate``'s goal at x (traced only when differentiated)."""
    return goal


@_goal_at.def_jvp
def _goal_at_jvp(primals, tangents, *, plan):
    goal, x, base, params = primals
    _, tx, t_base, t_params = tangents
    data = (x, base, params)
    diff, static = eqx.partition(data, eqx.is_inexact_array)
    t_diff = _fill_tangents(diff, eqx.filter((tx, t_base, t_params), eqx.is_array, replace=None))

    def f(d):
        xx, b, p = eqx.combine(d, static)
        r, _, g, _ = _evaluate(plan, xx, b, p)
        return 0.5 * r @ r + g

    _, dg = jax.jvp(f, (diff,), (t_diff,))
    return goal, dg


def _with_observations(params: dict[str, Any], frame: dict[str, Any]) -> dict[str, Any]:
    """``params`` with one frame's data (keys ``"<condition index>:<data key>"``)."""
    p = dict(params)
    conds = list(p["conditions"])
    for k, v in frame.items():
        i, key = k.split(":", 1)
        d = dict(conds[int(i)])
        d[key] = v
        conds[int(i)] = d
    p["conditions"] = conds
    return p


def _info_zeros(solve: Any, state: State) -> AssemblyInfo:
    """Zeros shaped like one solve's ``AssemblyInfo``, without tracing the solve."""
    plan = solve.plan
    dt = state.q.dtype
    n = len(plan.free)
    info = AssemblyInfo(
        goal=jnp.zeros((), dt),
        error_norm=jnp.zeros((), dt),
        errors=jnp.zeros(plan.ne, dt),
        iterations=jnp.zeros((), jnp.int32),
        num_evaluations=jnp.zeros((), jnp.int32),
        result=RESULTS.successful,  # type: ignore[arg-type]
        on_bounds=jnp.zeros(n, jnp.int8),
    )
    return info


def _track_segments(
    solve,
    S: int,
    Ls: int,
    state: State,
    params,
    frames,
    settings,
    progress: bool = False,
    retry: bool = False,
):
    """Every frame of a trial: ``S`` segments of ``Ls`` frames side by side (one vmapped
    solve per round, traced once).

    Round j solves frame j of every segment, frame 0 from ``state`` (the cold barrier),
    later frames from the segment's previous solution (the warm barrier). Then the seams:
    segment k's first frame is solved again from segment k-1's last solution; where that
    is better (lower goal, or feasible where the first was not) segment k is solved again
    from there, and the seams are checked again, until no segment changes. Last, every
    frame's q's are moved to the equivalent (whole turns, Euler branch) in range, else
    nearest the frame before (the first: nearest ``state``), as ``_branches`` says.
    """
    T = next(iter(frames.values())).shape[0]
    pad = S * Ls - T
    if "branches" not in settings:  # the same for every lane and frame
        settings = dict(settings, branches=solve.branches(state))
    bdata = settings["branches"]

    def lanes(a):
        a = jnp.concatenate([a, jnp.repeat(a[-1:], pad, axis=0)]) if pad else a
        return a.reshape((S, Ls) + a.shape[1:])

    fr = jax.tree.map(lanes, frames)
    cold, warm = settings["barrier"], settings["warm_barrier"]

    def lane(q0, frame, barrier, push):
        st = dict(settings, barrier=barrier, push=push)
        return state.with_q(q0), _with_observations(params, frame), st

    run = partial(solve.solve_q_lanes, lane)  # vmap(solve_q), with its loop written out

    def frame_at(j):  # (S,) frame indices -> each lane's frame
        return jax.tree.map(lambda a: jax.vmap(lambda al, jj: al[jj])(a, j), fr)

    q_shape = state.q.shape
    # The rounds keep each frame's q and info; the States are realized once, after the loop
    # (keeping whole realized States in the loop made a kernel per cache array).
    buf0 = jax.tree.map(lambda a: jnp.zeros((S, Ls) + a.shape, a.dtype), (state.q, _info_zeros(solve, state)))

    def good(info):
        return info.feasible

    # Phases: 0 main pass (all lanes, frame j); 1 seam check (lanes k >= 1, frame 0 from
    # lane k-1's last solution); 2 repair pass (lanes that improved, frames 1..Ls-1).
    def body(c):
        phase, j, q, buf, need = c["phase"], c["j"], c["q"], c["buf"], c["need"]
        if progress:
            jax.debug.callback(partial(_progress_report, S=S, T=T), phase, j)
        idx = jnp.arange(S)
        last_q = buf[0][:, Ls - 1]
        prev_last = jnp.concatenate([last_q[:1], last_q[:-1]])
        q0 = jnp.where(phase == 1, prev_last, jnp.where((phase == 0) & (j == 0), state.q[None], q))
        jj = jnp.where(phase == 1, 0, j)
        is_cold = (phase == 0) & (j == 0)
        barrier = jnp.where(is_cold, cold, warm) * jnp.ones(S)
        push = jnp.where(is_cold, settings["push"], settings["warm_push"]) * jnp.ones(S)
        fa = frame_at(jnp.full(S, jj))
        if retry:
            # A second start per frame: bounded q's pushed `retry_push` inside their bounds
            # (a local minimum held by a bound, e.g. a straight elbow on a humerus turned
            # about its axis, is left from there); the better of the two is kept.
            twice = jax.tree.map(lambda a: jnp.concatenate([a, a]), (q0, fa, barrier))
            push2 = jnp.concatenate([push, jnp.full(S, settings["retry_push"], push.dtype)])
            out2, info2 = run(twice[0], twice[1], twice[2], push2)
            first = jax.tree.map(lambda a: a[:S], (out2, info2))
            second = jax.tree.map(lambda a: a[S:], (out2, info2))
            g1, g2 = first[1].goal, second[1].goal
            pick = good(second[1]) & (~good(first[1]) | (g2 < g1 - settings["acc"] * jnp.abs(g1)))
            out, info = jax.tree.map(
                lambda a, b: jnp.where(pick.reshape((S,) + (1,) * (a.ndim - 1)), b, a), first, second
            )
        else:
            out, info = run(q0, fa, barrier, push)
        old_goal = buf[1].goal[:, 0]
        old_ok = good(jax.tree.map(lambda a: a[:, 0], buf[1]))
        margin = settings["acc"] * jnp.abs(old_goal)
        better = good(info) & (~old_ok | (info.goal < old_goal - margin))
        write = jnp.where(phase == 0, True, jnp.where(phase == 1, (idx > 0) & better, need))
        buf = jax.tree.map(
            lambda B, v: B.at[:, jj].set(jnp.where(write.reshape((S,) + (1,) * (v.ndim - 1)), v, B[:, jj])),
            buf,
            (out, info),
        )
        qn = jnp.where((write & good(info))[:, None], out, q)
        need_n = jnp.where(phase == 1, (idx > 0) & better, need)
        # Next round.
        main_done = (phase == 0) & (j == Ls - 1)
        repair_done = (phase == 2) & (j == Ls - 1)
        seam_none = (phase == 1) & ~jnp.any(need_n)
        nphase = jnp.where(
            main_done | repair_done,
            1,
            jnp.where(phase == 1, jnp.where(seam_none, 3, jnp.where(Ls > 1, 2, 1)), phase),
        )
        nj = jnp.where(phase == 1, 1, jnp.where(main_done | repair_done, 0, j + 1))
        passes = c["passes"] + jnp.where(phase == 1, 1, 0)
        nphase = jnp.where((passes > S) & (nphase != 0), 3, nphase)
        if S == 1:
            nphase = jnp.where(main_done, 3, nphase)
        return dict(phase=nphase, j=nj, q=qn, buf=buf, need=need_n, passes=passes)

    c0: dict[str, Any] = dict(
        phase=jnp.asarray(0),
        j=jnp.asarray(0),
        q=jnp.broadcast_to(state.q, (S, *q_shape)),
        buf=buf0,
        need=jnp.zeros(S, bool),
        passes=jnp.asarray(0),
    )
    cf = jax.lax.while_loop(lambda c: c["phase"] != 3, body, c0)
    qs, infos = jax.tree.map(lambda a: a.reshape((S * Ls,) + a.shape[2:])[:T], cf["buf"])
    bp = solve.branch_plan
    if bp.any:
        model = solve.plan.model
        user = bp.user_positions(model.topology(state.use_euler_angles), model.topology(True))
        dt = qs.dtype
        lo, hi = br.ranges(*(jnp.asarray(settings[k], dt) for k in ("lo", "hi", "range_lo", "range_hi")))
        qs = br.continuity(bp, qs, state.q, bdata, lo, hi, infos.on_bounds != 0, user)
    return qs, infos


def _branch_data(state: State, *, plan: _Plan, matter: Any) -> dict[str, jax.Array]:
    """The whole turns and Euler branches allowed in ``state``'s model (``_branches``; a
    program of its own, its answer passed to the solvers in their settings)."""
    assert plan.branches is not None
    internal = matter.set_use_euler_angles(state, True) if not state.use_euler_angles else state
    return br.branch_data(plan.branches, plan.model, internal)


def _realize_frames(state: State, qs: jax.Array, *, model: Any) -> State:
    """``state`` with each of the q's ``qs`` (T, nq), realized to Position: the States a
    ``track`` returns (a program of its own, compiled beside the solver's)."""
    return jax.vmap(lambda q: realize(model, state.with_q(q), Stage.POSITION))(qs)


@eqx.filter_custom_jvp
def _track(
    state: State,
    params,
    frames,
    settings,
    *,
    solve,
    S: int,
    Ls: int,
    progress: bool = False,
    retry: bool = False,
):
    """``_track_segments``: every frame's q and info. Its derivative is that of every
    frame's solve started at its solution (implicit differentiation frame by frame; the
    rounds of warm starts and seam repairs are not differentiated, and a while loop cannot
    be reverse-differentiated)."""
    return _track_segments(solve, S, Ls, state, params, frames, settings, progress, retry)


# The progress bar of the track call running now (host side; see Assembler.track).
_PROGRESS: list[Any] = []


def _progress_report(phase: Any, j: Any, *, S: int, T: int) -> None:
    """Host callback from the track loop: frames done in the main pass, then the seams."""
    if not _PROGRESS:
        return
    bar = _PROGRESS[-1]
    ph, jj = int(np.max(phase)), int(np.max(j))
    if ph == 0:
        done = min(T, (jj + 1) * S)
        bar.set_postfix_str("solving", refresh=False)
        bar.update(max(0, done - bar.n))
    elif ph in (1, 2):
        bar.set_postfix_str("re-solving seams", refresh=False)
        bar.refresh()


@_track.def_jvp
def _track_jvp(primals, tangents, *, solve, S: int, Ls: int, progress: bool = False, retry: bool = False):
    state, params, frames, settings = primals
    out = _track_segments(solve, S, Ls, state, params, frames, settings, False, retry)
    q_star = jax.lax.stop_gradient(out[0])
    warm = dict(settings, barrier=settings["warm_barrier"], push=1e-6)

    def again(st, p, fr):
        def one(q, f):
            return solve.solve_q(st.with_q(q), _with_observations(p, f), warm)

        return jax.vmap(one)(q_star, fr)

    _, t_out = eqx.filter_jvp(again, (state, params, frames), tuple(tangents[:3]))
    return out, t_out


def _fill_tangents(primal: Any, tangent: Any) -> Any:
    return jax.tree.map(
        lambda p, t: None if p is None else (jnp.zeros_like(p) if t is None else t),
        primal,
        tangent,
        is_leaf=lambda z: z is None,
    )


# Newton steps on the KKT conditions before implicit differentiation (see _implicit_jvp).
_POLISH_STEPS = 2


@eqx.filter_custom_jvp
def _implicit(x, lam, mask, base, params, *, plan, delta):
    """Identity on ``(x, lam)``; its derivative w.r.t. base/params is the implicit-function
    one: the KKT conditions ``mask * grad_x L = 0``, ``e = 0`` differentiated at the
    optimum (``L = f + lam . e``; q's on bounds, ``mask = 0``, stay put)."""
    return x, lam


def _lagrangian(plan, x, lam, diff, static):
    """``L = 0.5 |r|^2 + g + lam . e`` at x, the data's arrays ``diff`` apart."""
    b, p = eqx.combine(diff, static)
    r, e, g, _ = _evaluate(plan, x, b, p)
    return 0.5 * r @ r + g + lam @ e


def _kkt_parts(plan, x, lam, mask, diff, static, delta):
    """The masked KKT residual ``(mask * grad_x L, e)`` and its blocks ``(H, A)`` (H with a
    ``delta``-relative ridge, so q's that nothing determines get no derivative)."""
    n = x.shape[0]
    L = lambda xx: _lagrangian(plan, xx, lam, diff, static)  # noqa: E731
    gx = jax.grad(L)(x) * mask
    Hl = jax.hessian(L)(x)

    def cons(xx):
        e = _evaluate(plan, xx, *eqx.combine(diff, static))[1]
        return e, e

    A, e = jax.jacfwd(cons, has_aux=True)(x)
    Hm = Hl * mask[:, None] * mask[None, :] + jnp.diag(1.0 - mask)
    scale = jnp.maximum(jnp.max(jnp.abs(jnp.diag(Hm))), 1.0)
    Hm = Hm + delta * scale * jnp.eye(n, dtype=x.dtype)
    return gx, e, Hm, A * mask[None, :]


def _kkt_polish(plan, x, lam, mask, diff, static, delta):
    """Up to ``_POLISH_STEPS`` Newton steps on the masked KKT conditions from (x, lam), each
    kept only where it lowers the residual, none once the step is below sqrt(eps) (its
    effect on the derivative is then of that relative size too). Returns
    the point and the KKT blocks ``(H, A)`` there (one traced evaluation, in the loop)."""
    n, m = x.shape[0], lam.shape[0]
    tiny = jnp.sqrt(jnp.finfo(x.dtype).eps)

    def body(c):
        gx, e, Hm, Am = _kkt_parts(plan, c["x_try"], c["lam_try"], mask, diff, static, delta)
        res = gx @ gx + e @ e
        ok = jnp.isfinite(res) & ((c["it"] == 0) | (res < c["res"]))
        sx, sl = ip.kkt_solve(Hm, Am, -gx, -e, delta)
        pick = lambda a, b: jnp.where(ok, a, b)  # noqa: E731
        x, lam = pick(c["x_try"], c["x"]), pick(c["lam_try"], c["lam"])
        small = jnp.max(jnp.abs(sx * mask)) <= tiny * (1 + jnp.max(jnp.abs(x)))
        return dict(
            x=x, lam=lam, res=pick(res, c["res"]), H=pick(Hm, c["H"]), A=pick(Am, c["A"]),
            x_try=x + sx * mask, lam_try=lam + sl, it=c["it"] + 1, go=ok & ~small,
        )  # fmt: skip

    def cond(c):
        return (c["it"] == 0) | (c["go"] & (c["it"] <= _POLISH_STEPS))

    dt = x.dtype
    c0 = dict(
        x=x, lam=lam, res=jnp.asarray(jnp.inf, dt), H=jnp.zeros((n, n), dt), A=jnp.zeros((m, n), dt),
        x_try=x, lam_try=lam, it=jnp.asarray(0), go=jnp.asarray(True),
    )  # fmt: skip
    c = jax.lax.while_loop(cond, body, c0)
    return c["x"], c["lam"], c["H"], c["A"]


@eqx.filter_custom_jvp
def _blocks_at(H, A, x, lam, mask, diff, static, *, plan, delta):
    """Identity on the KKT blocks ``(H, A)`` evaluated (by the polish) at ``(x, lam)``; their
    derivative, needed only for second derivatives, is traced only then."""
    return H, A


@_blocks_at.def_jvp
def _blocks_at_jvp(primals, tangents, *, plan, delta):
    _, _, x, lam, mask, diff, static = primals
    _, _, tx, tlam, _, tdiff, _ = tangents
    f = lambda xx, ll, dd: _kkt_parts(plan, xx, ll, mask, dd, static, delta)[2:]  # noqa: E731
    t = _fill_tangents((x, lam, diff), (tx, tlam, tdiff))
    return jax.jvp(f, (x, lam, diff), t)


@_implicit.def_jvp
def _implicit_jvp(primals, tangents, *, plan, delta):
    x, lam, mask, base, params = primals
    _, _, _, t_base, t_params = tangents
    # Higher derivatives: x and lam themselves depend on base/params through this very
    # rule (a no-op at first order; the recursion stops at the order differentiated).
    x_out = x, lam = _implicit(x, lam, mask, base, params, plan=plan, delta=delta)
    diff, static = eqx.partition((base, params), eqx.is_inexact_array)
    t_diff = _fill_tangents(diff, eqx.filter((t_base, t_params), eqx.is_array, replace=None))
    n = x.shape[0]
    # The solve stops at its tolerance, short of the optimum, where the implicit formula
    # holds. Newton steps on the KKT conditions (active set fixed; quadratic convergence)
    # get there first, skipped once the step is below sqrt(eps); each is kept only where it
    # lowers the residual. The polish is not differentiated (x's derivative is this rule's).
    sg = jax.lax.stop_gradient
    x_pol, lam_pol, Hm, Am = _kkt_polish(plan, *sg((x, lam, mask, diff)), static, delta)
    x, lam = x + sg(x_pol - x), lam + sg(lam_pol - lam)
    Hm, Am = _blocks_at(Hm, Am, x, lam, mask, diff, static, plan=plan, delta=delta)

    def F(d):
        gxx = jax.grad(lambda xx: _lagrangian(plan, xx, lam, d, static))(x) * mask
        e = _evaluate(plan, x, *eqx.combine(d, static))[1]
        return jnp.concatenate([gxx, e])

    _, dF = jax.jvp(F, (diff,), (t_diff,))
    dx, dlam = ip.kkt_solve(Hm, Am, -dF[:n], -dF[n:], delta)
    return x_out, (dx * mask, dlam)


def _want_progress(progress: bool | None, *trees: Any) -> bool:
    """Whether ``track`` shows a progress bar: as asked, else when stderr is a terminal,
    the inputs are concrete (not being traced) and ``SIMJAX_PROGRESS`` does not say no."""
    traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(trees))
    if traced:
        return False
    if progress is not None:
        return bool(progress)
    env = os.environ.get("SIMJAX_PROGRESS", "")
    if env in ("0", "1"):
        return env == "1"
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


class _ProgressBar:
    """A tqdm bar over the frames of one ``track`` call; its clock ticks while XLA
    compiles (a helper thread refreshes it) and the loop reports frames as they finish."""

    def __init__(self, total: int, desc: str):
        self.bar = tqdm(total=total, desc=desc, unit="frame", leave=True, file=sys.stderr)
        self.bar.set_postfix_str("compiling / starting", refresh=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            self.bar.refresh()

    def __enter__(self) -> _ProgressBar:
        _PROGRESS.append(self.bar)
        self._thread.start()
        return self

    def finish(self, converged: int) -> None:
        self.bar.update(self.bar.total - self.bar.n)
        self.bar.set_postfix_str(f"{converged}/{self.bar.total} converged", refresh=True)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        _PROGRESS.remove(self.bar)
        self.bar.close()
