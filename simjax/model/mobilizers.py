"""Mobilizer kinds: each is defined by ``X_FM(q)``, its generalized speeds and ``N(q)``.

A mobilizer connects the inboard frame F (fixed on the parent) to the outboard frame M
(fixed on the child). ``V_FM = [w_FM; v_FM] = H_FM(q) u`` is expressed in F, with ``v_FM``
the velocity of M's origin. ``qdot = N(q) u``. Kinds whose speeds are the coordinate
derivatives (``qdot == u``) get ``H_FM`` from autodiff of ``X_FM``; quaternion kinds give
``N`` and a closed-form ``H_FM``. Everything here is static configuration (hashable); the
per-instance numbers (``params``) are arrays carried in the State.

Every method works on ONE mobilizer; the tree code vmaps each kind group.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from .. import _spatial as sp
from .._functions import _Same

Rp = tuple[jax.Array, jax.Array]


def velocity_jacobian(X_FM: Callable[[jax.Array], Rp], q: jax.Array) -> jax.Array:
    """``J(q)`` (6, nq): ``V_FM = J qdot``, from autodiff of ``X_FM`` (angular part in F)."""
    R, _ = X_FM(q)
    dR, dp = jax.jacfwd(lambda qq: X_FM(qq))(q)  # (3,3,nq), (3,nq)
    w = jax.vmap(lambda d: sp.vee(d @ R.T), in_axes=2, out_axes=1)(dR)
    return jnp.concatenate([w, dp], axis=0)


# Within this distance (|cos| of the middle Euler angle, about the angle from +-90 degrees
# in radians) of gimbal lock a mobilizer is reported as at its singularity: the mass matrix
# of a Gimbal has a condition number of ~1e12 there, the qdot of a Ball in Euler-angle
# mode entries of ~1e6 |u|.
GIMBAL_LOCK_TOLERANCE = 1e-6


@dataclass(frozen=True)
class AbstractMobilizer(abc.ABC):
    """Base of all mobilizer kinds.

    Subclasses set ``nq``, ``nu``, ``n_angles`` and implement ``X_FM``. They override
    ``N`` when ``qdot != u`` and may override ``H_FM`` with a closed form.
    """

    nq: ClassVar[int] = 0
    nu: ClassVar[int] = 0
    n_angles: ClassVar[int] = 0
    n_params: ClassVar[int] = 0
    uses_quaternion: ClassVar[bool] = False
    # True where the joint's velocity-product term ``Sdot_B u`` (the time derivative of the
    # motion subspace in B's frame, times u) is zero for every q and u: the subspace is
    # fixed in B (Pin, Slider, Screw, Cylinder, Translation, LineOrientation), or u is the
    # angular velocity that turns it (Ball: ``w x w = 0``). The Dynamics stage then skips
    # it; ``tests/test_mobilizers.py`` checks every kind's flag against autodiff.
    no_velocity_product: ClassVar[bool] = False
    # True where ``X_FM`` is a sum of constant terms weighted by functions of q
    # (``X_FM_weights``, ``X_FM_terms``): the tree code then composes the terms with the
    # joint frames once, outside a batch over states, leaving per state a weighted sum.
    has_X_FM_terms: ClassVar[bool] = False
    # ``X_FM_terms``' rotations (k, 3, 3) where they are constants for every ``params`` (all
    # kinds with terms so far), known while tracing: joint by joint, ``R_PF R_k`` is then
    # ``R_PF``'s columns picked and scaled (``stages._X_PM_from_terms``). None otherwise.
    # A kind that sets it also has ``R_FM^T H_FM = H_FM`` (it rotates about the axis it
    # moves along, if at all), so its motion subspace in B needs no ``R_FM``.
    X_FM_rotation_terms: ClassVar[np.ndarray | None] = None

    # --- definition ---------------------------------------------------------------
    @abc.abstractmethod
    def X_FM(self, q: jax.Array, params: jax.Array) -> Rp:
        """Rotation ``R_FM`` and origin ``p_FM`` of M in F."""

    def N(self, q: jax.Array, params: jax.Array) -> jax.Array | None:
        """``qdot = N(q) u``; ``None`` means identity (``qdot == u``)."""
        return None

    def X_FM_weights(self, q: jax.Array) -> jax.Array:
        """(k,) weights of ``X_FM_terms``, the first one 1 (kinds with ``has_X_FM_terms``):
        ``R_FM = sum_k w_k R_k`` and ``p_FM = sum_k w_k p_k``."""
        raise TypeError(f"{self.kind} has no X_FM_terms (has_X_FM_terms is False)")

    def X_FM_terms(self, params: jax.Array) -> Rp:
        """(k, 3, 3) and (k, 3) constant terms of ``X_FM`` (see ``X_FM_weights``)."""
        raise TypeError(f"{self.kind} has no X_FM_terms (has_X_FM_terms is False)")

    @property
    def qdot_is_u(self) -> bool:
        """Static: ``N(q)`` is the identity for every q (the kind does not override ``N``)."""
        return type(self).N is AbstractMobilizer.N

    def H_FM(self, q: jax.Array, params: jax.Array) -> jax.Array:
        """(6, nu) map from ``u`` to ``V_FM`` (in F, at M's origin)."""
        J = velocity_jacobian(lambda qq: self.X_FM(qq, params), q)
        Nq = self.N(q, params)
        return J if Nq is None else J @ Nq

    # --- defaults and fitting -----------------------------------------------------
    def default_q(self) -> np.ndarray:
        """Default generalized coordinates (zero; identity quaternion where used)."""
        return np.zeros(self.nq)

    def default_params(self) -> np.ndarray:
        """Default instance parameters of this mobilizer (e.g. a screw's pitch)."""
        return np.zeros(self.n_params)

    def q_to_fit_transform(self, R: jax.Array, p: jax.Array, params: jax.Array) -> jax.Array:
        """Coordinates whose ``X_FM`` best fits the given ``(R_FM, p_FM)``.

        The generic version runs Gauss-Newton from the default q on the pose error.
        Built-in kinds give closed forms.
        """
        q = jnp.asarray(self.default_q(), dtype=jnp.result_type(p))
        for _ in range(20):
            r = self._pose_residual(q, R, p, params)
            Jr = jax.jacfwd(lambda qq: self._pose_residual(qq, R, p, params))(q)
            dq = jnp.linalg.lstsq(Jr, -r)[0]
            q = q + dq
        return q

    def _pose_residual(self, q: jax.Array, R: jax.Array, p: jax.Array, params: jax.Array):
        Rq, pq = self.X_FM(q, params)
        return jnp.concatenate([sp.vee(Rq @ R.T - R @ Rq.T) * 0.5, pq - p])

    def _best_of(self, candidates: Sequence[jax.Array], R: jax.Array, p: jax.Array, params: jax.Array):
        """The candidate q whose ``X_FM`` is closest to ``(R, p)`` (rotation error counts
        fully, so a rotated frame with a negative stretch is fitted exactly)."""

        def err(q):
            Rq, pq = self.X_FM(q, params)
            return jnp.sum((Rq - R) ** 2) + jnp.sum((pq - p) ** 2)

        best = candidates[0]
        for c in candidates[1:]:
            best = jnp.where(err(c) < err(best), c, best)
        return best

    def u_to_fit_velocity(self, q: jax.Array, V_FM: jax.Array, params: jax.Array) -> jax.Array:
        """Least-squares speeds whose ``H u`` best fits ``V_FM`` (in F, at M's origin)."""
        H = self.H_FM(q, params)
        return jnp.linalg.lstsq(H, V_FM)[0]

    def with_euler_angles(self) -> AbstractMobilizer:
        """This kind in Euler-angle mode (Model-stage option); non-quaternion kinds: self."""
        return self

    @property
    def euler_middle_angle(self) -> int | None:
        """Index in this mobilizer's q of the middle one of body-fixed X-Y-Z Euler angles,
        at whose +-90 degrees (gimbal lock) the kinematics are singular (Gimbal; the
        quaternion kinds in Euler-angle mode); None for kinds without that singularity."""
        return None

    @property
    def kind(self) -> str:
        """Name of the kind, as in Simbody (``"Pin"``, ``"Ball"``, ...)."""
        return type(self).__name__


def _zero3(q: jax.Array) -> jax.Array:
    return jnp.zeros(3, dtype=q.dtype)


def _e(i: int, v: jax.Array) -> jax.Array:
    return jnp.zeros(3, dtype=v.dtype).at[i].set(v)


# ``rot_z(t) = Z + cos t (I - Z) + sin t [z]x`` with ``Z = z z^T``: the terms of a rotation
# about z, weighted by ``(1, cos t, sin t)``.
_ROT_Z_TERMS = np.stack(
    [np.diag([0.0, 0.0, 1.0]), np.diag([1.0, 1.0, 0.0]), np.cross(np.eye(3), [0.0, 0.0, 1.0])]
)


_ROT_Z_AND_TRANSLATION_TERMS = np.concatenate([_ROT_Z_TERMS, np.zeros((1, 3, 3))])
_IDENTITY_TERMS = {k: np.concatenate([np.eye(3)[None], np.zeros((k - 1, 3, 3))]) for k in (2, 4)}


def _terms(R: np.ndarray | None, p: np.ndarray, params: jax.Array) -> Rp:
    dt = params.dtype if jnp.issubdtype(params.dtype, jnp.floating) else jnp.result_type(float)
    return jnp.asarray(R, dt), jnp.asarray(p, dt)


# ----------------------------------------------------------------------------- 1-dof


@dataclass(frozen=True)
class Pin(AbstractMobilizer):
    """Rotation about the common z axis of F and M (``q`` = angle, ``u = qdot``)."""

    nq: ClassVar[int] = 1
    nu: ClassVar[int] = 1
    n_angles: ClassVar[int] = 1
    no_velocity_product: ClassVar[bool] = True
    has_X_FM_terms: ClassVar[bool] = True

    def X_FM(self, q, params):
        return sp.rot_z(q[0]), _zero3(q)

    def X_FM_weights(self, q):
        c, s = sp.cos_sin(q[0])
        return jnp.stack([jnp.ones((), c.dtype), c, s])

    X_FM_rotation_terms: ClassVar[np.ndarray | None] = _ROT_Z_TERMS

    def X_FM_terms(self, params):
        return _terms(self.X_FM_rotation_terms, np.zeros((3, 3)), params)

    def H_FM(self, q, params):
        z = jnp.zeros((), q.dtype)
        o = jnp.ones((), q.dtype)
        return jnp.stack([z, z, o, z, z, z])[:, None]

    def q_to_fit_transform(self, R, p, params):
        return jnp.arctan2(R[1, 0] - R[0, 1], R[0, 0] + R[1, 1])[None]


@dataclass(frozen=True)
class Slider(AbstractMobilizer):
    """Translation along the common x axis of F and M (``q`` = distance)."""

    nq: ClassVar[int] = 1
    nu: ClassVar[int] = 1
    no_velocity_product: ClassVar[bool] = True
    has_X_FM_terms: ClassVar[bool] = True

    def X_FM(self, q, params):
        return jnp.eye(3, dtype=q.dtype), _e(0, q[0])

    def X_FM_weights(self, q):
        return jnp.stack([jnp.ones((), q.dtype), q[0]])

    X_FM_rotation_terms: ClassVar[np.ndarray | None] = _IDENTITY_TERMS[2]

    def X_FM_terms(self, params):
        return _terms(self.X_FM_rotation_terms, np.array([[0.0, 0, 0], [1, 0, 0]]), params)

    def H_FM(self, q, params):
        z = jnp.zeros((), q.dtype)
        o = jnp.ones((), q.dtype)
        return jnp.stack([z, z, z, o, z, z])[:, None]

    def q_to_fit_transform(self, R, p, params):
        return p[:1]


@dataclass(frozen=True)
class Screw(AbstractMobilizer):
    """Rotation about z coupled to translation ``pitch * q`` along z (``params = [pitch]``)."""

    nq: ClassVar[int] = 1
    nu: ClassVar[int] = 1
    n_angles: ClassVar[int] = 1
    n_params: ClassVar[int] = 1
    no_velocity_product: ClassVar[bool] = True
    has_X_FM_terms: ClassVar[bool] = True
    pitch: float = 0.0

    def default_params(self):
        return np.array([self.pitch], dtype=float)

    def X_FM(self, q, params):
        return sp.rot_z(q[0]), _e(2, params[0] * q[0])

    def X_FM_weights(self, q):
        c, s = sp.cos_sin(q[0])
        return jnp.stack([jnp.ones((), c.dtype), c, s, q[0].astype(c.dtype)])

    X_FM_rotation_terms: ClassVar[np.ndarray | None] = _ROT_Z_AND_TRANSLATION_TERMS

    def X_FM_terms(self, params):
        R, p = _terms(self.X_FM_rotation_terms, np.zeros((4, 3)), params)
        return R, p.at[3, 2].set(params[0])

    def q_to_fit_transform(self, R, p, params):
        ang = jnp.arctan2(R[1, 0] - R[0, 1], R[0, 0] + R[1, 1])
        return ang[None]


# ----------------------------------------------------------------------------- 2-dof


@dataclass(frozen=True)
class Universal(AbstractMobilizer):
    """Rotation about x, then about the new y (body-fixed X-Y), ``u = qdot``."""

    nq: ClassVar[int] = 2
    nu: ClassVar[int] = 2
    n_angles: ClassVar[int] = 2

    def X_FM(self, q, params):
        return sp.rot_x(q[0]) @ sp.rot_y(q[1]), _zero3(q)

    def q_to_fit_transform(self, R, p, params):
        a = sp.rot_to_body_fixed_xyz(R)
        return a[:2]


@dataclass(frozen=True)
class Cylinder(AbstractMobilizer):
    """Rotation about z and translation along z: ``q = [angle, distance]``."""

    nq: ClassVar[int] = 2
    nu: ClassVar[int] = 2
    n_angles: ClassVar[int] = 1
    no_velocity_product: ClassVar[bool] = True
    has_X_FM_terms: ClassVar[bool] = True

    def X_FM(self, q, params):
        return sp.rot_z(q[0]), _e(2, q[1])

    def X_FM_weights(self, q):
        c, s = sp.cos_sin(q[0])
        return jnp.stack([jnp.ones((), c.dtype), c, s, q[1].astype(c.dtype)])

    X_FM_rotation_terms: ClassVar[np.ndarray | None] = _ROT_Z_AND_TRANSLATION_TERMS

    def X_FM_terms(self, params):
        p = np.zeros((4, 3))
        p[3, 2] = 1.0
        return _terms(self.X_FM_rotation_terms, p, params)

    def q_to_fit_transform(self, R, p, params):
        return jnp.stack([jnp.arctan2(R[1, 0] - R[0, 1], R[0, 0] + R[1, 1]), p[2]])


@dataclass(frozen=True)
class BendStretch(AbstractMobilizer):
    """Rotation about z, then translation along the rotated x: ``q = [angle, length]``."""

    nq: ClassVar[int] = 2
    nu: ClassVar[int] = 2
    n_angles: ClassVar[int] = 1

    def X_FM(self, q, params):
        R = sp.rot_z(q[0])
        return R, R[:, 0] * q[1]

    def q_to_fit_transform(self, R, p, params):
        # Simbody fits the translation (angle toward p, positive stretch); a rotation that
        # says otherwise (negative stretch) is fitted from R instead, whichever is closer.
        from_p = jnp.stack([jnp.arctan2(p[1], p[0]), jnp.sqrt(p[0] ** 2 + p[1] ** 2)])
        ang = jnp.arctan2(R[1, 0], R[0, 0])
        from_R = jnp.stack([ang, p[0] * jnp.cos(ang) + p[1] * jnp.sin(ang)])
        return self._best_of([from_p, from_R], R, p, params)


# ----------------------------------------------------------------------------- 3-dof


@dataclass(frozen=True)
class Planar(AbstractMobilizer):
    """Rotation about z and translation in the x-y plane of F: ``q = [angle, x, y]``."""

    nq: ClassVar[int] = 3
    nu: ClassVar[int] = 3
    n_angles: ClassVar[int] = 1

    def X_FM(self, q, params):
        return sp.rot_z(q[0]), jnp.stack([q[1], q[2], jnp.zeros_like(q[0])])

    def q_to_fit_transform(self, R, p, params):
        return jnp.stack([jnp.arctan2(R[1, 0] - R[0, 1], R[0, 0] + R[1, 1]), p[0], p[1]])


@dataclass(frozen=True)
class Gimbal(AbstractMobilizer):
    """Body-fixed X-Y-Z Euler angles, ``u = qdot``. Singular at ``q[1] = +-pi/2`` (gimbal
    lock): two of its speeds turn the body about the same axis, so the mass matrix is
    singular there (``euler_middle_angle``; ``GIMBAL_LOCK_TOLERANCE``). A Ball (a
    quaternion) has no such configuration."""

    nq: ClassVar[int] = 3
    nu: ClassVar[int] = 3
    n_angles: ClassVar[int] = 3

    @property
    def euler_middle_angle(self) -> int | None:
        return 1

    def X_FM(self, q, params):
        return sp.body_fixed(q, "xyz"), _zero3(q)

    def q_to_fit_transform(self, R, p, params):
        return sp.rot_to_body_fixed_xyz(R)


@dataclass(frozen=True)
class Translation(AbstractMobilizer):
    """Cartesian translation ``p_FM = q``, no rotation (Simbody's ``Translation``)."""

    nq: ClassVar[int] = 3
    nu: ClassVar[int] = 3
    no_velocity_product: ClassVar[bool] = True
    has_X_FM_terms: ClassVar[bool] = True

    def X_FM(self, q, params):
        return jnp.eye(3, dtype=q.dtype), q

    def X_FM_weights(self, q):
        return jnp.concatenate([jnp.ones(1, q.dtype), q])

    X_FM_rotation_terms: ClassVar[np.ndarray | None] = _IDENTITY_TERMS[4]

    def X_FM_terms(self, params):
        return _terms(self.X_FM_rotation_terms, np.eye(4, 3, -1), params)

    def H_FM(self, q, params):
        return jnp.concatenate([jnp.zeros((3, 3), q.dtype), jnp.eye(3, dtype=q.dtype)])

    def q_to_fit_transform(self, R, p, params):
        return p


@dataclass(frozen=True)
class _Orientation(AbstractMobilizer):
    """Base of the kinds whose rotation coordinates are a quaternion ``[w, x, y, z]`` or, in
    Euler-angle mode (a Model-stage option), body-fixed X-Y-Z angles, followed by
    ``n_translations`` coordinates of ``p_FM`` in F: Ball, Ellipsoid and LineOrientation
    (none), Free and FreeLine (three)."""

    n_angles: ClassVar[int] = 3
    n_translations: ClassVar[int] = 0
    euler: bool = False

    @property
    def nq(self) -> int:  # type: ignore[override]
        return (3 if self.euler else 4) + self.n_translations

    @property
    def uses_quaternion(self) -> bool:  # type: ignore[override]
        return not self.euler

    def with_euler_angles(self):
        return replace(self, euler=True)

    @property
    def euler_middle_angle(self) -> int | None:
        """1 in Euler-angle mode (``qdot = N(q) u`` is singular at ``q[1] = +-pi/2``), None
        with a quaternion."""
        return 1 if self.euler else None

    def default_q(self):
        angles = np.zeros(3) if self.euler else np.array([1.0, 0, 0, 0])
        return np.concatenate([angles, np.zeros(self.n_translations)])

    def _split(self, q):
        """The rotation coordinates and the translation ones."""
        k = 3 if self.euler else 4
        return q[:k], q[k:]

    def _R(self, a):
        return sp.body_fixed(a, "xyz") if self.euler else sp.quat_to_rot(a)

    def _N_rotation(self, a):
        """``adot = N w_FM`` (``w_FM`` in F) for the rotation coordinates ``a``."""
        return _ang_N_euler(a) if self.euler else sp.quat_N_parent(a)

    def q_to_fit_transform(self, R, p, params):
        a = sp.rot_to_body_fixed_xyz(R) if self.euler else sp.rot_to_quat(R)
        return jnp.concatenate([a, p]) if self.n_translations else a

    def _with_translations(self, A, q):
        """``[[A, 0], [0, 1]]``: a rotational block ``A`` with the ``n_translations``
        coordinates (or speeds) of ``p_FM`` passed through as they are."""
        n = self.n_translations
        top = jnp.concatenate([A, jnp.zeros((A.shape[0], n), q.dtype)], axis=1)
        bot = jnp.concatenate([jnp.zeros((n, A.shape[1]), q.dtype), jnp.eye(n, dtype=q.dtype)], axis=1)
        return jnp.concatenate([top, bot], axis=0)


@dataclass(frozen=True)
class Ball(_Orientation):
    """Spherical joint: quaternion ``q = [w, x, y, z]`` (or body-fixed X-Y-Z angles in
    Euler mode), ``u = w_FM`` expressed in F."""

    nu: ClassVar[int] = 3
    no_velocity_product: ClassVar[bool] = True

    def X_FM(self, q, params):
        return self._R(q), _zero3(q)

    def H_FM(self, q, params):
        return jnp.concatenate([jnp.eye(3, dtype=q.dtype), jnp.zeros((3, 3), q.dtype)])

    def N(self, q, params):
        return self._N_rotation(q)


def _ang_N_euler(a: jax.Array) -> jax.Array:
    """``adot = N w_F`` for body-fixed X-Y-Z angles and angular velocity in F."""
    J = velocity_jacobian(lambda aa: (sp.body_fixed(aa, "xyz"), _zero3(aa)), a)[:3]
    return jnp.linalg.inv(J)


@dataclass(frozen=True)
class Free(_Orientation):
    """Six dofs: ``q = [quaternion(4) | xyz angles(3), p_FM(3)]``,
    ``u = [w_FM in F, v_FM in F]``."""

    nu: ClassVar[int] = 6
    n_translations: ClassVar[int] = 3

    def X_FM(self, q, params):
        a, p = self._split(q)
        return self._R(a), p

    def H_FM(self, q, params):
        return jnp.eye(6, dtype=q.dtype)

    def N(self, q, params):
        a, _ = self._split(q)
        return self._with_translations(self._N_rotation(a), q)


@dataclass(frozen=True)
class Bushing(AbstractMobilizer):
    """Six dofs: body-fixed X-Y-Z angles then translation in F: ``q = [a, b, c, x, y, z]``,
    ``u = qdot``."""

    nq: ClassVar[int] = 6
    nu: ClassVar[int] = 6
    n_angles: ClassVar[int] = 3

    def X_FM(self, q, params):
        return sp.body_fixed(q[:3], "xyz"), q[3:]

    def q_to_fit_transform(self, R, p, params):
        return jnp.concatenate([sp.rot_to_body_fixed_xyz(R), p])


@dataclass(frozen=True)
class Ellipsoid(_Orientation):
    """Orientation like a Ball; M's origin lies on an ellipsoid with semi-axes
    ``params = [a, b, c]`` fixed in F, at ``p_FM = diag(a, b, c) n`` with ``n`` M's z axis
    in F (Simbody's formula: the surface normal there equals ``n`` only for a sphere).
    ``u = w_FM`` in F."""

    nu: ClassVar[int] = 3
    n_params: ClassVar[int] = 3
    radii: tuple[float, float, float] = (1.0, 1.0, 1.0)

    def default_params(self):
        return np.asarray(self.radii, dtype=float)

    def X_FM(self, q, params):
        R = self._R(q)
        return R, params * R[:, 2]

    def N(self, q, params):
        return self._N_rotation(q)

    def H_FM(self, q, params):
        # Angular part is w_FM (F); linear part from autodiff of p(q) along qdot = N u.
        J = velocity_jacobian(lambda qq: self.X_FM(qq, params), q)
        Hl = J[3:] @ self.N(q, params)
        return jnp.concatenate([jnp.eye(3, dtype=q.dtype), Hl])


@dataclass(frozen=True)
class SphericalCoords(AbstractMobilizer):
    """Azimuth about F's z, zenith about the new y, then translation along the new z:
    ``q = [azimuth, zenith, radius]``, ``u = qdot``."""

    nq: ClassVar[int] = 3
    nu: ClassVar[int] = 3
    n_angles: ClassVar[int] = 2

    def X_FM(self, q, params):
        R = sp.rot_z(q[0]) @ sp.rot_y(q[1])
        return R, R[:, 2] * q[2]

    def q_to_fit_transform(self, R, p, params):
        # from the translation (Simbody's choice, radius >= 0) or from the rotation
        # R = Rz(az) Ry(ze) with the radius projected on M's z: whichever fits better.
        from_p = jnp.stack(
            [jnp.arctan2(p[1], p[0]), jnp.arctan2(jnp.sqrt(p[0] ** 2 + p[1] ** 2), p[2]), sp.safe_norm(p)]
        )
        from_R = jnp.stack([jnp.arctan2(-R[0, 1], R[1, 1]), jnp.arctan2(-R[2, 0], R[2, 2]), p @ R[:, 2]])
        return self._best_of([from_p, from_R], R, p, params)


@dataclass(frozen=True)
class LineOrientation(_Orientation):
    """Orientation of a line along M's z axis: a quaternion (or X-Y-Z angles) with two
    speeds, ``u = [w_x, w_y]`` of ``w_FM`` expressed in M (no spin about M's z)."""

    nu: ClassVar[int] = 2
    no_velocity_product: ClassVar[bool] = True

    def X_FM(self, q, params):
        return self._R(q), _zero3(q)

    def H_FM(self, q, params):
        R = self._R(q)
        return jnp.concatenate([R[:, :2], jnp.zeros((3, 2), q.dtype)])

    def N(self, q, params):
        return self._N_rotation(q) @ self._R(q)[:, :2]


@dataclass(frozen=True)
class FreeLine(_Orientation):
    """LineOrientation plus translation: ``q = [quat(4) | angles(3), p_FM(3)]``,
    ``u = [w_x, w_y (in M), v_FM (in F)]``."""

    nu: ClassVar[int] = 5
    n_translations: ClassVar[int] = 3

    def X_FM(self, q, params):
        a, p = self._split(q)
        return self._R(a), p

    def H_FM(self, q, params):
        a, _ = self._split(q)
        return self._with_translations(self._R(a)[:, :2], q)

    def N(self, q, params):
        a, _ = self._split(q)
        return self._with_translations(self._N_rotation(a) @ self._R(a)[:, :2], q)


@dataclass(frozen=True)
class Weld(AbstractMobilizer):
    """No relative motion: ``X_FM`` is the identity."""

    def X_FM(self, q, params):
        return jnp.eye(3, dtype=q.dtype), jnp.zeros(3, dtype=q.dtype)

    def H_FM(self, q, params):
        return jnp.zeros((6, 0), dtype=q.dtype)

    def q_to_fit_transform(self, R, p, params):
        return jnp.zeros(0, dtype=p.dtype)


# ----------------------------------------------------------------------------- user kinds


@dataclass(frozen=True)  # eq and hash by structure: bodies whose functions differ only in numbers group
class FunctionBased(AbstractMobilizer):
    """Six functions of q: three rotations about ``axes[0:3]`` (applied in order, body
    fixed) and three translations along ``axes[3:6]`` (in F), as Simbody's
    ``MobilizedBody::FunctionBased``. ``qdot == u``; H and its derivative come from autodiff.

    Instance parameters: three multipliers of the translation functions (default 1), the
    factors OpenSim's scaling puts on a CustomJoint's translations (fitted by gradient in
    ``sj.io.fit_scale_factors``); the axes (the rotations' ``_rotation_table`` of their
    unit axes, 243 numbers, then the three unit translation axes); then the numbers of the
    six functions (knots and coefficients of the built-in ``sj.Function`` kinds).
    Mobilizers whose functions have the same kinds, sizes and coordinates (e.g. the left
    and right knees of a model, whatever their axes) compare equal and are evaluated as one
    kind, each with its own numbers.
    """

    n: int = 1
    functions: tuple[Any, ...] = field(default=(), compare=False, hash=False, repr=False)
    coordinate_indices: tuple[tuple[int, ...], ...] = ()
    axes: tuple[tuple[float, float, float], ...] = field(  # instance data (see above)
        default=(
            (1.0, 0.0, 0.0),
            (0.0, 1.0, 0.0),
            (0.0, 0.0, 1.0),
            (1.0, 0.0, 0.0),
            (0.0, 1.0, 0.0),
            (0.0, 0.0, 1.0),
        ),
        compare=False,
        hash=False,
    )
    n_angles_: int = 0
    structure: tuple[Any, ...] = field(default=(), init=False)
    shapes: tuple[tuple[tuple[int, ...], ...], ...] = field(default=(), init=False, repr=False)

    def __post_init__(self) -> None:
        structure, shapes = [], []
        for f in self.functions:
            if hasattr(f, "_split"):
                meta, data = f._split()
            else:  # a plain callable: its own kind, no data
                meta, data = ("callable", _Same(f)), []
            structure.append(meta)
            shapes.append(tuple(np.shape(d) for d in data))
        object.__setattr__(self, "structure", tuple(structure))
        object.__setattr__(self, "shapes", tuple(shapes))

    @property
    def n_params(self) -> int:  # type: ignore[override]
        return _FB_FUNCTIONS + sum(int(np.prod(sh)) for shs in self.shapes for sh in shs)

    @property
    def nq(self) -> int:  # type: ignore[override]
        return self.n

    @property
    def nu(self) -> int:  # type: ignore[override]
        return self.n

    @property
    def n_angles(self) -> int:  # type: ignore[override]
        return self.n_angles_

    def default_params(self) -> np.ndarray:
        table = _rotation_table(tuple(tuple(float(x) for x in a) for a in self.axes[:3]))
        parts = [np.ones(3), table.reshape(-1), np.stack([_unit(a) for a in self.axes[3:]]).reshape(-1)]
        for f in self.functions:
            if hasattr(f, "_split"):
                parts += [np.ravel(d) for d in f._split()[1]]
        return np.concatenate(parts)

    def _bound(self, params: jax.Array) -> list[Any]:
        """The six functions with their numbers taken from ``params``."""
        out, off = [], _FB_FUNCTIONS
        for f, shs in zip(self.functions, self.shapes, strict=True):
            arrays = []
            for sh in shs:
                size = int(np.prod(sh))
                arrays.append(params[off : off + size].reshape(sh))
                off += size
            out.append(f._bind(iter(arrays)) if shs else f)
        return out

    def _f(self, fn: Any, k: int, q: jax.Array) -> jax.Array:
        idx = self.coordinate_indices[k]
        x = q[np.asarray(idx, dtype=int)] if idx else jnp.zeros(0, q.dtype)
        return jnp.asarray(fn(x), dtype=q.dtype).reshape(())

    def X_FM(self, q, params):
        fns = self._bound(params)
        angles = [self._f(fns[k], k, q) for k in range(3)]
        R = _rotation_product(angles, params[3:_FB_TRANSLATION_AXES].reshape((3,) * 3 + (3, 3)), q.dtype)
        t = jnp.stack([self._f(fns[3 + k], 3 + k, q) for k in range(3)]) * params[:3]
        p = jnp.sum(t[:, None] * params[_FB_TRANSLATION_AXES:_FB_FUNCTIONS].reshape(3, 3), axis=0)
        return R, p.astype(q.dtype)


# FunctionBased's parameters: [multipliers (3) | rotation table (243) | translation axes (9) | functions]
_FB_TRANSLATION_AXES = 3 + 27 * 9
_FB_FUNCTIONS = _FB_TRANSLATION_AXES + 9


@functools.lru_cache(maxsize=256)
def _rotation_table(axes: tuple[tuple[float, float, float], ...]) -> np.ndarray:
    """(3, ..., 3, 3, 3) constant matrices whose sum weighted by products of ``(1, cos, sin)``
    of each angle is the product of the rotations about ``axes`` (body fixed, in order).

    About a unit axis ``a``, ``R(t) = a a^T + cos t (I - a a^T) + sin t [a]x``, so a product
    of rotations about constant axes is a fixed combination of constant matrices."""
    T = np.eye(3)[None]
    for axis in axes:
        a = _unit(axis)
        basis = np.stack([np.outer(a, a), np.eye(3) - np.outer(a, a), np.cross(np.eye(3), a)])
        T = np.einsum("...ij,kjl->...kil", T, basis)
    return T[0]


def _rotation_product(angles: Sequence[Any], table: Any, dtype: Any):
    """``R_1(angles[0]) R_2(angles[1]) ...`` about constant axes, as one weighted sum of
    the matrices of their ``_rotation_table`` (an array: instance data) with weights the
    products of each angle's ``(1, cos, sin)``: elementwise work and one reduction, where
    chained 3x3 products compile to a kernel each."""
    w = jnp.ones((), dtype)
    for t in angles:
        e = jnp.stack([jnp.ones((), dtype), jnp.cos(t), jnp.sin(t)])
        w = w[..., None] * e.reshape((1,) * w.ndim + (3,))
    return jnp.sum(w[..., None, None] * jnp.asarray(table, dtype), axis=tuple(range(len(angles))))


def _unit(axis: Any) -> np.ndarray:
    a = np.asarray(axis, dtype=float)
    n = float(np.linalg.norm(a))
    return a / n if n > 0 else a


@dataclass(frozen=True)  # eq and hash by value (callables compare by identity)
class Custom(AbstractMobilizer):
    """A user-defined mobilizer: ``X_FM(q)`` and, only when ``qdot != u``, ``N(q)``.

    ``H_FM = J(q) N(q)`` with ``J`` the autodiff velocity Jacobian of ``X_FM``; H-dot and
    N-dot come from autodiff too.
    """

    nq_: int = 0
    nu_: int = 0
    n_angles_: int = 0
    x_fm: Callable[[jax.Array], tuple[Any, Any]] | None = None
    n_matrix: Callable[[jax.Array], Any] | None = None
    default_q_: tuple[float, ...] | None = None
    q_fit: Callable[..., Any] | None = field(default=None)

    @property
    def nq(self) -> int:  # type: ignore[override]
        return self.nq_

    @property
    def nu(self) -> int:  # type: ignore[override]
        return self.nu_

    @property
    def n_angles(self) -> int:  # type: ignore[override]
        return self.n_angles_

    def X_FM(self, q, params):
        assert self.x_fm is not None  # MobilizedBody.Custom always gives X_FM
        out = self.x_fm(q)
        if isinstance(out, sp.Transform):
            return out.R.astype(q.dtype), out.p.astype(q.dtype)
        R, p = out
        return jnp.asarray(R, q.dtype), jnp.asarray(p, q.dtype)

    def N(self, q, params):
        if self.n_matrix is None:
            return None
        return jnp.asarray(self.n_matrix(q), dtype=q.dtype)

    @property
    def qdot_is_u(self) -> bool:
        return self.n_matrix is None

    def default_q(self):
        if self.default_q_ is not None:
            return np.asarray(self.default_q_, dtype=float)
        return np.zeros(self.nq_)

    def q_to_fit_transform(self, R, p, params):
        if self.q_fit is not None:
            return jnp.asarray(self.q_fit(R, p))
        return AbstractMobilizer.q_to_fit_transform(self, R, p, params)
