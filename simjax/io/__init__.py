"""Read models and motion data made elsewhere (OpenSim, URDF, MJCF; .trc, .mot/.sto, .c3d) and
run OpenSim's tools on them (IK, scaling, inverse dynamics with external loads, static
optimization).

``load_osim`` (and the other model loaders) return a :class:`LoadedModel`: a System with
handles by name and a default State; the motion readers return plain tables of NumPy arrays.
"""

from ._inverse_dynamics import ExternalForce as ExternalForce
from ._inverse_dynamics import ExternalLoads as ExternalLoads
from ._inverse_dynamics import IDResult as IDResult
from ._inverse_dynamics import IDSetup as IDSetup
from ._inverse_dynamics import coordinate_trajectories as coordinate_trajectories
from ._inverse_dynamics import read_external_loads as read_external_loads
from ._inverse_dynamics import read_id_setup as read_id_setup
from ._loaded import Coordinate as Coordinate
from ._loaded import LoadedModel as LoadedModel
from ._loaded import Marker as Marker
from ._loaded import ModelFileError as ModelFileError
from ._loaded import VisualGeometry as VisualGeometry
from ._mjcf import load_mjcf as load_mjcf
from ._motion import CoordinateTable as CoordinateTable
from ._motion import MarkerTable as MarkerTable
from ._motion import read_c3d as read_c3d
from ._motion import read_mot as read_mot
from ._motion import read_sto as read_sto
from ._motion import read_trc as read_trc
from ._motion import write_mot as write_mot
from ._motion import write_sto as write_sto
from ._motion import write_trc as write_trc
from ._osim import load_osim as load_osim
from ._scale import MarkerPlacerSetup as MarkerPlacerSetup
from ._scale import Measurement as Measurement
from ._scale import MeasurementResult as MeasurementResult
from ._scale import PlacedMarkers as PlacedMarkers
from ._scale import ScaleFit as ScaleFit
from ._scale import ScaleResult as ScaleResult
from ._scale import ScaleSetup as ScaleSetup
from ._scale import fit_scale_factors as fit_scale_factors
from ._scale import place_markers as place_markers
from ._scale import read_scale_setup as read_scale_setup
from ._scale import scale_inertia as scale_inertia
from ._scale import scale_osim as scale_osim
from ._scale import scale_state as scale_state
from ._scale import scale_stations as scale_stations
from ._setup import CoordinateTask as CoordinateTask
from ._setup import IKResult as IKResult
from ._setup import IKSetup as IKSetup
from ._setup import marker_error_table as marker_error_table
from ._setup import marker_errors as marker_errors
from ._setup import read_ik_setup as read_ik_setup
from ._static_optimization import MUSCLE_ANALYSIS as MUSCLE_ANALYSIS
from ._static_optimization import AnalyzeResult as AnalyzeResult
from ._static_optimization import AnalyzeSetup as AnalyzeSetup
from ._static_optimization import muscle_analysis as muscle_analysis
from ._static_optimization import read_analyze_setup as read_analyze_setup
from ._static_optimization import static_optimization as static_optimization
from ._urdf import load_urdf as load_urdf
