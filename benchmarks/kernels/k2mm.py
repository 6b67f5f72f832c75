"""k2mm: PolyBench 2mm -- two chained matrix products D = alpha*A@B@C + beta*D, one row at a time."""
import numpy as np


def kernel(alpha, beta, A, B, C, D):
    ni = A.shape[0]
    nj = B.shape[1]
    tmp = np.zeros((ni, nj))
    for i in range(ni):
        tmp[i, :] = alpha * (A[i, :] @ B)
    D *= beta
    for i in range(ni):
        D[i, :] += tmp[i, :] @ C
    return np.sum(D * D) / (D.shape[0] * D.shape[1])


WRT = ("alpha", "beta", "A", "B", "C", "D")
SIZES = {"test": {"ni": 6, "nj": 7, "nk": 8, "nl": 9},
         "bench": {"ni": 400, "nj": 450, "nk": 500, "nl": 550},
         # bench4, 4x the work: three-index products: each x4^(1/3)
         "bench4": {"ni": 635, "nj": 714, "nk": 794, "nl": 873}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    A = rng.standard_normal((p["ni"], p["nk"]))
    B = rng.standard_normal((p["nk"], p["nj"])) / np.sqrt(p["nk"])
    C = rng.standard_normal((p["nj"], p["nl"])) / np.sqrt(p["nj"])
    D = rng.standard_normal((p["ni"], p["nl"]))
    return (1.5, 1.2, A, B, C, D)


def jax_kernel(alpha, beta, A, B, C, D):
    import jax.numpy as jnp
    from jax import lax
    A, B, C, D = [jnp.asarray(a) for a in (A, B, C, D)]
    ni = A.shape[0]
    nj = B.shape[1]
    tmp = lax.fori_loop(0, ni, lambda i, t: t.at[i, :].set(alpha * (A[i, :] @ B)), jnp.zeros((ni, nj)))
    D = D * beta
    D = lax.fori_loop(0, ni, lambda i, D: D.at[i, :].add(tmp[i, :] @ C), D)
    return jnp.sum(D * D) / D.size
