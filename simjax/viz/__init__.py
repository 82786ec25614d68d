"""Static figures (matplotlib, headless-safe) of inverse-kinematics results.

``plot_marker_errors(table)`` draws each marker's error over time from
``sj.io.marker_error_table(..., per_marker=True)`` (OpenSim's ``_ik_marker_errors.sto``
read back with ``sj.io.read_sto`` works too), with the RMS and the maximum over markers.
``plot_coordinates(table, reference)`` draws coordinates over time (``model.table_from_q``
or a ``.mot``) against a reference motion (e.g. OpenSim's IK result), one panel each.
Both return the matplotlib ``Figure``; matplotlib is imported only when they are called
(``pip install matplotlib``).
"""

from ._figures import plot_coordinates as plot_coordinates
from ._figures import plot_marker_errors as plot_marker_errors
