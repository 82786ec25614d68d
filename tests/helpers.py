"""Shared test helpers: a model zoo with random, physically valid parameters."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import simjax as sj

MB = sj.MobilizedBody

ALL_KINDS = (
    "Pin",
    "Slider",
    "Screw",
    "Universal",
    "Cylinder",
    "BendStretch",
    "Planar",
    "Gimbal",
    "Ball",
    "Ellipsoid",
    "Translation",
    "SphericalCoords",
    "Bushing",
    "Free",
    "LineOrientation",
    "FreeLine",
    "Weld",
)


def random_body(rng: np.random.Generator) -> sj.Body:
    pts = rng.normal(size=(5, 3))
    Ic = sum(0.3 * (p @ p * np.eye(3) - np.outer(p, p)) for p in pts) + 0.01 * np.eye(3)
    return sj.Body.Rigid(
        sj.MassProperties.from_com_inertia(rng.uniform(0.5, 2.0), rng.normal(size=3) * 0.3, Ic)
    )


def random_transform(rng: np.random.Generator, scale: float = 0.5) -> sj.Transform:
    return sj.Transform(
        sj.Rotation.from_axis_angle(jnp.asarray(rng.normal(size=3))), rng.normal(size=3) * scale
    )


def make_mobod(kind: str, parent, rng: np.random.Generator, name: str | None = None):
    X_PF, body, X_BM = random_transform(rng), random_body(rng), random_transform(rng)
    if kind == "Screw":
        return MB.Screw(parent, X_PF, body, X_BM, pitch=0.3, name=name)
    if kind == "Ellipsoid":
        return MB.Ellipsoid(parent, X_PF, body, X_BM, radii=[0.5, 0.7, 0.9], name=name)
    return getattr(MB, kind)(parent, X_PF, body, X_BM, name=name)


def random_tree(seed: int = 0, kinds=ALL_KINDS, gravity=(0.3, -9.81, 0.1)):
    """A tree with one mobilized body of each kind, random parents, frames and masses."""
    rng = np.random.default_rng(seed)
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    if gravity is not None:
        sj.Force.UniformGravity(forces, matter, list(gravity))
    mobods = [matter.Ground()]
    for k in kinds:
        parent = mobods[int(rng.integers(len(mobods)))]
        mobods.append(make_mobod(k, parent, rng))
    return system, matter, forces, mobods


def pendulum(n: int = 2, seed: int = 0, kind: str = "Pin"):
    """An n-link chain of one kind with gravity along -y."""
    rng = np.random.default_rng(seed)
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    sj.Force.UniformGravity(forces, matter, [0, -9.81, 0])
    parent = matter.Ground()
    mobods = [parent]
    for _ in range(n):
        parent = getattr(MB, kind)(
            parent, sj.Transform(p=[0, -0.5, 0]), random_body(rng), sj.Transform(p=[0, 0.5, 0])
        )
        mobods.append(parent)
    return system, matter, forces, mobods


def random_state(system, seed: int = 1, scale: float = 0.4):
    rng = np.random.default_rng(seed)
    s0 = system.realize_topology()
    q = s0.q + jnp.asarray(rng.normal(size=s0.nq)) * scale
    u = jnp.asarray(rng.normal(size=s0.nu))
    return s0.with_q(q).with_u(u)


def rk4_rollout(system, state, h: float, n: int):
    """Fixed-step RK4 on (q, u) written out here, independent of the library's integrators."""
    nq = state.nq

    def f(y):
        s = system.realize(state.with_q(y[:nq]).with_u(y[nq:]), sj.Stage.ACCELERATION)
        return jnp.concatenate([s.qdot, s.udot])

    def step(y, _):
        k1 = f(y)
        k2 = f(y + h / 2 * k1)
        k3 = f(y + h / 2 * k2)
        k4 = f(y + h * k3)
        return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), None

    y0 = jnp.concatenate([state.q, state.u])
    y, _ = jax.lax.scan(step, y0, None, length=n)
    return state.with_q(y[:nq]).with_u(y[nq:])


def fd_jacobian(f, x, eps: float = 1e-6):
    """Central finite-difference Jacobian of f at x (1-D)."""
    x = np.asarray(x, dtype=float)
    cols = []
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = eps
        cols.append((np.asarray(f(jnp.asarray(x + e))) - np.asarray(f(jnp.asarray(x - e)))) / (2 * eps))
    return np.stack(cols, axis=-1)


def fourbar():
    """Crank-coupler-rocker (three Pins, 1 m / 2 m / 1.5 m) closed to Ground by a Ball at
    (2, 0.5, 0): a planar loop, so the Ball's z row is redundant. ``(system, matter, ball)``."""
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    sj.Force.UniformGravity(forces, matter, [0, -9.81, 0])
    mp = sj.MassProperties(1.0, [0.5, 0, 0], sj.Inertia(0.01, 0.35, 0.35))
    G = matter.Ground()
    crank = sj.MobilizedBody.Pin(G, sj.Transform(), mp, sj.Transform())
    coupler = sj.MobilizedBody.Pin(
        crank,
        sj.Transform(p=[1, 0, 0]),
        sj.MassProperties(1.0, [1, 0, 0], sj.Inertia(0.01, 1.4, 1.4)),
        sj.Transform(),
    )
    rocker = sj.MobilizedBody.Pin(coupler, sj.Transform(p=[2, 0, 0]), mp, sj.Transform())
    ball = sj.Constraint.Ball(G, [2.0, 0.5, 0], rocker, [1.5, 0, 0])
    return system, matter, ball


#: A one-body OpenSim model (a link on a pin to Ground), ``{name}`` and its attached
#: ``{geometry}`` to fill in: the loaders' file-handling tests write it beside their meshes.
ONE_PIN_OSIM = """<?xml version="1.0" encoding="UTF-8" ?>
<OpenSimDocument Version="40000"><Model name="{name}">
  <Ground name="ground"/>
  <BodySet name="bodyset"><objects>
    <Body name="link"><mass>1</mass><mass_center>0 -0.5 0</mass_center>
      <inertia>0.1 0.01 0.1 0 0 0</inertia>
      <attached_geometry>{geometry}</attached_geometry>
    </Body>
  </objects></BodySet>
  <JointSet name="jointset"><objects>
    <PinJoint name="hinge">
      <socket_parent_frame>/ground</socket_parent_frame>
      <socket_child_frame>/bodyset/link</socket_child_frame>
      <coordinates><Coordinate name="q1"/></coordinates>
    </PinJoint>
  </objects></JointSet>
</Model></OpenSimDocument>"""


# ----------------------------------------------------------------------- OpenSim oracles


def osim_vec(v) -> np.ndarray:
    """An OpenSim/SimTK vector (``Vec3``, ``Vector``, ``SpatialVec`` halves) as an array."""
    n = v.size() if hasattr(v, "size") else 3
    return np.array([v.get(i) for i in range(n)])


def hc_params_xml(geometry: str, params: dict) -> str:
    """One ``<HuntCrossleyForce::ContactParameters>`` block for the named geometry."""
    tags = "".join(f"<{k}>{v!r}</{k}>" for k, v in params.items())
    return (
        "<HuntCrossleyForce::ContactParameters>"
        f"<geometry>{geometry}</geometry>{tags}</HuntCrossleyForce::ContactParameters>"
    )


def splice_hc_parameters(text: str, blocks: str, force: str | None = None) -> str:
    """An OpenSim file's text with the (first) ``HuntCrossleyForce`` parameter block of
    ``force`` (of the first such force when None) replaced by ``blocks``: OpenSim's Python
    API writes one block per force, and per-surface parameters need one per surface."""
    tag = "HuntCrossleyForce::ContactParameters>"
    at = 0 if force is None else text.index(f'<HuntCrossleyForce name="{force}">')
    i = text.index("<" + tag, at)
    j = text.index("</" + tag, i) + len(tag) + 2
    return text[:i] + blocks + text[j:]
