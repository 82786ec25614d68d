"""Neutral model descriptions and builders for the peer-oracle tests.

A ``ModelSpec`` lists bodies (parents before children) with, for each one, its joint kind,
the inboard frame ``X_PF`` (on the parent), the outboard frame ``X_BM`` (on the body), and
the mass properties with the inertia about the **center of mass** (OpenSim's convention).
Builders turn it into a simjax System, an OpenSim Model, a Pinocchio Model and an MJCF
string, each with the maps between simjax's ``(q, u)`` and the peer's layout.

Conventions mapped here (see ``shared/PEERS.md``):

* simjax ``q``/``u``: bodies in creation (spec) order, each body's block contiguous;
  Ball ``q`` = quaternion ``[w, x, y, z]`` (or body-fixed X-Y-Z angles in Euler mode),
  ``u = w_FM`` in F; Free ``q = [quat | angles, p_FM]``, ``u = [w_FM in F, v_FM in F]``;
  Planar ``q = [angle, x, y]``.
* OpenSim runs Simbody in Euler mode; its Q/U slots are found by probing each Coordinate.
* Pinocchio (added depth-first): quaternions ``[x, y, z, w]``; Spherical ``v = R_FMᵀ u``;
  FreeFlyer ``q = [p, quat]``, ``v = [R_FMᵀ v_F, R_FMᵀ w_F]``; Universal, Gimbal and Planar
  are Composite joints (Planar as PX, PY, RZ). A welded body's inertia is appended to the
  joint it is rigidly attached to.
* MuJoCo: each MJCF body frame is the mobilizer's M frame; ball ``qpos = [w, x, y, z]``,
  ``qvel = R_FMᵀ u``; free ``qpos = [p_GM, quat_GM]``, ``qvel = [v in world, w in M]``;
  multi-dof joints are several hinges/slides in one body (composed body-fixed).

For every peer with velocity ``v_peer = T u`` the mass matrix maps as
``M_simjax = Tᵀ M_peer T`` and accelerations as ``udot = T⁻¹ (a_peer − Ṫ u)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# ----------------------------------------------------------------------------- rotations


def rot_x(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[1.0, 0, 0], [0, c, -s], [0, s, c]])


def rot_y(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, 0, s], [0, 1.0, 0], [-s, 0, c]])


def rot_z(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])


def body_xyz(a) -> np.ndarray:
    """``Rx(a0) Ry(a1) Rz(a2)`` (body-fixed X-Y-Z)."""
    return rot_x(a[0]) @ rot_y(a[1]) @ rot_z(a[2])


def xyz_from_rot(R: np.ndarray) -> np.ndarray:
    """Body-fixed X-Y-Z angles of ``R`` (middle angle in ``[-pi/2, pi/2]``)."""
    return np.array(
        [
            np.arctan2(-R[1, 2], R[2, 2]),
            np.arcsin(np.clip(R[0, 2], -1.0, 1.0)),
            np.arctan2(-R[0, 1], R[0, 0]),
        ]
    )


def quat_from_rot(R: np.ndarray) -> np.ndarray:
    """Unit quaternion ``[w, x, y, z]`` (``w >= 0``) of a rotation matrix."""
    t = np.trace(R)
    if t > max(R[0, 0], R[1, 1], R[2, 2]):
        w = 0.5 * np.sqrt(1.0 + t)
        q = np.array(
            [w, (R[2, 1] - R[1, 2]) / (4 * w), (R[0, 2] - R[2, 0]) / (4 * w), (R[1, 0] - R[0, 1]) / (4 * w)]
        )
    else:
        i = int(np.argmax(np.diag(R)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * np.sqrt(1.0 + R[i, i] - R[j, j] - R[k, k])
        q = np.empty(4)
        q[0] = (R[k, j] - R[j, k]) / s
        q[1 + i] = 0.25 * s
        q[1 + j] = (R[j, i] + R[i, j]) / s
        q[1 + k] = (R[k, i] + R[i, k]) / s
    q = q / np.linalg.norm(q)
    return q if q[0] >= 0 else -q


def rot_from_quat(q) -> np.ndarray:
    w, x, y, z = np.asarray(q, float) / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def random_rotation(rng: np.random.Generator, scale: float = np.pi) -> np.ndarray:
    a = rng.uniform(-scale, scale, 3)
    a[1] = np.clip(a[1], -1.3, 1.3)
    return body_xyz(a)


def random_inertia(rng: np.random.Generator, lo: float = 0.02, hi: float = 0.04) -> np.ndarray:
    """Inertia about the com with principal moments in ``[lo, hi]`` (``hi <= 2 lo``), rotated."""
    Q = random_rotation(rng)
    return Q @ np.diag(rng.uniform(lo, hi, 3)) @ Q.T


# ----------------------------------------------------------------------------- spec

#: kind -> (nq in quaternion mode, nq in Euler mode, nu)
JOINTS = {
    "pin": (1, 1, 1),
    "slider": (1, 1, 1),
    "universal": (2, 2, 2),
    "gimbal": (3, 3, 3),
    "planar": (3, 3, 3),
    "ball": (4, 3, 3),
    "free": (7, 6, 6),
    "weld": (0, 0, 0),
}


@dataclass(frozen=True)
class BodySpec:
    """One body and the joint to its parent (``parent == -1``: Ground)."""

    name: str
    parent: int
    joint: str
    R_PF: np.ndarray
    p_PF: np.ndarray
    R_BM: np.ndarray
    p_BM: np.ndarray
    mass: float
    com: np.ndarray
    inertia_com: np.ndarray  # about the com, in B


@dataclass
class ModelSpec:
    """A tree of bodies, parents listed before their children."""

    name: str
    bodies: list[BodySpec]
    gravity: np.ndarray = field(default_factory=lambda: np.array([0.0, -9.81, 0.0]))

    def __post_init__(self):
        for i, b in enumerate(self.bodies):
            assert b.joint in JOINTS, b.joint
            assert -1 <= b.parent < i, f"{b.name}: parent must come first"
            if b.joint == "free":
                assert b.parent == -1, "free joints only on Ground (MuJoCo)"

    def q_blocks(self, euler: bool = False) -> list[slice]:
        out, k = [], 0
        for b in self.bodies:
            n = JOINTS[b.joint][1 if euler else 0]
            out.append(slice(k, k + n))
            k += n
        return out

    def u_blocks(self) -> list[slice]:
        out, k = [], 0
        for b in self.bodies:
            n = JOINTS[b.joint][2]
            out.append(slice(k, k + n))
            k += n
        return out

    @property
    def nu(self) -> int:
        return sum(JOINTS[b.joint][2] for b in self.bodies)

    def nq(self, euler: bool = False) -> int:
        return sum(JOINTS[b.joint][1 if euler else 0] for b in self.bodies)

    def children(self, i: int) -> list[int]:
        return [k for k, b in enumerate(self.bodies) if b.parent == i]

    def dfs_order(self) -> list[int]:
        """Spec indices in depth-first preorder (children in spec order)."""
        out: list[int] = []

        def visit(i):
            for c in self.children(i):
                out.append(c)
                visit(c)

        visit(-1)
        return out


def _body(
    rng,
    name,
    parent,
    joint,
    *,
    p_PF=None,
    p_BM=None,
    rot_scale=0.6,
    com=None,
    mass=None,
    R_PF=None,
    R_BM=None,
) -> BodySpec:
    return BodySpec(
        name=name,
        parent=parent,
        joint=joint,
        R_PF=random_rotation(rng, rot_scale) if R_PF is None else np.asarray(R_PF, float),
        p_PF=(rng.normal(0, 0.05, 3) + [0.02, -0.4, 0.03]) if p_PF is None else np.asarray(p_PF, float),
        R_BM=random_rotation(rng, rot_scale) if R_BM is None else np.asarray(R_BM, float),
        p_BM=rng.normal(0, 0.03, 3) if p_BM is None else np.asarray(p_BM, float),
        mass=float(rng.uniform(0.5, 2.0)) if mass is None else float(mass),
        com=(rng.normal(0, 0.03, 3) + [0, -0.2, 0]) if com is None else np.asarray(com, float),
        inertia_com=random_inertia(rng),
    )


# ----------------------------------------------------------------------------- generators


def pin_chain(n: int, seed: int = 0) -> ModelSpec:
    """``n``-link pendulum of Pin joints with tilted axes, offsets and full inertias."""
    rng = np.random.default_rng(seed)
    bodies = [_body(rng, f"link{i}", i - 1, "pin") for i in range(n)]
    return ModelSpec(f"pin_chain_{n}", bodies)


def ball_chain(n: int = 10, seed: int = 1) -> ModelSpec:
    """``n``-link chain of Ball joints."""
    rng = np.random.default_rng(seed)
    bodies = [_body(rng, f"seg{i}", i - 1, "ball") for i in range(n)]
    return ModelSpec(f"ball_chain_{n}", bodies)


def humanoid(seed: int = 2) -> ModelSpec:
    """Free pelvis with 20 revolute dofs: two legs (hip flex/add, knee, ankle), spine (2),
    neck and head, two arms (shoulder flex/abd, elbow, wrist)."""
    rng = np.random.default_rng(seed)
    B: list[BodySpec] = []

    def add(name, parent, joint, p_PF, com, mass, R_PF=None):
        B.append(_body(rng, name, parent, joint, p_PF=p_PF, com=com, mass=mass, R_PF=R_PF, rot_scale=0.3))
        return len(B) - 1

    pelvis = add(
        "pelvis", -1, "free", [0.1, 0.95, -0.05], [0, 0.05, 0], 11.0, R_PF=body_xyz([0.1, 0.2, -0.05])
    )
    for side, s in (("r", 1.0), ("l", -1.0)):
        hf = add(f"hip_flex_{side}", pelvis, "pin", [-0.05, -0.07, 0.08 * s], [0, -0.02, 0], 0.5)
        ha = add(
            f"femur_{side}",
            hf,
            "pin",
            [0, -0.02, 0],
            [0, -0.17, 0],
            8.0,
            R_PF=rot_y(np.pi / 2) @ rot_x(0.1 * s),
        )
        kn = add(f"tibia_{side}", ha, "pin", [0, -0.4, 0], [0, -0.18, 0], 3.5)
        add(f"foot_{side}", kn, "pin", [0, -0.43, 0], [0.1, -0.03, 0], 1.2)
    lum = add("lumbar", pelvis, "pin", [-0.1, 0.08, 0], [0, 0.1, 0], 6.0)
    tor = add("torso", lum, "pin", [0, 0.2, 0], [0, 0.2, 0], 20.0, R_PF=rot_y(np.pi / 2))
    nk = add("neck", tor, "pin", [0, 0.42, 0], [0, 0.05, 0], 1.0)
    add("head", nk, "pin", [0, 0.1, 0], [0.02, 0.1, 0], 4.5, R_PF=rot_y(-np.pi / 2))
    for side, s in (("r", 1.0), ("l", -1.0)):
        sf = add(f"shoulder_{side}", tor, "pin", [0.0, 0.36, 0.17 * s], [0, -0.02, 0], 0.4)
        hu = add(
            f"humerus_{side}",
            sf,
            "pin",
            [0, -0.02, 0],
            [0, -0.15, 0],
            2.0,
            R_PF=rot_x(np.pi / 2) @ rot_y(0.2 * s),
        )
        el = add(f"ulna_{side}", hu, "pin", [0, -0.3, 0], [0, -0.12, 0], 1.2)
        add(f"hand_{side}", el, "pin", [0, -0.26, 0], [0, -0.07, 0], 0.5, R_PF=rot_y(np.pi / 2))
    return ModelSpec("humanoid", B)


def mixed_tree(seed: int = 3) -> ModelSpec:
    """Random tree with every shared mobilizer kind (Pin, Slider, Universal, Gimbal, Planar,
    Ball, Free, Weld), welds with children, a weld on Ground and two free bodies;
    creation order is not depth-first."""
    rng = np.random.default_rng(seed)
    kinds = [
        "free",
        "pin",
        "slider",
        "universal",
        "gimbal",
        "ball",
        "weld",
        "planar",
        "pin",
        "ball",
        "weld",
        "gimbal",
        "universal",
        "slider",
        "free",
        "weld",
        "pin",
        "planar",
        "ball",
        "pin",
    ]
    B: list[BodySpec] = []
    for i, k in enumerate(kinds):
        if k == "free":
            parent = -1
        elif i == 15:  # a weld on Ground, which gets children below
            parent = -1
        elif i >= 16:
            parent = 15 if i < 18 else int(rng.integers(0, i))
        else:
            parent = int(rng.integers(0, i))
        B.append(_body(rng, f"b{i}_{k}", parent, k, rot_scale=np.pi))
    return ModelSpec("mixed_tree", B)


def small_tree(seed: int = 4) -> ModelSpec:
    """Four bodies: a free base, a pin arm and a ball head on it, a slider tip on the head;
    gravity tilted off the axes (the force-element tests use it)."""
    rng = np.random.default_rng(seed)
    bodies = [
        _body(rng, "base", -1, "free", p_PF=[0.1, 0.8, -0.1]),
        _body(rng, "arm", 0, "pin"),
        _body(rng, "head", 0, "ball"),
        _body(rng, "tip", 2, "slider"),
    ]
    return ModelSpec("small_tree", bodies, gravity=np.array([0.4, -9.81, 0.3]))


# ----------------------------------------------------------------------------- states


def random_state(spec: ModelSpec, rng: np.random.Generator, u_scale: float = 1.0):
    """Random ``(q_euler, q_quat, u)`` in simjax's layouts (same physical state)."""
    qe, qq = [], []
    for b in spec.bodies:
        k = b.joint
        if k == "pin":
            v = rng.uniform(-np.pi, np.pi, 1)
        elif k == "slider":
            v = rng.uniform(-0.5, 0.5, 1)
        elif k == "universal":
            v = rng.uniform(-1.2, 1.2, 2)
        elif k in ("gimbal", "ball", "free"):
            v = np.array([rng.uniform(-np.pi, np.pi), rng.uniform(-1.2, 1.2), rng.uniform(-np.pi, np.pi)])
        elif k == "planar":
            v = np.r_[rng.uniform(-np.pi, np.pi), rng.uniform(-0.5, 0.5, 2)]
        else:
            v = np.zeros(0)
        if k == "free":
            v = np.r_[v, rng.uniform(-1, 1, 3)]
        qe.append(v)
        if k == "ball":
            qq.append(quat_from_rot(body_xyz(v)))
        elif k == "free":
            qq.append(np.r_[quat_from_rot(body_xyz(v[:3])), v[3:]])
        else:
            qq.append(v)
    u = rng.normal(0, u_scale, spec.nu)
    return np.concatenate(qe), np.concatenate(qq), u


def joint_poses(spec: ModelSpec, q: np.ndarray, euler: bool):
    """Per body: ``(R_FM, p_FM, coords)`` where coords are OpenSim's coordinate values."""
    out = []
    for b, sl in zip(spec.bodies, spec.q_blocks(euler)):
        qb = np.asarray(q[sl], float)
        k = b.joint
        if k == "pin":
            out.append((rot_z(qb[0]), np.zeros(3), qb))
        elif k == "slider":
            out.append((np.eye(3), np.array([qb[0], 0, 0]), qb))
        elif k == "universal":
            out.append((rot_x(qb[0]) @ rot_y(qb[1]), np.zeros(3), qb))
        elif k == "gimbal":
            out.append((body_xyz(qb), np.zeros(3), qb))
        elif k == "planar":
            out.append((rot_z(qb[0]), np.array([qb[1], qb[2], 0.0]), qb))
        elif k in ("ball", "free"):
            na = 3 if euler else 4
            R = body_xyz(qb[:na]) if euler else rot_from_quat(qb[:na])
            ang = qb[:3] if euler else xyz_from_rot(R)
            p = qb[na:] if k == "free" else np.zeros(3)
            out.append((R, p, np.r_[ang, p] if k == "free" else ang))
        else:
            out.append((np.eye(3), np.zeros(3), np.zeros(0)))
    return out


# ----------------------------------------------------------------------------- simjax


def to_simjax(spec: ModelSpec, return_forces: bool = False):
    """``(system, matter, bodies)``; ``bodies[i]`` is spec body ``i``. With
    ``return_forces``: ``(system, matter, bodies, forces, gravity)``, the
    ``GeneralForceSubsystem`` and its ``UniformGravity`` element, to add more forces to."""
    import simjax as sj

    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    gravity = sj.Force.UniformGravity(forces, matter, list(spec.gravity))
    kinds = {
        "pin": sj.MobilizedBody.Pin,
        "slider": sj.MobilizedBody.Slider,
        "universal": sj.MobilizedBody.Universal,
        "gimbal": sj.MobilizedBody.Gimbal,
        "planar": sj.MobilizedBody.Planar,
        "ball": sj.MobilizedBody.Ball,
        "free": sj.MobilizedBody.Free,
        "weld": sj.MobilizedBody.Weld,
    }
    bodies = []
    for b in spec.bodies:
        parent = matter.Ground() if b.parent < 0 else bodies[b.parent]
        mp = sj.MassProperties.from_com_inertia(b.mass, b.com, sj.Inertia(b.inertia_com))
        bodies.append(
            kinds[b.joint](
                parent,
                sj.Transform(R=b.R_PF, p=b.p_PF),
                sj.Body.Rigid(mp),
                sj.Transform(R=b.R_BM, p=b.p_BM),
                name=b.name,
            )
        )
    if return_forces:
        return system, matter, bodies, forces, gravity
    return system, matter, bodies


# ----------------------------------------------------------------------------- OpenSim


@dataclass
class OpenSimModel:
    model: object
    state: object
    bodies: list  # osim.Body per spec body
    q_slots: list[list[int]]  # per spec body: Q slot of each coordinate
    u_slots: list[list[int]]
    nQ: int
    nU: int

    def set_state(self, spec: ModelSpec, q: np.ndarray, u: np.ndarray, euler: bool):
        import opensim as osim

        Q = np.zeros(self.nQ)
        for slots, (_, _, coords) in zip(self.q_slots, joint_poses(spec, q, euler)):
            Q[slots] = coords
        U = np.zeros(self.nU)
        for slots, sl in zip(self.u_slots, spec.u_blocks()):
            U[slots] = u[sl]
        s = self.state
        s.setQ(osim.Vector.createFromMat(Q))
        s.setU(osim.Vector.createFromMat(U))
        return s

    @property
    def u_perm(self) -> np.ndarray:
        """``u_osim[u_perm] == u_simjax``."""
        return np.concatenate([np.asarray(s, int) for s in self.u_slots])

    def mass_matrix(self, spec, q, u, euler=False) -> np.ndarray:
        import opensim as osim

        s = self.set_state(spec, q, u, euler)
        self.model.realizePosition(s)
        M = osim.Matrix()
        self.model.getMatterSubsystem().calcM(s, M)
        p = self.u_perm
        return M.to_numpy()[np.ix_(p, p)]

    def udot(self, spec, q, u, euler=False) -> np.ndarray:
        s = self.set_state(spec, q, u, euler)
        self.model.realizeAcceleration(s)
        return s.getUDot().to_numpy()[self.u_perm]

    def body_transforms(self, spec, q, u, euler=False):
        s = self.set_state(spec, q, u, euler)
        self.model.realizePosition(s)
        out = []
        for b in self.bodies:
            X = b.getTransformInGround(s)
            R = X.R()
            out.append(
                (
                    np.array([[R.get(i, j) for j in range(3)] for i in range(3)]),
                    np.array([X.p().get(i) for i in range(3)]),
                )
            )
        return out


def to_opensim(spec: ModelSpec, add_forces=None) -> OpenSimModel:
    """OpenSim Model (joint parent frame = F, child frame = M) with probed Q/U slots.

    ``add_forces(model, bodies, joints)``, if given, is called before ``initSystem()``
    (``bodies[i]``/``joints[i]`` are spec body ``i``'s ``osim.Body`` and joint)."""
    import opensim as osim

    model = osim.Model()
    model.setName(spec.name)
    model.setGravity(osim.Vec3(*spec.gravity))
    joint_cls = {
        "pin": osim.PinJoint,
        "slider": osim.SliderJoint,
        "universal": osim.UniversalJoint,
        "gimbal": osim.GimbalJoint,
        "planar": osim.PlanarJoint,
        "ball": osim.BallJoint,
        "free": osim.FreeJoint,
        "weld": osim.WeldJoint,
    }
    bodies, joints = [], []
    for b in spec.bodies:
        I = b.inertia_com
        body = osim.Body(
            b.name,
            b.mass,
            osim.Vec3(*b.com),
            osim.Inertia(I[0, 0], I[1, 1], I[2, 2], I[0, 1], I[0, 2], I[1, 2]),
        )
        model.addBody(body)
        parent = model.getGround() if b.parent < 0 else bodies[b.parent]
        J = joint_cls[b.joint](
            f"{b.name}_joint",
            parent,
            osim.Vec3(*b.p_PF),
            osim.Vec3(*xyz_from_rot(b.R_PF)),
            body,
            osim.Vec3(*b.p_BM),
            osim.Vec3(*xyz_from_rot(b.R_BM)),
        )
        model.addJoint(J)
        bodies.append(body)
        joints.append(J)
    if add_forces is not None:
        add_forces(model, bodies, joints)
    state = model.initSystem()
    nQ, nU = state.getNQ(), state.getNU()
    q_slots, u_slots = [], []
    for J in joints:
        qs, us = [], []
        for i in range(J.numCoordinates()):
            c = J.get_coordinates(i)
            state.setQ(osim.Vector(nQ, 0.0))
            state.setU(osim.Vector(nU, 0.0))
            c.setValue(state, 0.5, False)
            c.setSpeedValue(state, 0.5)
            dq = np.flatnonzero(state.getQ().to_numpy())
            du = np.flatnonzero(state.getU().to_numpy())
            assert len(dq) == 1 and len(du) == 1, (c.getName(), dq, du)
            qs.append(int(dq[0]))
            us.append(int(du[0]))
        q_slots.append(qs)
        u_slots.append(us)
    return OpenSimModel(model, state, bodies, q_slots, u_slots, nQ, nU)


# ----------------------------------------------------------------------------- peer maps


def _velocity_blocks(spec: ModelSpec, poses, peer: str):
    """Per body ``T_b`` with ``v_peer_b = T_b u_b`` (blocks in the peer's per-joint order)."""
    out = []
    for b, (R, _, _) in zip(spec.bodies, poses):
        k, n = b.joint, JOINTS[b.joint][2]
        if k == "planar":
            T = np.eye(3)[[1, 2, 0]]  # peer [x, y, angle]
        elif k == "ball":
            T = R.T
        elif k == "free":
            T = np.zeros((6, 6))
            T[:3, 3:] = R.T if peer == "pinocchio" else b.R_PF
            T[3:, :3] = R.T
        else:
            T = np.eye(n)
        out.append(T)
    return out


@dataclass
class PeerMap:
    """Index maps for Pinocchio or MuJoCo: where each spec body's q and v live."""

    peer: str
    q_adr: list[int]  # per spec body (-1 for weld)
    v_adr: list[int]
    nq: int
    nv: int

    def qv(self, spec: ModelSpec, q: np.ndarray, u: np.ndarray, euler: bool = False):
        """Peer ``(q, v, T, c)``: ``v = T u`` and ``a_peer = T udot + c``."""
        poses = joint_poses(spec, q, euler)
        qp, vp = np.zeros(self.nq), np.zeros(self.nv)
        T = np.zeros((self.nv, spec.nu))
        c = np.zeros(self.nv)
        blocks = _velocity_blocks(spec, poses, self.peer)
        for b, sl_u, (R, p, coords), Tb, qa, va in zip(
            spec.bodies, spec.u_blocks(), poses, blocks, self.q_adr, self.v_adr
        ):
            k = b.joint
            if k == "weld":
                continue
            if k == "ball":
                quat = quat_from_rot(R)
                qb = quat[[1, 2, 3, 0]] if self.peer == "pinocchio" else quat
            elif k == "free":
                quat = quat_from_rot(R)
                if self.peer == "pinocchio":
                    qb = np.r_[p, quat[[1, 2, 3, 0]]]
                    w, vF = u[sl_u][:3], u[sl_u][3:]
                    c[va : va + 3] = -R.T @ np.cross(w, vF)
                else:
                    qb = np.r_[b.p_PF + b.R_PF @ p, quat_from_rot(b.R_PF @ R)]
            elif k == "planar":
                qb = coords[[1, 2, 0]]
            else:
                qb = coords
            qp[qa : qa + len(qb)] = qb
            n = Tb.shape[0]
            T[va : va + n, sl_u] = Tb
            vp[va : va + n] = Tb @ u[sl_u]
        return qp, vp, T, c

    def mass_matrix_to_simjax(self, M_peer, T):
        return T.T @ M_peer @ T

    def udot_to_simjax(self, a_peer, T, c):
        return np.linalg.solve(T, a_peer - c)


def _se3_np(R, p):
    return np.asarray(R, float), np.asarray(p, float)


def _compose(X1, X2):
    return X1[0] @ X2[0], X1[1] + X1[0] @ X2[1]


def _inv(X):
    return X[0].T, -X[0].T @ X[1]


# ----------------------------------------------------------------------------- Pinocchio


@dataclass
class PinocchioModel:
    model: object
    data: object
    map: PeerMap
    body_frame: list[tuple[int, tuple]]  # per spec body: (joint id, X_JB)

    def body_transforms(self, q_pin):
        import pinocchio as pin

        pin.forwardKinematics(self.model, self.data, q_pin)
        out = []
        for jid, X_JB in self.body_frame:
            oMi = self.data.oMi[jid]
            out.append(_compose((oMi.rotation.copy(), oMi.translation.copy()), X_JB))
        return out


def to_pinocchio(spec: ModelSpec) -> PinocchioModel:
    """Pinocchio Model, joints added depth-first (crba needs it)."""
    import pinocchio as pin

    model = pin.Model()
    model.gravity = pin.Motion(np.r_[spec.gravity, 0.0, 0.0, 0.0])

    def jmodel(kind):
        if kind == "pin":
            return pin.JointModelRZ()
        if kind == "slider":
            return pin.JointModelPX()
        if kind == "ball":
            return pin.JointModelSpherical()
        if kind == "free":
            return pin.JointModelFreeFlyer()
        parts = {
            "universal": [pin.JointModelRX(), pin.JointModelRY()],
            "gimbal": [pin.JointModelRX(), pin.JointModelRY(), pin.JointModelRZ()],
            "planar": [pin.JointModelPX(), pin.JointModelPY(), pin.JointModelRZ()],
        }[kind]
        jc = pin.JointModelComposite(len(parts))
        for p in parts:
            jc.addJoint(p)
        return jc

    attach: dict[int, tuple[int, tuple]] = {-1: (0, (np.eye(3), np.zeros(3)))}
    jids: dict[int, int] = {}
    for i in spec.dfs_order():
        b = spec.bodies[i]
        jp, X_JP = attach[b.parent]
        X_JF = _compose(X_JP, _se3_np(b.R_PF, b.p_PF))
        Y = pin.Inertia(b.mass, b.com, b.inertia_com)
        X_MB = _inv(_se3_np(b.R_BM, b.p_BM))
        if b.joint == "weld":
            X_JB = _compose(X_JF, X_MB)
            model.appendBodyToJoint(jp, Y, pin.SE3(*X_JB))
            attach[i] = (jp, X_JB)
        else:
            jid = model.addJoint(jp, jmodel(b.joint), pin.SE3(*X_JF), f"{b.name}_joint")
            model.appendBodyToJoint(jid, Y, pin.SE3(*X_MB))
            attach[i] = (jid, X_MB)
            jids[i] = jid
    q_adr = [model.idx_qs[jids[i]] if i in jids else -1 for i in range(len(spec.bodies))]
    v_adr = [model.idx_vs[jids[i]] if i in jids else -1 for i in range(len(spec.bodies))]
    pm = PeerMap("pinocchio", q_adr, v_adr, model.nq, model.nv)
    return PinocchioModel(model, model.createData(), pm, [attach[i] for i in range(len(spec.bodies))])


def pinocchio_mass_matrix(pm: PinocchioModel, q_pin) -> np.ndarray:
    import pinocchio as pin

    M = np.array(pin.crba(pm.model, pm.data, q_pin))
    return np.triu(M) + np.triu(M, 1).T  # crba fills the upper triangle


def pinocchio_aba(pm: PinocchioModel, q_pin, v_pin) -> np.ndarray:
    import pinocchio as pin

    return np.array(pin.aba(pm.model, pm.data, q_pin, v_pin, np.zeros(pm.model.nv)))


# ----------------------------------------------------------------------------- MuJoCo


def _fmt(v) -> str:
    return " ".join(repr(float(x)) for x in np.ravel(v))


def to_mujoco_xml(spec: ModelSpec) -> str:
    """MJCF with one MuJoCo body per spec body, its frame at the mobilizer's M frame."""
    lines = [
        f'<mujoco model="{spec.name}">',
        '  <compiler angle="radian" inertiafromgeom="false" autolimits="true"/>',
        f'  <option gravity="{_fmt(spec.gravity)}" timestep="0.001" integrator="Euler">',
        '    <flag contact="disable" constraint="disable" spring="disable" damper="disable"/>',
        "  </option>",
        '  <default><joint armature="0" damping="0" stiffness="0" frictionloss="0"'
        ' limited="false"/></default>',
        "  <worldbody>",
    ]
    joints = {
        "pin": [("hinge", "0 0 1")],
        "slider": [("slide", "1 0 0")],
        "universal": [("hinge", "1 0 0"), ("hinge", "0 1 0")],
        "gimbal": [("hinge", "1 0 0"), ("hinge", "0 1 0"), ("hinge", "0 0 1")],
        "planar": [("slide", "1 0 0"), ("slide", "0 1 0"), ("hinge", "0 0 1")],
        "ball": [("ball", None)],
        "free": [("free", None)],
        "weld": [],
    }

    def emit(i, depth):
        b = spec.bodies[i]
        ind = "  " * depth
        if b.parent < 0:
            X = (b.R_PF, b.p_PF)
        else:
            pb = spec.bodies[b.parent]
            X = _compose(_inv((pb.R_BM, pb.p_BM)), (b.R_PF, b.p_PF))
        lines.append(f'{ind}<body name="{b.name}" pos="{_fmt(X[1])}" quat="{_fmt(quat_from_rot(X[0]))}">')
        # inertial in M: com and com-inertia re-expressed from B
        R_MB, p_MB = _inv((b.R_BM, b.p_BM))
        c = p_MB + R_MB @ b.com
        Ic = R_MB @ b.inertia_com @ R_MB.T
        lines.append(
            f'{ind}  <inertial pos="{_fmt(c)}" mass="{b.mass!r}" fullinertia="'
            f'{_fmt([Ic[0, 0], Ic[1, 1], Ic[2, 2], Ic[0, 1], Ic[0, 2], Ic[1, 2]])}"/>'
        )
        for k, (jt, ax) in enumerate(joints[b.joint]):
            axs = f' axis="{ax}"' if ax else ""
            lines.append(f'{ind}  <joint name="{b.name}_j{k}" type="{jt}"{axs}/>')
        for ch in spec.children(i):
            emit(ch, depth + 1)
        lines.append(f"{ind}</body>")

    for i in spec.children(-1):
        emit(i, 2)
    lines += ["  </worldbody>", "</mujoco>"]
    return "\n".join(lines)


@dataclass
class MujocoModel:
    model: object
    data: object
    map: PeerMap
    body_ids: list[int]
    spec: ModelSpec

    def forward(self, q_mj, v_mj):
        import mujoco

        self.data.qpos[:] = q_mj
        self.data.qvel[:] = v_mj
        mujoco.mj_forward(self.model, self.data)

    def mass_matrix(self) -> np.ndarray:
        import mujoco

        M = np.zeros((self.model.nv, self.model.nv))
        mujoco.mj_fullM(self.model, self.data, M)  # MuJoCo >= 4 signature
        return M

    def body_transforms(self):
        out = []
        for bid, b in zip(self.body_ids, self.spec.bodies):
            X_GM = (self.data.xmat[bid].reshape(3, 3).copy(), self.data.xpos[bid].copy())
            out.append(_compose(X_GM, _inv((b.R_BM, b.p_BM))))
        return out


def to_mujoco(spec: ModelSpec) -> MujocoModel:
    import mujoco

    m = mujoco.MjModel.from_xml_string(to_mujoco_xml(spec))
    q_adr, v_adr, bids = [], [], []
    for b in spec.bodies:
        bids.append(mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, b.name))
        if b.joint == "weld":
            q_adr.append(-1)
            v_adr.append(-1)
            continue
        jid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, f"{b.name}_j0")
        q_adr.append(int(m.jnt_qposadr[jid]))
        v_adr.append(int(m.jnt_dofadr[jid]))
    return MujocoModel(m, mujoco.MjData(m), PeerMap("mujoco", q_adr, v_adr, m.nq, m.nv), bids, spec)


# ----------------------------------------------------------------------------- four-bar
# (the closed loop of tests/test_constraints_oracle.py and benchmarks/bench_constrained.py)

#: link lengths (crank, coupler, rocker), z offsets of the joints, pin-angle offsets
_FB_L = (0.3, 0.8, 0.6)
_FB_ZOFF = (0.05, -0.03, 0.02)
_FB_GAM = (0.4, -0.7, 1.1)
_FB_O1 = np.array([0.1, 0.2])  # crank pivot on Ground (x, y)
_FB_D = np.array([0.9, 0.1])  # rocker pivot on Ground (x, y)
_FB_TIP_Z = 0.01


def fourbar_spec() -> tuple[ModelSpec, np.ndarray, np.ndarray]:
    """Three Pin links whose pin axes are all Ground's z; the body frames are tilted
    arbitrarily (R_BM random), so the planarity holds only to round-off. Each link's M
    frame has its x axis along the link: ``phi_k = phi_(k-1) + gamma_k + q_k``.
    Returns the spec, the rocker tip station (rocker frame) and its Ground location
    when closed."""
    rng = np.random.default_rng(7)
    R_BM = [random_rotation(rng) for _ in range(3)]
    p_BM = [rng.normal(0, 0.05, 3) for _ in range(3)]
    bodies = []
    for k in range(3):
        if k == 0:
            R_PF, p_PF = rot_z(_FB_GAM[0]), np.array([_FB_O1[0], _FB_O1[1], _FB_ZOFF[0]])
        else:
            R_PF = R_BM[k - 1] @ rot_z(_FB_GAM[k])
            p_PF = p_BM[k - 1] + R_BM[k - 1] @ np.array([_FB_L[k - 1], 0.0, _FB_ZOFF[k]])
        bodies.append(
            BodySpec(
                f"link{k}",
                k - 1,
                "pin",
                R_PF,
                p_PF,
                R_BM[k],
                p_BM[k],
                float(rng.uniform(0.5, 2.0)),
                rng.normal(0, 0.1, 3),
                random_inertia(rng),
            )
        )
    tip = p_BM[2] + R_BM[2] @ np.array([_FB_L[2], 0.0, _FB_TIP_Z])
    ground_point = np.array([_FB_D[0], _FB_D[1], sum(_FB_ZOFF) + _FB_TIP_Z])
    return ModelSpec("fourbar", bodies), tip, ground_point


def fourbar_assemble(phi1: float, w1: float) -> tuple[np.ndarray, np.ndarray]:
    """Closed-form ``(q, u)`` of the four-bar for crank angle ``phi1`` (absolute angle of
    the crank) and crank rate ``w1`` (one assembly branch)."""
    e = lambda a: np.array([np.cos(a), np.sin(a)])
    ep = lambda a: np.array([-np.sin(a), np.cos(a)])
    a, b, c = _FB_L
    B = _FB_O1 + a * e(phi1)  # coupler pivot
    dv = _FB_D - B
    d = np.linalg.norm(dv)
    x = (d * d + b * b - c * c) / (2 * d)
    h = np.sqrt(b * b - x * x)
    C = B + x * dv / d + h * np.array([-dv[1], dv[0]]) / d  # rocker pivot
    phi2 = np.arctan2(C[1] - B[1], C[0] - B[0])
    phi3 = np.arctan2(_FB_D[1] - C[1], _FB_D[0] - C[0])
    q = np.array([phi1 - _FB_GAM[0], phi2 - phi1 - _FB_GAM[1], phi3 - phi2 - _FB_GAM[2]])
    # a w1 e'(phi1) + b w2 e'(phi2) + c w3 e'(phi3) = 0
    w23 = np.linalg.solve(np.column_stack([b * ep(phi2), c * ep(phi3)]), -a * w1 * ep(phi1))
    w = np.r_[w1, w23]
    return q, np.array([w[0], w[1] - w[0], w[2] - w[1]])


ALL_MODELS = {
    "pin_chain_2": lambda: pin_chain(2, seed=10),
    "pin_chain_7": lambda: pin_chain(7, seed=11),
    "pin_chain_20": lambda: pin_chain(20, seed=12),
    "pin_chain_50": lambda: pin_chain(50, seed=13),
    "ball_chain_10": lambda: ball_chain(10),
    "humanoid": humanoid,
    "mixed_tree": mixed_tree,
}
