"""What a Model's constraints and limits compile to in each Model-stage option."""

from __future__ import annotations

from typing import Any

from ..model.model import ConstraintRecord, LimitRecord, ModelOption
from ..model.topology import Topology
from . import kernels as cn
from . import unilateral as uni


def build_options(
    parent: tuple[int, ...],
    mobilizers: tuple[Any, ...],
    names: tuple[str, ...],
    records: tuple[ConstraintRecord, ...],
    limits: tuple[LimitRecord, ...],
) -> tuple[ModelOption, ModelOption]:
    """Both Model options, quaternions and Euler angles: each one's Topology, compiled
    constraints (rows numbered per level in constraint order), constraint groups,
    unilateral rows and row counts. ``realize_topology()`` builds them with the Model."""
    out = []
    for euler in (False, True):
        mobs = tuple(None if m is None else (m.with_euler_angles() if euler else m) for m in mobilizers)
        topo = Topology(parent, mobs, names)
        compiled: list[cn.CompiledConstraint] = []
        rows = (0, 0, 0)
        for i, rec in enumerate(records):
            cc = cn.compile_constraint(i, rec, parent, topo, rows)
            rows = (rows[0] + cc.mp, rows[1] + cc.mv, rows[2] + cc.ma)
            compiled.append(cc)
        cs = tuple(compiled)
        groups = tuple(cn.make_group(records, m) for m in cn.group_members(records, cs))
        out.append(ModelOption(topo, cs, groups, uni.build_limit_rows(records, cs, limits, euler), rows))
    return out[0], out[1]
