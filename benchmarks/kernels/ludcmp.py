"""ludcmp: PolyBench ludcmp -- LU factorisation followed by forward and backward substitution (reverse range)."""
import numpy as np


def kernel(A, b):
    n = A.shape[0]
    for i in range(n):
        for j in range(i):
            w = A[i, j] - A[i, :j] @ A[:j, j]
            A[i, j] = w / A[j, j]
        for j in range(i, n):
            A[i, j] = A[i, j] - A[i, :i] @ A[:i, j]
    y = np.zeros(n)
    for i in range(n):
        y[i] = b[i] - A[i, :i] @ y[:i]
    x = np.zeros(n)
    for i in range(n - 1, -1, -1):
        x[i] = (y[i] - A[i, i + 1:] @ x[i + 1:]) / A[i, i]
    return np.sum(x * x) + np.sum(x)


WRT = ("A", "b")
SIZES = {"test": {"n": 10}, "bench": {"n": 150}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    n = SIZES[size]["n"]
    A = rng.standard_normal((n, n)) / np.sqrt(n) + 3.0 * np.eye(n)
    b = rng.standard_normal(n)
    return (A, b)


JAX_NOTE = ("loop ranges and slices (range(i), A[i, :j], x[i + 1:]) depend on the outer index; "
            "lax.fori_loop needs static shapes, so JAX needs a masked rewrite")
