"""``RESULTS``: what an assembly, a projection or a simulation achieved.

One JAX-compatible enumeration (``equinox.Enumeration``, as ``diffrax.RESULTS``) shared by
the Assembler (``AssemblyInfo.result``), the System's projections
(``project_q(..., return_result=True)``) and ``simulate`` (``Trajectory.result``). Items
pass through ``jit``, batch under ``vmap`` and compare with ``==``::

    traj = sj.simulate(system, state, 1.0, dt=1e-3, throw=False)
    ok = traj.result == sj.RESULTS.successful  # a bool array
    print(sj.RESULTS[traj.result])  # the message

``sj.RESULTS.where(pred, a, b)`` selects between two items; ``item.error_if(x, pred)``
raises the item's message through ``equinox.error_if`` (also under ``jit``).

Members are only ever appended (their integer values are stable). The Assembler's
``AssemblyInfo.status`` is the same item as ``AssemblyInfo.result`` (it held integer
codes before: ``simjax.studies.assembler.LEGACY_STATUS_CODES`` maps them).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp


class RESULTS(eqx.Enumeration):
    """What an assembly, a projection or a simulation achieved (see the module docstring)."""

    successful = "successful"
    # ------------------------------------------------------------------ assembly
    assembly_max_iterations = (
        "Assembly: the error conditions are satisfied within the error tolerance, but the "
        "goals did not converge to the requested accuracy within the maximum number of "
        "iterations. The result is usable; for a tighter optimum raise "
        "Assembler.set_max_iterations(...) or loosen Assembler.set_accuracy(...)."
    )
    assembly_infeasible = (
        "Assembly failed: the error conditions (by default the System's constraints) could "
        "not be satisfied within the error tolerance. They may contradict each other or the "
        "locks/bounds, or be unreachable from this start: make one a goal (finite weight), "
        "unlock q's or widen bounds, loosen Assembler.set_error_tolerance(...), or start "
        "closer to an assembled configuration; if it ran out of iterations "
        "(info.iterations), raise Assembler.set_max_iterations(...). The tolerance itself "
        "may be below what the dtype resolves for the model (2 eps x (1 + the largest body "
        "distance from Ground): about 1e-6 in float32), whatever error is computed: loosen it "
        "or compute in float64."
    )
    assembly_no_data = (
        "Assembly failed: a goal has nothing to fit: every observation is missing (NaN) or "
        "has zero weight in this frame. Provide observations or skip the frame."
    )
    assembly_nonfinite = (
        "Assembly failed: a non-finite value (NaN/inf) appeared in the solve. Check the "
        "initial q's, the observations (use NaN only for whole missing markers) and the "
        "model parameters."
    )
    assembly_on_bounds = (
        "Assembly converged with q's on their bounds (info.on_bounds marks them, "
        "Assembler.describe_bounds names them): the goal would decrease further if those "
        "bounds were wider. Check that the bounds are meant and that the observations fit "
        "the model there."
    )
    assembly_stalled = (
        "Assembly stalled: the error conditions are satisfied, but no step decreases the "
        "goal although it has not converged to the requested accuracy (round-off, or a "
        "goal that is not smooth there). The result is usable but may not be a minimum; "
        "loosen Assembler.set_accuracy(...) or start elsewhere."
    )
    # ------------------------------------------------------------------ projection
    projection_failed = (
        "Projection failed: the RMS constraint error after projection is above the "
        "tolerance (or non-finite), or the tolerance is below what the dtype resolves for "
        "the model (2 eps x (1 + the largest body distance from Ground): about 1e-6 in "
        "float32). The constraints may be unsatisfiable from this state: start from a "
        "configuration closer to satisfying them (assemble it with sj.Assembler), raise "
        "`iterations`, or loosen `tol` (or compute in float64)."
    )
    # ------------------------------------------------------------------ simulation
    event_occurred = (
        "The simulation was stopped early by a terminating event (see Trajectory.termination_time)."
    )
    max_steps_reached = (
        "Simulation failed: the adaptive integrator used up `max_steps` step attempts in "
        "one output interval before reaching its end. Raise `max_steps`, loosen "
        "`accuracy`/`atol`, add output times (`save_at`), or use an implicit integrator "
        "(integrator='kvaerno5') if the system is stiff."
    )
    step_size_too_small = (
        "Simulation failed: the adaptive integrator's step size shrank to the resolution of "
        "the time variable without an acceptable step. The system may be extremely stiff "
        "or discontinuous there: use an implicit integrator (integrator='kvaerno5'), loosen "
        "`accuracy`/`atol`, or check the model (forces, constraints) at that time."
    )
    simulation_nonfinite = (
        "Simulation failed: the state became non-finite (NaN/inf). Use a smaller step (`dt`) "
        "or an adaptive integrator with tighter `accuracy`, and check the model (stiff or "
        "singular forces, NaN parameters or initial values)."
    )
    unilateral_solve_failed = (
        "Simulation failed: the complementarity solve of the unilateral constraints "
        "(coordinate limits) did not settle on a set of pushing rows within its iteration "
        "limit. Use a smaller step (`dt`), remove limits that contradict each other or the "
        "bilateral constraints, or widen ranges that leave no admissible configuration."
    )
    events_unresolved = (
        "The simulation ran to its end, but within some step a TriggeredEvent's witness "
        "changed faster than the step's samples resolve (or crossed more often than one "
        "step handles), so crossings may have been missed (Trajectory.events_unresolved "
        "marks which). Use a smaller step (`dt`, or `max_step`/`accuracy` for the adaptive "
        "integrators) or more samples per step (`event_samples`)."
    )
    constraints_unsatisfiable = (
        "Simulation failed: after projection onto the constraints their errors stayed above "
        "the tolerance (RMS position or velocity error above 10 x max(`accuracy`, 100 machine "
        "epsilons), velocity errors relative to 1 + max |u|; or a coordinate limit penetrated "
        "past twice its deadband): the constraints contradict each other (a point held at two "
        "places, one speed demanded at two values, a ConstantCoordinate outside a "
        "CoordinateLimit's range) or cannot be met from this state. Remove or disable the "
        "contradicting constraint, assemble the initial State (sj.Assembler), or raise "
        "`projection_iterations` or shorten the step."
    )
    gimbal_lock = (
        "Simulation failed: a mobilizer with Euler angles reached gimbal lock (its middle angle "
        "at +-90 degrees), where a Gimbal's mass matrix or the qdot of a Ball/Free in "
        "Euler-angle mode is singular. Use quaternions (Simbody's advice): a Ball instead of "
        "a Gimbal, and matter.set_use_euler_angles(state, False) (the default) for the others."
    )


def all_finite(tree) -> jax.Array:
    """True when every inexact leaf of ``tree`` is finite (a scalar bool)."""
    leaves = [x for x in jax.tree.leaves(tree) if jnp.issubdtype(jnp.result_type(x), jnp.inexact)]
    out = jnp.asarray(True)
    for x in leaves:
        out = out & jnp.all(jnp.isfinite(x))
    return out


def simulation_ok(result: RESULTS) -> jax.Array:
    """True where a simulation result is not a failure (successful, stopped by a
    terminating event, or with unresolved event witnesses)."""
    with jax.ensure_compile_time_eval():
        ok = (result == RESULTS.successful) | (result == RESULTS.event_occurred)
        return ok | (result == RESULTS.events_unresolved)
