"""The tendons a Model holds (MuJoCo's ``<tendon>``): one frozen record of every tendon,
built by ``realize_topology()`` from the ``sj.Tendon`` handles
(:mod:`simjax.system.tendons`) and evaluated by :mod:`simjax.dynamics.tendons`.

A fixed tendon is linear in joint coordinates (``L = sum coef q``); a spatial tendon is a
sum of *segments*, each from a site to a site, straight or wrapped around a sphere or a
cylinder (optionally on the side of a side site), divided by the ``divisor`` of the pulley
branch it lies in. The segments are resolved once, here, as MuJoCo's ``mj_tendon`` walks a
tendon's path, so the kernel evaluates every segment of every tendon at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: wrap kinds of a segment
NO_WRAP, SPHERE, CYLINDER = 0, 1, 2


@dataclass(frozen=True, eq=False)
class TendonSet:
    """Every tendon of a Model (static NumPy).

    ``names`` per tendon. Fixed terms (F of them): ``fixed_tendon`` (F,) the tendon,
    ``fixed_coord`` (F, 2) the coordinate (body, slot in its mobilizer's q; ``qdot = u``
    there), ``fixed_coef`` (F,). Segments (S): ``seg_tendon`` (S,), ``seg_divisor`` (S,),
    ``seg_site`` (S, 2) the start and end sites' indices into ``site_body`` (N,) and
    ``site_pos`` (N, 3) (station in the body frame); ``seg_wrap`` (S,) NO_WRAP, SPHERE or
    CYLINDER; ``seg_geom_body`` (S,), ``seg_geom_pos`` (S, 3), ``seg_geom_rot`` (S, 3, 3)
    the wrap geom's frame in its body, ``seg_radius`` (S,); ``seg_side`` (S,) the side
    site's index (-1 without one).
    """

    names: tuple[str, ...]
    fixed_tendon: np.ndarray
    fixed_coord: np.ndarray
    fixed_coef: np.ndarray
    site_body: np.ndarray
    site_pos: np.ndarray
    seg_tendon: np.ndarray
    seg_divisor: np.ndarray
    seg_site: np.ndarray
    seg_wrap: np.ndarray
    seg_geom_body: np.ndarray
    seg_geom_pos: np.ndarray
    seg_geom_rot: np.ndarray
    seg_radius: np.ndarray
    seg_side: np.ndarray

    @property
    def num_tendons(self) -> int:
        """Number of tendons."""
        return len(self.names)

    @property
    def key(self) -> tuple:
        """What a compiled program depends on (the kernel holds every number as a constant)."""
        arrays = (
            self.fixed_tendon, self.fixed_coord, self.fixed_coef, self.site_body, self.site_pos,
            self.seg_tendon, self.seg_divisor, self.seg_site, self.seg_wrap, self.seg_geom_body,
            self.seg_geom_pos, self.seg_geom_rot, self.seg_radius, self.seg_side,
        )  # fmt: skip
        return (len(self.names), tuple((a.shape, a.dtype.str, a.tobytes()) for a in arrays))
