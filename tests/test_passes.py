"""IR passes that change the program for speed (run on every backend): the change shows in the
IR, and values and gradients stay those of the original program."""
import re

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
    # the solves with M^T use the forward's factors of M (LAPACK's transposed solve)
    assert "lu_factor" not in backward and "trans=1" in backward


def changed_after(u, kappa, n_steps):
    n = u.shape[0]
    M = np.eye(n) * (1.0 + 2.0 * kappa) - kappa * np.eye(n, k=1)
    for t in range(n_steps):
        u = np.linalg.solve(M, u + 0.01 * np.sin(u))
    M[0, :] = u                        # the forward's factors no longer describe M
    return np.sum(u * u) + np.sum(M @ u)


def test_factors_are_not_shared_once_the_matrix_changes(backend):
    rng = np.random.default_rng(1)
    args = (rng.uniform(-1, 1, 5), 0.3, 3)
    check_grad(changed_after, args, ("u", "kappa"), backend=backend)
    backward = flowgrad.grad(changed_after, wrt=("u", "kappa"), backend=backend).ir(*args).split("# backward")[1]
    assert "lu_factor" in backward


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


def test_dead_clear_at_the_end_of_a_loop_body_is_removed():
    from flowgrad.ir.core import Assign, Const, Container, For, Read, Ref
    from flowgrad.passes.dce import eliminate_dead
    x = Container("x", np.float64, (4,), "arg")
    t = Container("t", np.float64, (4,))
    y = Container("y", np.float64, (4,))
    w = Container("w", np.float64, (4,))
    i = Container("i", np.int64, ())
    body = [Assign(Ref(t), Read(Ref(x)) * 2.0),         # t written in full before each read
            Assign(Ref(y), Read(Ref(t)), accumulate=True),
            Assign(Ref(w), Read(Ref(w)) + Read(Ref(y))),  # w read by the next iteration
            Assign(Ref(t), Const(0.0)),                    # cleared for nothing
            Assign(Ref(w), Read(Ref(w)) * 0.5)]
    (loop,), live = eliminate_dead([For(i, 0, 3, 1, body)], {y, w})
    assert len(loop.body) == 4 and all(not (s.dst.container is t and isinstance(s.expr, Const))
                                       for s in loop.body)
    assert x in live and t not in live


def smooth_steps(A, B, c, n_steps):
    for t in range(n_steps):
        B[1:-1] = c * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1, ] = 0.25 * (B[:-2] + 2.0 * B[1:-1] + B[2:]) * c
    return np.sum(A * A) + np.sum(B[::2])


def smooth_2d(U, W):
    V = U[1:-1] * W[1:-1] + U[:-2] + U[2:] * W[2:]          # shifted rows, W broadcast along them
    return np.sum(np.tanh(V))


def test_shifted_adjoint_sums_are_gathered(backend):
    rng = np.random.default_rng(2)
    args = (rng.uniform(-1, 1, 9), rng.uniform(-1, 1, 9), 0.3, 3)
    check_grad(smooth_steps, args, ("A", "B", "c"), backend=backend)
    backward = flowgrad.grad(smooth_steps, wrt=("A", "B"), backend=backend).ir(*args).split("# backward")[1]
    # one sum of three shifted terms over the middle of g_B, not three passes over g_B
    middle = [ln for ln in backward.splitlines() if ln.strip().startswith("g_B[2:+5] +=")]
    assert len(middle) == 1 and middle[0].count("g_A[") == 3
    args2 = (rng.uniform(-1, 1, (5, 6)), rng.uniform(-1, 1, (5, 1)))
    check_grad(smooth_2d, args2, ("U", "W"), backend=backend)
    backward = flowgrad.grad(smooth_2d, wrt=("U", "W"), backend=backend).ir(*args2).split("# backward")[1]
    assert any(ln.count("gexpr[") == 2 and ln.strip().startswith("g_U[") for ln in backward.splitlines())


def heat_in_place(u, r, n_steps):
    inner, left, right = u[1:-1], u[:-2], u[2:]
    for t in range(n_steps):
        inner += r * (left - 2.0 * inner + right)        # the update reads its own neighbours
    return np.sum(u * u)


def test_in_place_stencil_adjoints_are_gathered_from_one_saved_copy(backend):
    rng = np.random.default_rng(4)
    args = (rng.uniform(-1, 1, 12), 0.2, 3)
    check_grad(heat_in_place, args, ("u", "r"), backend=backend)
    backward = flowgrad.grad(heat_in_place, wrt=("u", "r"), backend=backend).ir(*args).split("# backward")[1]
    # the three shifted sums from the saved g_u[1:-1] become one per piece of g_u: the middle
    # piece reads three shifted views of the copy
    middle = [ln for ln in backward.splitlines() if ln.strip().startswith("g_u[2:+8] +=")]
    assert len(middle) == 1 and middle[0].count("gacc[") == 3, backward


def test_dump_shows_a_pass_before_and_after(monkeypatch, capsys):
    monkeypatch.setenv("FLOWGRAD_DUMP", "copies,gather")
    args = (np.linspace(0.0, 1.0, 7), np.linspace(1.0, 2.0, 7), 0.3, 2)
    flowgrad.grad(smooth_steps, wrt=("A", "c"), backend="numpy")(*args)
    out = capsys.readouterr().out
    for name in ("copies", "gather"):
        assert f"# before {name}" in out and f"# after {name}" in out
    assert "# before dce" not in out


def five_point(A, B, n_steps):
    for t in range(n_steps):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])
    return np.sum(A * A)


def test_two_dimensional_stencil_adjoints_are_gathered(backend):
    rng = np.random.default_rng(3)
    args = (rng.uniform(-1, 1, (6, 7)), rng.uniform(-1, 1, (6, 7)), 2)
    check_grad(five_point, args, ("A", "B"), backend=backend)
    backward = flowgrad.grad(five_point, wrt=("A", "B"), backend=backend).ir(*args).split("# backward")[1]
    # the interior of g_B gets all five shifted terms of g_A in one sum (written, not added: the
    # loop clears g_B's interior at the end of each step, see test_cleared.py)
    assert any(ln.strip().startswith("g_B[2:+2, 2:+3] = ") and ln.count("g_A[") == 5
               for ln in backward.splitlines())


def seven_point(A, B, n_steps):
    for t in range(n_steps):
        B[1:-1, 1:-1, 1:-1] = 0.1 * (A[1:-1, 1:-1, 1:-1] + A[2:, 1:-1, 1:-1] + A[:-2, 1:-1, 1:-1] + A[1:-1, 2:, 1:-1]
                                     + A[1:-1, :-2, 1:-1] + A[1:-1, 1:-1, 2:] + A[1:-1, 1:-1, :-2])
        A[1:-1, 1:-1, 1:-1] = B[1:-1, 1:-1, 1:-1] * 0.5
    return np.sum(A * A) + np.sum(B * B)


def test_a_three_dimensional_stencil_adjoint_is_gathered_in_parts(backend):
    # all six shifts at once would make 125 pieces: the shifts along the first two axes gather
    # into one sum per piece (25 pieces), those along the third into another (5)
    rng = np.random.default_rng(4)
    args = (rng.uniform(-1, 1, (6, 7, 8)), rng.uniform(-1, 1, (6, 7, 8)), 2)
    check_grad(seven_point, args, ("A", "B"), backend=backend)
    backward = flowgrad.grad(seven_point, wrt=("A", "B"), backend=backend).ir(*args).split("# backward")[1]
    # (the first also takes the centre's term, which the clearing of g_A fused into an assignment:
    # written, as the pieces cover the cleared interior)
    assert any(ln.strip().startswith("g_A[2:+2, 2:+3, 1:+6] = ") and ln.count("g_B[") == 5
               for ln in backward.splitlines()), backward
    assert any(ln.strip().startswith("g_A[1:+4, 1:+5, 2:+4] +=") and ln.count("g_B[") == 2
               for ln in backward.splitlines()), backward


def forward_substitution(L, b):
    n = b.shape[0]
    x = np.zeros(n)
    for i in range(n):
        x[i] = b[i]
        for j in range(i):
            x[i] -= L[i, j] * x[j]       # adjoints read x[j], j < i: the old x[i] is never needed
        x[i] = x[i] / L[i, i]
    return np.sum(x * x)


def forward_substitution_reaching_the_diagonal(L, b):
    n = b.shape[0]
    x = b * 1.0
    for i in range(n):
        for j in range(i + 1):
            x[i] -= 0.1 * L[i, j] * x[j] * x[j]     # j == i reads the element being updated
    return np.sum(x * x)


def _pushes_in_innermost_loops(ir):
    """The tape pushes in the forward's loops that contain no other loop."""
    forward = ir.split("# backward")[0].splitlines()
    found = []
    for k, line in enumerate(forward):
        if line.lstrip().startswith("for "):
            body = []
            for ln in forward[k + 1:]:
                if _depth(ln) <= _depth(line):
                    break
                body.append(ln.strip())
            if not any(ln.startswith("for ") for ln in body):
                found += [ln for ln in body if ln.startswith("push ")]
    return found


def _depth(line):
    return len(line) - len(line.lstrip())


def test_values_no_adjoint_reads_are_not_taped(backend):
    rng = np.random.default_rng(3)
    n = 7
    L = np.tril(rng.uniform(-0.5, 0.5, (n, n))) + 2.0 * np.eye(n)
    args = (L, rng.uniform(-1, 1, n))
    check_forward(forward_substitution, args, backend)
    check_grad(forward_substitution, args, ("L", "b"), backend=backend)
    ir = flowgrad.grad(forward_substitution, wrt=("L", "b"), backend=backend).ir(*args)
    assert _pushes_in_innermost_loops(ir) == []
    # where an adjoint does read the element being updated, its old values stay on the tape
    check_grad(forward_substitution_reaching_the_diagonal, args, ("L", "b"), backend=backend)
    ir = flowgrad.grad(forward_substitution_reaching_the_diagonal, wrt=("L", "b"), backend=backend).ir(*args)
    assert _pushes_in_innermost_loops(ir)


def row_then_sum(A, x):
    """atax: ``tmp[i]`` overwrites a zero; the adjoint reads ``tmp[i]`` before restoring it, and
    the restores of the other iterations put back other elements."""
    m, n = A.shape
    y = np.zeros(n)
    tmp = np.zeros(m)
    for i in range(m):
        tmp[i] = np.tanh(A[i, :] @ x)
        y += A[i, :] * tmp[i]
    return np.sum(y * y)


def row_then_sum_reading_the_last(A, x):
    """Iteration i also reads ``tmp[i - 1]``, which the restore of the next pass backwards puts back."""
    m, n = A.shape
    y = np.zeros(n)
    tmp = np.zeros(m)
    for i in range(1, m):
        tmp[i] = np.tanh(A[i, :] @ x) + 0.5 * tmp[i - 1] * tmp[i - 1]
        y += A[i, :] * tmp[i]
        tmp[i - 1] = 0.25 * tmp[i]
    return np.sum(y * y) + np.sum(tmp * tmp)


def test_restores_of_a_row_no_other_pass_reads_are_dropped(backend):
    rng = np.random.default_rng(5)
    args = (rng.standard_normal((8, 6)), rng.standard_normal(6))
    check_grad(row_then_sum, args, ("A", "x"), backend=backend)
    forward = flowgrad.grad(row_then_sum, wrt=("A", "x"), backend=backend).ir(*args).split("# backward")[0]
    assert "push " not in forward, forward
    check_grad(row_then_sum_reading_the_last, args, ("A", "x"), backend=backend)
    forward = flowgrad.grad(row_then_sum_reading_the_last, wrt=("A", "x"),
                            backend=backend).ir(*args).split("# backward")[0]
    assert "push " in forward, forward


def csr_rows(indptr, indices, data, x):
    n = indptr.shape[0] - 1
    y = np.zeros(n)
    for i in range(n):
        start = indptr[i]
        end = indptr[i + 1]
        y[i] = data[start:end] @ x[indices[start:end]]
    return np.sum(np.tanh(y))


def csr_rows_scaling_x(indptr, indices, data, x):
    n = indptr.shape[0] - 1
    y = np.zeros(n)
    for i in range(n):
        start = indptr[i]
        end = indptr[i + 1]
        y[i] = data[start:end] @ x[indices[start:end]]
        x = x * 1.1                      # written after the gather reads it: the gather is taped
    return np.sum(np.tanh(y))


def _csr(rng, n=6):
    counts = rng.integers(0, 4, n)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    indices = np.concatenate([rng.choice(n, c, replace=False) for c in counts]).astype(np.int64)
    return indptr, indices, rng.standard_normal(indptr[-1]), rng.standard_normal(n)


def test_cheap_loop_local_values_are_recomputed_not_taped(backend):
    args = _csr(np.random.default_rng(4))
    check_forward(csr_rows, args, backend)
    check_grad(csr_rows, args, ("data", "x"), backend=backend)
    ir = flowgrad.grad(csr_rows, wrt=("data", "x"), backend=backend).ir(*args)
    forward, backward = ir.split("# backward")
    # the row bounds, the index slice and the gather run again per reversed row; nothing is pushed
    assert not [ln for ln in forward.splitlines() if ln.strip().startswith("push")], forward
    assert backward.count("gather(") + backward.count("take(x") == 1      # native: read in place
    # the gather's adjoint scatters g_matmul * data[start:end] directly, before g_matmul is cleared
    assert "g_gather" not in backward and "add_at((g_matmul * data[" in backward, backward
    # where a later statement of the row overwrites what the gather read, its values are taped
    check_grad(csr_rows_scaling_x, args, ("data", "x"), backend=backend)
    ir = flowgrad.grad(csr_rows_scaling_x, wrt=("data", "x"), backend=backend).ir(*args)
    assert "push tape_gather <- gather" in ir.split("# backward")[0], ir


def normalised_heads(x, W, n_heads):
    out = np.zeros(x.shape)
    for h in range(n_heads):
        s = x @ W[h]
        e = np.exp(s - np.max(s, axis=1, keepdims=True))
        p = e / np.sum(e, axis=1, keepdims=True)         # a division of taped values: recomputed
        out += p @ W[h]                                   # a product: p stays a value of its own
    return np.sum(out * out)


def test_divisions_of_taped_values_are_recomputed_not_taped(backend):
    rng = np.random.default_rng(5)
    args = (rng.standard_normal((4, 5)), rng.standard_normal((3, 5, 5)) * 0.5, 3)
    check_forward(normalised_heads, args, backend)
    check_grad(normalised_heads, args, ("x", "W"), backend=backend)
    ir = flowgrad.grad(normalised_heads, wrt=("x", "W"), backend=backend).ir(*args)
    forward, backward = ir.split("# backward")
    assert "push tape_e <- e" in forward and "push tape_p" not in forward, forward
    assert "p = (e / sum_1)" in backward, backward


def gathered_layers(x, W, src, n):
    for k in range(n):
        msg = x[src] @ W[k]
        x = np.tanh(msg) + x
    return np.sum(x * x)


def carried_through(x, W, n):
    m = x * 1.0
    acc = np.zeros(x.shape)
    for k in range(n):
        acc = acc + m @ W[k]
        m = np.tanh(acc)            # m's adjoint is cleared per iteration and read after the loop
    return np.sum(m * m) + np.sum(acc)


def test_adjoints_cleared_after_each_iteration_are_written_not_accumulated(backend):
    rng = np.random.default_rng(6)
    args = (rng.standard_normal((4, 3)), rng.standard_normal((2, 3, 3)) * 0.5, np.array([0, 1, 3, 2]), 2)
    check_grad(gathered_layers, args, ("x", "W"), backend=backend)
    backward = flowgrad.grad(gathered_layers, wrt=("x", "W"), backend=backend).ir(*args).split("# backward")[1]
    # g_matmul is zero at the top of each reversed iteration: its first sum is its value, and
    # nothing clears it (not before the loop, not after its last read in the body)
    assert "g_matmul = (g_x" in backward and "g_matmul = 0.0" not in backward, backward
    args = (rng.standard_normal((4, 3)), rng.standard_normal((3, 3, 3)) * 0.5, 3)
    check_grad(carried_through, args, ("x", "W"), backend=backend)


def tanh_steps(h, W, n):
    for t in range(n):
        a = h @ W
        h = np.exp(-0.1 * a * a) * 0.5 + np.tanh(a)
        h = np.tanh(h)
    return np.sum(np.sqrt(h * h + 1.0))


def test_the_adjoint_of_a_tanh_reads_the_value_written(backend):
    rng = np.random.default_rng(8)
    args = (rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, (4, 4)), 3)
    check_forward(tanh_steps, args, backend)
    check_grad(tanh_steps, args, ("h", "W"), backend=backend)
    ir = flowgrad.grad(tanh_steps, wrt=("h", "W"), backend=backend).ir(*args)
    backward = ir.split("# backward")[1]
    # h = tanh(...): its derivative is 1 - h * h with h as written, read before h's old value
    # comes back; no tanh or exp is evaluated again
    assert "(1.0 - (h * h))" in backward and "tanh(" not in backward and "exp(" not in backward, backward
    assert backward.index("(1.0 - (h * h))") < backward.index("pop tape_h -> h"), backward


def residual_tanh(x, W):
    h = np.tanh(x @ W)
    y = h + x
    return np.sum(y * y)


def test_a_gradient_keeps_a_tanh_its_backward_reads(backend):
    # the forward alone fuses tanh into the sum; the gradient's forward keeps it as an array, and
    # its backward reads it instead of evaluating tanh again
    rng = np.random.default_rng(9)
    args = (rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, (4, 4)))
    check_forward(residual_tanh, args, backend)
    check_grad(residual_tanh, args, ("x", "W"), backend=backend)
    assert "y = (tanh(matmul) + x)" in flowgrad.jit(residual_tanh, backend=backend).ir(*args)
    forward, backward = flowgrad.grad(residual_tanh, wrt=("x", "W"), backend=backend).ir(*args).split("# backward")
    assert "h = tanh(matmul)\n" in forward and "tanh(" not in backward, backward


def ode_steps(y, W, c, n_steps):
    for s in range(n_steps):
        k = np.tanh(W @ y) - c * y             # tanh inside a larger expression, in a loop
        y = y + 0.1 * k * np.exp(-0.5 * y * y)
    return np.sum(y * y)


def test_a_tanh_inside_an_expression_is_kept_not_evaluated_again(backend):
    # the gradient's forward computes each tanh and exp into an array of its own, which the loop
    # tapes instead of the product it is taken of; the backward evaluates neither again
    rng = np.random.default_rng(11)
    args = (rng.uniform(-1, 1, (4, 3)), rng.uniform(-1, 1, (4, 4)), 0.3, 3)
    check_forward(ode_steps, args, backend)
    check_grad(ode_steps, args, ("y", "W", "c"), backend=backend)
    assert "tanh(matmul) - " in flowgrad.jit(ode_steps, backend=backend).ir(*args)
    forward, backward = flowgrad.grad(ode_steps, wrt=("y", "W", "c"), backend=backend).ir(*args).split("# backward")
    assert "tanh = tanh(matmul)\n" in forward and "push tape_matmul" not in forward, forward
    assert "tanh(" not in backward and "exp(" not in backward, backward


def dense_layers(x, w1, w2):
    h = np.maximum(x @ w1, 0.0)
    return np.sum((h @ w2) ** 2)


def test_a_weight_gradient_product_is_computed_into_the_gradient(backend):
    rng = np.random.default_rng(12)
    args = (rng.standard_normal((5, 4)), rng.standard_normal((4, 6)), rng.standard_normal((6, 3)))
    check_grad(dense_layers, args, ("x", "w1", "w2"), backend=backend)
    backward = flowgrad.grad(dense_layers, wrt=("x", "w1", "w2"), backend=backend).ir(*args).split("# backward")[1]
    for g in ("g_x", "g_w1", "g_w2"):
        assert f"  {g} = matmul" in backward, backward      # the product writes the gradient itself
        assert f"  {g} = gmatm" not in backward, backward   # rather than being copied there
    x, w1, w2 = (a.copy() for a in args)
    grads = flowgrad.grad(dense_layers, wrt=("x", "w1", "w2"), backend=backend)(*args)
    again = flowgrad.grad(dense_layers, wrt=("x", "w1", "w2"), backend=backend)(*args)
    for a, b in zip(grads, again):
        np.testing.assert_array_equal(a, b)                 # handed-over buffers are not reused
    for a, b in zip(args, (x, w1, w2)):
        np.testing.assert_array_equal(a, b)


def rank_one_rows(alpha, C, A, B):
    for i in range(C.shape[0]):
        C[i, :] *= 0.5
        for k in range(A.shape[1]):
            C[i, :] += alpha * A[i, k] * B[k, :]
    return np.sum(C * C)


def running_sum(x, n):
    for k in range(1, n):
        x[k] = x[k] + 0.5 * x[k - 1]
    return np.sum(x * x)


def test_reversed_loops_whose_iterations_commute_run_forwards(backend):
    # the adjoint of the k loop writes row k of g_B and element (i, k) of g_A, sums into g_alpha
    # and keeps its dot product to itself: it walks the rows of g_B in ascending order
    rng = np.random.default_rng(13)
    args = (0.7, rng.standard_normal((4, 5)), rng.standard_normal((4, 3)), rng.standard_normal((3, 5)))
    check_grad(rank_one_rows, args, ("alpha", "C", "A", "B"), backend=backend)
    backward = flowgrad.grad(rank_one_rows, wrt=("alpha", "C", "A", "B"), backend=backend).ir(*args).split("# backward")[1]
    assert "for k in 0:" in backward and "for i in reversed(" in backward, backward
    # each iteration of the recurrence's adjoint reads what the one before it wrote: still reversed
    args = (rng.standard_normal(6), 6)
    check_grad(running_sum, args, ("x",), backend=backend)
    backward = flowgrad.grad(running_sum, wrt=("x",), backend=backend).ir(*args).split("# backward")[1]
    assert "for k in reversed(" in backward, backward


def rows_and_whole(A, p, r):
    """bicg: the adjoint of the row loop writes g_A a row at a time; the adjoint of the product
    ``A @ p`` (lifted out of the loop) writes all of g_A after it, and sums over its rows."""
    m, n = A.shape
    s = np.zeros(n)
    q = np.zeros(m)
    for i in range(m):
        s += r[i] * A[i, :]
        q[i] = A[i, :] @ p
    return np.sum(s * s) + np.sum(q * q)


def test_statements_over_rows_fold_into_the_row_loop_beside_them(backend):
    rng = np.random.default_rng(21)
    args = (rng.standard_normal((12, 9)), rng.standard_normal(9), rng.standard_normal(12))
    check_grad(rows_and_whole, args, ("A", "p", "r"), backend=backend)
    backward = flowgrad.grad(rows_and_whole, wrt=("A", "p", "r"), backend=backend).ir(*args).split("# backward")[1]
    if backend == "native":       # one pass over A and g_A; g_p summed from zero a row at a time
        assert "g_A += " not in backward and "g_A[i, 0:+9] += " in backward and "g_p = 0.0" in backward, backward
    else:                         # NumPy's statements over the whole array stay
        assert "g_A += " in backward, backward


def test_a_row_a_later_iteration_writes_is_not_folded():
    from flowgrad.ir.core import F64, I64, Assign, Container, For, Index, Read, Ref, Slice
    from flowgrad.passes.order import fold_into_row_loops
    m, n = 6, 4
    X, A, Y = (Container(name, F64, shape) for name, shape in (("X", (m + 1, n)), ("A", (m, n)), ("Y", (m, n))))
    i = Container("i", I64, ())

    def program(shift):
        row = [Index(Read(Ref(i, ()))), Slice(0, n)]
        loop = For(i, 0, m, 1, [Assign(Ref(X, row), Read(Ref(A, [Index(Read(Ref(i, ()))), Slice(0, n)])))])
        return [loop, Assign(Ref(Y), Read(Ref(X, [Slice(shift, m), Slice(0, n)])))]

    names = iter(f"t{k}" for k in range(10))
    # row i of Y reads row i of X, which iteration i writes: Y's rows join the loop
    folded = fold_into_row_loops(program(0), {Y}, {}, lambda base: next(names))
    assert len(folded) == 1 and len(folded[0].body) == 2
    # row i of Y reads row i + 1, which iteration i + 1 writes after it: the statement stays after the loop
    kept = fold_into_row_loops(program(1), {Y}, {}, lambda base: next(names))
    assert len(kept) == 2 and len(kept[0].body) == 1


def row_products(x, y, A):
    for i in range(A.shape[0]):
        x[i] += A[i, :] @ y
    return np.sum(x * x)


def test_a_scalar_adjoint_cleared_after_each_iteration_is_written_at_its_top(backend):
    # g_matmul += g_x[i] ... g_matmul = 0 per reversed iteration: written at the top instead,
    # which leaves the iterations independent, so the loop runs forwards
    rng = np.random.default_rng(15)
    args = (rng.standard_normal(5), rng.standard_normal(4), rng.standard_normal((5, 4)))
    check_grad(row_products, args, ("x", "y", "A"), backend=backend)
    backward = flowgrad.grad(row_products, wrt=("x", "y", "A"), backend=backend).ir(*args).split("# backward")[1]
    assert "g_matmul = g_x[i]" in backward and "for i in 0:" in backward, backward


def column_products(x, y, A):
    for i in range(A.shape[1] - 1):
        x[i + 1] += A[:, i] @ y
    return np.sum(x * x)


def test_a_column_loop_adjoint_is_interchanged_to_walk_rows(backend):
    # for i: g_A[:, i] = g * y; g_y += g * A[:, i], with g = g_x[i + 1]: the loop over the rows goes
    # outside, so each row of g_A is written in one pass and g_y[j] sums a row
    rng = np.random.default_rng(17)
    args = (rng.standard_normal(5), rng.standard_normal(6), rng.standard_normal((6, 5)))
    check_grad(column_products, args, ("x", "y", "A"), backend=backend)
    backward = flowgrad.grad(column_products, wrt=("x", "y", "A"), backend=backend).ir(*args).split("# backward")[1]
    assert re.search(r"g_A\[j\w*, 0:\+4\] \+?= \(g_x\[1:\+4\] \* y\[j\w*\]\)", backward), backward
    assert re.search(r"g_y\[j\w*\] \+= gsum", backward), backward
    assert "for i in" not in backward, backward


def concatenated_steps(xs, h, W):
    for t in range(xs.shape[0]):
        z = np.concatenate((xs[t], h), axis=1)
        h = np.tanh(z @ W)
    return np.sum(h * h)


def test_an_adjoint_cleared_in_parts_is_cleared_whole_and_written_not_accumulated(backend):
    # the adjoint of the concatenation is handed on in two parts, each cleared after: one clear,
    # which moves to the top of the body, so the product is read in place of it
    rng = np.random.default_rng(16)
    args = (rng.standard_normal((3, 2, 4)), rng.standard_normal((2, 5)), rng.standard_normal((9, 5)) * 0.5)
    check_grad(concatenated_steps, args, ("xs", "h", "W"), backend=backend)
    backward = flowgrad.grad(concatenated_steps, wrt=("xs", "h", "W"), backend=backend).ir(*args).split("# backward")[1]
    assert "g_concat" not in backward, backward


def recurrent_steps(v, W, n_steps):
    for t in range(n_steps):
        v = np.tanh(W @ v + 0.5) * 0.9
        if np.sum(v) > 20.0:                      # a branch: its update only when taken
            v = v - 0.1 * (W @ v)
    return np.sum(v * v)


def recurrent_with_a_row_of_w(v, W, n_steps):
    for t in range(n_steps):
        v = np.tanh(W @ v) + 0.1 * W[0] * v          # g_W[0] is updated by another statement too
    return np.sum(v * v)


def test_outer_product_updates_in_a_loop_become_one_product_after_it(backend):
    rng = np.random.default_rng(10)
    n = 70                                       # 4900 elements: worth one product (5 x 5 is not)
    args = (rng.uniform(-1, 1, n), rng.uniform(-0.5, 0.5, (n, n)) / np.sqrt(n), 6)
    check_forward(recurrent_steps, args, backend)
    check_grad(recurrent_steps, args[:2] + (70,), ("v", "W"), backend=backend)    # full stacks flushed
    check_grad(recurrent_steps, args, ("v", "W"), backend=backend)
    backward = flowgrad.grad(recurrent_steps, wrt=("v", "W"), backend=backend).ir(*args).split("# backward")[1]
    # each step stores g_matmul and v as the next row of two stacks; g_W gets their product when
    # a stack is full (in the loop) and after the loop
    assert "g_W += (" not in backward, backward
    assert backward.count("matmul_tn_flat(stack_g_W") == 4, backward
    assert backward.count("== 64)") == 2, backward
    # another statement only adding to part of g_W in the loop: the sums commute, so the outer
    # products are still summed after the loop, and that statement stays in it
    check_grad(recurrent_with_a_row_of_w, args, ("v", "W"), backend=backend)
    backward = flowgrad.grad(recurrent_with_a_row_of_w, wrt=("v", "W"), backend=backend).ir(*args)
    assert "matmul_tn_flat(stack_g_W" in backward and "g_W[0, 0:+70] +=" in backward, backward
    small = (args[0][:5], args[1][:5, :5], 6)
    assert "stack_g_W" not in flowgrad.grad(recurrent_steps, wrt=("v", "W"), backend=backend).ir(*small)


def edge_messages(x, W, v, src, dst):
    msg = x[src] @ W                  # 12 edges over 4 nodes: multiplied per node, then gathered
    agg = np.zeros((x.shape[0], W.shape[1]))
    np.add.at(agg, dst, msg)
    x[src[0]] += 1.0                  # x written after the product: the product saw the old x
    score = x[src] @ v                # a matrix-vector product, gathered the same way
    few = x[src[:2]] @ W              # 2 rows of 4: gathered first, as written
    return np.sum(np.tanh(agg) ** 2) + np.sum(score * score) + np.sum(few * x[1:3, :3])


def test_a_product_of_gathered_rows_is_the_gather_of_the_product(backend):
    rng = np.random.default_rng(18)
    args = (rng.standard_normal((4, 5)), rng.standard_normal((5, 3)), rng.standard_normal(5),
            rng.integers(0, 4, 12), rng.integers(0, 4, 12))
    check_forward(edge_messages, args, backend)
    check_grad(edge_messages, args, ("x", "W", "v"), backend=backend)
    ir = flowgrad.grad(edge_messages, wrt=("x", "W", "v"), backend=backend).ir(*args)
    forward, backward = ir.split("# backward")
    assert len(re.findall(r"rows\w* = matmul\(x\w*, (W|v)\b", forward)) == 2, forward
    assert len(re.findall(r"= gather\(rows\w*, src", forward)) == 2, forward
    assert re.search(r"= matmul\(gather\w*, W\)", forward), forward          # the 2-row gather
    # the edge adjoints are summed per node before the weight gradient's product
    assert re.search(r"matmul_tn_flat\(x\w*, g_rows", backward), backward


def column_sweeps(A):
    m, n = A.shape
    Q = np.zeros((m, n))
    for k in range(n):
        Q[:, k] = A[:, k] / np.sqrt(A[:, k] @ A[:, k])
        for j in range(k + 1, n):                 # Q[:, k] read on every j, A[:, j] moves with j
            A[:, j] -= Q[:, k] * (Q[:, k] @ A[:, j])
    return np.sum(Q * np.cos(Q))


def test_a_column_every_iteration_uses_is_packed_around_the_loop(backend):
    rng = np.random.default_rng(19)
    args = (rng.standard_normal((7, 5)),)
    check_forward(column_sweeps, args, backend)
    check_grad(column_sweeps, args, ("A",), backend=backend)
    ir = flowgrad.grad(column_sweeps, wrt=("A",), backend=backend).ir(*args)
    forward, backward = ir.split("# backward")
    if backend != "native":
        assert "pack_" not in ir, ir                # a lowering choice of the native backend
        return
    # the forward's j loop reads a contiguous copy of Q[:, k]; the backward's updates a copy of
    # g_Q[:, k], written back after the loop; A[:, j] changes with j and stays as it is
    # (Q's container is named after the np.zeros that makes it)
    assert re.search(r"pack_array\w* = array\[0:\+7, k\]", forward), forward
    assert re.search(r"pack_g_array\w* = g_array\[0:\+7, k\]", backward), backward
    assert re.search(r"g_array\[0:\+7, k\] = pack_g_array", backward), backward
    assert "pack_A" not in ir and "pack_g_A" not in ir, ir


# ---------------------------------------------------------------- loops of products (contract)


def rank_k_rows(alpha, C, A):
    n, m = A.shape
    for i in range(n):
        for k in range(m):                       # an axpy per k: one matrix-vector product
            C[i, :i + 1] += alpha * A[i, k] * A[:i + 1, k]
    return np.sum(C * C)


def two_products(C, A, B, w):
    n, m = A.shape
    for i in range(n):
        for k in range(m):                       # two terms, a difference, a k-independent vector
            C[i, :] -= A[i, k] * B[k, :] * w - 2.0 * B[k, :] * A[i, k]
    return np.sum(C * C)


def outer_products(C, A, B):
    for k in range(A.shape[1]):                  # a rank-one update per k: one matrix product
        C += A[:, k, np.newaxis] * B[np.newaxis, k, :]
    return np.sum(np.sin(C))


def dots(s, A, b):
    for i in range(A.shape[0]):
        for k in range(A.shape[1]):
            s[i] += A[i, k] * b[k]
    return np.sum(s * s)


def _contracted(fn, args, wrt, backend):
    """The gradient program's IR for ``fn`` (checked against the oracles first)."""
    check_forward(fn, args, backend=backend, rtol=1e-10)
    check_grad(fn, args, wrt, backend=backend)
    return flowgrad.grad(fn, wrt=wrt, backend=backend).ir(*args)


@pytest.mark.parametrize("fn,shapes,wrt", [
    (rank_k_rows, [(), (10, 10), (10, 12)], ("alpha", "C", "A")),
    (two_products, [(7, 9), (7, 11), (11, 9), (9,)], ("C", "A", "B", "w")),
    (outer_products, [(6, 8), (6, 10), (10, 8)], ("C", "A", "B")),
    (dots, [(5,), (5, 9), (9,)], ("s", "A", "b")),
])
def test_loops_of_products_become_matrix_products(fn, shapes, wrt, backend):
    rng = np.random.default_rng(7)
    args = tuple(rng.uniform(-1, 1, s) if s else 1.3 for s in shapes)
    ir = _contracted(fn, args, wrt, backend)
    forward = ir.split("# backward")[0]
    assert "matmul(" in forward and "for k " not in forward, forward


def triangular_dots(s, A, b):
    k = -1
    for i in range(A.shape[0]):
        for k in range(i):                       # no iteration at all when i == 0
            s[i] += A[i, k] * b[k]
    return np.sum(s * s) + k                    # the counter the loops leave behind


def reads_what_it_updates(x, A):
    for k in range(A.shape[1]):
        x[1:] += A[1:, k] * x[k]                 # x[k] is updated by earlier iterations
    return np.sum(x * x)


def test_a_contracted_loop_keeps_python_semantics(backend):
    rng = np.random.default_rng(8)
    args = (rng.uniform(-1, 1, 9), rng.uniform(-1, 1, (9, 9)), rng.uniform(-1, 1, 9))
    ir = _contracted(triangular_dots, args, ("s", "A", "b"), backend)
    assert "matmul(" in ir.split("# backward")[0]
    # an update reading what earlier iterations wrote stays a loop
    args = (rng.uniform(-1, 1, 10), rng.uniform(-1, 1, (10, 9)) * 0.3)
    ir = _contracted(reads_what_it_updates, args, ("x", "A"), backend)
    assert "matmul(" not in ir.split("# backward")[0]


def solve_once(A, b):
    x = np.linalg.solve(A, b)
    return np.sum(np.tanh(x))


def solve_then_change(A, b):
    x = np.linalg.solve(A, b)
    A *= 2.0                                     # the backward sweep must factorise the old A
    return np.sum(np.tanh(x)) + np.sum(A * A)


def test_a_solve_and_its_adjoint_factorise_once(backend):
    rng = np.random.default_rng(9)
    A = rng.uniform(-1, 1, (7, 7)) + 7 * np.eye(7)
    b = rng.uniform(-1, 1, 7)
    check_grad(solve_once, (A, b), ("A", "b"), backend=backend)
    forward, backward = flowgrad.grad(solve_once, wrt=("A", "b"), backend=backend).ir(A, b).split("# backward")
    assert forward.count("lu_factor(") == 1 and "lu_factor(" not in backward, backward
    assert "lu_solve(" in backward and " solve(" not in backward, backward
    check_grad(solve_then_change, (A, b), ("A", "b"), backend=backend)


def gaussian_likelihood(X, y, ell):
    d2 = np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=2)
    L = np.linalg.cholesky(np.exp(-d2 / ell) + 0.5 * np.eye(X.shape[0]))
    alpha = np.linalg.solve(L, y)
    return np.sum(alpha * alpha) + np.sum(np.log(np.diag(L)))


@pytest.mark.parametrize("n", [6, 150])          # 150: three blocks of the blocked adjoint
def test_the_cholesky_adjoint_is_blocked(n, backend):
    rng = np.random.default_rng(10)
    args = (rng.uniform(-1, 1, (n, 2)), rng.uniform(-1, 1, n), 0.8)
    check_grad(gaussian_likelihood, args, ("X", "y", "ell"), backend=backend)
    backward = flowgrad.grad(gaussian_likelihood, wrt=("X", "y", "ell"), backend=backend).ir(*args).split("# backward")[1]
    # the Cholesky adjoint in one call; the adjoint of ``solve(L, y)`` a triangular solve (``triangular``)
    assert "cholesky_vjp(" in backward and backward.count("solve_triangular(") == 1, backward
    assert "lu_factor(" not in backward, backward


def test_the_blocked_cholesky_adjoint_is_the_formula():
    """``cholesky_vjp`` (Murray's blocked reverse mode) against the formula on whole matrices,
    for orders below, at and across the block size, NumPy's and the compiled one."""
    from flowgrad.backends import linalg_runtime, native_linalg
    runtimes = [linalg_runtime, native_linalg]
    rng = np.random.default_rng(16)
    block = linalg_runtime.CHOLESKY_BLOCK
    for n in (0, 1, 5, block, block + 1, 2 * block + 7):
        b = rng.standard_normal((n, n))
        low = np.linalg.cholesky(b @ b.T + n * np.eye(n))
        g = rng.standard_normal((n, n))
        want = linalg_runtime._cholesky_block_vjp(low, np.tril(g))
        for runtime in runtimes:
            got = runtime.cholesky_vjp(low, g)            # the upper triangle of g is not read
            scale = np.abs(want).max(initial=1.0)
            assert got.shape == (n, n) and np.allclose(got, want, rtol=1e-12, atol=1e-12 * scale), (n, runtime)
            assert not np.triu(got, 1).any()


def hyper_gradient_norm(X, y, ell):
    g = flowgrad.grad(gaussian_likelihood, wrt=("X", "y", "ell"))(X, y, ell)
    return np.sum(g[0] * g[0]) + g[2] * g[2]


def test_second_derivatives_through_the_blocked_cholesky_adjoint(backend):
    """Reverse over reverse differentiates the formula ``cholesky_vjp`` computes; forward over
    reverse its tangent: a Hessian-vector product against differences of the gradient."""
    rng = np.random.default_rng(17)
    args = (rng.uniform(-1, 1, (5, 2)), rng.uniform(-1, 1, 5), 0.8)
    check_grad(hyper_gradient_norm, args, ("X", "ell"), backend=backend)
    v = rng.uniform(-1, 1, (5, 2))
    hv = flowgrad.hvp(gaussian_likelihood, args, (v, None, None), wrt="X", backend=backend)
    grad = flowgrad.grad(gaussian_likelihood, wrt="X", backend="numpy")
    eps = 1e-6
    fd = (grad(args[0] + eps * v, *args[1:]) - grad(args[0] - eps * v, *args[1:])) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-8)


def triangular_rows(data, w):
    n, m = data.shape
    cov = np.zeros((m, m))
    for i in range(m):
        row = data[:, i] @ data[:, i:]           # the adjoint adds outer products into g_data[:, i:]
        cov[i, i:] = row * w[i:]
    return np.sum(cov * cov) + np.sum(row)      # the last row read after the loop: stays in it


def test_outer_products_into_a_sweeping_view_are_summed_by_products(backend):
    rng = np.random.default_rng(11)
    args = (rng.uniform(-1, 1, (90, 70)), rng.uniform(0.5, 1.5, 70))
    check_grad(triangular_rows, args, ("data", "w"), backend=backend)
    backward = flowgrad.grad(triangular_rows, wrt=("data", "w"), backend=backend).ir(*args).split("# backward")[1]
    assert "matmul_tn_flat(stack_g_data" in backward, backward
    # each stored row is zero outside the iteration's columns
    assert re.search(r"stack_g_data_1\[rows_g_data, 0:\+70\] = 0.0", backward), backward


# ---------------------------------------------------------------- loops' products taken out (lift_products)


def covariance_rows(data):
    n, m = data.shape
    data -= np.mean(data, axis=0)
    cov = np.zeros((m, m))
    for i in range(m):
        cov[i, i:] = data[:, i] @ data[:, i:] / (n - 1.0)      # a triangle of a Gram matrix
        cov[i:, i] = cov[i, i:]
    return np.sum(cov * cov)


def strict_rows(data, w):
    m = data.shape[1]
    corr = np.zeros((m, m))
    for i in range(m - 1):
        corr[i, i + 1:] = data[:, i] @ data[:, i + 1:]          # data[:, :-1].T @ data[:, 1:], widened
        corr[i + 1:, i] = corr[i, i + 1:] * w[i]
    return np.sum(corr * corr)


def rows_below(alpha, A, B):
    m, n = B.shape
    for i in range(m):
        for j in range(n):                     # reads rows below i, which the loop has not changed yet
            B[i, j] += A[i + 1:, i] @ B[i + 1:, j]
            B[i, j] *= alpha
    return np.sum(B * B)


def products_of_rows(X, v):
    out = np.zeros(X.shape[0])
    for i in range(X.shape[0]):
        out[i] = np.tanh(X[i, :] @ v)           # one matrix-vector product
    return np.sum(out * out)


@pytest.mark.parametrize("fn,shapes,wrt,nest", [
    (covariance_rows, [(14, 11)], ("data",), "for i "),
    (strict_rows, [(12, 10), (10,)], ("data", "w"), "for i "),
    (rows_below, [(), (9, 9), (9, 10)], ("alpha", "A", "B"), "for j "),
    (products_of_rows, [(10, 6), (6,)], ("X", "v"), "for i "),
])
def test_products_in_loops_become_one_product(fn, shapes, wrt, nest, backend):
    rng = np.random.default_rng(12)
    args = tuple(rng.uniform(-1, 1, s) if s else 1.1 for s in shapes)
    check_forward(fn, args, backend=backend, rtol=1e-10)
    check_grad(fn, args, wrt, backend=backend)
    forward = flowgrad.grad(fn, wrt=wrt, backend=backend).ir(*args).split("# backward")[0]
    # the product is made before the loop, which reads its rows
    head, loop = forward.split(nest, 1)
    assert "matmul(" in head and "matmul(" not in loop.split("\n  sum")[0], forward


def gram_of_columns(X):
    return np.sum(np.sin(X.T @ X)) + np.sum(np.cos(X @ X.T))


def test_a_gram_matrix_adjoint_is_one_product(backend):
    rng = np.random.default_rng(13)
    args = (rng.uniform(-1, 1, (7, 5)),)
    check_forward(gram_of_columns, args, backend=backend, rtol=1e-12)
    check_grad(gram_of_columns, args, ("X",), backend=backend)
    backward = flowgrad.grad(gram_of_columns, wrt=("X",), backend=backend).ir(*args).split("# backward")[1]
    assert backward.count("matmul(") == 2 and "gsym" in backward, backward


def reads_earlier_rows(x, A):
    for i in range(1, x.shape[0]):
        x[i] = np.sin(A[i, :] @ x)              # x[i - 1] was written by the iteration before
    return np.sum(x * x)


def product_read_after(X, v):
    for i in range(X.shape[0]):
        t = X[i, :] @ v
        X[i, :] *= t
    return np.sum(X * X) + t                   # the last iteration's product


def moving_sum(A, b):
    out = np.zeros(A.shape[0])
    for i in range(A.shape[0]):
        out[i] = A[i, :i] @ b[:i]                # the slice moves along the summed axis
    return np.sum(out * out)


@pytest.mark.parametrize("fn,shapes,wrt", [
    (reads_earlier_rows, [(10,), (10, 10)], ("x", "A")),
    (product_read_after, [(9, 4), (4,)], ("X", "v")),
    (moving_sum, [(10, 10), (10,)], ("A", "b")),
])
def test_products_the_loop_depends_on_stay_in_it(fn, shapes, wrt, backend):
    rng = np.random.default_rng(14)
    args = tuple(rng.uniform(-1, 1, s) * 0.5 for s in shapes)
    check_forward(fn, args, backend=backend, rtol=1e-10)
    check_grad(fn, args, wrt, backend=backend)
    forward = flowgrad.grad(fn, wrt=wrt, backend=backend).ir(*args).split("# backward")[0]
    assert "matmul(" not in forward.split("for i ")[0], forward


# ---------------------------------------------------------------- softmax shifts taken as constants (shifts)


def softmax_weighted(x, w):
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return np.sum(e / np.sum(e, axis=-1, keepdims=True) * w)


def log_sum_exps(X, w):
    rows = np.zeros(X.shape[0])
    for i in range(X.shape[0]):
        mx = np.max(X[i, :])
        rows[i] = mx + np.log(np.sum(np.exp(X[i, :] - mx)))
    cmax = np.max(X, axis=0, keepdims=True)
    cols = cmax + np.log(np.sum(np.exp(X - cmax), axis=0, keepdims=True))
    return np.sum(rows * w) + np.sum(np.sin(cols))


def heads(x, W):
    out = np.zeros_like(x)
    for h in range(2):
        s = x[:, 2 * h:2 * h + 2] @ W[2 * h:2 * h + 2, :]
        p = np.exp(s - np.max(s, axis=1, keepdims=True))
        out[:, 2 * h:2 * h + 2] = (p / np.sum(p, axis=1, keepdims=True)) @ x[:, 2 * h:2 * h + 2]
    return np.sum(out * out)


@pytest.mark.parametrize("fn,shapes,wrt", [
    (softmax_weighted, [(3, 4, 5), (5,)], ("x", "w")),
    (log_sum_exps, [(6, 5), (6,)], ("X", "w")),
    (heads, [(5, 4), (4, 5)], ("x", "W")),
])
def test_a_softmax_shift_is_a_constant(fn, shapes, wrt, backend):
    rng = np.random.default_rng(15)
    args = tuple(rng.uniform(-2, 2, s) for s in shapes)
    check_forward(fn, args, backend=backend, rtol=1e-12)
    check_grad(fn, args, wrt, backend=backend)
    ir = flowgrad.grad(fn, wrt=wrt, backend=backend).ir(*args)
    forward, backward = ir.split("# backward")
    assert "max_const(" in forward and " max(" not in forward, forward
    assert "count" not in backward, backward            # no share of the maximum's adjoint


def unnormalised(x):
    m = np.max(x, axis=1, keepdims=True)
    return np.sum(np.exp(x - m))                       # depends on m


def other_axis(x):
    m = np.max(x, axis=1, keepdims=True)
    e = np.exp(x - m)
    return np.sum(np.sin(e / np.sum(e, axis=0, keepdims=True)))    # summed across m's rows


def shift_used_again(x):
    m = np.max(x, axis=1, keepdims=True)
    e = np.exp(x - m)
    return np.sum(e / np.sum(e, axis=1, keepdims=True)) + np.sum(m * m)


def last_row_after(X):
    for i in range(X.shape[0]):
        e = np.exp(X[i, :] - np.max(X[i, :]))
        X[i, :] = e / np.sum(e)
    return np.sum(X * X) + np.sum(e)                    # the last e, unnormalised


@pytest.mark.parametrize("fn,shape", [(unnormalised, (4, 5)), (other_axis, (4, 5)), (shift_used_again, (4, 5)),
                                      (last_row_after, (4, 5))])
def test_a_shift_its_uses_do_not_cancel_keeps_its_derivative(fn, shape, backend):
    rng = np.random.default_rng(16)
    args = (rng.uniform(-2, 2, shape),)
    check_forward(fn, args, backend=backend, rtol=1e-12)
    check_grad(fn, args, ("x",) if "x" in fn.__code__.co_varnames[:1] else ("X",), backend=backend)
    forward = flowgrad.grad(fn, wrt=(fn.__code__.co_varnames[0],), backend=backend).ir(*args).split("# backward")[0]
    assert "max_const(" not in forward, forward


# ---------------------------------------------------------------- solves by a Cholesky factor (triangular)


def _kernel_matrix(X, ell):
    return np.exp(-np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=2) / ell) + 0.5 * np.eye(X.shape[0])


def gp_two_solves(X, y, ell):
    L = np.linalg.cholesky(_kernel_matrix(X, ell))
    alpha = np.linalg.solve(L.T, np.linalg.solve(L, y))      # K^-1 y, the second by the transpose
    return y @ alpha + 2.0 * np.sum(np.log(np.diag(L)))


def gp_columns(X, Y, ell):
    L = np.linalg.cholesky(_kernel_matrix(X, ell))
    return np.sum(np.linalg.solve(L, Y) ** 2)


def factors_in_a_loop(A, y, n):
    x = y
    for t in range(n):                 # every value L takes is a factor
        L = np.linalg.cholesky(A @ A.T + (1.0 + t) * np.eye(A.shape[0]))
        x = np.tanh(np.linalg.solve(L, x))
    return np.sum(x * x)


@pytest.mark.parametrize("fn, make, wrt, triangular", [
    (gp_two_solves, lambda r: (r.uniform(-1, 1, (7, 2)), r.uniform(-1, 1, 7), 0.8), ("X", "y", "ell"), 2),
    (gp_columns, lambda r: (r.uniform(-1, 1, (6, 2)), r.uniform(-1, 1, (6, 3)), 0.6), ("X", "Y", "ell"), 1),
    (factors_in_a_loop, lambda r: (r.uniform(-1, 1, (5, 5)), r.uniform(-1, 1, 5), 3), ("A", "y"), 1),
])
def test_solves_by_a_cholesky_factor_are_triangular(fn, make, wrt, triangular, backend):
    args = make(np.random.default_rng(14))
    check_forward(fn, args, backend)
    check_grad(fn, args, wrt, backend=backend)
    forward = flowgrad.jit(fn, backend=backend).ir(*args)
    assert forward.count("solve_triangular(") == triangular and " solve(" not in forward, forward
    assert "trans=1" in forward if fn is gp_two_solves else "trans=1" not in forward, forward


def factor_changed(X, y, ell):
    L = np.linalg.cholesky(_kernel_matrix(X, ell))
    L[0, -1] = 0.3                     # no longer triangular: the general solve stays
    return np.sum(np.linalg.solve(L, y) ** 2)


def any_matrix(A, y):
    L = np.tril(A) + 3.0 * np.eye(A.shape[0])         # triangular, but not a factor
    return np.sum(np.linalg.solve(L, y) ** 2) + np.sum(np.linalg.solve(A, y))


@pytest.mark.parametrize("fn, make, wrt", [
    (factor_changed, lambda r: (r.uniform(-1, 1, (6, 2)), r.uniform(-1, 1, 6), 0.8), ("X", "y", "ell")),
    (any_matrix, lambda r: (r.uniform(-1, 1, (5, 5)) + 4.0 * np.eye(5), r.uniform(-1, 1, 5)), ("A", "y")),
])
def test_other_solves_stay_general(fn, make, wrt, backend):
    args = make(np.random.default_rng(15))
    check_forward(fn, args, backend)
    check_grad(fn, args, wrt, backend=backend)
    assert "solve_triangular(" not in flowgrad.jit(fn, backend=backend).ir(*args)


# ---------------------------------------------------------------- products read transposed (transposes)


def rank_two_update(A, B, C):
    P = A @ B.T
    Q = B @ A.T                      # P transposed
    return np.sum(np.tril(C + P + Q) ** 2)


def rank_two_rows(alpha, C, A, B):
    n, m = A.shape
    for i in range(n):               # syr2k: the loops become the two products, the second P.T
        for k in range(m):
            C[i, :i + 1] += A[:i + 1, k] * alpha * B[i, k] + B[:i + 1, k] * alpha * A[i, k]
    return np.sum(np.tril(C) ** 2)


def changed_between(A, B):
    P = A @ B.T
    B[0, :] = 1.0                    # B changed: the second product is computed
    return np.sum(P * (B @ A.T))


@pytest.mark.parametrize("fn, make, wrt, products", [
    (rank_two_update, lambda r: (r.uniform(-1, 1, (7, 5)), r.uniform(-1, 1, (7, 5)), r.uniform(-1, 1, (7, 7))),
     ("A", "B", "C"), 1),
    (rank_two_rows,
     lambda r: (1.3, r.uniform(-1, 1, (40, 40)), r.uniform(-1, 1, (40, 30)), r.uniform(-1, 1, (40, 30))),
     ("alpha", "C", "A", "B"), 1),
    (changed_between, lambda r: (r.uniform(-1, 1, (6, 4)), r.uniform(-1, 1, (6, 4))), ("A",), 2),
])
def test_a_product_transposing_another_reads_it(fn, make, wrt, products, backend):
    args = make(np.random.default_rng(18))
    check_forward(fn, args, backend)
    check_grad(fn, args, wrt, backend=backend)
    forward = flowgrad.jit(fn, backend=backend).ir(*args)
    assert forward.count("matmul(") == products, forward


def rank_k_rows(alpha, beta, C, A):
    n, m = A.shape
    for i in range(n):               # syrk: the loop over k becomes the Gram matrix A A^T
        C[i, :i + 1] *= beta
        for k in range(m):
            C[i, :i + 1] += alpha * A[i, k] * A[:i + 1, k]
    return np.sum(np.tril(C) ** 2)


def gram_changed(A, w):
    G = A.T @ A
    G = G * w                         # no longer symmetric: its columns stay columns
    total = 0.0
    for i in range(G.shape[0]):
        total = total + np.sum(G[:i + 1, i] ** 2)
    return total


@pytest.mark.parametrize("fn, make, wrt, rows", [
    (rank_k_rows, lambda r: (1.3, 0.7, r.uniform(-1, 1, (40, 40)), r.uniform(-1, 1, (40, 30))),
     ("alpha", "beta", "C", "A"), True),
    (gram_changed, lambda r: (r.uniform(-1, 1, (8, 6)), r.uniform(0.5, 1.5, (6, 6))), ("A", "w"), False),
])
def test_a_gram_matrix_is_read_by_rows(fn, make, wrt, rows, backend):
    args = make(np.random.default_rng(19))
    check_forward(fn, args, backend)
    check_grad(fn, args, wrt, backend=backend)
    forward = flowgrad.jit(fn, backend=backend).ir(*args)
    assert bool(re.search(r"\w+\[i, 0:\+", forward)) == rows, forward


def product_into_rows(A, B, C):
    C[2:7, :] += A[:, 1:6].T @ B
    return np.sum(np.sin(C))


@pytest.mark.parametrize("backend", ["numpy", pytest.param("native", marks=pytest.mark.native)])
def test_a_copy_read_transposed_is_read_from_its_original(backend):
    """The product's adjoint ``g_t = g_C[2:7, :]`` is read transposed by ``A``'s; the copy goes."""
    rng = np.random.default_rng(0)
    args = (rng.standard_normal((4, 8)), rng.standard_normal((4, 3)), rng.standard_normal((9, 3)))
    text = flowgrad.grad(product_into_rows, wrt=(0, 1, 2), backend=backend).ir(*args)
    backward = text[text.index("# backward"):]
    assert "g_C[2:+5, 0:+3].transpose(1, 0)" in backward and "g_matmul = " not in backward, backward
    check_grad(product_into_rows, args, (0, 1, 2), backend=backend)


def copies_then_update(u, v, c):
    """A stencil step's copies: ``v`` is never written, so its copy is read from ``v`` itself;
    ``u``'s copy is read after ``u`` changes, so it stays."""
    un = u.copy()
    vn = v.copy()
    u[1:-1] = un[1:-1] * vn[1:-1] + c * (un[2:] - un[:-2])
    u[0] = vn[0] + un[-1]
    return np.sum(u * u) + np.sum(np.sin(vn))


@pytest.mark.parametrize("backend", ["numpy", pytest.param("native", marks=pytest.mark.native)])
def test_a_copy_of_an_array_not_yet_written_is_read_from_the_array(backend):
    rng = np.random.default_rng(1)
    args = (rng.standard_normal(12), rng.standard_normal(12), 0.3)
    forward = flowgrad.jit(copies_then_update, backend=backend).ir(*args)
    assert "sin(v)" in forward and "= v\n" not in forward and "= u\n" in forward, forward
    check_forward(copies_then_update, args, backend=backend, rtol=1e-12)
    check_grad(copies_then_update, args, (0, 1, 2), backend=backend)
