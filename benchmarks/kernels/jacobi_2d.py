"""jacobi_2d: PolyBench jacobi-2d -- 5-point Jacobi stencil, ping-pong between two 2-D arrays."""
import numpy as np


def kernel(A, B, tsteps):
    n = A.shape[0]
    for t in range(tsteps):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])
    return np.sum(A * A) / (n * n)


WRT = ("A", "B")
SIZES = {"test": {"n": 10, "tsteps": 4}, "bench": {"n": 300, "tsteps": 60},
         # bench4, 4x the work: n^2*tsteps: interior 298 -> 596 a side
         "bench4": {"n": 598, "tsteps": 60}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    n = p["n"]
    A = rng.uniform(0.0, 1.0, (n, n))
    B = rng.uniform(0.0, 1.0, (n, n))
    return (A, B, p["tsteps"])


def jax_kernel(A, B, tsteps):
    import jax.numpy as jnp
    from jax import lax
    A = jnp.asarray(A)
    B = jnp.asarray(B)
    n = A.shape[0]

    def step(t, c):
        A, B = c
        B = B.at[1:-1, 1:-1].set(0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1]))
        A = A.at[1:-1, 1:-1].set(0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1]))
        return (A, B)

    A, B = lax.fori_loop(0, tsteps, step, (A, B))
    return jnp.sum(A * A) / (n * n)
