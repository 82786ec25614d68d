"""simjax: Simbody's multibody dynamics on JAX (jit, vmap and grad throughout).

Enable float64 for Simbody-level accuracy: ``jax.config.update("jax_enable_x64", True)``.
Importing simjax changes nothing outside it; ``sj.configure()``, called before the first
JAX computation, makes the XLA:CPU settings and the persistent compilation cache simjax's
programs were measured with (see :func:`simjax.configure`).
"""

from . import _config as _config
from . import io as io  # sj.io.load_osim, read_trc, ...
from . import viz as viz  # sj.viz.plot_marker_errors, plot_coordinates
from ._batching import vmap as vmap
from ._config import Configuration as Configuration
from ._config import configure as configure
from ._functions import Function as Function
from ._results import RESULTS as RESULTS
from ._sharding import make_mesh as make_mesh
from ._sharding import shard as shard
from ._spatial import Inertia as Inertia
from ._spatial import MassProperties as MassProperties
from ._spatial import Rotation as Rotation
from ._spatial import Transform as Transform
from ._stage import Stage as Stage
from .constraints.kernels import ConstraintContext as ConstraintContext
from .model.contact import MujocoConstraintOptions as MujocoConstraintOptions
from .model.context import Context as Context
from .model.mobilizers import AbstractMobilizer as AbstractMobilizer
from .model.state import StageError as StageError
from .model.state import State as State
from .studies.assembler import Assembler as Assembler
from .studies.assembler import AssemblyFailed as AssemblyFailed
from .studies.assembler import AssemblyInfo as AssemblyInfo
from .studies.conditions import AssemblyCondition as AssemblyCondition
from .studies.conditions import Markers as Markers
from .studies.conditions import OrientationSensors as OrientationSensors
from .studies.conditions import QValue as QValue
from .studies.inverse_dynamics import InverseDynamicsSolver as InverseDynamicsSolver
from .studies.simulate import ScheduledEvent as ScheduledEvent
from .studies.simulate import TimeStepper as TimeStepper
from .studies.simulate import Trajectory as Trajectory
from .studies.simulate import TriggeredEvent as TriggeredEvent
from .studies.simulate import simulate as simulate
from .studies.static_optimization import StaticOptimization as StaticOptimization
from .studies.static_optimization import StaticOptimizationSolution as StaticOptimizationSolution
from .system.bodies import Body as Body
from .system.bodies import MobilizedBody as MobilizedBody
from .system.constraints import Constraint as Constraint
from .system.contact import ContactGeometry as ContactGeometry
from .system.contact import ContactProperties as ContactProperties
from .system.contact import ContactSurface as ContactSurface
from .system.couplings import Coupling as Coupling
from .system.diagnose import NonFiniteError as NonFiniteError
from .system.diagnose import debug_nans as debug_nans
from .system.diagnose import find_nonfinite as find_nonfinite
from .system.forces import Force as Force
from .system.forces import HuntCrossleyForce as HuntCrossleyForce
from .system.forces import PathSpring as PathSpring
from .system.forces import SmoothSphereHalfSpaceForce as SmoothSphereHalfSpaceForce
from .system.forces import TendonSpringDamper as TendonSpringDamper
from .system.matter import SimbodyMatterSubsystem as SimbodyMatterSubsystem
from .system.muscles import DeGrooteFregly2016Muscle as DeGrooteFregly2016Muscle
from .system.muscles import Millard2012EquilibriumMuscle as Millard2012EquilibriumMuscle
from .system.muscles import Muscle as Muscle
from .system.muscles import Thelen2003Muscle as Thelen2003Muscle
from .system.muscles import equilibrate_muscles as equilibrate_muscles
from .system.paths import GeometryPath as GeometryPath
from .system.paths import WrapCylinder as WrapCylinder
from .system.paths import WrapEllipsoid as WrapEllipsoid
from .system.paths import WrapSphere as WrapSphere
from .system.paths import WrapTorus as WrapTorus
from .system.system import ForceSubsystem as ForceSubsystem
from .system.system import GeneralForceSubsystem as GeneralForceSubsystem
from .system.system import MultibodySystem as MultibodySystem
from .system.system import Subsystem as Subsystem
from .system.system import TopologyError as TopologyError
from .system.tendons import Tendon as Tendon

__version__ = "0.1.0"
