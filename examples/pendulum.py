"""A pin + ball double pendulum: forward dynamics, an RK4 rollout, and 1024 rollouts at once.

Run:  python examples/pendulum.py          (add --view to watch the motion in the browser,
      --out PATH to save the figure elsewhere)

Prints the mass matrix and accelerations at a sample state, the energy drift of a 2 s
fixed-step rollout, a gradient through the whole rollout, and the throughput of the same
rollout batched with ``sj.vmap`` over 1024 initial states with different link masses;
saves ``pendulum.png`` in the current folder (the pendulum at the start and the end of the rollout, and
the energy drift) with ``sj.viz.plot_pose``. ``--view`` serves the rollout in the 3D viewer
(``sj.viz.View``, on localhost) until Ctrl-C.
"""

import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

import simjax as sj

sj.configure()  # XLA:CPU settings and a compilation cache, before the first computation
jax.config.update("jax_enable_x64", True)


def build():
    system = sj.MultibodySystem()
    matter = sj.SimbodyMatterSubsystem(system)
    forces = sj.GeneralForceSubsystem(system)
    sj.Force.UniformGravity(forces, matter, [0, -9.81, 0])
    body = sj.Body.Rigid(sj.MassProperties(1.0, [0, 0, 0], sj.Inertia(0.1, 0.1, 0.1)))
    link1 = sj.MobilizedBody.Pin(matter.Ground(), sj.Transform(), body, sj.Transform(p=[0, 1, 0]))
    link2 = sj.MobilizedBody.Ball(link1, sj.Transform(), body, sj.Transform(p=[0, 1, 0]))
    return system, matter, link1, link2


def rollout(system, state, h=1e-3, n=2000):
    """Classical RK4 on (q, u); quaternions are renormalized by realize at every stage."""
    nq = state.nq

    def f(y):
        s = system.realize(state.with_q(y[:nq]).with_u(y[nq:]), sj.Stage.ACCELERATION)
        return jnp.concatenate([s.qdot, s.udot])

    def step(y, _):
        k1 = f(y)
        k2 = f(y + h / 2 * k1)
        k3 = f(y + h / 2 * k2)
        k4 = f(y + h * k3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        s = system.realize(state.with_q(y[:nq]).with_u(y[nq:]), sj.Stage.VELOCITY)
        return y, system.calc_energy(s)

    y, energy = jax.lax.scan(step, jnp.concatenate([state.q, state.u]), None, length=n)
    return state.with_q(y[:nq]).with_u(y[nq:]), energy


def main(view: bool = False) -> None:
    system, matter, link1, link2 = build()
    state = system.realize_topology()
    state = link1.set_q(state, 0.5)
    state = link2.set_q_to_fit_transform(
        state, sj.Transform(sj.Rotation.from_axis_angle(jnp.array([0.3, 0.0, 0.6])))
    )
    state = state.with_u(jnp.array([0.0, 1.0, -0.5, 0.2]))
    s = system.realize(state, sj.Stage.ACCELERATION)
    print("nq, nu =", s.nq, s.nu)
    print("mass matrix M(q):\n", matter.calc_mass_matrix(s))
    print("udot =", s.udot)
    print("link2 origin in Ground =", link2.get_body_transform(s).p)

    run = jax.jit(lambda st: rollout(system, st))
    t0 = time.perf_counter()
    final, energy = jax.block_until_ready(run(state))
    t_compile = time.perf_counter() - t0
    t0 = time.perf_counter()
    final, energy = jax.block_until_ready(run(state))
    t_run = time.perf_counter() - t0
    e0 = system.calc_energy(system.realize(state, sj.Stage.VELOCITY))
    print(f"2 s RK4 rollout (h = 1 ms): first call {t_compile:.2f} s (compile), then {t_run * 1e3:.1f} ms")
    print(f"energy {float(e0):.6f} J, max drift {float(jnp.abs(energy - e0).max()):.2e} J")

    # Gradient of link2's final height with respect to the first link's mass, through 2000 steps.
    def final_height(mass1):
        st = state.with_instance("matter", "mass", state.instance["matter"]["mass"].at[1].set(mass1))
        end, _ = rollout(system, st)
        return link2.get_body_transform(system.realize(end, sj.Stage.POSITION)).p[1]

    g = jax.jit(jax.grad(final_height))(1.0)
    eps = 1e-5
    fd = (final_height(1.0 + eps) - final_height(1.0 - eps)) / (2 * eps)
    print(f"d(final height)/d(mass of link 1) = {float(g):.6f} (finite difference {float(fd):.6f})")

    # 1024 rollouts at once, each with its own initial angle and link masses.
    B = 1024
    key1, key2 = jax.random.split(jax.random.PRNGKey(0))
    q1 = jax.random.uniform(key1, (B,), minval=-1.0, maxval=1.0)
    masses = state.instance["matter"]["mass"] * jax.random.uniform(key2, (B, 3), minval=0.5, maxval=2.0)
    batch = jax.vmap(lambda a, m: state.with_q(state.q.at[0].set(a)).with_instance("matter", "mass", m))(
        q1, masses
    )
    # sj.vmap: jax.vmap evaluated in chunks of 128 on a CPU (each chunk's work stays in cache)
    brun = jax.jit(sj.vmap(lambda st: rollout(system, st, n=500)))
    jax.block_until_ready(brun(batch))
    t0 = time.perf_counter()
    _, benergy = jax.block_until_ready(brun(batch))
    dt = time.perf_counter() - t0
    print(f"{B} rollouts x 500 RK4 steps in {dt:.2f} s = {B * 500 * 4 / dt:,.0f} forward-dynamics calls/s")
    print(f"worst energy drift over the batch: {float(jnp.abs(benergy - benergy[:, :1]).max()):.2e} J")

    figure(system, state, final, energy - e0)
    if view:
        watch(system, state)


def figure(system, start, end, drift):
    """The pendulum at the start and the end of the rollout, and the energy drift."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(11, 3.8))
    sj.viz.plot_pose(start, system, ax=fig.add_subplot(1, 3, 1, projection="3d"), title="t = 0")
    sj.viz.plot_pose(end, system, ax=fig.add_subplot(1, 3, 2, projection="3d"), title="t = 2 s")
    ax = fig.add_subplot(1, 3, 3)
    ax.plot(jnp.arange(drift.shape[0]) * 1e-3, drift)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("energy - E0 (J)")
    ax.set_title("energy drift, RK4 h = 1 ms")
    fig.tight_layout()
    # in the current folder, not over the copy the README shows (examples/pendulum.png)
    out = Path(sys.argv[sys.argv.index("--out") + 1]) if "--out" in sys.argv else Path("pendulum.png")
    fig.savefig(out, dpi=90)
    print(f"saved {out}")


def watch(system, state):
    """Serve a 4 s rollout in the browser (sj.viz.View) until Ctrl-C."""
    traj = sj.simulate(system, state, 4.0, save_at=241, integrator="rk4", dt=1e-3)
    view = sj.viz.View(system, frames=True)
    view.animate(traj)
    print(f"3D view at {view.url} (Ctrl-C to stop)")
    try:
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        view.close()


if __name__ == "__main__":
    main(view="--view" in sys.argv)
