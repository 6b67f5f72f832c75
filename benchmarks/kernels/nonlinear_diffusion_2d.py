"""nonlinear_diffusion_2d: explicit 2-D diffusion whose diffusivity grows with the field (u_t = kappa (1 + u^2) lap u), updated in place on the interior for many steps."""
import numpy as np


def kernel(u, kappa, steps):
    for t in range(steps):
        c = u[1:-1, 1:-1]
        lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * c
        u[1:-1, 1:-1] = c + kappa * lap * (1.0 + c * c)
    return np.sum(u * u) / u.size


WRT = ("u", "kappa")
SIZES = {"test": {"n": 10, "steps": 4}, "bench": {"n": 400, "steps": 200},
         # bench4, 4x the work: n^2*steps: interior 398 -> 796 a side
         "bench4": {"n": 798, "steps": 200}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    u = rng.uniform(0.0, 0.5, (p["n"], p["n"]))
    return (u, 0.1, p["steps"])


def jax_kernel(u, kappa, steps):
    import jax.numpy as jnp
    from jax import lax

    def step(t, u):
        c = u[1:-1, 1:-1]
        lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * c
        return u.at[1:-1, 1:-1].set(c + kappa * lap * (1.0 + c * c))

    u = lax.fori_loop(0, steps, step, jnp.asarray(u))
    return jnp.sum(u * u) / u.size
