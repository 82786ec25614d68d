"""Realization stages, in Simbody's order."""

from __future__ import annotations

import enum


class Stage(enum.IntEnum):
    """Simbody's computation stages; a State realized to a stage has every cache entry of
    that stage and the ones below it. Setting a variable drops the State back to the stage
    just below the variable's own stage."""

    EMPTY = 0
    TOPOLOGY = 1
    MODEL = 2
    INSTANCE = 3
    TIME = 4
    POSITION = 5
    VELOCITY = 6
    DYNAMICS = 7
    ACCELERATION = 8
    REPORT = 9
    INFINITY = 10

    def prev(self) -> Stage:
        """The stage just below this one (Empty stays Empty)."""
        return Stage(max(int(self) - 1, 0))

    def next(self) -> Stage:
        """The stage just above this one (Infinity stays Infinity)."""
        return Stage(min(int(self) + 1, int(Stage.INFINITY)))
