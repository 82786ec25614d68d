"""One batch over every device of a machine, and over several machines: JAX's own sharding.

simjax's batched programs (``jit(vmap(...))`` of ``System.realize``, ``sj.simulate`` over a
batch of States, ``Assembler.track`` over frames, ``vmap`` of ``Assembler.solve`` over a
batch of models) are ordinary JAX programs, so a batch placed on several devices is
computed where it lies and the results stay there: XLA's sharding propagation splits the
work along the batch axis, with no gather to one device. This module only places the
batch:

- :func:`make_mesh`: a one-axis mesh (``"batch"``) over the devices of every process,
  with the axis in JAX's ``Auto`` mode (sharding propagated by XLA). simjax's programs mix
  batched and unbatched arrays (a batch of States with the model's constants), which JAX's
  ``Explicit`` mode refuses, so :func:`shard` also turns an ``Explicit`` mesh into the
  ``Auto`` mesh of the same devices.
- :func:`shard`: every array of a batch (a vmapped State, frames, control sequences)
  split along its leading axis over the mesh. Under ``jax.distributed`` each process
  passes its own part of the batch and gets the global array back.

On CPU, ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` (set before JAX starts)
makes N host devices; see the README for when that pays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

__all__ = ["make_mesh", "shard"]


def make_mesh(devices: int | Sequence[Any] | None = None, axis_name: str = "batch") -> Mesh:
    """A one-axis device mesh for batches (JAX's ``Auto`` axis type).

    Args:
        devices: The devices: default every device of every process (``jax.devices()``;
            under ``jax.distributed`` that spans the machines), an int for the first n of
            them, or a list of devices.
        axis_name: The mesh axis the batch is split along.
    """
    all_devices = jax.devices()
    if devices is None:
        devs = list(all_devices)
    elif isinstance(devices, (int, np.integer)):
        if not 1 <= int(devices) <= len(all_devices):
            raise ValueError(
                f"make_mesh: asked for {int(devices)} devices, but JAX has {len(all_devices)} "
                f"({all_devices[0].platform}); on CPU, set XLA_FLAGS="
                "--xla_force_host_platform_device_count=N before JAX starts for N host devices"
            )
        devs = list(all_devices[: int(devices)])
    else:
        devs = list(devices)
        if not devs:
            raise ValueError("make_mesh: no devices given")
    return Mesh(np.asarray(devs, dtype=object), (axis_name,), axis_types=(AxisType.Auto,))


def _auto(mesh: Mesh) -> Mesh:
    """The mesh with every axis in ``Auto`` mode (the same devices and names)."""
    if all(t == AxisType.Auto for t in mesh.axis_types):
        return mesh
    return Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * len(mesh.axis_names))


def shard(batch: Any, mesh: Mesh | None = None, *, axis_name: str | None = None) -> Any:
    """Split a batch over the devices of a mesh, along its leading (batch) axis.

    Args:
        batch: A pytree whose arrays all have the batch first: a vmapped ``State``
            (``jax.vmap(lambda q: state.with_q(q))(qs)``), marker frames ``(T, n, 3)``,
            control sequences, or a tuple of them with the same batch size. Scalars are
            replicated; non-array leaves are kept as they are.
        mesh: The mesh (default :func:`make_mesh` over every device). An ``Explicit``
            mesh is used as the ``Auto`` mesh of the same devices.
        axis_name: The mesh axis to split along (default the mesh's first).

    Returns:
        The same pytree with every array a global ``jax.Array`` split over the devices;
        pass it to a batched simjax program and its results stay split the same way.
        Under ``jax.distributed`` (several processes), each process passes its own part
        of the batch (the same size on every process) and gets the global arrays.

    Raises:
        ValueError: the arrays do not share one leading size, or the (global) batch size
            is not a multiple of the number of devices along the axis.
    """
    mesh = _auto(make_mesh() if mesh is None else mesh)
    name = mesh.axis_names[0] if axis_name is None else axis_name
    if name not in mesh.axis_names:
        raise ValueError(f"shard: the mesh has no axis {name!r} (its axes: {mesh.axis_names})")
    n = int(mesh.shape[name])
    leaves = [x for x in jax.tree.leaves(batch) if isinstance(x, (np.ndarray, jax.Array, np.generic))]
    sizes = sorted({int(np.shape(x)[0]) for x in leaves if np.ndim(x) >= 1})
    if not sizes:
        raise ValueError("shard: nothing to split: no array with a batch axis in the batch")
    if len(sizes) > 1:
        raise ValueError(
            f"shard: the arrays have different leading sizes {sizes}; every array must have the "
            "batch first (vmap the State, or shard the parts of different sizes separately)"
        )
    local = sizes[0]
    procs = jax.process_count()
    total = local * procs
    if total % n:
        raise ValueError(
            f"shard: a batch of {total} does not split evenly over {n} devices along {name!r}: pad "
            f"it to a multiple of {n} (e.g. repeat its last member) or use a mesh of "
            f"{math.gcd(total, n)} devices"
        )
    split = NamedSharding(mesh, PartitionSpec(name))
    whole = NamedSharding(mesh, PartitionSpec())

    def place(x: Any) -> Any:
        if not isinstance(x, (np.ndarray, jax.Array, np.generic)):
            return x
        target = split if np.ndim(x) >= 1 else whole
        if procs == 1:
            return jax.device_put(x, target)
        return jax.make_array_from_process_local_data(target, np.asarray(x))

    return jax.tree.map(place, batch)
