"""subcycled_reaction_diffusion: 2-D diffusion of a reacting species with its stiff reaction sub-cycled (many small explicit reaction steps per diffusion step), as operator-split atmospheric-chemistry and combustion codes do."""
import numpy as np


def kernel(c, k, steps, sub):
    dt = 0.02
    h = dt / sub
    for t in range(steps):
        lap = c[:-2, 1:-1] + c[2:, 1:-1] + c[1:-1, :-2] + c[1:-1, 2:] - 4.0 * c[1:-1, 1:-1]
        c[1:-1, 1:-1] += 0.2 * lap
        for s in range(sub):
            c = c + h * (1.0 - k * c * c)                  # a nonlinear source and sink, relaxed
    return np.sum(c * c) / c.size


WRT = ("c", "k")
SIZES = {"test": {"n": 8, "steps": 3, "sub": 4}, "bench": {"n": 200, "steps": 20, "sub": 25},
         # bench4, 4x the work: n^2*steps*sub: the grid doubled a side
         "bench4": {"n": 400, "steps": 20, "sub": 25}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    c = rng.uniform(0.0, 0.5, (p["n"], p["n"]))
    return (c, 2.0, p["steps"], p["sub"])


def jax_kernel(c, k, steps, sub):
    import jax.numpy as jnp
    from jax import lax

    h = 0.02 / sub

    def react(s, c):
        return c + h * (1.0 - k * c * c)

    def step(t, c):
        lap = c[:-2, 1:-1] + c[2:, 1:-1] + c[1:-1, :-2] + c[1:-1, 2:] - 4.0 * c[1:-1, 1:-1]
        c = c.at[1:-1, 1:-1].add(0.2 * lap)
        return lax.fori_loop(0, sub, react, c)

    c = lax.fori_loop(0, steps, step, jnp.asarray(c))
    return jnp.sum(c * c) / c.size
