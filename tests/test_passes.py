"""IR passes that change the program for speed (run on every backend): the change shows in the
IR, and values and gradients stay those of the original program."""
import numpy as np
import pytest

import flowgrad
from oracle import check_forward, check_grad


def implicit_steps(u, kappa, n_steps):
    n = u.shape[0]
    M = np.eye(n) * (1.0 + 2.0 * kappa) - kappa * np.eye(n, k=1) - kappa * np.eye(n, k=-1)
    for t in range(n_steps):
        B = M * 1.0                      # written in the outer loop: stays a solve there
        for k in range(2):
            u = np.linalg.solve(M, u + 0.01 * np.sin(u))    # M invariant: factorised once
        u = np.linalg.solve(B, u)
    return np.sum(u * u)


def singular_inside(A, b, n):
    for t in range(n):
        b = np.linalg.solve(A, b)
    return np.sum(b)


def test_solves_with_an_invariant_matrix_are_factorised_once(backend):
    rng = np.random.default_rng(0)
    args = (rng.uniform(-1, 1, 6), 0.3, 3)
    check_forward(implicit_steps, args, backend)
    check_grad(implicit_steps, args, ("u", "kappa"), backend=backend)
    ir = flowgrad.grad(implicit_steps, wrt=("u", "kappa"), backend=backend).ir(*args)
    forward = ir.split("# backward")[0]
    assert forward.count("lu_factor") == 1 and forward.count("lu_solve") == 1
    assert forward.count("solve(") - forward.count("lu_solve(") == 1      # the solve with B stays
    backward = ir.split("# backward")[1]
    assert "lu_factor" in backward                                          # solves with M^T too


def test_hoisted_factorisation_keeps_numpy_errors(backend):
    A = np.zeros((3, 3))
    b = np.ones(3)
    fn = flowgrad.jit(singular_inside, backend=backend)
    assert fn(A, b, 0) == 3.0             # no solve runs: no error, as in NumPy
    with pytest.raises(np.linalg.LinAlgError):
        fn(A, b, 2)


def dead_work(x):
    unused = np.exp(x) * 2.0             # noqa: F841 (never read)
    y = x * 3.0
    return np.sum(y)


def test_dead_statements_are_removed(backend):
    x = np.linspace(0.0, 1.0, 5)
    check_grad(dead_work, (x,), ("x",), backend=backend)
    assert "exp" not in flowgrad.jit(dead_work, backend=backend).ir(x)
