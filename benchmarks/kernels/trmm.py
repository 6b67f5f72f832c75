"""trmm: PolyBench trmm -- B = alpha * A^T B with unit lower-triangular A; dot products over A[i+1:, i]."""
import numpy as np


def kernel(alpha, A, B):
    m, n = B.shape
    for i in range(m):
        for j in range(n):
            B[i, j] += A[i + 1:, i] @ B[i + 1:, j]
            B[i, j] *= alpha
    return np.sum(B * B) / (m * n)


WRT = ("alpha", "A", "B")
SIZES = {"test": {"m": 8, "n": 6}, "bench": {"m": 120, "n": 150},
         # bench4, 4x the work: m^2*n: both x4^(1/3) each
         "bench4": {"m": 190, "n": 238}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    m, n = p["m"], p["n"]
    A = rng.standard_normal((m, m)) / np.sqrt(m)
    B = rng.standard_normal((m, n))
    return (1.1, A, B)


def jax_kernel(alpha, A, B):
    import jax.numpy as jnp
    A = jnp.asarray(A)
    B = jnp.asarray(B)
    m, n = B.shape
    # row i reads only rows below it, which the loop has not yet changed: one product with
    # A's strict lower triangle
    B = alpha * (B + jnp.tril(A, -1).T @ B)
    return jnp.sum(B * B) / (m * n)
