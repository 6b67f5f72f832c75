"""seidel_2d: PolyBench seidel-2d -- Gauss-Seidel 9-point stencil with scalar element updates (loop-carried dependence in i and j)."""
import numpy as np


def kernel(A, tsteps):
    n = A.shape[0]
    for t in range(tsteps):
        for i in range(1, n - 1):
            for j in range(1, n - 1):
                A[i, j] = (A[i - 1, j - 1] + A[i - 1, j] + A[i - 1, j + 1]
                           + A[i, j - 1] + A[i, j] + A[i, j + 1]
                           + A[i + 1, j - 1] + A[i + 1, j] + A[i + 1, j + 1]) / 9.0
    return np.sum(A * A) / (n * n)


WRT = ("A",)
SIZES = {"test": {"n": 8, "tsteps": 2}, "bench": {"n": 48, "tsteps": 5},
         # bench4, 4x the work: n^2*tsteps: interior 46 -> 92 a side
         "bench4": {"n": 94, "tsteps": 5}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    n = p["n"]
    A = rng.uniform(0.0, 1.0, (n, n))
    return (A, p["tsteps"])


def jax_kernel(A, tsteps):
    import jax.numpy as jnp
    from jax import lax
    A = jnp.asarray(A)
    n = A.shape[0]

    def jbody(j, c):
        A, i = c
        v = (A[i - 1, j - 1] + A[i - 1, j] + A[i - 1, j + 1]
             + A[i, j - 1] + A[i, j] + A[i, j + 1]
             + A[i + 1, j - 1] + A[i + 1, j] + A[i + 1, j + 1]) / 9.0
        return (A.at[i, j].set(v), i)

    def ibody(i, A):
        return lax.fori_loop(1, n - 1, jbody, (A, i))[0]

    def tbody(t, A):
        return lax.fori_loop(1, n - 1, ibody, A)

    A = lax.fori_loop(0, tsteps, tbody, A)
    return jnp.sum(A * A) / (n * n)
