"""doitgen: PolyBench doitgen -- multiresolution analysis kernel; A[r, q, :] = A[r, q, :] @ C4 via a temporary, doubly nested loop."""
import numpy as np


def kernel(A, C4):
    nr, nq, npp = A.shape
    s = np.zeros(npp)
    for r in range(nr):
        for q in range(nq):
            s[:] = A[r, q, :] @ C4
            A[r, q, :] = s
    return np.sum(A * A) / (nr * nq)


WRT = ("A", "C4")
SIZES = {"test": {"nr": 4, "nq": 5, "np": 6}, "bench": {"nr": 100, "nq": 80, "np": 120},
         # bench4, 4x the work: nr*nq*np^2: each x4^(1/4)
         "bench4": {"nr": 141, "nq": 113, "np": 170}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    A = rng.standard_normal((p["nr"], p["nq"], p["np"]))
    C4 = rng.standard_normal((p["np"], p["np"])) / np.sqrt(p["np"])
    return (A, C4)


def jax_kernel(A, C4):
    import jax.numpy as jnp
    from jax import lax
    A = jnp.asarray(A)
    C4 = jnp.asarray(C4)
    nr, nq, npp = A.shape

    def inner(q, c):
        A, r = c
        return (A.at[r, q, :].set(A[r, q, :] @ C4), r)

    def outer(r, A):
        return lax.fori_loop(0, nq, inner, (A, r))[0]

    A = lax.fori_loop(0, nr, outer, A)
    return jnp.sum(A * A) / (nr * nq)
