"""Modules imported on first use, so that ``import simjax`` stays quick.

diffrax (simulation only) and ``scipy.spatial`` (mesh hulls only) were ~0.4 s of a ~0.9 s
``import simjax``: most users of one workflow (inverse kinematics from a notebook, say)
never touch them.
"""

from __future__ import annotations

import importlib
import types
from typing import Any


class LazyModule(types.ModuleType):
    """Stands for module ``name`` and imports it at the first attribute read."""

    def __init__(self, name: str) -> None:
        super().__init__(name)

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self.__name__), attr)
