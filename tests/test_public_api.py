"""The public API, pinned: the exact public names of ``simjax`` and of its user-facing
namespaces. A refactor that adds, renames or drops a user-visible name fails here.

If you changed a public name on purpose, update the list below and the API reference
(``docs/api/``), which must name every public name of ``simjax``.
"""

from __future__ import annotations

import pytest

import simjax as sj

SJ = [
    "AbstractMobilizer",
    "Assembler",
    "AssemblyCondition",
    "AssemblyFailed",
    "AssemblyInfo",
    "Body",
    "Configuration",
    "Constraint",
    "ContactGeometry",
    "ContactProperties",
    "ContactSurface",
    "Coupling",
    "ConstraintContext",
    "Context",
    "Force",
    "ForceSubsystem",
    "Function",
    "GeneralForceSubsystem",
    "GeometryPath",
    "HuntCrossleyForce",
    "Inertia",
    "Markers",
    "MassProperties",
    "MobilizedBody",
    "MujocoConstraintOptions",
    "MultibodySystem",
    "NonFiniteError",
    "OrientationSensors",
    "PathSpring",
    "QValue",
    "RESULTS",
    "Rotation",
    "ScheduledEvent",
    "SimbodyMatterSubsystem",
    "SmoothSphereHalfSpaceForce",
    "Stage",
    "StageError",
    "State",
    "Subsystem",
    "Tendon",
    "TendonSpringDamper",
    "TimeStepper",
    "TopologyError",
    "Trajectory",
    "Transform",
    "TriggeredEvent",
    "configure",
    "constraints",
    "debug_nans",
    "dynamics",
    "find_nonfinite",
    "forward",
    "io",
    "viz",
    "make_mesh",
    "model",
    "shard",
    "simulate",
    "studies",
    "system",
    "tree",
    "vmap",
]

FORCE = [
    "ConstantForce",
    "ConstantTorque",
    "CoordinateActuator",
    "CoordinateLimitForce",
    "Custom",
    "DiscreteForces",
    "GlobalDamper",
    "Gravity",
    "LinearBushing",
    "MobilityConstantForce",
    "MobilityLinearDamper",
    "MobilityLinearSpring",
    "MobilityLinearStop",
    "TwoPointConstantForce",
    "TwoPointLinearDamper",
    "TwoPointLinearSpring",
    "UniformGravity",
    "calc_force_contribution",
    "calc_potential_energy",
    "calc_power",
    "disable",
    "enable",
    "is_disabled",
    "set_disabled_by_default",
]

CONSTRAINT = [
    "Ball",
    "CoincidentPoints",
    "ConstantAcceleration",
    "ConstantAngle",
    "ConstantCoordinate",
    "ConstantDistance",
    "ConstantOrientation",
    "ConstantSpeed",
    "CoordinateCoupler",
    "CoordinateLimit",
    "Coupling",
    "Custom",
    "NoSlip1D",
    "PointInPlane",
    "PointOnLine",
    "PrescribedMotion",
    "Rod",
    "SpeedCoupler",
    "Spherical",
    "Weld",
    "calc_acceleration_constraint_matrix_a",
    "calc_acceleration_constraint_matrix_at",
    "calc_acceleration_error_from_udot",
    "calc_constraint_forces_from_multipliers",
    "calc_position_constraint_matrix_p",
    "calc_position_constraint_matrix_pn_inv",
    "calc_position_constraint_matrix_pt",
    "calc_position_error_from_q",
    "calc_power",
    "calc_velocity_constraint_matrix_v",
    "calc_velocity_constraint_matrix_vt",
    "calc_velocity_error_from_u",
    "disable",
    "enable",
    "get_acceleration_errors",
    "get_acceleration_errors_as_vector",
    "get_ancestor_mobilized_body",
    "get_constrained_body_forces_as_vector",
    "get_constrained_mobility_forces_as_vector",
    "get_constraint_forces_as_vectors",
    "get_constraint_index",
    "get_index_of_multipliers_in_use",
    "get_matter_subsystem",
    "get_mobilized_body_from_constrained_body",
    "get_mobilized_body_from_constrained_mobilizer",
    "get_multipliers",
    "get_multipliers_as_vector",
    "get_num_constrained_bodies",
    "get_num_constrained_mobilizers",
    "get_num_constrained_q",
    "get_num_constrained_u",
    "get_num_constraint_equations_in_use",
    "get_param",
    "get_position_errors",
    "get_position_errors_as_vector",
    "get_q_index_of_constrained_q",
    "get_u_index_of_constrained_u",
    "get_velocity_errors",
    "get_velocity_errors_as_vector",
    "is_disabled",
    "is_disabled_by_default",
    "set_disabled_by_default",
    "set_param",
]

MOBILIZED_BODY = [
    "Ball",
    "BendStretch",
    "Bushing",
    "Cartesian",
    "Custom",
    "Cylinder",
    "Ellipsoid",
    "Free",
    "FreeLine",
    "FunctionBased",
    "Gimbal",
    "Ground",
    "LineOrientation",
    "Pin",
    "Planar",
    "Screw",
    "Slider",
    "SphericalCoords",
    "Translation",
    "Universal",
    "Weld",
    "add_contact_surface",
    "find_body_transform_in_another_body",
    "find_station_acceleration_in_ground",
    "find_station_location_in_ground",
    "find_station_velocity_in_ground",
    "get_body_acceleration",
    "get_body_angular_velocity",
    "get_body_origin_location",
    "get_body_origin_velocity",
    "get_body_rotation",
    "get_body_transform",
    "get_body_velocity",
    "get_default_armature",
    "get_default_mass_properties",
    "get_default_q",
    "get_inboard_frame",
    "get_inertia_about_body_origin",
    "get_mass",
    "get_mass_center",
    "get_mobilized_body_index",
    "get_mobilizer_params",
    "get_mobilizer_transform",
    "get_mobilizer_velocity",
    "get_num_q",
    "get_num_u",
    "get_one_q",
    "get_one_u",
    "get_outboard_frame",
    "get_parent_mobilized_body",
    "get_q",
    "get_u",
    "get_unit_inertia_about_body_origin",
    "is_ground",
    "mobilizer",
    "set_default_armature",
    "set_default_mass_properties",
    "set_default_q",
    "set_default_u",
    "set_inboard_frame",
    "set_mass",
    "set_mass_properties",
    "set_one_q",
    "set_one_u",
    "set_outboard_frame",
    "set_q",
    "set_q_to_fit_transform",
    "set_u",
    "set_u_to_fit_velocity",
]

FUNCTION = [
    "Constant",
    "Linear",
    "Polynomial",
    "Sinusoid",
    "Spline",
    "Step",
    "arg_size",
    "calc_derivative",
    "calc_value",
    "get_argument_size",
    "get_max_derivative_order",
]

IO = [
    "Coordinate",
    "CoordinateTable",
    "CoordinateTask",
    "IKResult",
    "IKSetup",
    "LoadedModel",
    "Marker",
    "MarkerTable",
    "MarkerPlacerSetup",
    "Measurement",
    "MeasurementResult",
    "ModelFileError",
    "PlacedMarkers",
    "ScaleFit",
    "ScaleResult",
    "ScaleSetup",
    "VisualGeometry",
    "fit_scale_factors",
    "load_mjcf",
    "load_osim",
    "load_urdf",
    "marker_error_table",
    "marker_errors",
    "place_markers",
    "read_c3d",
    "read_ik_setup",
    "read_mot",
    "read_scale_setup",
    "read_sto",
    "read_trc",
    "scale_inertia",
    "scale_osim",
    "scale_state",
    "scale_stations",
    "write_mot",
    "write_sto",
    "write_trc",
]


VIZ = ["View", "geometry_poses", "plot_coordinates", "plot_marker_errors", "plot_pose", "plot_trajectory"]


def _public(obj) -> list[str]:
    return sorted(n for n in dir(obj) if not n.startswith("_"))


@pytest.mark.parametrize(
    ("what", "obj", "expected"),
    [
        ("simjax", sj, SJ),
        ("simjax.Force", sj.Force, FORCE),
        ("simjax.Constraint", sj.Constraint, CONSTRAINT),
        ("simjax.MobilizedBody", sj.MobilizedBody, MOBILIZED_BODY),
        ("simjax.Function", sj.Function, FUNCTION),
        ("simjax.io", sj.io, IO),
        ("simjax.viz", sj.viz, VIZ),
    ],
)
def test_public_names_are_pinned(what, obj, expected):
    got = _public(obj)
    added = sorted(set(got) - set(expected))
    removed = sorted(set(expected) - set(got))
    assert got == sorted(expected), (
        f"the public names of {what} changed: added {added}, removed {removed}. If you added a "
        "public name on purpose, add it here (tests/test_public_api.py) and to the API reference "
        "(docs/api/); if "
        "a refactor renamed or dropped one, users' code breaks: restore it"
    )


def test_the_api_reference_documents_every_public_name():
    """Each public class and function of ``simjax`` has a ``::: simjax.NAME`` entry in the
    documentation site's API reference (the kinds of ``Force``, ``Constraint``,
    ``MobilizedBody`` and ``Function`` are documented with their base; ``sj.io`` and
    ``sj.viz`` are documented whole)."""
    import pathlib
    import re
    import types

    api = pathlib.Path(__file__).resolve().parent.parent / "docs" / "api"
    pages = "\n".join(p.read_text() for p in api.glob("*.md"))
    entries = set(re.findall(r"^::: simjax\.(\w+)$", pages, re.M))
    wanted = {n for n in SJ if not isinstance(getattr(sj, n), types.ModuleType)} | {"io", "viz"}
    missing = sorted(wanted - entries)
    assert not missing, f"docs/api/ has no '::: simjax.NAME' entry for {missing}: add them to docs/api/"
