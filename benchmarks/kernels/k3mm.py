"""k3mm: PolyBench 3mm -- G = (A@B)@(C@D) as three row-looped matrix products."""
import numpy as np


def kernel(A, B, C, D):
    ni = A.shape[0]
    nj = B.shape[1]
    nl = D.shape[1]
    E = np.zeros((ni, nj))
    F = np.zeros((nj, nl))
    G = np.zeros((ni, nl))
    for i in range(ni):
        E[i, :] = A[i, :] @ B
    for i in range(nj):
        F[i, :] = C[i, :] @ D
    for i in range(ni):
        G[i, :] = E[i, :] @ F
    return np.sum(G * G) / (ni * nl)


WRT = ("A", "B", "C", "D")
SIZES = {"test": {"ni": 6, "nj": 7, "nk": 8, "nl": 9, "nm": 10},
         "bench": {"ni": 400, "nj": 450, "nk": 500, "nl": 550, "nm": 600},
         # bench4, 4x the work: three-index products: each x4^(1/3)
         "bench4": {"ni": 635, "nj": 714, "nk": 794, "nl": 873, "nm": 952}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    A = rng.standard_normal((p["ni"], p["nk"]))
    B = rng.standard_normal((p["nk"], p["nj"])) / np.sqrt(p["nk"])
    C = rng.standard_normal((p["nj"], p["nm"]))
    D = rng.standard_normal((p["nm"], p["nl"])) / np.sqrt(p["nm"])
    return (A, B, C, D)


def jax_kernel(A, B, C, D):
    import jax.numpy as jnp
    from jax import lax
    A, B, C, D = [jnp.asarray(a) for a in (A, B, C, D)]
    ni = A.shape[0]
    nj = B.shape[1]
    nl = D.shape[1]
    E = lax.fori_loop(0, ni, lambda i, E: E.at[i, :].set(A[i, :] @ B), jnp.zeros((ni, nj)))
    F = lax.fori_loop(0, nj, lambda i, F: F.at[i, :].set(C[i, :] @ D), jnp.zeros((nj, nl)))
    G = lax.fori_loop(0, ni, lambda i, G: G.at[i, :].set(E[i, :] @ F), jnp.zeros((ni, nl)))
    return jnp.sum(G * G) / G.size
