"""Operators that run as one compiled program when called on concrete values.

Outside ``jit`` a JAX function runs op by op: one dispatch per array operation, and in a
fresh process one small XLA compilation per new operation, where OpenSim's reporting calls
take microseconds. ``compiled_outside_traces`` runs a method ``f(self, state, *arrays)``
through ``jax.jit`` instead (``self`` static, by identity; one program per State structure
and argument shape): one compilation on the first call, then one dispatch per call.
Inside a user's ``jit``, ``vmap`` or ``grad`` (any traced argument) it runs as written,
traced into the caller's program, each State's cache carrying its dependence on the State's
variables (``forward.realize.with_cache_dependence``): derivatives do not depend on the stage
a State was realized to.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import jax

from ..forward.realize import with_cache_dependence
from ..model.state import State
from .diagnose import _concrete

_F = TypeVar("_F", bound=Callable[..., Any])


def compiled_outside_traces(method: _F | None = None, *, static: tuple[str, ...] = ()) -> Any:
    """Decorate a method whose arguments after ``self`` are States, arrays or None, and
    the arguments named in ``static`` (a body or its index: hashable, part of the compiled
    program's key)."""
    if method is None:
        return functools.partial(compiled_outside_traces, static=static)
    return _compiled(method, static)


def _compiled(method: _F, static: tuple[str, ...]) -> _F:
    # Both given, jax.jit does not map names to positions itself.
    names = list(inspect.signature(method).parameters)
    argnums = (0, *(names.index(n) for n in static))
    jitted = jax.jit(method, static_argnums=argnums, static_argnames=static)
    traced = reads_cache(method)  # under a trace: as written, the States' caches dependent

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _concrete((args, kwargs)):
            return traced(self, *args, **kwargs)
        return jitted(self, *args, **kwargs)

    call.compiled = jitted  # type: ignore[attr-defined]  # the jitted method (introspection, tests)
    return call  # type: ignore[return-value]


def reads_cache(method: _F) -> _F:
    """Decorate a handle's method that reads a State's cache (``f(self, state, ...)``): under
    a trace, its State arguments carry their cache's dependence on their variables
    (``forward.realize.with_cache_dependence``), so its derivatives do not depend on the
    stage the State was realized to. Outside traces it runs as written."""

    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _concrete((args, kwargs)):
            args = tuple(_dependent(self, a) for a in args)
            kwargs = {k: _dependent(self, a) for k, a in kwargs.items()}
        return method(self, *args, **kwargs)

    return call  # type: ignore[return-value]


def _dependent(owner: Any, arg: Any) -> Any:
    """A State argument with its cache's dependence on its variables (others as they are)."""
    if not isinstance(arg, State):
        return arg
    # A handle reaches its System through its subsystem (matter, forces) or its matter.
    system = owner
    while not hasattr(system, "model_for"):
        system = getattr(system, "_system", None) or getattr(system, "_matter", None) or system._subsystem
    return with_cache_dependence(system.model_for(arg), arg)
