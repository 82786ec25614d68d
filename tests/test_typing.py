"""Type annotations evaluate: ``typing.get_type_hints`` works on the public API.

simjax uses ``from __future__ import annotations``, so annotations are strings until a tool
evaluates them (``typing.get_type_hints``, ``jaxtyping.jaxtyped`` + beartype, docs
generators). A jaxtyping shape must then be valid (``Float[Array, " 3"]``, not
``Float[Array, 3]``) and every name must be importable from the module.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing

import pytest

import simjax as sj

# (callable, expected jaxtyping dims of its return value, or of the named field/parameter)
SHAPED = [
    (sj.SimbodyMatterSubsystem.calc_mass_matrix, "return", "nu nu"),
    (sj.SimbodyMatterSubsystem.calc_m_inverse, "return", "nu nu"),
    (sj.SimbodyMatterSubsystem.multiply_by_m, "return", "nu"),
    (sj.SimbodyMatterSubsystem.multiply_by_m_inv, "return", "nu *k"),
    (sj.SimbodyMatterSubsystem.calc_g, "return", "m nu"),
    (sj.SimbodyMatterSubsystem.calc_bias_for_acceleration_constraints, "return", "m"),
    (sj.SimbodyMatterSubsystem.multiply_by_g_transpose, "return", "nu"),
    (sj.SimbodyMatterSubsystem.calc_system_jacobian, "return", "nb*6 nu"),
    (sj.SimbodyMatterSubsystem.calc_frame_jacobian, "return", "6 nu"),
    (sj.SimbodyMatterSubsystem.calc_station_jacobian, "return", "3 nu"),
    (sj.SimbodyMatterSubsystem.calc_bias_for_system_jacobian, "return", "nb*6"),
    (sj.SimbodyMatterSubsystem.multiply_by_system_jacobian_transpose, "return", "nu"),
    (sj.SimbodyMatterSubsystem.calc_residual_force, "return", "nu"),
    (sj.SimbodyMatterSubsystem.calc_acceleration, "return", "nu"),
    (sj.SimbodyMatterSubsystem.calc_bias_forces, "return", "nu"),
    (sj.SimbodyMatterSubsystem.calc_qdot, "return", "nq"),
    (sj.SimbodyMatterSubsystem.calc_qdotdot, "return", "nq"),
    (sj.SimbodyMatterSubsystem.calc_system_mass_center_location_in_ground, "return", "3"),
    (sj.SimbodyMatterSubsystem.calc_system_momentum_about_ground_origin, "return", "6"),
    (sj.SimbodyMatterSubsystem.calc_kinetic_energy, "return", ""),
    (sj.SimbodyMatterSubsystem.get_body_velocities, "return", "nb 6"),
    (sj.MultibodySystem.calc_energy, "return", ""),
    (sj.MultibodySystem.calc_kinetic_energy, "return", ""),
    (sj.MultibodySystem.calc_potential_energy, "return", ""),
    (sj.MobilizedBody.get_q, "return", "nq_body"),
    (sj.MobilizedBody.get_u, "return", "nu_body"),
    (sj.MobilizedBody.get_body_rotation, "return", "3 3"),
    (sj.MobilizedBody.get_body_origin_location, "return", "3"),
    (sj.MobilizedBody.get_body_velocity, "return", "6"),
    (sj.MobilizedBody.get_body_acceleration, "return", "6"),
    (sj.MobilizedBody.get_inertia_about_body_origin, "return", "3 3"),
    (sj.MobilizedBody.find_station_location_in_ground, "return", "3"),
    (sj.MobilizedBody.find_station_velocity_in_ground, "return", "3"),
    (sj.MobilizedBody.find_station_acceleration_in_ground, "return", "3"),
    (sj.Context.station_location, "return", "3"),
    (sj.Context.body_velocity, "return", "6"),
    (sj.Context.q.fget, "return", "nq"),
    (sj.State.qdot.fget, "return", "nq"),
    (sj.State.udot.fget, "return", "nu"),
    (sj.State.multipliers.fget, "return", "m"),
    (sj.Transform, "R", "3 3"),
    (sj.Transform, "p", "3"),
    (sj.Transform.apply, "return", "3"),
    (sj.Trajectory, "q", "n nq"),
    (sj.Trajectory, "u", "n nu"),
    (sj.Trajectory, "t", "n"),
]


@pytest.mark.parametrize(("obj", "key", "dims"), SHAPED, ids=[f"{o.__qualname__}:{k}" for o, k, _ in SHAPED])
def test_jaxtyping_shapes_evaluate(obj, key, dims):
    hint = typing.get_type_hints(obj)[key]
    assert hint.dim_str == dims  # a jaxtyping Float[Array, ...] with these dimensions
    assert "float64" in hint.dtypes and "float32" in hint.dtypes  # Float[...]


def _simjax_objects():
    """Every function, class, method and property defined in a simjax module."""
    for info in pkgutil.walk_packages(sj.__path__, "simjax."):
        mod = importlib.import_module(info.name)
        for name, obj in vars(mod).items():
            if getattr(obj, "__module__", None) != info.name:
                continue
            if inspect.isfunction(obj):
                yield f"{info.name}.{name}", obj
            elif inspect.isclass(obj):
                yield f"{info.name}.{name}", obj
                for attr, v in vars(obj).items():
                    f = v.fget if isinstance(v, property) else getattr(v, "__func__", v)
                    if inspect.isfunction(f):
                        yield f"{info.name}.{name}.{attr}", f


def test_every_annotation_evaluates():
    bad = []
    count = 0
    for name, obj in _simjax_objects():
        try:
            typing.get_type_hints(obj)
        except Exception as e:  # report every failure at once
            bad.append(f"{name}: {type(e).__name__}: {e}")
        count += 1
    assert count > 500  # the walk found the package
    assert not bad, "annotations that do not evaluate:\n" + "\n".join(bad)
