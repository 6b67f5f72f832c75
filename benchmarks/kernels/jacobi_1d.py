"""jacobi_1d: PolyBench jacobi-1d -- 3-point Jacobi smoothing, ping-pong between two 1-D arrays."""
import numpy as np


def kernel(A, B, tsteps):
    n = A.shape[0]
    for t in range(tsteps):
        B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1] = 0.33333 * (B[:-2] + B[1:-1] + B[2:])
    return np.sum(A * A) / n


WRT = ("A", "B")
SIZES = {"test": {"n": 16, "tsteps": 4}, "bench": {"n": 40000, "tsteps": 500},
         # bench4, 4x the work: n*tsteps: the grid x4, steps kept
         "bench4": {"n": 160000, "tsteps": 500}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    A = rng.uniform(0.0, 1.0, p["n"])
    B = rng.uniform(0.0, 1.0, p["n"])
    return (A, B, p["tsteps"])


def jax_kernel(A, B, tsteps):
    import jax.numpy as jnp
    from jax import lax
    A = jnp.asarray(A)
    B = jnp.asarray(B)
    n = A.shape[0]

    def step(t, c):
        A, B = c
        B = B.at[1:-1].set(0.33333 * (A[:-2] + A[1:-1] + A[2:]))
        A = A.at[1:-1].set(0.33333 * (B[:-2] + B[1:-1] + B[2:]))
        return (A, B)

    A, B = lax.fori_loop(0, tsteps, step, (A, B))
    return jnp.sum(A * A) / n
