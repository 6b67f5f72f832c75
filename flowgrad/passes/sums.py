"""Full sums that share their products: each scalar factor taken out, each product summed once.

Needs: a statement list (the backward sweep of a gradient). Changes: in any block, sums of whole
arrays into scalars over one iteration space (``Call("sum_to", shape=())``) are written as
linear combinations ``sum(E_m) = c_1 sum(F_1) + ... + c_k sum(F_k)``, with each ``c`` a scalar
expression and each ``F`` a product of array factors, where the group's sums share a product
``F`` and have no fewer sums than products. Each product is summed once, where the group's first
sum was, and each sum becomes the scalar combination at its own place.

The adjoint of ``V[:n] = d * (p * V[1:n + 1] + (1 - p) * V[:n])`` with respect to the scalars
``d`` and ``p`` sums ``g * d * V[:n]``, ``g * (p * V[1:n + 1] + (1 - p) * V[:n])`` and
``g * d * V[1:n + 1]``: three sums with four products per element, which are
``d * sum(g * V[:n])``, ``p * sum(g * V[1:n + 1]) + (1 - p) * sum(g * V[:n])`` and
``d * sum(g * V[1:n + 1])``: two sums of one product each. A compiler does not do this for us:
taking ``d`` out of a sum reassociates it, and finding the sums' common products needs the
products distributed over the sums inside them.

A later sum joins a group only where nothing between the group's first sum and its own place
writes what it reads; sums of complex values, and sums whose products would not span the whole
iteration space (a broadcast factor), keep their form.
"""
from __future__ import annotations

from ..ir.core import (Assign, Call, Const, Container, Op, Read, Ref, iter_reads, map_blocks, op, same_expr,
                       stmt_writes, walk)

# a sum whose expression distributes into more products than this keeps its form
MAX_TERMS = 6


def share_sum_products(stmts, containers, namer):
    """``stmts`` with each block's full sums written over their shared products (see the module)."""
    out = [map_blocks(s, lambda body: share_sum_products(body, containers, namer)) for s in stmts]
    first = -1
    while first + 1 < len(out):
        first += 1
        s = out[first]
        if not _full_sum(s):
            continue
        full, dtype = s.attrs["full"], s.outputs[0].dtype
        group = [(first, _terms(s.inputs[0], full, dtype))]
        if group[0][1] is None:
            continue
        written = {s.outputs[0]}
        space = {r.ref.container for d in full for r in iter_reads(d)}
        for k in range(first + 1, len(out)):
            t = out[k]
            if space & written:
                break
            if _full_sum(t) and _same_space(t, s) and \
                    not {r.ref.container for r in iter_reads(t.inputs[0])} & written:
                terms = _terms(t.inputs[0], full, dtype)
                if terms is not None:
                    group.append((k, terms))
            written |= {w.container for v in walk([t]) for w in stmt_writes(v)}
        cores = []
        for _, terms in group:
            for _, core in terms:
                if not any(_same_factors(core, c) for c in cores):
                    cores.append(core)
        if len(cores) > len(group) or len(cores) >= sum(len(terms) for _, terms in group):
            continue
        sums = [containers.setdefault(n, _scalar(n, dtype)) for n in (namer("gsum") for _ in cores)]
        made = [Call("sum_to", [_product(c)], [t], {"shape": (), "full": full}, s.loc) for c, t in zip(cores, sums)]
        for k, terms in group:
            combo = None
            for coef, core in terms:
                j = next(j for j, c in enumerate(cores) if _same_factors(core, c))
                term = Read(Ref(sums[j], ())) if coef is None else op("multiply", coef, Read(Ref(sums[j], ())))
                combo = term if combo is None else op("add", combo, term)
            out[k] = Assign(Ref(out[k].outputs[0], ()), combo, loc=out[k].loc)
        out[first:first] = made
        first += len(made)
    return out


def _scalar(name, dtype):
    return Container(name, dtype, (), "transient")


def _full_sum(s):
    return isinstance(s, Call) and s.op == "sum_to" and s.attrs.get("shape") == () and len(s.inputs) == 1 \
        and len(s.outputs) == 1 and s.outputs[0].dtype.kind == "f" and s.inputs[0].dtype == s.outputs[0].dtype


def _same_space(a, b):
    fa, fb = a.attrs["full"], b.attrs["full"]
    return len(fa) == len(fb) and all(same_expr(x, y) for x, y in zip(fa, fb))


def _terms(e, full, dtype):
    """``[(coefficient, factors)]`` with ``e`` the sum of ``coefficient * product(factors)`` (a
    coefficient ``None`` is one), each product of ``dtype`` spanning ``full``; None where ``e``
    has more than ``MAX_TERMS`` of them or a product does not span ``full`` or takes another dtype
    (a product of integer arrays)."""
    terms = _split(e)
    if terms is None or len(terms) > MAX_TERMS:
        terms = [(None, [e])]
    for _, factors in terms:
        product = _product(factors)
        if len(product.shape) != len(full) or not all(same_expr(x, y) for x, y in zip(product.shape, full)) or \
                product.dtype != dtype:
            return None
    return terms


def _split(e):
    if not e.shape:
        return None                     # a scalar summed over the space: not a product of arrays
    if isinstance(e, Op) and e.name in ("add", "subtract"):
        a, b = _split(e.args[0]), _split(e.args[1])
        if a is None or b is None:
            return None
        return a + (b if e.name == "add" else [(_negated(c), f) for c, f in b])
    if isinstance(e, Op) and e.name == "negative":
        a = _split(e.args[0])
        return None if a is None else [(_negated(c), f) for c, f in a]
    if isinstance(e, Op) and e.name == "multiply":
        x, y = e.args
        if not x.shape or not y.shape:
            scale, arr = (x, y) if not x.shape else (y, x)
            a = _split(arr)
            return None if a is None else [(_scaled(c, scale), f) for c, f in a]
        a, b = _split(x), _split(y)
        if a is None or b is None or len(a) * len(b) > MAX_TERMS:
            return None
        return [(_times(ca, cb), fa + fb) for ca, fa in a for cb, fb in b]
    if isinstance(e, Op) and e.name == "divide" and not e.args[1].shape:
        a = _split(e.args[0])
        return None if a is None else [(op("divide", Const(1.0) if c is None else c, e.args[1]), f) for c, f in a]
    return [(None, [e])]


def _negated(c):
    return Const(-1.0) if c is None else op("negative", c)


def _scaled(c, scale):
    return scale if c is None else op("multiply", c, scale)


def _times(a, b):
    return b if a is None else a if b is None else op("multiply", a, b)


def _same_factors(a, b):
    """Whether two products have the same factors, in any order."""
    if len(a) != len(b):
        return False
    rest = list(b)
    for x in a:
        k = next((k for k, y in enumerate(rest) if same_expr(x, y)), None)
        if k is None:
            return False
        del rest[k]
    return True


def _product(factors):
    e = factors[0]
    for f in factors[1:]:
        e = op("multiply", e, f)
    return e


__all__ = ["share_sum_products"]
