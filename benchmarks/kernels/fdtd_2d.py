"""fdtd_2d: PolyBench FDTD-2D -- Yee-grid finite-difference time-domain update of ex/ey/hz with a source row per step."""
import numpy as np


def kernel(ex, ey, hz, fict):
    tmax = fict.shape[0]
    for t in range(tmax):
        ey[0, :] = fict[t]
        ey[1:, :] -= 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] -= 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] -= 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1])
    nx, ny = hz.shape
    return (np.sum(hz * hz) + np.sum(ex * ex) + np.sum(ey * ey)) / (nx * ny)


WRT = ("ex", "ey", "hz", "fict")
SIZES = {"test": {"nx": 8, "ny": 10, "tmax": 4}, "bench": {"nx": 400, "ny": 500, "tmax": 40},
         # bench4, 4x the work: nx*ny*tmax: the grid doubled a side, steps kept
         "bench4": {"nx": 800, "ny": 1000, "tmax": 40}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    nx, ny = p["nx"], p["ny"]
    ex = rng.uniform(-1.0, 1.0, (nx, ny))
    ey = rng.uniform(-1.0, 1.0, (nx, ny))
    hz = rng.uniform(-1.0, 1.0, (nx, ny))
    fict = rng.uniform(-1.0, 1.0, p["tmax"])
    return (ex, ey, hz, fict)


def jax_kernel(ex, ey, hz, fict):
    import jax.numpy as jnp
    from jax import lax
    ex = jnp.asarray(ex)
    ey = jnp.asarray(ey)
    hz = jnp.asarray(hz)
    fict = jnp.asarray(fict)
    tmax = fict.shape[0]

    def step(t, c):
        ex, ey, hz = c
        ey = ey.at[0, :].set(fict[t])
        ey = ey.at[1:, :].add(-0.5 * (hz[1:, :] - hz[:-1, :]))
        ex = ex.at[:, 1:].add(-0.5 * (hz[:, 1:] - hz[:, :-1]))
        hz = hz.at[:-1, :-1].add(-0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1]))
        return (ex, ey, hz)

    ex, ey, hz = lax.fori_loop(0, tmax, step, (ex, ey, hz))
    nx, ny = hz.shape
    return (jnp.sum(hz * hz) + jnp.sum(ex * ex) + jnp.sum(ey * ey)) / (nx * ny)
