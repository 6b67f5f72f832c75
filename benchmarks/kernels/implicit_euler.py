"""implicit_euler: semi-implicit Euler for a 1-D reaction-diffusion equation; tridiagonal Laplacian built in a loop, np.linalg.solve every step."""
import numpy as np


def kernel(u, kappa, n_steps):
    n = u.shape[0]
    dx = 1.0 / (n + 1)
    dt = 0.01
    L = 2.0 * np.eye(n)
    for i in range(n - 1):
        L[i, i + 1] = -1.0
        L[i + 1, i] = -1.0
    M = np.eye(n) + (kappa * dt / (dx * dx)) * L
    for t in range(n_steps):
        u = np.linalg.solve(M, u + dt * np.sin(3.0 * u))
    return np.sum(u * u) / n * 100.0


WRT = ("u", "kappa")
SIZES = {"test": {"n": 10, "n_steps": 4}, "bench": {"n": 400, "n_steps": 40},
         # bench4, 4x the work: n^3 per step (dense solve): n x4^(1/3)
         "bench4": {"n": 635, "n_steps": 40}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    u = rng.uniform(-1.0, 1.0, p["n"])
    return (u, 0.05, p["n_steps"])


def jax_kernel(u, kappa, n_steps):
    import jax.numpy as jnp
    from jax import lax
    u = jnp.asarray(u)
    n = u.shape[0]
    dx = 1.0 / (n + 1)
    dt = 0.01
    L = 2.0 * jnp.eye(n) - jnp.eye(n, k=1) - jnp.eye(n, k=-1)
    M = jnp.eye(n) + (kappa * dt / (dx * dx)) * L
    u = lax.fori_loop(0, n_steps, lambda t, u: jnp.linalg.solve(M, u + dt * jnp.sin(3.0 * u)), u)
    return jnp.sum(u * u) / n * 100.0
