"""bicg: PolyBench BiCG sub-kernel -- s = A^T r and q = A p computed in one row loop."""
import numpy as np


def kernel(A, p, r):
    m, n = A.shape
    s = np.zeros(n)
    q = np.zeros(m)
    for i in range(m):
        s += r[i] * A[i, :]
        q[i] = A[i, :] @ p
    return np.sum(s * s) + np.sum(q * q)


WRT = ("A", "p", "r")
SIZES = {"test": {"m": 10, "n": 8}, "bench": {"m": 2200, "n": 1800},
         # bench4, 4x the work: m*n: both doubled
         "bench4": {"m": 4400, "n": 3600}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    sz = SIZES[size]
    m, n = sz["m"], sz["n"]
    A = rng.standard_normal((m, n)) / np.sqrt(n)
    p = rng.standard_normal(n)
    r = rng.standard_normal(m) / np.sqrt(m)
    return (A, p, r)


def jax_kernel(A, p, r):
    import jax.numpy as jnp
    from jax import lax
    A = jnp.asarray(A)
    p = jnp.asarray(p)
    r = jnp.asarray(r)
    m, n = A.shape

    def body(i, carry):
        s, q = carry
        s = s + r[i] * A[i, :]
        q = q.at[i].set(A[i, :] @ p)
        return (s, q)

    s, q = lax.fori_loop(0, m, body, (jnp.zeros(n), jnp.zeros(m)))
    return jnp.sum(s * s) + jnp.sum(q * q)
