"""Oracles for flowgrad tests: finite differences and plain NumPy (STYLE.md, rule 6).

* ``check_grad``    -- ``flowgrad.value_and_grad`` against central finite differences in
                       random directions, the value against plain NumPy, and the caller's
                       arguments left untouched.
* ``check_vjp``     -- ``flowgrad.vjp`` for array-valued functions: a random cotangent
                       reduces the output to the scalar ``<cot, f(x)>`` for the differences.
* ``check_forward`` -- ``flowgrad.jit`` against plain NumPy.

Every evaluation of the user function gets fresh deep copies of the arguments, since
the programs under test may mutate them.
"""

import copy
import inspect

import numpy as np

import flowgrad

# Rounding noise of a central difference is about ulp(|f|) / eps; allow this many ulps.
_ROUNDING_ULPS = 100.0
_VALUE_RTOL = 1e-12
_VALUE_ATOL = 1e-12


def _copies(args):
    return copy.deepcopy(tuple(args))


def param_names(fn, nargs):
    """Positional parameter names of `fn`, padded with ``argN`` for anything unnamed."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        params = []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = [p.name for p in params if p.kind in kinds]
    return names + [f"arg{i}" for i in range(len(names), nargs)]


def resolve_wrt(fn, args, wrt):
    """Return (positions, single) for a flowgrad-style `wrt` (name, int, or tuple of them)."""
    single = not isinstance(wrt, (tuple, list))
    items = (wrt,) if single else tuple(wrt)
    names = param_names(fn, len(args))
    positions = []
    for item in items:
        if isinstance(item, str):
            if item not in names:
                raise ValueError(f"oracle: {item!r} is not an argument of {fn.__name__}{names}")
            positions.append(names.index(item))
        else:
            positions.append(int(item) % len(args))
    return tuple(positions), single


def is_float_arg(value):
    """Arguments flowgrad differentiates by default: float arrays and float scalars."""
    if isinstance(value, np.ndarray):
        return np.issubdtype(value.dtype, np.floating)
    return isinstance(value, (float, np.floating))


def _describe(value):
    if isinstance(value, np.ndarray):
        return f"array(shape={value.shape}, dtype={value.dtype})"
    return f"{type(value).__name__}({value!r})"


def _assert_same(before, after, label):
    """Exact equality of an argument with the copy taken before a flowgrad call."""
    if isinstance(before, np.ndarray):
        assert isinstance(after, np.ndarray), f"{label}: was an array, now {_describe(after)}"
        assert after.shape == before.shape and after.dtype == before.dtype, (
            f"{label}: changed from {_describe(before)} to {_describe(after)}"
        )
        same = np.array_equal(after, before, equal_nan=np.issubdtype(before.dtype, np.inexact))
        assert same, f"{label}: contents were modified\nbefore={before!r}\nafter={after!r}"
    elif isinstance(before, (list, tuple)):
        assert len(after) == len(before), f"{label}: length changed"
        for i, (b, a) in enumerate(zip(before, after)):
            _assert_same(b, a, f"{label}[{i}]")
    else:
        assert after == before, f"{label}: changed from {before!r} to {after!r}"


def assert_args_unchanged(fn, args, saved, when):
    names = param_names(fn, len(args))
    for name, before, after in zip(names, saved, args):
        _assert_same(before, after, f"{fn.__name__}: caller's argument {name!r} after {when}")


def _assert_close(got, expected, what, rtol=_VALUE_RTOL, atol=_VALUE_ATOL):
    """`got` equals `expected` (a scalar, an array, or a tuple/list of them)."""
    if isinstance(expected, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(expected), (
            f"{what}: expected a sequence of {len(expected)}, got {got!r}"
        )
        for i, (g, e) in enumerate(zip(got, expected)):
            _assert_close(g, e, f"{what}[{i}]", rtol, atol)
        return
    if isinstance(expected, np.ndarray):
        assert isinstance(got, np.ndarray), f"{what}: expected {_describe(expected)}, got {_describe(got)}"
        assert got.shape == expected.shape, f"{what}: shape {got.shape} != NumPy's {expected.shape}"
        assert got.dtype == expected.dtype, f"{what}: dtype {got.dtype} != NumPy's {expected.dtype}"
    else:
        assert np.ndim(got) == 0, f"{what}: expected a scalar like {expected!r}, got {_describe(got)}"
    expected_arr = np.asarray(expected)
    got_arr = np.asarray(got)
    if expected_arr.dtype.kind in "fc" and expected_arr.size:
        scale = max(1.0, float(np.max(np.abs(expected_arr))))
        np.testing.assert_allclose(
            got_arr, expected_arr, rtol=rtol, atol=atol * scale,
            err_msg=f"{what}: flowgrad differs from plain NumPy",
        )
    else:
        np.testing.assert_array_equal(got_arr, expected_arr, err_msg=f"{what}: flowgrad differs from plain NumPy")


def _check_grad_shapes(fn, args, positions, grads, names):
    for pos, g in zip(positions, grads):
        arg = args[pos]
        label = f"{fn.__name__}: gradient for {names[pos]!r}"
        if isinstance(arg, np.ndarray):
            assert isinstance(g, np.ndarray), f"{label}: expected an array, got {_describe(g)}"
            assert g.shape == arg.shape, f"{label}: shape {g.shape} != argument shape {arg.shape}"
            assert g.dtype == arg.dtype, f"{label}: dtype {g.dtype} != argument dtype {arg.dtype}"
        else:
            assert np.ndim(g) == 0, f"{label}: expected a scalar for a scalar argument, got {_describe(g)}"
        assert np.all(np.isfinite(g)), f"{label}: not finite: {g!r}"


def _random_like(rng, value):
    if isinstance(value, np.ndarray):
        return rng.standard_normal(value.shape)
    return float(rng.standard_normal())


def _shifted(value, direction, step):
    if isinstance(value, np.ndarray):
        return (value + step * direction).astype(value.dtype, copy=False)
    return type(value)(value + step * direction)


def _central_difference(scalar_fn, args, positions, dirs, eps):
    """(fd, noise): central difference of scalar_fn along dirs and its rounding-noise bound."""
    plus, minus = list(_copies(args)), list(_copies(args))
    for pos, d in zip(positions, dirs):
        plus[pos] = _shifted(plus[pos], d, eps)
        minus[pos] = _shifted(minus[pos], d, -eps)
    f_plus, f_minus = float(scalar_fn(*plus)), float(scalar_fn(*minus))
    fd = (f_plus - f_minus) / (2.0 * eps)
    noise = _ROUNDING_ULPS * np.finfo(np.float64).eps * max(abs(f_plus), abs(f_minus)) / eps
    return fd, noise


def _inner(g, d):
    return float(np.sum(np.asarray(g, dtype=np.float64) * d))


def _compare_directional(scalar_fn, args, positions, grads, names, eps, rtol, n_dirs, rng, what):
    """Compare <grads, d> with finite differences along n_dirs random directions d."""
    for k in range(n_dirs):
        dirs = [_random_like(rng, args[pos]) for pos in positions]
        fd, noise = _central_difference(scalar_fn, args, positions, dirs, eps)
        gd = sum(_inner(g, d) for g, d in zip(grads, dirs))
        scale = float(np.sqrt(sum(np.sum(np.square(g)) for g in grads) * sum(np.sum(np.square(d)) for d in dirs)))
        denom = max(abs(fd), abs(gd), 1e-8 * scale)
        err = abs(fd - gd)
        if err <= rtol * denom + noise:
            continue
        # Localise: which argument's gradient disagrees along its part of the direction?
        lines = []
        for pos, g, d in zip(positions, grads, dirs):
            fd_i, noise_i = _central_difference(scalar_fn, args, (pos,), (d,), eps)
            gd_i = _inner(g, d)
            bad = abs(fd_i - gd_i) > rtol * max(abs(fd_i), abs(gd_i), 1e-8 * scale) + noise_i
            lines.append(
                f"  argument {names[pos]!r}: finite difference {fd_i!r} vs <grad, d> {gd_i!r}"
                + ("   <-- MISMATCH" if bad else "")
            )
        raise AssertionError(
            f"{what}: gradient check failed in random direction {k} of {n_dirs}: "
            f"finite difference {fd!r} vs <grad, d> {gd!r} "
            f"(|diff| {err:.3g} > tolerance {rtol * denom + noise:.3g}, eps={eps})\n" + "\n".join(lines)
        )


def check_grad(fn, args, wrt=0, backend="numpy", n_dirs=3, eps=1e-6, rtol=1e-6, seed=0, vg=None):
    """Check ``flowgrad.value_and_grad(fn, wrt=wrt)`` at `args`.

    Asserts: the value equals ``fn`` run by plain NumPy; the caller's arguments are not
    modified; each gradient has its argument's shape and dtype; and along `n_dirs` random
    directions (all `wrt` arguments perturbed together) the directional derivative
    ``<grad, d>`` matches a central finite difference with step `eps` to relative `rtol`.

    Args:
        fn: the user program; returns a float scalar.
        args: positional arguments (arrays, ints, floats).
        wrt: a name or position, or a tuple of them (flowgrad's convention).
        backend: flowgrad backend name.
        vg: an existing ``value_and_grad`` function to reuse (to test caching across calls).

    Returns:
        (value, grads) as returned by flowgrad, grads normalised to a tuple.
    """
    args = tuple(args)
    names = param_names(fn, len(args))
    positions, single = resolve_wrt(fn, args, wrt)
    for pos in positions:
        assert is_float_arg(args[pos]), f"oracle misuse: wrt argument {names[pos]!r} is not float"
    saved = _copies(args)
    if vg is None:
        vg = flowgrad.value_and_grad(fn, wrt=wrt, backend=backend)
    result = vg(*args)
    assert_args_unchanged(fn, args, saved, "value_and_grad")
    assert isinstance(result, tuple) and len(result) == 2, (
        f"value_and_grad must return (value, grads), got {result!r}"
    )
    value, grads = result
    if single:
        assert not isinstance(grads, tuple), f"wrt={wrt!r} is one argument: expected one gradient, got a tuple"
        grads = (grads,)
    else:
        assert isinstance(grads, tuple) and len(grads) == len(positions), (
            f"wrt={wrt!r}: expected a tuple of {len(positions)} gradients, got {grads!r}"
        )

    expected = fn(*_copies(args))
    assert np.ndim(expected) == 0, "oracle misuse: check_grad needs a scalar-valued function"
    _assert_close(value, expected, f"{fn.__name__}: value")
    _check_grad_shapes(fn, args, positions, grads, names)

    rng = np.random.default_rng(seed)
    _compare_directional(
        fn, args, positions, grads, names, eps, rtol, n_dirs, rng,
        what=f"{fn.__name__} (backend={backend}, wrt={wrt!r})",
    )
    return value, grads


def check_vjp(fn, args, wrt=None, backend="numpy", n_dirs=3, eps=1e-6, rtol=1e-6, seed=0):
    """Check ``flowgrad.vjp(fn, *args, wrt=wrt)`` for an array- (or scalar-) valued `fn`.

    Asserts the primal output equals plain NumPy, the caller's arguments are untouched,
    the pullback returns a tuple (one gradient per wrt entry), and for `n_dirs` random
    cotangents (reusing the same pullback) the gradient of ``<cot, fn(x)>`` matches finite
    differences in a random direction. ``wrt=None`` uses flowgrad's default: every float
    argument.

    Returns:
        (out, pullback).
    """
    args = tuple(args)
    names = param_names(fn, len(args))
    if wrt is None:
        positions = tuple(i for i, a in enumerate(args) if is_float_arg(a))
        kwargs = {}
    else:
        positions, _ = resolve_wrt(fn, args, wrt)
        kwargs = {"wrt": wrt}
    saved = _copies(args)
    out, pullback = flowgrad.vjp(fn, *args, backend=backend, **kwargs)
    assert_args_unchanged(fn, args, saved, "vjp")
    expected = fn(*_copies(args))
    _assert_close(out, expected, f"{fn.__name__}: vjp output")

    rng = np.random.default_rng(seed)
    for k in range(n_dirs):
        cot = rng.standard_normal(np.shape(expected))
        cot_saved = copy.deepcopy(cot)
        grads = pullback(cot)
        assert_args_unchanged(fn, args, saved, "pullback")
        _assert_same(cot_saved, cot, "cotangent after pullback")
        assert isinstance(grads, tuple) and len(grads) == len(positions), (
            f"pullback must return a tuple of {len(positions)} gradients "
            f"(for {[names[p] for p in positions]}), got {grads!r}"
        )
        _check_grad_shapes(fn, args, positions, grads, names)

        def reduced(*a, _cot=cot):
            return np.sum(_cot * fn(*a))

        _compare_directional(
            reduced, args, positions, grads, names, eps, rtol, 1, rng,
            what=f"{fn.__name__} (backend={backend}, wrt={wrt!r}, cotangent {k})",
        )
    return out, pullback


def check_forward(fn, args, backend="numpy", rtol=1e-12):
    """``flowgrad.jit(fn)`` returns what plain NumPy returns (values, shapes and dtypes)."""
    args = tuple(args)
    jitted = flowgrad.jit(fn, backend=backend)
    expected = fn(*_copies(args))
    got = jitted(*_copies(args))
    _assert_close(got, expected, f"{fn.__name__} (backend={backend}): jit forward", rtol=rtol, atol=rtol)
    return got
