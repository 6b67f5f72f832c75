"""Solve with a Cholesky factor as the triangular system it is.

Needs: a captured statement list, before the autodiff. Changes: ``x = solve(L, b)`` and
``x = solve(L.T, b)`` become ``solve_triangular(L, b, lower=True, trans=0 or 1)`` where every value
``L`` ever holds is the output of ``np.linalg.cholesky`` of a float64 matrix: lower triangular with
a positive diagonal (the factorisation raises otherwise), so the general solve's LU factorisation
(two thirds of n^3 multiply-adds, as much as the Cholesky factorisation itself) finds the
triangle it was given, and a triangular solve (n^2) gives the same ``x`` up to rounding. The
gradient gains twice: the adjoint of a solve solves with the transpose, another factorisation,
now another triangular solve; and the adjoint reaching ``L`` is the lower triangle of ``-gb x'``
(what the solve reads), which the Cholesky adjoint reads anyway.

A Gaussian-process log-likelihood (``alpha = solve(L, y)``) solves this way; its gradient at
n = 630 spent a third of its time in the two LU factorisations.
"""
from __future__ import annotations

import numpy as np

from ..ir.core import Call, Read, Ref, map_blocks, written_only_by


def triangular_solves(stmts):
    """``stmts`` with the general solves by a Cholesky factor made triangular (see the module)."""
    factors = {c for c in written_only_by(stmts, lambda s, c: isinstance(s, Call) and s.op == "cholesky" and
                                          s.outputs[0] is c)
               if c.kind == "transient" and c.ndim == 2 and c.dtype == np.float64}
    return _rewrite(stmts, factors) if factors else stmts


def _factor_read(e, factors):
    """``(L, trans)`` where ``e`` reads a whole factor ``L`` (``trans``: through its transpose)."""
    if not isinstance(e, Read) or e.ref.container not in factors:
        return None
    ref = e.ref
    if not Ref(ref.container, ref.items).is_whole() or ref.perm not in (None, (1, 0)):
        return None
    return ref.container, 0 if ref.perm is None else 1


def _rewrite(stmts, factors):
    out = []
    for s in stmts:
        if isinstance(s, Call) and s.op == "solve" and s.inputs[1].dtype == np.float64 and \
                len(s.inputs[1].shape) in (1, 2):
            found = _factor_read(s.inputs[0], factors)
            if found is not None:
                factor, trans = found
                s = Call("solve_triangular", [Read(Ref(factor)), s.inputs[1]], s.outputs,
                         {"lower": True, "trans": trans, "unit": False}, loc=s.loc)
        out.append(map_blocks(s, lambda body: _rewrite(body, factors)))
    return out
