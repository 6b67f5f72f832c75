"""flowgrad's transforms called inside code flowgrad captures, composed at the IR level.

A call of ``grad(f)``, ``value_and_grad(f)``, ``jit(f)``, ``jvp``, ``vjp`` (and the pullback it
returns) or ``hvp`` met while capturing a function is lowered where it stands. ``f`` is inlined
into a statement list of its own, reading fresh containers that hold the differentiated
arguments; that list becomes a program whose gradient (``autodiff.reverse``) or tangent
(``autodiff.forward``) program is built, and the derivative program's statements are emitted into
the capture in place of the call. The transform around the captured function then differentiates
them like any other statements, so transforms nest to any depth:
``grad(lambda x: grad(f)(x) @ v)``, ``jvp`` of a function calling ``grad``, ``grad`` of one
calling ``jvp``.

The inlined function gets its array arguments as copies (it may update them in place, as under a
top-level ``grad`` call) but must not write arrays from outside it (values it closes over): the
derivative program may run the function again (a ``vjp`` pullback recomputes the forward sweep it
needs), which must then see what the first run saw.
"""
from __future__ import annotations

import inspect

import numpy as np

from . import pipeline
from .autodiff.forward import build_tangent
from .autodiff.reverse import build_reverse
from .errors import InputError, unsupported
from .ir.core import Assign, Const, Expr, Program, Read, Ref, stmt_writes, walk


class Nested:
    """``grad(fn)``, ``value_and_grad(fn)`` or ``jit(fn)`` (``kind``) as captured code calls it."""

    def __init__(self, kind, fn, wrt):
        self.kind, self.fn, self.wrt = kind, fn, wrt
        self.__name__ = f"{kind}({_name(fn)})"

    def _flowgrad_inline(self, fe, args, kwargs, loc):
        if self.kind == "jit":
            return fe.call(self.fn, list(args), dict(kwargs), loc, _name(self.fn))
        keys = _wrt_keys(self.fn, self.wrt, args, kwargs, loc, self.__name__)
        values, grads = _gradient(fe, self.fn, args, kwargs, keys, loc, self.__name__)
        single = not isinstance(self.wrt, (tuple, list))
        g = grads[0] if single else tuple(grads)
        return (values[0], g) if self.kind == "value_and_grad" else g


def nested_transform(kind):
    """The ``_flowgrad_nested`` hook of transform class ``kind``: ``grad(f, wrt=...)`` made inside
    captured code."""
    def make(fe, args, kwargs, loc):
        try:
            bound = _SIGNATURES[kind].bind(*args, **kwargs)
        except TypeError as exc:
            raise InputError(f"{loc}: {kind}(): {exc}") from None
        bound.apply_defaults()
        return Nested(kind, bound.arguments["fn"], bound.arguments.get("wrt"))
    return make


def _grad_signature(fn, wrt=0, backend=None, memory_budget=None, strategy=None):
    pass


def _jit_signature(fn, backend=None):
    pass


_SIGNATURES = {"grad": inspect.signature(_grad_signature), "value_and_grad": inspect.signature(_grad_signature),
               "jit": inspect.signature(_jit_signature)}


# ---------------------------------------------------------------- jvp, hvp, vjp


def inline_jvp(fe, args, kwargs, loc):
    """``jvp(fn, primals, tangents, wrt=None)`` in captured code: ``(out, tangent_out)``."""
    fn, primals, tangents, wrt = _bind(_jvp_signature, "jvp", args, kwargs, loc)
    primals, tangents = _sequence(primals, "primals", loc), _sequence(tangents, "tangents", loc)
    if len(primals) != len(tangents):
        raise InputError(f"{loc}: jvp takes one tangent per primal: got {len(primals)} primals and "
                         f"{len(tangents)} tangents")
    keys = _default_keys(fe, primals, loc) if wrt is None else _wrt_keys(fn, wrt, primals, {}, loc, "jvp")
    return _tangent(fe, fn, primals, tangents, keys, loc)


def inline_hvp(fe, args, kwargs, loc):
    """``hvp(fn, primals, tangents, wrt=0)`` in captured code: jvp of ``grad(fn)``."""
    fn, primals, tangents, wrt = _bind(_jvp_signature, "hvp", args, kwargs, loc, wrt_default=0)
    if isinstance(wrt, (tuple, list)):
        raise InputError(f"{loc}: hvp differentiates one argument: pass wrt as one name or position")
    primals, tangents = _sequence(primals, "primals", loc), _sequence(tangents, "tangents", loc)
    if len(primals) != len(tangents):
        raise InputError(f"{loc}: hvp takes one tangent per primal: got {len(primals)} primals and "
                         f"{len(tangents)} tangents")
    keys = _wrt_keys(fn, wrt, primals, {}, loc, "hvp")
    return _tangent(fe, Nested("grad", fn, wrt), primals, tangents, keys, loc)[1]


def inline_vjp(fe, args, kwargs, loc):
    """``vjp(fn, *args, wrt=None)`` in captured code: ``(out, pullback)``. The pullback, called
    in the same captured code, runs the gradient program of ``fn`` at the same arguments (its
    forward sweep again, then the backward sweep from the cotangent it is given)."""
    if not args:
        raise InputError(f"{loc}: vjp() takes the function to differentiate")
    fn, fargs = args[0], list(args[1:])
    extra = set(kwargs) - {"wrt", "backend"}
    if extra:
        raise InputError(f"{loc}: vjp() got unexpected keyword arguments {sorted(extra)}")
    wrt = kwargs.get("wrt")
    keys = _default_keys(fe, fargs, loc) if wrt is None else _wrt_keys(fn, wrt, fargs, {}, loc, "vjp")
    # the arguments as they are now: the pullback may be called after the caller changed them
    owned = _Owned(fe, fargs, {}, keys, loc, "vjp")
    mine = owned.mine
    stmts, outs, tree = _inline(fe, fn, owned.args, {}, loc, "vjp", mine)
    if len(outs) != 1:
        raise unsupported(loc, f"vjp of {_name(fn)} inside a function flowgrad captures, with a result of "
                               f"{len(outs)} arrays", "return one array (stack the results) or call vjp outside")
    if any(w.container in mine for t in walk(stmts) for w in stmt_writes(t)):
        raise unsupported(loc, f"vjp of {_name(fn)} inside a function flowgrad captures, where {_name(fn)} "
                               "updates an argument in place", "write to a copy of the argument inside it")
    for s in stmts:
        fe.emit(s)
    return Read(Ref(outs[0])), _Pullback(fn, owned, outs[0])


class _Pullback:
    """The pullback ``vjp`` returned inside captured code."""

    __name__ = "pullback"

    def __init__(self, fn, owned, out):
        self.fn, self.owned, self.out = fn, owned, out

    def _flowgrad_inline(self, fe, args, kwargs, loc):
        if len(args) != 1 or kwargs:
            raise InputError(f"{loc}: a vjp pullback takes one cotangent")
        ct = fe.to_expr(args[0], loc)
        _check_shape(ct, self.out, loc, "the cotangent")
        owned = self.owned
        stmts, outs, _ = _inline(fe, self.fn, owned.args, {}, loc, "vjp", owned.mine)
        return tuple(owned.regroup(_reverse(fe, stmts, outs[0], owned.wrt, ct, loc)))


# ---------------------------------------------------------------- the derivative programs


class _Owned:
    """The arguments of one inlined call, as it sees them (``args``, ``kwargs``): each array or number
    a read of a fresh container holding its value now (the call may update its arguments in place,
    as under a top-level ``grad``). ``wrt``: the containers of the float leaves of the arguments at
    ``keys`` (an array, a number, or a pytree of them: tuples, lists, dicts), in order; ``mine``:
    every container made here."""

    def __init__(self, fe, args, kwargs, keys, loc, what):
        self.args, self.kwargs = list(args), dict(kwargs)
        self.keys, self.originals, self.wrt, self.mine = list(keys), {}, [], set()
        for k in list(range(len(self.args))) + list(self.kwargs):
            v = _get(self.args, self.kwargs, k)
            self.originals[k] = v
            differentiated = k in self.keys
            if differentiated and not _is_node(v):          # a plain argument: a float one, or an error
                c = _input(fe, v, loc, True, f"argument {k!r} of {what}")
                self.wrt.append(c)
                self.mine.add(c)
                _put(self.args, self.kwargs, k, Read(Ref(c)))
                continue
            count = len(self.wrt)

            def own(leaf, differentiated=differentiated):
                if not isinstance(leaf, Expr) and not (differentiated and _is_float(leaf)):
                    return leaf
                c = _input(fe, leaf, loc, False, what)
                self.mine.add(c)
                if differentiated and _is_float(leaf):
                    self.wrt.append(c)
                return Read(Ref(c))
            _put(self.args, self.kwargs, k, _tree_map(own, v))
            if differentiated and len(self.wrt) == count:
                raise InputError(f"{loc}: argument {k!r} of {what} holds no float array or float to differentiate")

    def regroup(self, flat):
        """Per key, the values ``flat`` (one per ``wrt`` container) in its argument's structure
        (None at a leaf not differentiated)."""
        it = iter(flat)
        out = []
        for k in self.keys:
            v = self.originals[k]
            out.append(next(it) if not _is_node(v) else
                       _tree_map(lambda leaf: next(it) if _is_float(leaf) else None, v))
        return out

    def leaf_positions(self, k):
        """Positions among the leaves of argument ``k`` of those differentiated."""
        v = self.originals[k]
        return [0] if not _is_node(v) else [j for j, leaf in enumerate(_leaves(v)) if _is_float(leaf)]


def _gradient(fe, fn, args, kwargs, keys, loc, what):
    """``(values, gradients)`` of scalar ``fn`` at ``args`` in the arguments ``keys`` (positions or
    keyword names), emitted into the capture: reads of the result and the gradient of each key's
    argument, in its structure."""
    owned = _Owned(fe, args, kwargs, keys, loc, what)
    stmts, outs, tree = _inline(fe, fn, owned.args, owned.kwargs, loc, what, owned.mine)
    r = outs[0]
    if len(outs) != 1 or tree is not None or r.ndim or r.dtype.kind != "f":
        raise InputError(f"{loc}: {what} requires {_name(fn)} to return a real float scalar")
    return [Read(Ref(r, ()))], owned.regroup(_reverse(fe, stmts, r, owned.wrt, Const(1.0, r.dtype), loc))


def _reverse(fe, stmts, result, wrt, cotangent, loc):
    """Emit the gradient program of ``stmts`` (computing container ``result`` from the containers
    ``wrt``) for ``cotangent``; returns a read of each gradient."""
    unit = pipeline.run(pipeline.CAPTURED, pipeline.Unit({"body": stmts}, fe.containers, fe.namer, [result],
                                                         "numpy", "reverse"))
    prog = Program("nested", wrt, unit.sweeps["body"], [result], fe.containers)
    gp = build_reverse(prog, wrt, fe.namer)
    fe.containers.update(gp.containers)
    gp.cotangent.kind = "transient"
    fe.emit(Assign(Ref(gp.cotangent), cotangent, loc=loc))
    for s in gp.forward + gp.backward:
        fe.emit(s)
    grads = []
    for w in wrt:
        g = gp.grads.get(w)
        if g is None:                   # the result does not depend on it
            g = fe.container("g_" + w.name, w.dtype, w.shape)
            fe.emit(Assign(Ref(g), Const(0.0, w.dtype), loc=loc))
        grads.append(Read(Ref(g)))
    return grads


def _tangent(fe, fn, primals, tangents, keys, loc):
    """``(out, tangent_out)`` of ``fn(*primals)`` in the directions ``tangents`` of the primals at
    ``keys`` (each of its primal's structure), emitted into the capture."""
    owned = _Owned(fe, primals, {}, keys, loc, "jvp")
    seeds_values = []
    for k in keys:
        t = tangents[k]
        leaves = [t] if not _is_node(owned.originals[k]) else _leaves(t)
        if _is_node(owned.originals[k]) and len(leaves) != len(_leaves(owned.originals[k])):
            raise InputError(f"{loc}: tangent {k} of jvp does not have its primal's structure")
        seeds_values += [None if leaves[j] is None else fe.to_expr(leaves[j], loc) for j in owned.leaf_positions(k)]
    for w, t in zip(owned.wrt, seeds_values):
        if t is not None:
            _check_shape(t, w, loc, "a tangent")
    stmts, outs, tree = _inline(fe, fn, owned.args, {}, loc, "jvp", owned.mine)
    wrt = owned.wrt
    tp = build_tangent(Program("nested", wrt, stmts, outs, fe.containers), wrt, fe.namer)
    fe.containers.update(tp.containers)
    for seed, t in zip(tp.params[len(wrt):], seeds_values):
        seed.kind = "transient"
        fe.emit(Assign(Ref(seed), Const(0.0, seed.dtype) if t is None else t, loc=loc))
    for s in tp.body:
        fe.emit(s)
    n = len(outs)
    values = [Read(Ref(c)) for c in tp.results[:n]]
    t_values = [Read(Ref(c)) for c in tp.results[n:]]
    return _rebuild(tree, values), _rebuild(tree, t_values)


# ---------------------------------------------------------------- inlining the function


def _inline(fe, fn, args, kwargs, loc, what, mine):
    """Capture ``fn(*args, **kwargs)`` into a statement list of its own (not emitted); returns
    ``(statements, result containers, structure)``: the structure is None for one array, else the
    tuple or list the function returned. ``mine``: containers made for the call, which it may
    write; it may not write any other container made before it."""
    before = set(fe.containers)

    def call():
        value = fe.call(fn, list(args), dict(kwargs), loc, _name(fn))
        leaves = list(value) if isinstance(value, (tuple, list)) else [value]
        outs = []
        for v in leaves:
            e = fe.to_expr(v, loc)
            if e.dtype.kind not in "fc":
                raise InputError(f"{loc}: {what} of {_name(fn)}: its result has dtype {e.dtype}; only float "
                                 "results can be differentiated")
            outs.append(fe.materialize(e, "out", loc).ref.container)
        return outs, (type(value) if isinstance(value, (tuple, list)) else None)

    stmts, (outs, tree) = fe.collect(call)
    for s in walk(stmts):
        for w in stmt_writes(s):
            c = w.container
            if c.name in before and c not in mine and c.kind != "tape":
                raise unsupported(getattr(s, "loc", None) or loc,
                                  f"{what} of {_name(fn)}, which writes here into an array of the code around "
                                  "it (a side effect of a function being differentiated)",
                                  "transforms take pure functions: write to a copy (x = x.copy()) inside it")
    return stmts, outs, tree


def _input(fe, value, loc, differentiated, what):
    """A fresh container holding ``value`` (an argument of the transformed function)."""
    e = fe.to_expr(value, loc)
    if differentiated and e.dtype.kind not in "fc":
        raise InputError(f"{loc}: {what} has dtype {e.dtype}; only float arguments can be differentiated")
    c = fe.container("arg", e.dtype, e.shape)
    fe.emit(Assign(Ref(c), e, loc=loc))
    return c


def _is_node(v):
    return isinstance(v, (tuple, list, dict))


def _is_float(v):
    """A leaf that carries a derivative: a float array or number (a Python float included)."""
    if isinstance(v, Expr):
        return v.dtype.kind in "fc"
    return isinstance(v, (float, complex)) or isinstance(v, np.floating)


def _tree_map(fn, v):
    """``v`` with each leaf replaced by ``fn(leaf)``. Tuples (named ones too), lists and dicts are the
    nodes, visited as JAX does (a dict by sorted key); ``_leaves`` lists the leaves in that order."""
    if isinstance(v, tuple):
        items = [_tree_map(fn, x) for x in v]
        return type(v)(*items) if hasattr(v, "_fields") else tuple(items)
    if isinstance(v, list):
        return [_tree_map(fn, x) for x in v]
    if isinstance(v, dict):
        mapped = {k: _tree_map(fn, v[k]) for k in sorted(v)}
        return {k: mapped[k] for k in v}
    return fn(v)


def _leaves(v):
    out = []
    _tree_map(out.append, v)
    return out


def _check_shape(e, c, loc, what):
    if len(e.shape) != c.ndim or any(isinstance(a, Const) and isinstance(b, Const) and a.value != b.value
                                     for a, b in zip(e.shape, c.shape)):
        raise InputError(f"{loc}: {what} has shape {_shape_text(e.shape)} but its primal has shape "
                         f"{_shape_text(c.shape)}")


def _shape_text(shape):
    return "(" + ", ".join(str(d.value) if isinstance(d, Const) else "?" for d in shape) + \
        ("," if len(shape) == 1 else "") + ")"


def _rebuild(tree, values):
    return values[0] if tree is None else tree(values)


# ---------------------------------------------------------------- arguments


def _jvp_signature(fn, primals, tangents, wrt=None, backend=None):
    pass


def _bind(signature_of, what, args, kwargs, loc, wrt_default=None):
    try:
        bound = inspect.signature(signature_of).bind(*args, **kwargs)
    except TypeError as exc:
        raise InputError(f"{loc}: {what}(): {exc}") from None
    bound.apply_defaults()
    a = bound.arguments
    return a["fn"], a["primals"], a["tangents"], a["wrt"] if a["wrt"] is not None else wrt_default


def _sequence(v, what, loc):
    if not isinstance(v, (tuple, list)):
        raise InputError(f"{loc}: {what} must be a tuple of the arguments")
    return list(v)


def _param_names(fn):
    node = getattr(fn, "node", None)
    if node is not None:                        # a function defined in captured code
        return [a.arg for a in node.args.posonlyargs + node.args.args]
    try:
        return [p for p in inspect.signature(fn).parameters]
    except (TypeError, ValueError):
        return []


def _wrt_keys(fn, wrt, args, kwargs, loc, what):
    """The positions in ``args`` (or names in ``kwargs``) of the arguments ``wrt`` names."""
    items = list(wrt) if isinstance(wrt, (tuple, list)) else [wrt]
    names = _param_names(fn)
    keys = []
    for w in items:
        if isinstance(w, bool) or not isinstance(w, (int, str)):
            raise InputError(f"{loc}: {what}: wrt entries must be argument names or positions, not {w!r}")
        if isinstance(w, int):
            if not -len(args) <= w < len(args):
                raise InputError(f"{loc}: {what}: wrt position {w} is out of range for {len(args)} arguments")
            keys.append(w % len(args))
        elif w in kwargs:
            keys.append(w)
        elif w in names and names.index(w) < len(args):
            keys.append(names.index(w))
        else:
            raise InputError(f"{loc}: {what}: wrt name {w!r} is not an argument of {_name(fn)} "
                             f"({', '.join(names)})")
    return keys


def _default_keys(fe, args, loc):
    """Every argument that is, or holds, a float array or number (as ``vjp`` and ``jvp`` choose by
    default)."""
    keys = []
    for k, v in enumerate(args):
        if any(_is_float(leaf) for leaf in _leaves(v)):
            keys.append(k)
    if not keys:
        raise InputError(f"{loc}: no float argument to differentiate")
    return keys


def _get(args, kwargs, k):
    return args[k] if isinstance(k, int) else kwargs[k]


def _put(args, kwargs, k, v):
    if isinstance(k, int):
        args[k] = v
    else:
        kwargs[k] = v


def _name(fn):
    return getattr(fn, "__name__", type(fn).__name__)


__all__ = ["Nested", "nested_transform", "inline_jvp", "inline_hvp", "inline_vjp"]
