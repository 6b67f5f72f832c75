"""A loop's overwritten parts go to its tape in one entry (``passes/bulk.py``); the reversed loop,
free of tape traffic, may then run forwards and turned inside out (``passes/order.py``). The
change shows in the IR, and the gradients stay those of the original program."""
import re

import numpy as np

import flowgrad
from flowgrad.ir.core import F64, I64, Const, Container, For, Index, Read, Ref, Slice, apart, loop_range, op
from benchmarks.kernels import gramschmidt, lu
from oracle import check_grad


def _sweeps(fn, args, wrt, backend):
    text = flowgrad.grad(fn, wrt=wrt, backend=backend).ir(*args)
    forward, backward = text.split("# backward")
    return forward, backward


def test_lu_saves_each_row_segment_in_one_entry_and_its_adjoint_walks_rows(backend):
    rng = np.random.default_rng(3)
    n = 7
    A = rng.standard_normal((n, n)) / n + 2.0 * np.eye(n)
    check_grad(lu.kernel, (A,), ("A",), backend=backend)
    forward, backward = _sweeps(lu.kernel, (A,), ("A",), backend)
    # the loop over j >= i pushed A[i, j] per iteration: now the segment A[i, i:n] once
    assert re.search(r"push tape_A <- A\[i, i:\+", forward), forward
    assert re.search(r"pop tape_A -> A\[i, i:\+", backward), backward
    # its adjoint, free of pops, runs over the rows above i, each row's part in one pass
    assert re.search(r"g_A\[j\w*, i:\+maximum\(0, \(7 - i\)\)\] \+= ", backward), backward
    # the loop over j < i pushes twice per iteration onto the same tape: it keeps its pops
    assert "pop tape_A -> A[i, j]" in backward, backward


def running_rows(A):
    # iteration j reads element j - 1, which iteration j - 1 wrote: its adjoint reads another
    # iteration's part of A, so the parts come back one per iteration
    n = A.shape[1]
    for i in range(A.shape[0]):
        for j in range(1, n):
            A[i, j] = np.sin(A[i, j]) * A[i, j - 1]
    return np.sum(A * A)


def test_a_loop_whose_adjoint_reads_another_iterations_part_keeps_its_pops(backend):
    rng = np.random.default_rng(4)
    A = rng.uniform(0.5, 1.5, (3, 6))
    check_grad(running_rows, (A,), ("A",), backend=backend)
    forward, backward = _sweeps(running_rows, (A,), ("A",), backend)
    assert re.search(r"push tape_\w+ <- A\[i, j\]", forward), forward
    assert re.search(r"pop tape_\w+ -> A\[i, j\]", backward), backward


def squash(x, w):
    # iteration j overwrites element j, and its adjoint reads the element it restores
    for j in range(x.shape[0]):
        x[j] = np.sin(x[j]) * w[j]
    return np.sum(x * x)


def test_a_loop_whose_adjoint_reads_its_own_part_pops_the_parts_before_it(backend):
    rng = np.random.default_rng(5)
    args = (rng.standard_normal(9), rng.standard_normal(9))
    check_grad(squash, args, ("x", "w"), backend=backend)
    forward, backward = _sweeps(squash, args, ("x", "w"), backend)
    # one push of all of x before the loop, one pop before its adjoint, which then runs forwards
    assert re.search(r"push tape_x <- x\n\s*for j in 0:9:1:\n\s*x\[j\] = ", forward), forward
    assert re.search(r"pop tape_x -> x\n\s*for j in 0:9:1:\n", backward), backward
    assert backward.count("pop ") == 1, backward


def test_views_one_of_which_ends_where_the_other_starts_are_apart():
    n = 8
    A = Container("A", F64, (n, n))
    i, j = Container("i", I64, ()), Container("j", I64, ())
    vi, vj = Read(Ref(i, ())), Read(Ref(j, ()))
    above = op("maximum", Const(0), vi)                          # 0:+maximum(0, i): rows 0 .. i - 1
    rest = op("maximum", Const(0), op("subtract", Const(n), vi))  # i:+maximum(0, n - i)
    assert apart(Ref(A, [Slice(0, above), Index(vj)]), Ref(A, [Index(vi), Slice(vi, rest)]))
    assert apart(Ref(A, [Index(vi), Slice(0, above)]), Ref(A, [Index(vi), Slice(vi, rest)]))
    # one more row reaches row i
    longer = op("maximum", Const(0), op("add", vi, Const(1)))
    assert not apart(Ref(A, [Slice(0, longer), Index(vj)]), Ref(A, [Index(vi), Slice(vi, rest)]))


def test_a_loop_up_to_a_clipped_bound_stops_at_the_bound_where_it_runs():
    i, j = Container("i", I64, ()), Container("j", I64, ())
    vi = Read(Ref(i, ()))
    loop = For(j, 0, op("maximum", Const(0), vi), 1, [])
    (lo, _), (hi, k) = loop_range(loop)
    assert lo.value == 0 and isinstance(hi, Read) and hi.ref.container is i and k == -1


def test_a_loop_pushing_onto_two_tapes_saves_each_in_one_entry(backend):
    # Gram-Schmidt's column loop saves R[k, j] and the column A[:, j] per iteration: both go in
    # one entry each, and the loop's adjoint runs forwards; native code stores A with its columns as
    # rows (``passes/layout.py``: they are swept inside two loops), so the column is a row of A_t
    args = gramschmidt.args("test")
    check_grad(gramschmidt.kernel, args, gramschmidt.WRT, backend=backend)
    forward, backward = _sweeps(gramschmidt.kernel, args, gramschmidt.WRT, backend)
    column = r"pop tape_A_t -> A_t\[\(k \+ 1\):\+maximum\(0, \(8 - \(k \+ 1\)\)\), 0:\+12\]" \
        if backend == "native" else r"pop tape_A -> A\[0:\+12, \(k \+ 1\):\+maximum"
    assert re.search(column, backward), backward
    assert re.search(r"pop tape_array_1 -> array_1\[k, \(k \+ 1\):\+maximum", backward), backward
    assert re.search(r"for j in \(k \+ 1\):8:1:", backward), backward
