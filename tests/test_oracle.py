"""simjax against its peers: Simbody (through OpenSim), Pinocchio and MuJoCo.

At random states of pin chains (2, 7, 20, 50 links), a 10-link ball chain, a free-floating
humanoid-like tree and a random tree with every shared mobilizer kind, compare the mass
matrix, forward-dynamics ``udot`` with gravity and body transforms ``X_GB`` to 1e-9
relative. Ball and free joints are also compared in Euler-angle mode against OpenSim
(which runs Simbody in that mode). Models and the maps between layouts live in
``oracle_models.py``. Each peer is skipped when it is not installed.

Run ``pytest tests/test_oracle.py -s`` to print the largest relative error per model,
peer and quantity.
"""

import functools
import sys
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np
import pytest

import simjax as sj

sys.path.insert(0, str(Path(__file__).parent))
import oracle_models as om

pytestmark = pytest.mark.oracle

RTOL = 1e-9
#: model name -> number of random states compared
N_STATES = {
    "pin_chain_2": 3,
    "pin_chain_7": 3,
    "pin_chain_20": 2,
    "pin_chain_50": 2,
    "ball_chain_10": 3,
    "humanoid": 3,
    "mixed_tree": 3,
}
MODELS = list(N_STATES)
EULER_MODELS = ["ball_chain_10", "humanoid", "mixed_tree"]
PEERS = {"opensim": "opensim", "pinocchio": "pinocchio", "mujoco": "mujoco"}

#: (model, peer, quantity) -> largest relative error seen (printed at module end)
ERRORS: dict[tuple[str, str, str], float] = {}


# ----------------------------------------------------------------------------- fixtures


class SimjaxCase:
    """A model, its random states and simjax's results at them (one jit per mode)."""

    def __init__(self, name: str):
        self.name = name
        self.spec = om.ALL_MODELS[name]()
        rng = np.random.default_rng(1234)
        self.states = [om.random_state(self.spec, rng) for _ in range(N_STATES[name])]
        self.system, self.matter, self.bodies = om.to_simjax(self.spec)
        self._s0 = {False: self.system.realize_topology()}
        self._fn: dict[bool, object] = {}

    def _compiled(self, euler: bool):
        if euler not in self._fn:
            if euler:
                self._s0[True] = self.matter.set_use_euler_angles(self._s0[False], True)
            s0, system, matter = self._s0[euler], self.system, self.matter

            def f(q, u):
                s = system.realize(s0.with_q(q).with_u(u), sj.Stage.ACCELERATION)
                R, p = matter.get_body_transforms(s)
                return matter.calc_mass_matrix(s), s.udot, R, p

            self._fn[euler] = jax.jit(f)
        return self._fn[euler]

    @functools.cache  # noqa: B019 (one case per model, kept for the module)
    def results(self, euler: bool = False):
        """Per state: ``(M, udot, [(R_GB, p_GB) per spec body])`` as numpy."""
        f = self._compiled(euler)
        out = []
        for qe, qq, u in self.states:
            M, ud, R, p = f(jnp.asarray(qe if euler else qq), jnp.asarray(u))
            R, p = np.asarray(R), np.asarray(p)
            X = [(R[i + 1], p[i + 1]) for i in range(len(self.spec.bodies))]
            out.append((np.asarray(M), np.asarray(ud), X))
        return out


@functools.cache
def simjax_case(name: str) -> SimjaxCase:
    return SimjaxCase(name)


@functools.cache
def peer_model(name: str, peer: str):
    spec = simjax_case(name).spec
    return {"opensim": om.to_opensim, "pinocchio": om.to_pinocchio, "mujoco": om.to_mujoco}[peer](spec)


def peer_results(name: str, peer: str, euler: bool = False):
    """Peer's ``(M, udot, X_GB list)`` per state, mapped to simjax's layout."""
    pytest.importorskip(PEERS[peer])
    case = simjax_case(name)
    spec, pm = case.spec, peer_model(name, peer)
    out = []
    for qe, qq, u in case.states:
        q = qe if euler else qq
        if peer == "opensim":
            out.append(
                (
                    pm.mass_matrix(spec, q, u, euler),
                    pm.udot(spec, q, u, euler),
                    pm.body_transforms(spec, q, u, euler),
                )
            )
            continue
        qp, vp, T, c = pm.map.qv(spec, q, u, euler)
        if peer == "pinocchio":
            M = om.pinocchio_mass_matrix(pm, qp)
            a = om.pinocchio_aba(pm, qp, vp)
            X = pm.body_transforms(qp)
        else:
            pm.forward(qp, vp)
            M, a, X = pm.mass_matrix(), pm.data.qacc.copy(), pm.body_transforms()
        out.append((T.T @ M @ T, np.linalg.solve(T, a - c), X))
    return out


@pytest.fixture(scope="module", autouse=True)
def _report_errors():
    yield
    if ERRORS:
        print("\nlargest relative errors (max|simjax - peer| / max|peer|):")
        for (model, peer, what), e in sorted(ERRORS.items()):
            print(f"  {model:14s} {peer:10s} {what:10s} {e:.2e}")
    simjax_case.cache_clear()
    peer_model.cache_clear()


def _check(actual, desired, key, atol_scale=None):
    actual, desired = np.asarray(actual), np.asarray(desired)
    scale = max(1.0, float(np.abs(desired).max())) if atol_scale is None else atol_scale
    err = float(np.abs(actual - desired).max()) / scale
    ERRORS[key] = max(ERRORS.get(key, 0.0), err)
    np.testing.assert_allclose(actual, desired, rtol=RTOL, atol=RTOL * scale, err_msg=str(key))


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("peer", list(PEERS))
@pytest.mark.parametrize("model", MODELS)
def test_mass_matrix(model, peer):
    ours = simjax_case(model).results()
    for (M, _, _), (Mp, _, _) in zip(ours, peer_results(model, peer)):
        _check(M, Mp, (model, peer, "M"))


@pytest.mark.parametrize("peer", list(PEERS))
@pytest.mark.parametrize("model", MODELS)
def test_forward_dynamics(model, peer):
    ours = simjax_case(model).results()
    for (_, ud, _), (_, udp, _) in zip(ours, peer_results(model, peer)):
        _check(ud, udp, (model, peer, "udot"))


@pytest.mark.parametrize("peer", list(PEERS))
@pytest.mark.parametrize("model", MODELS)
def test_body_transforms(model, peer):
    case = simjax_case(model)
    n = len(case.spec.bodies)
    which = sorted({0, n // 2, n - 1})  # first, a middle and the last body
    for (_, _, X), (_, _, Xp) in zip(case.results(), peer_results(model, peer)):
        for i in which:
            _check(X[i][0], Xp[i][0], (model, peer, "R_GB"), atol_scale=1.0)
            _check(X[i][1], Xp[i][1], (model, peer, "p_GB"))


@pytest.mark.parametrize("model", EULER_MODELS)
def test_euler_mode_against_opensim(model):
    """Ball and free joints as body-fixed X-Y-Z angles (OpenSim's own mode)."""
    case = simjax_case(model)
    ours = case.results(euler=True)
    for (M, ud, X), (Mp, udp, Xp) in zip(ours, peer_results(model, "opensim", euler=True)):
        _check(M, Mp, (model, "opensim", "M euler"))
        _check(ud, udp, (model, "opensim", "udot euler"))
        for i in range(len(X)):
            _check(X[i][0], Xp[i][0], (model, "opensim", "R euler"), atol_scale=1.0)
            _check(X[i][1], Xp[i][1], (model, "opensim", "p euler"))


@pytest.mark.parametrize("model", EULER_MODELS)
def test_euler_mode_equals_quaternion_mode(model):
    """Same physical state in both modes: same M, udot and X_GB (no peer needed)."""
    case = simjax_case(model)
    for (M, ud, X), (Me, ude, Xe) in zip(case.results(), case.results(euler=True)):
        _check(Me, M, (model, "simjax", "M q-vs-e"))
        _check(ude, ud, (model, "simjax", "udot q-vs-e"))
        for (R, p), (Re, pe) in zip(X, Xe):
            _check(Re, R, (model, "simjax", "R q-vs-e"), atol_scale=1.0)
            _check(pe, p, (model, "simjax", "p q-vs-e"))


def test_model_zoo_covers_the_shared_kinds():
    """The random tree has every shared kind, welds with children, and a creation order
    that is not depth-first (so the peers' permutations are exercised)."""
    spec = om.mixed_tree()
    kinds = {b.joint for b in spec.bodies}
    assert kinds == set(om.JOINTS)
    welds = [i for i, b in enumerate(spec.bodies) if b.joint == "weld"]
    assert any(spec.children(i) for i in welds)
    assert any(spec.bodies[i].parent == -1 for i in welds)
    assert spec.dfs_order() != list(range(len(spec.bodies)))
    hum = om.humanoid()
    assert hum.bodies[0].joint == "free" and hum.nu == 26
