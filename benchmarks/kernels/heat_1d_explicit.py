"""heat_1d_explicit: explicit FTCS 1-D heat equation updated in place through aliasing views (inner/left/right of one array), Neumann/Dirichlet ends."""
import numpy as np


def kernel(u, kappa, n_steps):
    n = u.shape[0]
    dx = 1.0 / (n - 1)
    dt = 0.4 * dx * dx
    r = kappa * dt / (dx * dx)
    inner = u[1:-1]
    left = u[:-2]
    right = u[2:]
    for t in range(n_steps):
        lap = left - 2.0 * inner + right
        inner += r * lap
        u[0] = u[1]
        u[-1] = 0.0
    return np.sum(u * u) / n + u[n // 2]


WRT = ("u", "kappa")
SIZES = {"test": {"n": 12, "n_steps": 5}, "bench": {"n": 20000, "n_steps": 1000},
         # bench4, 4x the work: n*n_steps: the grid x4, steps kept
         "bench4": {"n": 80000, "n_steps": 1000}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    u = rng.uniform(0.0, 1.0, p["n"])
    return (u, 1.1, p["n_steps"])


def jax_kernel(u, kappa, n_steps):
    import jax.numpy as jnp
    from jax import lax
    u = jnp.asarray(u)
    n = u.shape[0]
    dx = 1.0 / (n - 1)
    dt = 0.4 * dx * dx
    r = kappa * dt / (dx * dx)

    def step(t, u):
        u = u.at[1:-1].add(r * (u[:-2] - 2.0 * u[1:-1] + u[2:]))
        u = u.at[0].set(u[1])
        return u.at[-1].set(0.0)

    u = lax.fori_loop(0, n_steps, step, u)
    return jnp.sum(u * u) / n + u[n // 2]
