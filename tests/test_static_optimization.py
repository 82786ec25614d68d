"""Static optimization: ``sj.StaticOptimization`` (OpenSim's ``StaticOptimization``) and
OpenSim's ``AnalyzeTool`` setup that runs it (``sj.io.read_analyze_setup``), checked against
OpenSim 4.6's own analysis on the same files (gait14dof22musc with its muscles replaced by
``DeGrooteFregly2016Muscle`` and reserve actuators on every coordinate, the gait-like trial
and force plates of ``test_inverse_dynamics``), and on a synthetic arm against forward
dynamics, SciPy's optimizer and finite differences."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_inverse_dynamics import write_trial
from test_io_osim import model_path

import simjax as sj
from simjax.io import ModelFileError

jax.config.update("jax_enable_x64", True)


def _so_setup(name, t0, t1, criterion=1e-8):
    return (
        '<?xml version="1.0" encoding="UTF-8" ?>\n<OpenSimDocument Version="40000">'
        f'<AnalyzeTool name="{name}"><model_file>so_model.osim</model_file>'
        "<replace_force_set>false</replace_force_set><results_directory>results</results_directory>"
        f"<output_precision>16</output_precision><initial_time>{t0}</initial_time><final_time>{t1}</final_time>"
        '<AnalysisSet name="Analyses"><objects><StaticOptimization name="StaticOptimization">'
        f"<on>true</on><start_time>{t0}</start_time><end_time>{t1}</end_time><step_interval>1</step_interval>"
        "<use_model_force_set>true</use_model_force_set><activation_exponent>2</activation_exponent>"
        "<use_muscle_physiology>true</use_muscle_physiology>"
        f"<optimizer_convergence_criterion>{criterion}</optimizer_convergence_criterion>"
        "<optimizer_max_iterations>200</optimizer_max_iterations></StaticOptimization>"
        f'<MuscleAnalysis name="MuscleAnalysis"><on>true</on><start_time>{t0}</start_time>'
        f"<end_time>{t1}</end_time><step_interval>1</step_interval><muscle_list>all</muscle_list>"
        "<moment_arm_coordinate_list>all</moment_arm_coordinate_list><compute_moments>true</compute_moments>"
        "</MuscleAnalysis></objects></AnalysisSet>"
        "<external_loads_file>loads.xml</external_loads_file><coordinates_file>motion.mot</coordinates_file>"
        "<lowpass_cutoff_frequency_for_coordinates>6</lowpass_cutoff_frequency_for_coordinates>"
        "</AnalyzeTool></OpenSimDocument>"
    )


def write_so_trial(d, t0=0.45, t1=0.5, criterion=1e-8):
    """In folder ``d``: the trial of ``write_trial``, gait14dof22musc's muscles as
    rigid-tendon DeGrooteFregly2016Muscles (OpenSim's ``replaceMuscles``) with a reserve
    CoordinateActuator on every coordinate (100 on the pelvis, 10 elsewhere) as
    so_model.osim, and so.xml, a static optimization setup over ``t0..t1`` s at OpenSim's
    convergence ``criterion``. Also used by benchmarks/bench_static_optimization.py."""
    import opensim as osim

    write_trial(d, model_path("gait14dof22musc"))
    m = osim.Model(model_path("gait14dof22musc"))
    osim.DeGrooteFregly2016Muscle.replaceMuscles(m)
    for i in range(m.getMuscles().getSize()):
        osim.DeGrooteFregly2016Muscle.safeDownCast(m.getMuscles().get(i)).set_ignore_tendon_compliance(True)
    for c in m.getCoordinateSet():
        a = osim.CoordinateActuator(c.getName())
        a.setName(c.getName() + "_reserve")
        a.setOptimalForce(100.0 if c.getName().startswith("pelvis") else 10.0)
        m.addForce(a)
    m.finalizeConnections()
    m.printToXML(str(d / "so_model.osim"))
    (d / "so.xml").write_text(_so_setup("so", t0, t1, criterion))
    return d


@pytest.fixture(scope="module")
def trial(tmp_path_factory):
    """:func:`write_so_trial` over 0.45..0.5 s (6 frames)."""
    pytest.importorskip("opensim")
    return write_so_trial(tmp_path_factory.mktemp("so_trial"))


@pytest.mark.oracle
def test_the_tool_equals_opensims_static_optimization(trial, tmp_path):
    """simjax's tool against OpenSim's AnalyzeTool on the same setup (6 frames, 39
    actuators): the activations agree to 1e-5 (measured 6.7e-7: OpenSim's IPOPT at
    1e-8) and so do the costs to 1e-7 (measured 3e-8; OpenSim's, a little lower, miss the
    accelerations by 6e-9 of the largest generalized force, simjax's by 1e-12)."""
    osim = pytest.importorskip("opensim")
    osim.AnalyzeTool(str(trial / "so.xml")).run()
    ref = sj.io.read_sto(trial / "results" / "so_StaticOptimization_activation.sto")
    setup = sj.io.read_analyze_setup(trial / "so.xml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the model's left-out parts (wrap objects, ...)
        model = sj.io.load_osim(setup.model_file)
    res = setup.run(model, output_dir=tmp_path)
    names = list(res.activation.labels)
    assert len(names) == 22 + 17 and res.converged.all()
    np.testing.assert_allclose(res.time, np.asarray(ref.time), atol=1e-12)
    R = np.asarray(ref.data)[:, [list(ref.labels).index(n) for n in names]]
    A = np.asarray(res.activation.data)
    cost_osim, cost_sj = (R**2).sum(1), (A**2).sum(1)
    err = np.abs(A - R).max()
    r_sj = np.abs(res.residual).max() / (1 + np.abs(res.generalized_forces).max())
    print(f"activations differ by {err:.1e}; simjax's residual {r_sj:.1e}")
    assert err < 1e-5 and r_sj < 1e-10
    assert np.all(np.abs(cost_sj - cost_osim) <= 1e-7 * cost_osim)
    # the files OpenSim's tools read back
    back = sj.io.read_sto(res.files["activation"])
    np.testing.assert_allclose(np.asarray(back.data), A, rtol=1e-12, atol=1e-14)
    forces = sj.io.read_sto(res.files["force"])
    assert list(forces.labels) == names
    # the muscle analysis of the same run: every file OpenSim wrote that simjax writes
    assert set(sj.io.MUSCLE_ANALYSIS) <= set(res.muscle_analysis)
    worst = {}
    for key, tab in res.muscle_analysis.items():
        ref = sj.io.read_sto(trial / "results" / f"so_MuscleAnalysis_{key}.sto")
        cols = [list(ref.labels).index(n) for n in tab.labels]
        R = np.asarray(ref.data)[:, cols]
        assert back_file_matches(res.files[key], tab)
        worst[key] = np.abs(np.asarray(tab.data) - R).max() / max(np.abs(R).max(), 1e-3)
    key = max(worst, key=worst.get)
    print(f"muscle analysis: {len(worst)} files, worst {key} {worst[key]:.1e}")
    assert worst[key] < 1e-9


def back_file_matches(path, tab):
    """The .sto written reads back as the table (labels, times, values)."""
    back = sj.io.read_sto(path)
    return list(back.labels) == list(tab.labels) and np.allclose(back.data, tab.data, rtol=1e-12, atol=1e-14)


def _arm():
    """A planar three-link arm on pins (the third link locked at 0.3 rad), four muscles
    (shoulder and elbow flexor and extensor, one of them biarticular), a reserve on the
    shoulder (optimal force 5) and forces to apply for the forward-dynamics check."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    sj.Force.UniformGravity(forces, matter, [0, -9.81, 0])
    link = sj.Body(sj.MassProperties(1.5, [0.15, 0, 0], sj.Inertia(0.002, 0.05, 0.05)))
    upper = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(), link, sj.Transform(), name="upper")
    fore = sj.MobilizedBody.Pin(upper, sj.Transform(p=[0.3, 0, 0]), link, sj.Transform(), name="fore")
    hand = sj.MobilizedBody.Pin(fore, sj.Transform(p=[0.3, 0, 0]), link, sj.Transform(), name="hand")
    sj.Constraint.ConstantCoordinate(hand, 0, 0.3)
    pts = {
        "shoulder_flexor": [(matter.Ground(), [0.0, 0.1, 0.0]), (upper, [0.12, 0.03, 0.0])],
        "shoulder_extensor": [(matter.Ground(), [0.0, -0.1, 0.0]), (upper, [0.12, -0.03, 0.0])],
        "biceps": [(matter.Ground(), [0.0, 0.08, 0.0]), (upper, [0.2, 0.04, 0]), (fore, [0.06, 0.02, 0.0])],
        "triceps": [(upper, [0.05, -0.03, 0.0]), (fore, [-0.03, -0.02, 0.0])],
    }
    muscles = []
    for k, (name, ps) in enumerate(pts.items()):
        path = sj.GeometryPath(matter, name)
        for body, p in ps:
            path.append_path_point(body, p)
        L = (0.126, 0.152, 0.31, 0.25)[k]  # the path's length at q = (0.15, 1.0, 0.3)
        muscles.append(
            sj.DeGrooteFregly2016Muscle(
                forces,
                path,
                name=name,
                max_isometric_force=400.0 + 50 * k,
                optimal_fiber_length=0.65 * L,
                tendon_slack_length=0.33 * L,
                pennation_angle_at_optimal=0.1,
                ignore_tendon_compliance=True,
                ignore_activation_dynamics=True,
            )
        )
    reserve = sj.Force.CoordinateActuator(forces, upper, 0, gain=(5.0, 0.0, 0.0), name="shoulder_reserve")
    applied = sj.Force.DiscreteForces(forces, matter)
    state = system.realize_topology()
    state = hand.set_one_q(state, 0, 0.3)
    return system, muscles, reserve, applied, state


@pytest.fixture(scope="module")
def arm():
    return _arm()


def _frames(state, n=4, seed=0):
    rng = np.random.default_rng(seed)
    q = np.tile(np.asarray(state.q), (n, 1))
    q[:, :2] = rng.uniform([-0.3, 0.4], [0.6, 1.6], size=(n, 2))
    u = np.zeros((n, 3))
    u[:, :2] = rng.normal(scale=1.0, size=(n, 2))
    udot = np.zeros((n, 3))
    udot[:, :2] = rng.normal(scale=[4.0, 3.0], size=(n, 2))
    udot[-1, :2] = [30.0, -40.0]  # a fast move: muscles on their bounds, the reserve takes the rest
    return q, u, udot


@pytest.mark.oracle
def test_solution_moves_the_arm_as_asked_and_is_the_optimum(arm):
    """At four frames, the solution's forces applied in forward dynamics (constrained:
    the third link locked) give the target accelerations; its cost equals SciPy's SLSQP
    optimum of the same problem (p = 2 and p = 3) to 1e-7 with the bounds respected."""
    from scipy.optimize import minimize

    system, muscles, reserve, applied, state = arm
    matter = system.get_matter_subsystem()
    q, u, udot = (jnp.asarray(x) for x in _frames(state))

    @jax.jit
    def forward(qq, uu, act, force):
        """udot with the solution's reserve control and muscle tensions applied."""
        s = state.with_q(qq).with_u(uu)
        r = matter.calc_path_moment_arms(system.realize(s, sj.Stage.POSITION))
        fd = system.set_controls(s, jnp.concatenate([act[:1], jnp.zeros(4)]))
        for m in muscles:
            fd = m.disable(fd)
        fd = applied.set_all_mobility_forces(fd, r.T @ force[1:])
        return system.realize(fd, sj.Stage.ACCELERATION).udot

    for p in (2.0, 3.0):
        so = sj.StaticOptimization(system, activation_exponent=p, dependent_u=[2])

        @jax.jit
        def run(q, u, udot, so=so):
            sol = so.solve_trajectory(state, q, u, udot)
            eq = jax.vmap(lambda qq, uu, aa: so.equations(state.with_q(qq).with_u(uu), aa)[:2])(q, u, udot)
            return sol, eq

        sol, (C, d) = run(q, u, udot)
        assert bool(sol.converged.all())
        act = np.asarray(sol.activation)
        assert act[:, 1:].min() >= 0 and act[:, 1:].max() <= 1
        udot_fd = np.asarray(jax.vmap(forward)(q, u, sol.activation, sol.force))
        np.testing.assert_allclose(
            udot_fd[:, :2], udot[:, :2], rtol=0, atol=1e-9 * (1 + float(jnp.abs(udot).max()))
        )
        for k in range(len(q)):
            Ck, dk = np.asarray(C[k]), np.asarray(d[k])
            ref = minimize(
                lambda a: np.sum(np.abs(a) ** p),
                np.full(5, 0.1),
                jac=lambda a: p * np.sign(a) * np.abs(a) ** (p - 1),
                constraints=[{"type": "eq", "fun": lambda a: Ck @ a - dk, "jac": lambda a: Ck}],
                bounds=[(-np.inf, np.inf)] + [(0.0, 1.0)] * 4,
                method="SLSQP",
                options={"ftol": 1e-14, "maxiter": 500},
            )
            assert ref.success
            cost = float(sol.objective[k])
            assert abs(cost - ref.fun) <= 1e-7 * (1 + ref.fun)


def test_gradients_through_the_solution_equal_central_differences(arm):
    """d(total cost over the frames)/d(max isometric force of the biceps) and d/d(target
    acceleration) by reverse-mode autodiff through the batched solve equal central
    differences."""
    system, muscles, reserve, applied, state = arm
    q, u, udot = _frames(state, n=3, seed=1)
    so = sj.StaticOptimization(system, dependent_u=[2])
    biceps = muscles[2]

    @jax.jit
    def cost(F, acc):
        s = biceps.set_max_isometric_force(state, F)
        return so.solve_trajectory(s, q, u, acc).objective.sum()

    F0 = 450.0
    g_F, g_a = jax.grad(cost, argnums=(0, 1))(F0, jnp.asarray(udot))
    h = 0.1
    fd_F = (cost(F0 + h, udot) - cost(F0 - h, udot)) / (2 * h)
    np.testing.assert_allclose(float(g_F), float(fd_F), rtol=1e-6)
    e = np.zeros_like(udot)
    e[1, 1] = 1e-2
    fd_a = (cost(F0, udot + e) - cost(F0, udot - e)) / 2e-2
    np.testing.assert_allclose(float(g_a[1, 1]), float(fd_a), rtol=1e-6)


def test_bad_input_is_refused_clearly(arm, trial, tmp_path):
    system, muscles, reserve, applied, state = arm
    with pytest.raises(ValueError, match="activation_exponent must be a finite number above 1"):
        sj.StaticOptimization(system, activation_exponent=1.0)
    with pytest.raises(ValueError, match="min_control must hold one number per actuator"):
        sj.StaticOptimization(system, min_control=[0, 0])
    with pytest.raises(ValueError, match="min_control above max_control for biceps"):
        sj.StaticOptimization(system, min_control=[0, 0, 0, 0.9, 0], max_control=[1, 1, 1, 0.5, 1])
    so = sj.StaticOptimization(system)
    with pytest.raises(ValueError, match="the System has constraints: pass dependent_u"):
        so.solve(state, jnp.zeros(3))
    with pytest.raises(ValueError, match="udot must have shape"):
        sj.StaticOptimization(system, dependent_u=[2]).solve(state, jnp.zeros(2))
    # a model too weak for the motion: reported, not delivered as a solution
    weak = sj.StaticOptimization(
        system, dependent_u=[2], min_control=np.zeros(5), max_control=[0, 1, 1, 1, 1]
    )
    sol = jax.jit(weak.solve)(state.with_q(jnp.asarray([0.2, 1.0, 0.3])), jnp.asarray([80.0, -200.0, 0.0]))
    assert not bool(sol.converged) and float(jnp.abs(sol.residual).max()) > 1.0
    # setups OpenSim runs differently
    base = (trial / "so.xml").read_text()
    for change, msg in (
        (("<on>true</on>", "<on>false</on>"), "holds no StaticOptimization or MuscleAnalysis that is on"),
        (("<use_model_force_set>true", "<use_model_force_set>false"), "use_model_force_set"),
        (("<replace_force_set>false", "<replace_force_set>true"), "force_set_files"),
    ):
        bad = tmp_path / "bad.xml"
        bad.write_text(base.replace(*change))
        with pytest.raises(ModelFileError, match=msg):
            sj.io.read_analyze_setup(bad)


def test_handles_by_name(trial):
    """``model.actuator``, ``model.geometry_path`` and ``loads.get`` by name, with the close
    names in the error."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = sj.io.load_osim(trial / "so_model.osim")
    assert model.actuator("soleus_r") is model.muscle("soleus_r")
    assert model.actuator("knee_angle_r_reserve") is model.actuators["knee_angle_r_reserve"]
    assert model.geometry_path("soleus_r") is model.muscle("soleus_r").get_geometry_path()
    assert model.control_ranges["soleus_r"] == (0.01, 1.0)
    assert model.control_ranges["knee_angle_r_reserve"] == (-np.inf, np.inf)
    with pytest.raises(KeyError, match="did you mean"):
        model.actuator("soleus")
    with pytest.raises(KeyError, match="no path named"):
        model.geometry_path("nope")
    loads = sj.io.read_external_loads(trial / "loads.xml")
    assert loads.get("left").applied_to_body == "calcn_l"
    with pytest.raises(KeyError, match="the file has: right, left"):
        loads.get("middle")
