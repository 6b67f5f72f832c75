"""Oracles for functions of pytrees (STYLE.md, rule 6): ``oracle``'s checks, over the leaves.

* ``check_tree_grad`` -- ``flowgrad.value_and_grad`` with pytree arguments: the value against
  plain NumPy, each gradient a tree of its argument's structure (float leaves of its shape
  and dtype, integer leaves zero), finite differences in random directions over every float
  leaf of the ``wrt`` arguments, and the caller's arguments unchanged (deeply).
* ``check_tree_vjp`` -- ``flowgrad.vjp`` of a function returning a pytree: the result against
  plain NumPy (same structure), and for random cotangents of that structure the gradients
  against finite differences of ``<cotangent, f(x)>``.
* ``check_tree_forward`` -- ``flowgrad.jit`` against plain NumPy, structure included.
"""
import copy

import numpy as np

import flowgrad
from flowgrad import pytree
from oracle import _assert_close, _compare_directional, param_names, resolve_wrt


def _float_leaf(v):
    return isinstance(v, (float, np.floating)) or isinstance(v, np.ndarray) and v.dtype.kind == "f"


def assert_same_tree(before, after, label):
    """Deep equality of a pytree (arrays bit for bit) with the copy taken before a call."""
    lb, tb = pytree.flatten(before, objects=True)
    la, ta = pytree.flatten(after, objects=True)
    assert tb.key() == ta.key() or _static_equal(tb, ta), f"{label}: structure changed"
    for path, b, a in zip(tb.paths(label), lb, la):
        if isinstance(b, np.ndarray):
            assert isinstance(a, np.ndarray) and a.shape == b.shape and a.dtype == b.dtype, f"{path} changed"
            assert np.array_equal(a, b, equal_nan=True), f"{path}: contents were modified"
        else:
            assert type(a) is type(b) and (a == b or a != a and b != b), f"{path}: {b!r} became {a!r}"


def _static_equal(a, b):
    return a.kind == b.kind and a.keys == b.keys and len(a.kids) == len(b.kids) and \
        all(_static_equal(x, y) for x, y in zip(a.kids, b.kids)) and \
        (a.kind != "static" or a.static is b.static or a.static == b.static)


def assert_tree_close(got, expected, what, rtol=1e-12):
    le, te = pytree.flatten(expected, objects=True)
    lg, tg = pytree.flatten(got, objects=True)
    assert type(got) is type(expected), f"{what}: a {type(got).__name__}, NumPy gives a {type(expected).__name__}"
    assert tg.key() == te.key() or _static_equal(tg, te), f"{what}: structure differs from plain NumPy's"
    for path, g, e in zip(te.paths(what), lg, le):
        if isinstance(e, np.ndarray):
            _assert_close(g, e, path, rtol, rtol)
        else:
            assert np.ndim(g) == 0, f"{path}: expected a scalar, got {g!r}"
            np.testing.assert_allclose(float(g), float(e), rtol=rtol, atol=rtol, err_msg=path)


def check_tree_forward(fn, args, backend="numpy", rtol=1e-12):
    args = tuple(args)
    saved = copy.deepcopy(args)
    got = flowgrad.jit(fn, backend=backend)(*args)
    for name, b, a in zip(param_names(fn, len(args)), saved, args):
        assert_same_tree(b, a, f"argument {name}")
    assert_tree_close(got, fn(*copy.deepcopy(args)), f"{fn.__name__} (backend={backend}): jit forward", rtol)
    return got


def _flat_problem(fn, args, positions):
    """(leaves, rebuild): the float leaves of the arguments at ``positions``, and a function
    calling ``fn`` with them replaced."""
    leaves, where = [], []
    trees = {}
    for pos in positions:
        ls, tree = pytree.flatten(args[pos], objects=True)
        trees[pos] = (ls, tree)
        for k, v in enumerate(ls):
            if _float_leaf(v):
                leaves.append(v)
                where.append((pos, k))

    def call(*flat):
        a = list(copy.deepcopy(args))
        new = {pos: list(copy.deepcopy(ls)) for pos, (ls, _) in trees.items()}
        for (pos, k), v in zip(where, flat):
            new[pos][k] = v
        for pos, (_, tree) in trees.items():
            a[pos] = tree.unflatten(new[pos])
        return fn(*a)
    return leaves, where, trees, call


def _grad_leaves(fn, args, positions, grads, where, trees, names):
    """The gradient leaves, in ``where`` order, after checking each gradient's structure."""
    out = {}
    for pos, g in zip(positions, grads):
        ls, tree = trees[pos]
        gl, gt = pytree.flatten(g, objects=True)
        assert type(g) is type(args[pos]), f"gradient for {names[pos]!r}: a {type(g).__name__}, not a " \
                                           f"{type(args[pos]).__name__}"
        assert len(gl) == len(ls), f"gradient for {names[pos]!r}: {len(gl)} leaves, the argument has {len(ls)}"
        for k, (a, b) in enumerate(zip(ls, gl)):
            path = tree.paths(names[pos])[k]
            if isinstance(a, np.ndarray):
                assert isinstance(b, np.ndarray) and b.shape == a.shape and b.dtype == a.dtype, \
                    f"{path}: gradient {b!r} for an array {a.shape} {a.dtype}"
            else:
                assert np.ndim(b) == 0, f"{path}: gradient {b!r} for a scalar"
            if not _float_leaf(a):
                assert np.all(np.asarray(b) == 0), f"{path}: an integer leaf's gradient must be zero"
            out[(pos, k)] = b
    return [out[w] for w in where]


def check_tree_grad(fn, args, wrt=0, backend="numpy", n_dirs=3, eps=1e-6, rtol=1e-6, seed=0):
    """Check ``flowgrad.value_and_grad(fn, wrt=wrt)`` at pytree ``args``; returns (value, grads)."""
    args = tuple(args)
    names = param_names(fn, len(args))
    positions, single = resolve_wrt(fn, args, wrt)
    saved = copy.deepcopy(args)
    value, grads = flowgrad.value_and_grad(fn, wrt=wrt, backend=backend)(*args)
    for name, b, a in zip(names, saved, args):
        assert_same_tree(b, a, f"argument {name}")
    expected = fn(*copy.deepcopy(args))
    _assert_close(value, expected, f"{fn.__name__}: value")
    grads = (grads,) if single else grads
    leaves, where, trees, call = _flat_problem(fn, args, positions)
    flat_grads = _grad_leaves(fn, args, positions, grads, where, trees, names)
    paths = [trees[pos][1].paths(names[pos])[k] for pos, k in where]
    _compare_directional(call, leaves, range(len(leaves)), flat_grads, paths, eps, rtol, n_dirs,
                         np.random.default_rng(seed), what=f"{fn.__name__} (backend={backend}, wrt={wrt!r})")
    return value, (grads[0] if single else grads)


def _random_tree(rng, tree_value):
    ls, tree = pytree.flatten(tree_value)
    return tree.unflatten([rng.standard_normal(np.shape(v)) if np.ndim(v) else float(rng.standard_normal())
                           for v in ls])


def _inner_tree(a, b):
    la, _ = pytree.flatten(a)
    lb, _ = pytree.flatten(b)
    return sum(np.sum(np.asarray(x, dtype=np.float64) * np.asarray(y, dtype=np.float64)) for x, y in zip(la, lb))


def check_tree_vjp(fn, args, wrt, backend="numpy", n_dirs=2, eps=1e-6, rtol=1e-6, seed=0):
    """Check ``flowgrad.vjp(fn, *args, wrt=wrt)`` for a pytree-valued ``fn``; returns (out, pullback)."""
    args = tuple(args)
    names = param_names(fn, len(args))
    positions, _ = resolve_wrt(fn, args, wrt)
    saved = copy.deepcopy(args)
    out, pullback = flowgrad.vjp(fn, *args, wrt=wrt, backend=backend)
    expected = fn(*copy.deepcopy(args))
    assert_tree_close(out, expected, f"{fn.__name__}: vjp output")
    rng = np.random.default_rng(seed)
    leaves, where, trees, call = _flat_problem(fn, args, positions)
    paths = [trees[pos][1].paths(names[pos])[k] for pos, k in where]
    for k in range(n_dirs):
        cot = _random_tree(rng, expected)
        grads = pullback(cot)
        for name, b, a in zip(names, saved, args):
            assert_same_tree(b, a, f"argument {name} after pullback")
        assert isinstance(grads, tuple) and len(grads) == len(positions)
        flat_grads = _grad_leaves(fn, args, positions, grads, where, trees, names)

        def reduced(*flat, _cot=cot):
            return _inner_tree(_cot, call(*flat))
        _compare_directional(reduced, leaves, range(len(leaves)), flat_grads, paths, eps, rtol, 1, rng,
                             what=f"{fn.__name__} (backend={backend}, wrt={wrt!r}, cotangent {k})")
    return out, pullback
