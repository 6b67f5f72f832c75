"""syr2k: PolyBench syr2k -- symmetric rank-2k update of the lower triangle, row slices C[i, :i+1]."""
import numpy as np


def kernel(alpha, beta, C, A, B):
    n, m = A.shape
    for i in range(n):
        C[i, :i + 1] *= beta
        for k in range(m):
            C[i, :i + 1] += A[:i + 1, k] * alpha * B[i, k] + B[:i + 1, k] * alpha * A[i, k]
    return np.sum(np.tril(C) ** 2) / n


WRT = ("alpha", "beta", "C", "A", "B")
SIZES = {"test": {"n": 8, "m": 6}, "bench": {"n": 120, "m": 100},
         # bench4, 4x the work: n^2*m: both x4^(1/3) each
         "bench4": {"n": 190, "m": 159}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    n, m = p["n"], p["m"]
    C = rng.standard_normal((n, n))
    A = rng.standard_normal((n, m)) / np.sqrt(m)
    B = rng.standard_normal((n, m)) / np.sqrt(m)
    return (1.5, 1.2, C, A, B)


def jax_kernel(alpha, beta, C, A, B):
    import jax.numpy as jnp
    C = jnp.asarray(C)
    A = jnp.asarray(A)
    B = jnp.asarray(B)
    n, m = A.shape
    # rows are independent and the k loop is a sum: the lower triangle of one update
    C = jnp.tril(beta * C + alpha * (B @ A.T) + alpha * (A @ B.T))
    return jnp.sum(C ** 2) / n
