"""Small helpers the generated NumPy source calls (imported there as ``_rt``)."""
from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg
import scipy.special

from . import fft_runtime as fft  # noqa: F401 (for generated code: _rt.fft.<name>)
from . import linalg_runtime as linalg  # noqa: F401 (for generated code: _rt.linalg.<name>)


def gammaln(x):
    return scipy.special.gammaln(x)


def digamma(x):
    return scipy.special.digamma(x)


def trigamma(x):
    return scipy.special.polygamma(1, x)


def polygamma(n, x):
    return scipy.special.polygamma(n, x)


def sum_to(x, shape, full):
    """Sum ``x``, broadcast to ``full``, back down to ``shape`` (the adjoint of broadcasting): a
    new array, never ``x`` itself (a Call's output is memory of its own; an adjoint view passed
    through as it was would be cleared with it)."""
    x = np.broadcast_to(np.array(x), tuple(int(d) for d in full))
    shape = tuple(int(d) for d in shape)
    lead = x.ndim - len(shape)
    if lead > 0:
        x = x.sum(axis=tuple(range(lead)))
    axes = tuple(k for k, d in enumerate(shape) if d == 1 and x.shape[k] != 1)
    if axes:
        x = x.sum(axis=axes, keepdims=True)
    return np.broadcast_to(x, shape).copy() if x.shape != shape else x


def check_sizes(message, *sizes):
    """Sizes known only at run time that must agree (``passes.checks``), in pairs."""
    if any(a != b for a, b in zip(sizes[::2], sizes[1::2])):
        raise ValueError(message.format(*sizes))
    return True


def check_index(*triples):
    """Indices checked ahead of their loop: (first, last, n) triples (``Facts.hoist_check``)."""
    for k in range(0, len(triples), 3):
        n = triples[k + 2]
        for i in triples[k:k + 2]:
            checked_index(i, n)
    return True


def checked_index(i, n):
    """NumPy's integer index ``i`` into an axis of length ``n`` (the IR's ``checked_index``)."""
    if not -n <= i < n:
        raise IndexError(f"index {i} is out of bounds for axis with size {n}")
    return i + n if i < 0 else i


def slice_stop(stop):
    """A negative-step slice that runs to the start of the axis has no stop (``None``)."""
    return None if stop < 0 else stop


def kept(x):
    """A copy of array ``x`` for a tape; None (an array not made yet) as it is."""
    return None if x is None else x.copy()


def gather_last(g, index):
    """``g[index]`` where, among duplicate target positions, only the last one receives the value.

    This is the adjoint of NumPy's ``y[idx] = v``: with repeated indices the last write wins,
    so only that element of ``v`` influences ``y``.
    """
    probe = np.zeros(g.shape, dtype=np.int64)
    where = np.broadcast_to(np.asarray(probe[index]), np.asarray(probe[index]).shape)
    order = np.arange(where.size, dtype=np.int64).reshape(where.shape) + 1
    probe[index] = order
    winner = probe[index] == order
    return np.where(winner, g[index], 0.0)


def einsum_vjp(subscripts, k, g, *operands):
    """The adjoint of operand ``k`` of ``np.einsum(subscripts, *operands)`` given the output's ``g``.

    Letters of operand ``k`` that appear nowhere else are broadcast; a letter repeated inside
    operand ``k`` (a diagonal, e.g. a trace ``'ii->'``) receives the adjoint on that diagonal.
    """
    inputs, output = subscripts.replace(" ", "").split("->")
    terms = inputs.split(",")
    target = terms[k]
    shape = operands[k].shape
    unique = "".join(dict.fromkeys(target))
    size = {c: shape[target.index(c)] for c in unique}
    others = [t for j, t in enumerate(terms) if j != k]
    present = set(output).union(*others) if others else set(output)
    kept = "".join(c for c in unique if c in present)
    spec = ",".join([output] + others) + "->" + kept
    part = np.einsum(spec, g, *[o for j, o in enumerate(operands) if j != k], optimize=True)
    part = np.broadcast_to(part[tuple(slice(None) if c in present else None for c in unique)],
                           tuple(size[c] for c in unique))
    dtype = np.result_type(operands[k], part, np.float64)     # complex where the others are
    if unique == target:
        return np.array(part, dtype=dtype)
    out = np.zeros(shape, dtype=dtype)
    grids = np.indices(tuple(size[c] for c in unique), sparse=True)
    out[tuple(grids[unique.index(c)] for c in target)] = part
    return out


def matmul_tn_flat(a, g):
    """Sum over all leading axes of ``a[..., :, :].T @ g[..., :, :]``: one (k x rows) @ (rows x m) GEMM."""
    a, g = np.asarray(a), np.asarray(g)
    return np.reshape(a, (-1, a.shape[-1])).T @ np.reshape(g, (-1, g.shape[-1]))


def lu_factor(a):
    """``(lu, piv)``: the LU factorisation (partial pivoting, LAPACK getrf) that ``np.linalg.solve``
    computes on every call, kept for ``lu_solve`` (see ``flowgrad.passes.hoist``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", scipy.linalg.LinAlgWarning)   # singular: raised by lu_solve
        return scipy.linalg.lu_factor(np.asarray(a), check_finite=False)


def lu_solve(lu, piv, b, trans=0):
    """``np.linalg.solve(a, b)`` (``trans``: ``np.linalg.solve(a.T, b)``) from ``lu_factor(a)``:
    the same LAPACK getrs, so the same values; an exactly singular ``a`` raises ``LinAlgError`` as
    NumPy does."""
    if not np.all(np.diagonal(lu)):
        raise np.linalg.LinAlgError("Singular matrix")
    return scipy.linalg.lu_solve((lu, piv), np.asarray(b), trans=trans, check_finite=False)
