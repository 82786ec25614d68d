"""The builder layer: what users construct before ``realize_topology()`` freezes a Model."""

from .. import _spatial as _sp
from .bodies import Body as Body
from .bodies import MobilizedBody as MobilizedBody
from .constraints import Constraint as Constraint
from .contact import ContactGeometry as ContactGeometry
from .contact import ContactSurface as ContactSurface
from .forces import Force as Force
from .forces import PathSpring as PathSpring
from .forces import TendonSpringDamper as TendonSpringDamper
from .matter import SimbodyMatterSubsystem as SimbodyMatterSubsystem
from .muscles import DeGrooteFregly2016Muscle as DeGrooteFregly2016Muscle
from .muscles import Millard2012EquilibriumMuscle as Millard2012EquilibriumMuscle
from .muscles import Muscle as Muscle
from .muscles import Thelen2003Muscle as Thelen2003Muscle
from .muscles import equilibrate_muscles as equilibrate_muscles
from .paths import GeometryPath as GeometryPath
from .paths import WrapCylinder as WrapCylinder
from .paths import WrapEllipsoid as WrapEllipsoid
from .paths import WrapSphere as WrapSphere
from .paths import WrapTorus as WrapTorus
from .system import GeneralForceSubsystem as GeneralForceSubsystem
from .system import MultibodySystem as MultibodySystem
from .tendons import Tendon as Tendon

Transform = _sp.Transform
