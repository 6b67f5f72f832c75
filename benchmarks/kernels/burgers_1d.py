"""burgers_1d: viscous Burgers equation on a periodic grid, centred flux differences with np.roll neighbours, tuple-swap double buffering."""
import math
import numpy as np


def kernel(u, nu, n_steps):
    n = u.shape[0]
    dx = 2.0 * math.pi / n
    dt = 0.2 * dx
    un = np.empty_like(u)
    for t in range(n_steps):
        up = np.roll(u, -1)
        um = np.roll(u, 1)
        f = 0.5 * u * u
        un[:] = u - (0.5 * dt / dx) * (np.roll(f, -1) - np.roll(f, 1)) + nu * (up - 2.0 * u + um)
        u, un = un, u
    return np.sum(u * u) / n + np.sum(u[: n // 2]) / n


WRT = ("u", "nu")
SIZES = {"test": {"n": 16, "n_steps": 5}, "bench": {"n": 20000, "n_steps": 500},
         # bench4, 4x the work: n*n_steps: the grid x4, steps kept
         "bench4": {"n": 80000, "n_steps": 500}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    n = p["n"]
    u = 0.5 + 0.5 * rng.uniform(-1.0, 1.0, n)
    return (u, 0.2, p["n_steps"])   # nu: grid diffusion number (stable for nu <= 0.5)


def jax_kernel(u, nu, n_steps):
    import jax.numpy as jnp
    from jax import lax
    u = jnp.asarray(u)
    n = u.shape[0]
    dx = 2.0 * jnp.pi / n
    dt = 0.2 * dx

    def step(t, u):
        up = jnp.roll(u, -1)
        um = jnp.roll(u, 1)
        f = 0.5 * u * u
        return u - (0.5 * dt / dx) * (jnp.roll(f, -1) - jnp.roll(f, 1)) + nu * (up - 2.0 * u + um)

    u = lax.fori_loop(0, n_steps, step, u)
    return jnp.sum(u * u) / n + jnp.sum(u[: n // 2]) / n
