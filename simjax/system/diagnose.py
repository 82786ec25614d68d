"""Where did the NaN come from? A debug mode that names the first stage and element.

``find_nonfinite(system, state)`` realizes a concrete State one stage at a time, in
Simbody's order, and checks each stage's inputs and results element by element: the State's
variables (q, u, z by body; Instance and discrete variables by name), then each body's
position and velocity, each force element's contribution, the mass matrix and the
accelerations, each constraint's errors and multipliers. It returns a sentence naming the
first non-finite value found and what produced it, or ``None`` when everything is finite.

``with sj.debug_nans():`` turns the check on for ``System.realize`` and ``sj.simulate``
outside ``jit``: a non-finite result raises ``sj.NonFiniteError`` with that sentence
(inside ``jit`` nothing is concrete to inspect; run the failing call eagerly in the block).
It costs one eager, element-by-element pass when a result is non-finite, and a finiteness
test of each result otherwise.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from .._stage import Stage
from ..forward.realize import realize
from ..model.state import State

_DEBUG: contextvars.ContextVar[bool] = contextvars.ContextVar("simjax_debug_nans", default=False)


class NonFiniteError(FloatingPointError):
    """A non-finite value (NaN or inf) found in debug mode; the message names the stage and
    element that produced it first."""


@contextlib.contextmanager
def debug_nans(enabled: bool = True) -> Iterator[None]:
    """Within the block, ``System.realize`` and ``sj.simulate`` (outside ``jit``) raise
    ``sj.NonFiniteError`` naming the first stage and element that produced a NaN or inf,
    instead of returning it (``realize``) or reporting ``simulation_nonfinite``
    (``simulate``, which then diagnoses the last good State)."""
    token = _DEBUG.set(bool(enabled))
    try:
        yield
    finally:
        _DEBUG.reset(token)


def debug_nans_enabled() -> bool:
    """Whether ``debug_nans`` mode is on (in this context)."""
    return _DEBUG.get()


def _concrete(tree: Any) -> bool:
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(tree))


def _bad(x: Any) -> np.ndarray | None:
    """Indices of the non-finite entries of ``x`` (None if all finite)."""
    a = np.asarray(x)
    if a.dtype.kind not in "fc":
        return None
    idx = np.argwhere(~np.isfinite(a))
    return idx if idx.size else None


def all_finite(tree: Any) -> bool:
    """Every floating leaf of ``tree`` finite (concrete trees only)."""
    return all(_bad(x) is None for x in jax.tree.leaves(tree))


def _fmt(a: Any) -> str:
    return np.array2string(np.asarray(a), precision=4, max_line_width=200)


def _first_bad_body(bodies: Any, *per_body: Any) -> Any:
    """The first body (base to tip) whose row of any of the ``(nb, ...)`` arrays is not
    finite, or None."""
    for b in bodies:
        if any(_bad(a[b.index]) is not None for a in per_body):
            return b
    return None


def _bad_constraint_rows(matter: Any, rows: Any, stage: str, what: str) -> str | None:
    """The first constraint whose ``rows(constraint)`` are not finite, named."""
    for c in matter._constraints:
        e = rows(c)
        if e.size and _bad(e) is not None:
            return f"{stage} stage: the {what} of {c!r} ({getattr(c, 'name', '')}) are {_fmt(e)}"
    return None


def find_nonfinite(system: Any, state: State, stage: Stage = Stage.ACCELERATION) -> str | None:
    """Name the first non-finite value met realizing ``state`` up to ``stage`` (see the
    module docstring); ``None`` if everything is finite. The State must be concrete
    (outside ``jit``)."""
    if not _concrete(state):
        raise TypeError(
            "find_nonfinite inspects concrete values: call it outside jit/vmap/grad (on the "
            "State that failed, e.g. traj.final_state, or one member of a batch)"
        )
    model = system.model_for(state)
    matter = system.get_matter_subsystem()
    bodies = matter._mobods[1:]

    # 1. the State's own variables
    if _bad(state.t) is not None:
        return f"the State's time t is {float(state.t)}"
    for b in bodies:
        for what, get in (("q", b.get_q), ("u", b.get_u)):
            v = get(state)
            if _bad(v) is not None:
                return (
                    f"the State's {what} of {b!r} is {_fmt(v)}: set finite values "
                    f"(state.with_{what}(...), or {b.name}.set_{what}(...))"
                )
    if _bad(state.z) is not None:
        return f"the State's z (auxiliary continuous variables) holds {_fmt(state.z)}"
    for kind, table in (("Instance", state.instance), ("discrete", state.discrete)):
        for sub, vals in table.items():
            for name, v in vals.items():
                idx = _bad(v)
                if idx is not None:
                    where = ""
                    if sub == "matter" and np.ndim(v) >= 1 and np.shape(v)[0] == len(model.names):
                        where = f" (body {model.names[int(idx[0][0])]!r})"
                    return f"the {kind} variable {sub}.{name}{where} holds {_fmt(v)}"

    # 2. Position: each body's frame, then the constraints' position errors
    if stage < Stage.POSITION:
        return None
    s = realize(model, state, Stage.POSITION)
    pc = s.position_cache
    b = _first_bad_body(bodies, pc.R_GB, pc.p_GB)
    if b is not None:
        return (
            f"Position stage: the frame of {b!r} is not finite (q of its mobilizer: "
            f"{_fmt(b.get_q(state))}); check its mobilizer's q and its fixed frames, or a "
            "Custom mobilizer's function"
        )
    b = _first_bad_body(bodies, pc.inertia_O, pc.com_G)
    if b is not None:
        return f"Position stage: the spatial inertia of {b!r} is not finite; check its mass properties"
    why = _bad_constraint_rows(matter, lambda c: c.get_position_errors(s), "Position", "position errors")
    if why:
        return why

    # 3. Velocity
    if stage < Stage.VELOCITY:
        return None
    s = realize(model, s, Stage.VELOCITY)
    vc = s.velocity_cache
    b = _first_bad_body(bodies, vc.V_O)
    if b is not None:
        return f"Velocity stage: the spatial velocity of {b!r} is not finite (u: {_fmt(b.get_u(state))})"
    why = _bad_constraint_rows(matter, lambda c: c.get_velocity_errors(s), "Velocity", "velocity errors")
    if why:
        return why

    # 4. Dynamics: each force element, then the subsystems' forces
    if stage < Stage.DYNAMICS:
        return None
    for sub in system._subsystems:
        for el in getattr(sub, "_elements", ()):  # a GeneralForceSubsystem's force elements
            F, tau = el.calc_force_contribution(s)
            if (F is not None and _bad(F) is not None) or (tau is not None and _bad(tau) is not None):
                return (
                    f"Dynamics stage: force element {type(el).__name__} (#{el._ordinal} of its kind, "
                    f"in subsystem {sub.name!r}) gives non-finite forces; check its parameters "
                    "and, for a Custom force, its function"
                )
    d = realize(model, s, Stage.DYNAMICS)
    dc = d.dynamics_cache
    if _bad(dc.body_forces) is not None or _bad(dc.mobility_forces) is not None:
        subs = ", ".join(repr(getattr(x, "name", x)) for x in model.force_subsystems)
        return f"Dynamics stage: the applied forces are not finite (force subsystems: {subs or 'none'})"
    if _bad(dc.bias) is not None:
        return "Dynamics stage: the velocity-dependent (Coriolis, gyroscopic) forces are not finite"

    # 5. Acceleration: the mass matrix, then udot and the multipliers
    if stage < Stage.ACCELERATION:
        return None
    M = np.asarray(matter.calc_mass_matrix(d))
    if _bad(M) is not None:
        return "Acceleration stage: the mass matrix M(q) is not finite"
    w = np.linalg.eigvalsh(0.5 * (M + M.T)) if M.size else np.zeros(0)
    a = realize(model, d, Stage.ACCELERATION)
    ac = a.acceleration_cache
    # Singular to round-off: udot is not finite or, where the solve's pivots happened to pass
    # its test (a pivot of round-off size), meaningless.
    if M.size and w[0] <= 1e-14 * max(1.0, float(w[-1])):
        return (
            f"Acceleration stage: the mass matrix is singular (smallest eigenvalue {w[0]:.3g}), "
            "so udot is not finite or meaningless: a moving body without mass or inertia, or a "
            "mobilizer at a singular configuration (gimbal lock of Euler angles); give it mass "
            "properties or move away from the singularity"
        )
    topo = model.topology(state.use_euler_angles)
    for b in bodies:
        u0, nu_b = int(topo.u_start[b.index]), int(topo.nu_body[b.index])
        v = np.asarray(ac.udot)[u0 : u0 + nu_b]
        if nu_b and _bad(v) is not None:
            return f"Acceleration stage: udot of {b!r} is {_fmt(v)}"
    for c in matter._constraints:
        try:
            lam = c.get_multipliers(a)
        except ValueError:  # disabled
            continue
        if lam.size and _bad(lam) is not None:
            return (
                f"Acceleration stage: the multipliers of {c!r} are {_fmt(lam)}; its rows may be "
                "degenerate at this configuration"
            )
    if _bad(ac.zdot) is not None:
        return "Acceleration stage: zdot (the auxiliary variables' derivatives) is not finite"
    if not all_finite(a.cache):
        return "Acceleration stage: a realized result is not finite (no single element named)"
    return None
