"""Seeing models, motions and IK fits: a live 3D view and static figures.

``View(model)`` serves a 3D scene on localhost (viser; ``pip install 'simjax[viz]'``):
``show(state)``, ``animate(trajectory_or_states)`` with a time slider, and
``compare_markers(states, trc)`` with each model marker coloured by its error.
The paths (muscles coloured by activation, blue 0 to red 1; ligaments grey) are drawn
around their wraps. ``plot_pose(state, model)`` draws a pose as a static matplotlib figure
(headless, in CI), paths included;
``plot_trajectory(traj, model)`` coordinates, energy and constraint error over time.

The IK figures:

``plot_marker_errors(table)`` draws each marker's error over time from
``sj.io.marker_error_table(..., per_marker=True)`` (OpenSim's ``_ik_marker_errors.sto``
read back with ``sj.io.read_sto`` works too), with the RMS and the maximum over markers.
``plot_coordinates(table, reference, model=model)`` draws coordinates over time
(``model.table_from_q`` or a ``.mot``) against a reference motion (e.g. OpenSim's IK result),
one panel each: the model's rotational coordinates in degrees, translations in metres.
``plot_muscles(analysis, "TendonForce", reference)`` draws one muscle quantity over a trial
(``sj.io.muscle_analysis``'s tables, an ``AnalyzeResult``'s static optimization, moment
arms), one panel per muscle, against a reference such as OpenSim's own MuscleAnalysis.
They return the matplotlib ``Figure``; matplotlib is imported only when they are called
(``pip install matplotlib``).
"""

from ._figures import plot_coordinates as plot_coordinates
from ._figures import plot_marker_errors as plot_marker_errors
from ._figures import plot_muscles as plot_muscles
from ._figures import plot_pose as plot_pose
from ._figures import plot_trajectory as plot_trajectory
from ._scene import geometry_poses as geometry_poses
from ._view import View as View
