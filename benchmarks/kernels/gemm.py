"""gemm: PolyBench gemm -- C = alpha*A@B + beta*C with i/k loops and rank-1 row updates."""
import numpy as np


def kernel(alpha, beta, C, A, B):
    ni, nk = A.shape
    for i in range(ni):
        C[i, :] *= beta
        for k in range(nk):
            C[i, :] += alpha * A[i, k] * B[k, :]
    return np.sum(C * C) / (C.shape[0] * C.shape[1])


WRT = ("alpha", "beta", "C", "A", "B")
SIZES = {"test": {"ni": 6, "nj": 7, "nk": 8}, "bench": {"ni": 110, "nj": 130, "nk": 120},
         # bench4, 4x the work: ni*nj*nk: x4^(1/3) each
         "bench4": {"ni": 175, "nj": 206, "nk": 190}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    C = rng.standard_normal((p["ni"], p["nj"]))
    A = rng.standard_normal((p["ni"], p["nk"]))
    B = rng.standard_normal((p["nk"], p["nj"])) / np.sqrt(p["nk"])
    return (1.5, 1.2, C, A, B)


def jax_kernel(alpha, beta, C, A, B):
    import jax.numpy as jnp
    from jax import lax
    C = jnp.asarray(C)
    A = jnp.asarray(A)
    B = jnp.asarray(B)
    ni, nk = A.shape

    def kbody(k, c):
        C, i = c
        return (C.at[i, :].add(alpha * A[i, k] * B[k, :]), i)

    def ibody(i, C):
        C = C.at[i, :].multiply(beta)
        return lax.fori_loop(0, nk, kbody, (C, i))[0]

    C = lax.fori_loop(0, ni, ibody, C)
    return jnp.sum(C * C) / C.size
