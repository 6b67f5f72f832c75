"""Public API of forward mode and of Jacobians: ``jvp``, ``linearize``, ``jacfwd``, ``jacrev``,
``hvp`` and ``hessian`` (JAX's names and shapes).

Each captures the function once per call signature, as ``grad`` does, and compiles its tangent
program (``autodiff.forward``): the function's statements interleaved with their tangents, loops
kept as loops. ``hvp`` and ``hessian`` compile the tangent program of the gradient program
(forward over reverse), so they work through ``while`` loops and in-place updates too.
"""
from __future__ import annotations

import weakref

import numpy as np

from . import api_nested, pytree
from .api import (DEFAULT_BACKEND, _format_grads, _is_float_leaf, _run_vjp, _scalar_result, _Transform,
                  _unpack_result)
from .errors import InputError
from .ir.core import Assign, Call, iter_reads, walk

# one transform per function, wrt, backend and mode: a compiled program is reused across calls
_TRANSFORMS = weakref.WeakKeyDictionary()


def _transform(fn, wrt, backend, mode):
    try:
        per_fn = _TRANSFORMS.setdefault(fn, {})
    except TypeError:               # not weakly referable: no reuse across calls
        per_fn = {}
    key = (wrt if isinstance(wrt, (tuple, list)) else (wrt,), isinstance(wrt, (tuple, list)), backend, mode)
    key = (tuple(key[0]),) + key[1:]
    t = per_fn.get(key)
    if t is None:
        t = per_fn[key] = _Transform(fn, wrt, backend or DEFAULT_BACKEND, mode)
    return t


def _default_wrt(t, args):
    """Every argument that is, or holds, a float number or array (as ``vjp``)."""
    arguments = t.bind(args)
    return tuple(n for n, v in arguments.items()
                 if _is_float_leaf(v) or pytree.is_node(v) and any(_is_float_leaf(x) for x in pytree.flatten(v)[0]))


def _seed(w, value, what):
    """A tangent value as the tangent program takes it for argument container ``w``."""
    if w.ndim == 0:
        if np.ndim(value) != 0:
            raise InputError(f"{what} has shape {np.shape(value)} but its primal is a scalar")
        return complex(value) if w.dtype.kind == "c" else float(np.real(value))
    if np.iscomplexobj(value) and w.dtype.kind != "c":
        raise InputError(f"{what} is complex but its primal is real ({w.dtype}): pass a real tangent")
    a = np.asarray(value, dtype=w.dtype)
    shape = tuple(int(d.value) for d in w.shape) if all(hasattr(d, "value") for d in w.shape) else None
    if shape is not None and a.shape != shape:
        raise InputError(f"{what} has shape {a.shape} but its primal has shape {shape}")
    return a


def _seeds(entry, names, tangents_by_name, arguments):
    """The tangent program's seed values, one per ``entry.wrt`` container, in order."""
    seeds = []
    for name, picks in zip(names, entry.wrt_layout):
        tv = tangents_by_name[name]
        if picks is None:
            seeds.append(_seed(entry.wrt[len(seeds)], tv, f"the tangent of {name!r}"))
            continue
        _, tree = pytree.flatten(arguments[name], objects=True)
        try:
            leaves = tree.leaves_of(tv, "tangent")
        except ValueError as exc:
            raise InputError(f"the tangent of {name!r}: {exc} (it must have the structure of the primal)") from None
        for k, _ in picks:
            seeds.append(_seed(entry.wrt[len(seeds)], leaves[k], f"the tangent of {name!r} (leaf {k})"))
    return seeds


def _run(entry, args, extra):
    """``(value, tangents)`` from the compiled tangent program."""
    value, touts = entry.func(*(entry.call_args(args) + list(extra)))
    return value, touts


def _tangent_out(entry, value, tangent):
    """The result's tangent as the caller gets it: the result's structure, shape and type."""
    layout = entry.layout
    if entry.result.ndim == 0 and np.ndim(tangent):
        tangent = tangent[0]        # native code hands a scalar's tangent over as an array of one
    if layout is not None and layout.packed:
        flat = np.array(tangent, dtype=layout.dtype)
        flat[:layout.header] = np.asarray(value)[:layout.header]      # sizes known at run time
        return layout.unpack(flat)
    if entry.result.ndim == 0:
        tangent = entry.result.dtype.type(tangent)
    return tangent if layout is None else layout.unpack(tangent)


def _tangent_program(fn, primals, wrt, backend):
    """``(transform, wrt names, bound arguments, compiled entry)`` of ``fn``'s tangent program for
    ``primals`` (default ``wrt``: every argument that is or holds a float)."""
    if wrt is None:
        wrt = _default_wrt(_transform(fn, (), backend, "jvp"), primals)
    elif not isinstance(wrt, (tuple, list)):
        wrt = (wrt,)
    t = _transform(fn, tuple(wrt), backend, "jvp")
    names, _ = t.wrt_names(primals)
    arguments = t.bind(primals)
    return t, names, arguments, t.compiled(primals, arguments)


def jvp(fn, primals, tangents, wrt=None, backend=None):
    """Evaluate ``fn(*primals)`` and its directional derivative, the Jacobian-vector product.

    Args:
      fn: a Python function using NumPy (loops, ``while``, branches, in-place updates, views).
      primals: a tuple of the arguments.
      tangents: a tuple like ``primals``: the direction for each differentiated argument (an
        array or number of its shape and dtype, or a pytree of them for a pytree argument);
        entries of arguments not differentiated are ignored (``None`` is fine).
      wrt: names or positions of the arguments to differentiate (default: every argument that
        is, or holds, a float array or a float).
      backend: ``"native"`` (Numba; the default when installed) or ``"numpy"``.

    Returns:
      ``(out, tangent_out)``: ``fn(*primals)`` and ``J @ tangents``, of the result's structure.

    Example:
      >>> def f(x):
      ...     return np.sin(x) * x
      >>> out, t = flowgrad.jvp(f, (np.ones(3),), (np.ones(3),))     # doctest: +SKIP
    """
    primals, tangents = tuple(primals), tuple(tangents)
    if len(tangents) != len(primals):
        raise InputError(f"jvp takes one tangent per primal: got {len(primals)} primals and {len(tangents)} "
                         "tangents")
    t, names, arguments, entry = _tangent_program(fn, primals, wrt, backend)
    by_name = dict(zip(t.params, tangents))
    value, touts = _run(entry, primals, _seeds(entry, names, by_name, arguments))
    return _unpack_result(entry, value), _tangent_out(entry, value, touts[0])


def linearize(fn, *primals, wrt=None, backend=None):
    """Evaluate ``fn(*primals)`` and return its linearisation there: a function giving the
    Jacobian-vector product for any tangents, by the compiled tangent program (JAX's ``linearize``).

    Args:
      fn: a Python function using NumPy (loops, ``while``, branches, in-place updates, views).
      *primals: the arguments at which to linearise.
      wrt: names or positions of the arguments to differentiate (default: every argument that is,
        or holds, a float array or a float).
      backend: ``"native"`` (Numba; the default when installed) or ``"numpy"``.

    Returns:
      ``(out, f_jvp)``: ``fn(*primals)`` and ``f_jvp(*tangents)`` (one tangent per primal, as in
      ``jvp``; those of arguments not differentiated are ignored) giving ``J @ tangents``. Each
      call of ``f_jvp`` runs the tangent program compiled once, at the primals as they were when
      ``linearize`` was called.

    Example:
      >>> out, f_jvp = flowgrad.linearize(lambda x: np.sin(x) * x, np.ones(3))     # doctest: +SKIP
      >>> t = f_jvp(np.ones(3))                                                    # doctest: +SKIP
    """
    primals = tuple(np.array(p) if isinstance(p, np.ndarray) else p for p in primals)
    t, names, arguments, entry = _tangent_program(fn, primals, wrt, backend)
    zeros = {n: np.zeros_like(arguments[n]) if isinstance(arguments[n], np.ndarray) else 0.0 for n in names}
    value, _ = _run(entry, primals, _seeds(entry, names, zeros, arguments))
    out = _unpack_result(entry, value)

    def f_jvp(*tangents):
        if len(tangents) != len(primals):
            raise InputError(f"the linearisation of {t.__name__} takes one tangent per primal: got {len(primals)} "
                             f"primals and {len(tangents)} tangents")
        by_name = dict(zip(t.params, tangents))
        value, touts = _run(entry, primals, _seeds(entry, names, by_name, arguments))
        return _tangent_out(entry, value, touts[0])

    return out, f_jvp


def _basis(shape, dtype):
    """The unit directions of an array (or scalar) of ``shape``, one at a time."""
    n = int(np.prod(shape, dtype=np.int64))
    for k in range(n):
        e = np.zeros(n, dtype=dtype)
        e[k] = 1.0
        yield e.reshape(shape) if shape else e[0].item()


def _real_wrt(t, names, arguments, what):
    for n in names:
        v = arguments[n]
        if not (isinstance(v, (float, np.floating)) or isinstance(v, np.ndarray) and v.dtype.kind == "f"):
            raise InputError(f"{what} differentiates real float arrays and floats; argument {n!r} is a "
                             f"{type(v).__name__}{'' if not isinstance(v, np.ndarray) else ' of ' + str(v.dtype)}")


class _Jacobian:
    """What ``jacfwd`` and ``jacrev`` share: the transform of ``fn`` in ``mode`` and, per call, the
    differentiated arguments and the compiled program."""
    mode = None

    def __init__(self, fn, wrt=0, backend=None):
        self.fn, self.wrt, self.backend = fn, wrt, backend
        self.t = _Transform(fn, wrt, backend or DEFAULT_BACKEND, self.mode)
        self.__name__ = getattr(fn, "__name__", "fn")

    def _prepare(self, args):
        """``(names, single, arguments, entry)`` for a call with ``args``."""
        t = self.t
        names, single = t.wrt_names(args)
        arguments = t.bind(args)
        _real_wrt(t, names, arguments, type(self).__name__)
        return names, single, arguments, t.compiled(args, arguments)


class jacfwd(_Jacobian):
    """Make a function computing the Jacobian of ``fn`` by forward mode, one column per input
    direction.

    Args:
      fn: a Python function using NumPy, returning an array or a scalar.
      wrt: argument name or position, or a tuple of them (default 0); real float arrays or floats.
      backend: ``"native"`` (the default when Numba is installed) or ``"numpy"``.

    Returns:
      ``jac(*args)``: the Jacobian of shape ``out.shape + x.shape`` (JAX's layout), or a tuple of
      them for a tuple ``wrt``. One compiled program carries all input directions at once (the
      primal statements run once; ``autodiff.batch``); a very large Jacobian is taken in a few
      calls of it, each with as many directions as fit ``DIRECTIONS_BYTES``.

    Example:
      >>> J = flowgrad.jacfwd(lambda x: np.cumsum(x * x))(np.ones(3))     # doctest: +SKIP
    """

    mode = "jvp_dirs"

    def __call__(self, *args):
        names, single, arguments, entry = self._prepare(args)
        if entry.layout is not None:
            raise InputError(f"jacfwd of {self.__name__} requires an array or scalar result, but it returns a "
                             f"{entry.layout.tree.kind}")
        shapes = [np.shape(arguments[n]) for n in names]
        value, rows = _all_directions(entry, args, [], shapes)
        rshape, out, k = np.shape(value), [], 0
        for shape in shapes:
            n = _size(shape)
            block = rows[k:k + n]
            k += n
            out.append(np.moveaxis(block, 0, -1).reshape(rshape + shape))
        return out[0] if single else tuple(out)


# the most bytes of one batched tangent value (complex: 16 per element): more directions are
# taken in several calls
DIRECTIONS_BYTES = 1 << 27


def _size(shape):
    return int(np.prod(shape, dtype=np.int64))


def _all_directions(entry, args, extra, shapes):
    """``(value, tangents)``: the batched tangent program run on every unit direction of the
    differentiated arguments (of ``shapes``, in order), the tangents stacked on a first axis."""
    sizes = [_size(s) for s in shapes]
    total = sum(sizes)
    widest = max([1] + sizes + [_widest(entry, args)])
    per_call = max(1, min(total, DIRECTIONS_BYTES // (16 * widest)))
    value, parts = None, []
    for lo in range(0, max(total, 1), per_call):
        m = min(per_call, total - lo) if total else 0
        seeds, start = [], 0
        for shape, n, w in zip(shapes, sizes, entry.wrt):
            seed = np.zeros((m, n), dtype=w.dtype)
            for j in range(max(lo, start), min(lo + m, start + n)):
                seed[j - lo, j - start] = 1.0
            seeds.append(seed.reshape((m,) + shape))
            start += n
        value, touts = _run(entry, args, list(extra) + seeds + [m])
        parts.append(np.asarray(touts[0]))
    value = _unpack_result(entry, value)
    rows = np.concatenate(parts) if parts else np.zeros((0,) + np.shape(value))
    return value, rows.reshape((total,) + np.shape(value))


def _widest(entry, args):
    """The most elements of one direction of a batched tangent value of ``entry``'s program, where
    the arguments give its size (a size only the program body knows is left out)."""
    from .checkpoint.plan import _Unknown, evaluate
    shapes = getattr(entry, "direction_shapes", None)
    if shapes is None:
        # the batched containers and the values statements compute on the way (a fused outer
        # product), each without its direction axis: found once per compiled program
        prog = entry.tangent_prog
        n_dirs = prog.params[-1]
        shapes = [c.shape for c in prog.containers.values()]
        for st in walk(prog.body):
            shapes += [e.shape for e in ([st.expr] if isinstance(st, Assign) else
                                         list(st.inputs) if isinstance(st, Call) else [])]
        shapes = entry.direction_shapes = [
            shape[1:] for shape in shapes if shape and any(r.ref.container is n_dirs for r in iter_reads(shape[0]))]
    env = entry.arg_env(args)
    widest = 1
    for shape in shapes:
        try:
            widest = max(widest, int(np.prod([evaluate(d, env) for d in shape], dtype=np.int64)))
        except _Unknown:
            continue
    return widest


class jacrev(_Jacobian):
    """Make a function computing the Jacobian of ``fn`` by reverse mode, one row per output element
    (a pullback of each unit cotangent); ``jacfwd``'s result, cheaper where outputs are fewer than
    inputs.

    Args:
      fn: a Python function using NumPy, returning a float array or a float.
      wrt: argument name or position, or a tuple of them (default 0); real float arrays or floats.
      backend: ``"native"`` (the default when Numba is installed) or ``"numpy"``.

    Returns:
      ``jac(*args)``: the Jacobian of shape ``out.shape + x.shape`` (JAX's layout), or a tuple of
      them for a tuple ``wrt``. The gradient program is compiled once and run once per output
      element.

    Example:
      >>> J = flowgrad.jacrev(lambda x: np.cumsum(x * x))(np.ones(3))     # doctest: +SKIP
    """

    mode = "reverse"

    def __call__(self, *args):
        names, single, arguments, entry = self._prepare(args)
        if entry.layout is not None:
            raise InputError(f"jacrev of {self.__name__} requires an array or scalar result, but it returns a "
                             f"{entry.layout.tree.kind}")
        if entry.result.dtype.kind != "f":
            raise InputError(f"jacrev of {self.__name__} requires a real float result, not {entry.result.dtype}")
        value, pull = _run_vjp(entry, args)
        rows = []
        for e in _basis(np.shape(value), np.float64):
            if rows:                  # a pullback runs once: the forward sweep again for the next row
                _, pull = _run_vjp(entry, args)
            grads = _format_grads(entry, pull(e), names, False, arguments)
            rows.append([np.asarray(g, dtype=np.float64) for g in grads])
        rshape = np.shape(value)
        out = []
        for k, name in enumerate(names):
            xshape = np.shape(arguments[name])
            jac = np.stack([r[k] for r in rows]) if rows else np.zeros((0,) + xshape)
            out.append(jac.reshape(rshape + xshape))
        return out[0] if single else tuple(out)


def hvp(fn, primals, tangents, wrt=0, backend=None):
    """The Hessian-vector product ``H v`` of a scalar-valued ``fn``, by forward over reverse mode:
    the tangent program of its gradient program, so through ``while`` loops and in-place updates too.

    Args:
      fn: a Python function using NumPy, returning a float scalar.
      primals: a tuple of the arguments.
      tangents: a tuple like ``primals``; the entry of the ``wrt`` argument is ``v`` (the others
        are ignored).
      wrt: the argument name or position differentiated (default 0): a float array or a float.
      backend: ``"native"`` (the default when Numba is installed) or ``"numpy"``.

    Returns:
      ``H v``, shaped as the ``wrt`` argument: the derivative of ``grad(fn)`` in direction ``v``.

    Example:
      >>> hv = flowgrad.hvp(lambda x: np.sum(x ** 4), (x,), (v,))       # doctest: +SKIP
    """
    primals, tangents = tuple(primals), tuple(tangents)
    if len(tangents) != len(primals):
        raise InputError(f"hvp takes one tangent per primal: got {len(primals)} primals and {len(tangents)} "
                         "tangents")
    if isinstance(wrt, (tuple, list)):
        raise InputError("hvp differentiates one argument: pass wrt as one name or position")
    t = _transform(fn, wrt, backend, "hvp")
    return _hvp_run(t, primals, dict(zip(t.params, tangents)))


def _hvp_run(t, args, by_name):
    names, _ = t.wrt_names(args)
    arguments = t.bind(args)
    _real_wrt(t, names, arguments, "hvp")
    entry = t.compiled(args, arguments)
    _scalar_result(entry, t.__name__)
    seeds = _seeds(entry, names, by_name, arguments)
    _, touts = _run(entry, args, [1.0] + seeds)
    x = arguments[names[0]]
    hv = touts[0]
    if isinstance(x, np.ndarray):
        return np.asarray(hv, dtype=x.dtype).reshape(x.shape)
    return float(np.asarray(hv).reshape(-1)[0])


class hessian:
    """Make a function computing the Hessian of a scalar-valued ``fn`` by forward over reverse
    mode (a Hessian-vector product in every input direction); through ``while`` loops, in-place
    updates and data-dependent branches, which JAX's ``hessian`` cannot take through a ``while``.

    Args:
      fn: a Python function using NumPy, returning a float scalar.
      wrt: the argument name or position (default 0): a float array or a float.
      backend: ``"native"`` (the default when Numba is installed) or ``"numpy"``.

    Returns:
      ``h(*args)``: the Hessian, of shape ``x.shape + x.shape``. One compiled program carries all
      input directions at once: the function and its gradient run once, their tangents in every
      direction alongside (``autodiff.batch``).

    Example:
      >>> H = flowgrad.hessian(lambda x: np.sum(np.sin(x) * x))(np.ones(3))    # doctest: +SKIP
    """

    def __init__(self, fn, wrt=0, backend=None):
        if isinstance(wrt, (tuple, list)):
            raise InputError("hessian differentiates one argument: pass wrt as one name or position")
        self.t = _Transform(fn, wrt, backend or DEFAULT_BACKEND, "hvp_dirs")
        self.__name__ = getattr(fn, "__name__", "fn")

    def __call__(self, *args):
        t = self.t
        names, _ = t.wrt_names(args)
        arguments = t.bind(args)
        _real_wrt(t, names, arguments, "hessian")
        entry = t.compiled(args, arguments)
        _scalar_result(entry, t.__name__)
        shape = np.shape(arguments[names[0]])
        _, rows = _all_directions(entry, args, [1.0], [shape])
        return np.asarray(rows, dtype=np.float64).reshape(shape + shape)


# called inside captured code, jvp and hvp lower there (``api_nested``); the others are refused
jvp._flowgrad_inline = api_nested.inline_jvp
hvp._flowgrad_inline = api_nested.inline_hvp
linearize._flowgrad_transform = _Jacobian._flowgrad_transform = hessian._flowgrad_transform = True

__all__ = ["jvp", "linearize", "jacfwd", "jacrev", "hvp", "hessian"]
