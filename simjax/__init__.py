"""simjax: Simbody's multibody dynamics on JAX (jit, vmap and grad throughout).

Enable float64 for Simbody-level accuracy: ``jax.config.update("jax_enable_x64", True)``.
"""

from . import _forces as _forces_module  # noqa: F401  (registers Force kinds)
from . import io as io  # noqa: E402  (sj.io.load_osim, read_trc, ...)
from ._assembler import Assembler as Assembler
from ._assembler import AssemblyFailed as AssemblyFailed
from ._assembler import AssemblyInfo as AssemblyInfo
from ._bodies import Body as Body
from ._bodies import MobilizedBody as MobilizedBody
from ._conditions import AssemblyCondition as AssemblyCondition
from ._conditions import Markers as Markers
from ._conditions import OrientationSensors as OrientationSensors
from ._conditions import QValue as QValue
from ._constraints import Constraint as Constraint
from ._constraints import ConstraintContext as ConstraintContext
from ._context import Context as Context
from ._forces import Force as Force
from ._functions import Function as Function
from ._matter import SimbodyMatterSubsystem as SimbodyMatterSubsystem
from ._mobilizers import AbstractMobilizer as AbstractMobilizer
from ._simulate import ScheduledEvent as ScheduledEvent
from ._simulate import TimeStepper as TimeStepper
from ._simulate import Trajectory as Trajectory
from ._simulate import TriggeredEvent as TriggeredEvent
from ._simulate import simulate as simulate
from ._spatial import Inertia as Inertia
from ._spatial import MassProperties as MassProperties
from ._spatial import Rotation as Rotation
from ._spatial import Transform as Transform
from ._stage import Stage as Stage
from ._state import StageError as StageError
from ._state import State as State
from ._system import ForceSubsystem as ForceSubsystem
from ._system import GeneralForceSubsystem as GeneralForceSubsystem
from ._system import MultibodySystem as MultibodySystem
from ._system import Subsystem as Subsystem
from ._system import TopologyError as TopologyError

__version__ = "0.1.0"
