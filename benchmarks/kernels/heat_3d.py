"""heat_3d: PolyBench heat-3d -- explicit 7-point 3-D heat stencil, ping-pong between A and B on interior views."""
import numpy as np


def kernel(A, B, tsteps):
    n = A.shape[0]
    for t in range(tsteps):
        B[1:-1, 1:-1, 1:-1] = (
            0.125 * (A[2:, 1:-1, 1:-1] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[:-2, 1:-1, 1:-1])
            + 0.125 * (A[1:-1, 2:, 1:-1] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[1:-1, :-2, 1:-1])
            + 0.125 * (A[1:-1, 1:-1, 2:] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[1:-1, 1:-1, :-2])
            + A[1:-1, 1:-1, 1:-1])
        A[1:-1, 1:-1, 1:-1] = (
            0.125 * (B[2:, 1:-1, 1:-1] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[:-2, 1:-1, 1:-1])
            + 0.125 * (B[1:-1, 2:, 1:-1] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[1:-1, :-2, 1:-1])
            + 0.125 * (B[1:-1, 1:-1, 2:] - 2.0 * B[1:-1, 1:-1, 1:-1] + B[1:-1, 1:-1, :-2])
            + B[1:-1, 1:-1, 1:-1])
    return np.sum(A * A) / (n * n * n)


WRT = ("A", "B")
SIZES = {"test": {"n": 8, "tsteps": 3}, "bench": {"n": 50, "tsteps": 20},
         # bench4, 4x the work: n^3*tsteps: interior 48 -> 76 a side (3.97x)
         "bench4": {"n": 78, "tsteps": 20}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    n = p["n"]
    A = rng.uniform(0.0, 1.0, (n, n, n))
    B = A.copy()
    return (A, B, p["tsteps"])


def jax_kernel(A, B, tsteps):
    import jax.numpy as jnp
    from jax import lax
    A = jnp.asarray(A)
    B = jnp.asarray(B)
    n = A.shape[0]

    def sweep(A, B):
        return B.at[1:-1, 1:-1, 1:-1].set(
            0.125 * (A[2:, 1:-1, 1:-1] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[:-2, 1:-1, 1:-1])
            + 0.125 * (A[1:-1, 2:, 1:-1] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[1:-1, :-2, 1:-1])
            + 0.125 * (A[1:-1, 1:-1, 2:] - 2.0 * A[1:-1, 1:-1, 1:-1] + A[1:-1, 1:-1, :-2])
            + A[1:-1, 1:-1, 1:-1])

    def step(t, c):
        A, B = c
        B = sweep(A, B)
        A = sweep(B, A)
        return (A, B)

    A, B = lax.fori_loop(0, tsteps, step, (A, B))
    return jnp.sum(A * A) / (n * n * n)
