"""nbody: softened gravitational N-body with leapfrog (kick-drift-kick); pairwise forces in a triangular i-loop over j > i slices, helper mutates acc in place."""
import numpy as np

G = 1.0
SOFT = 0.1


def accelerations(pos, mass, acc):
    n = pos.shape[0]
    acc[:, :] = 0.0
    for i in range(n - 1):
        d = pos[i + 1:, :] - pos[i, :]
        r2 = np.sum(d * d, axis=1) + SOFT * SOFT
        inv3 = r2 ** -1.5
        f = d * inv3[:, None]
        acc[i, :] += G * np.sum(mass[i + 1:, None] * f, axis=0)
        acc[i + 1:, :] -= G * mass[i] * f


def energy(pos, vel, mass):
    n = pos.shape[0]
    ke = 0.5 * np.sum(mass[:, None] * vel * vel)
    pe = 0.0
    for i in range(n - 1):
        d = pos[i + 1:, :] - pos[i, :]
        r = np.sqrt(np.sum(d * d, axis=1) + SOFT * SOFT)
        pe -= G * mass[i] * np.sum(mass[i + 1:] / r)
    return ke + pe


def kernel(pos, vel, mass, dt, n_steps):
    acc = np.zeros_like(pos)
    accelerations(pos, mass, acc)
    for s in range(n_steps):
        vel += acc * (dt / 2.0)
        pos += vel * dt
        accelerations(pos, mass, acc)
        vel += acc * (dt / 2.0)
    return energy(pos, vel, mass) + np.mean(pos * pos)


WRT = ("pos", "vel", "mass", "dt")
SIZES = {"test": {"n": 8, "n_steps": 3}, "bench": {"n": 200, "n_steps": 8},
         # bench4, 4x the work: n^2 pairs per step: n doubled
         "bench4": {"n": 400, "n_steps": 8}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    n = p["n"]
    pos = rng.standard_normal((n, 3))
    vel = 0.3 * rng.standard_normal((n, 3))
    mass = rng.uniform(0.5, 1.5, n) / n
    return (pos, vel, mass, 0.01, p["n_steps"])


def jax_kernel(pos, vel, mass, dt, n_steps):
    import jax.numpy as jnp
    from jax import lax
    pos = jnp.asarray(pos)
    vel = jnp.asarray(vel)
    mass = jnp.asarray(mass)
    n = pos.shape[0]
    upper = jnp.triu(jnp.ones((n, n), dtype=bool), 1)

    # the pair loop as all pairs at once: d[i, j] = pos[j] - pos[i]; the diagonal's d is 0,
    # so its force vanishes (SOFT > 0)
    def accelerations(pos):
        d = pos[None, :, :] - pos[:, None, :]
        inv3 = (jnp.sum(d * d, axis=2) + SOFT * SOFT) ** -1.5
        return G * jnp.sum((mass[None, :] * inv3)[:, :, None] * d, axis=1)

    def energy(pos, vel):
        ke = 0.5 * jnp.sum(mass[:, None] * vel * vel)
        d = pos[None, :, :] - pos[:, None, :]
        r = jnp.sqrt(jnp.sum(d * d, axis=2) + SOFT * SOFT)
        pe = -G * jnp.sum(jnp.where(upper, mass[:, None] * mass[None, :] / r, 0.0))
        return ke + pe

    def step(s, c):
        pos, vel, acc = c
        vel = vel + acc * (dt / 2.0)
        pos = pos + vel * dt
        acc = accelerations(pos)
        vel = vel + acc * (dt / 2.0)
        return (pos, vel, acc)

    pos, vel, acc = lax.fori_loop(0, n_steps, step, (pos, vel, accelerations(pos)))
    return energy(pos, vel) + jnp.mean(pos * pos)
