"""gramschmidt: PolyBench Gram-Schmidt QR -- modified Gram-Schmidt with column updates in a triangular j loop."""
import numpy as np


def kernel(A):
    m, n = A.shape
    Q = np.zeros((m, n))
    R = np.zeros((n, n))
    for k in range(n):
        nrm = A[:, k] @ A[:, k]
        R[k, k] = np.sqrt(nrm)
        Q[:, k] = A[:, k] / R[k, k]
        for j in range(k + 1, n):
            R[k, j] = Q[:, k] @ A[:, j]
            A[:, j] -= Q[:, k] * R[k, j]
    return np.sum(R) + np.sum(Q)


WRT = ("A",)
SIZES = {"test": {"m": 12, "n": 8}, "bench": {"m": 240, "n": 200}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    A = rng.standard_normal((p["m"], p["n"]))
    return (A,)


JAX_NOTE = ("inner loop range(k + 1, n) depends on the outer index; lax.fori_loop with a traced lower "
            "bound lowers to while_loop, which JAX cannot reverse-differentiate")
