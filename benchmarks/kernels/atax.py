"""atax: PolyBench atax -- y = A^T (A x), accumulated row by row."""
import numpy as np


def kernel(A, x):
    m, n = A.shape
    y = np.zeros(n)
    tmp = np.zeros(m)
    for i in range(m):
        tmp[i] = A[i, :] @ x
        y += A[i, :] * tmp[i]
    return np.sum(y * y) / n


WRT = ("A", "x")
SIZES = {"test": {"m": 8, "n": 10}, "bench": {"m": 1800, "n": 2200},
         # bench4, 4x the work: m*n: both doubled
         "bench4": {"m": 3600, "n": 4400}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    A = rng.standard_normal((p["m"], p["n"])) / np.sqrt(p["n"])
    x = rng.standard_normal(p["n"])
    return (A, x)


def jax_kernel(A, x):
    import jax.numpy as jnp
    from jax import lax
    A = jnp.asarray(A)
    x = jnp.asarray(x)
    m, n = A.shape

    def body(i, carry):
        tmp, y = carry
        tmp = tmp.at[i].set(A[i, :] @ x)
        y = y + A[i, :] * tmp[i]
        return (tmp, y)

    tmp, y = lax.fori_loop(0, m, body, (jnp.zeros(m), jnp.zeros(n)))
    return jnp.sum(y * y) / n
