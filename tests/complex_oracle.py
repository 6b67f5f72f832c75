"""Oracles for complex programs (STYLE.md, rule 6): plain NumPy for values, central differences
for gradients in JAX's convention, and ``jax.grad`` / ``jax.vjp`` where JAX is installed.

For a real loss ``L`` of ``z = x + i y`` the gradient is ``dL/dx - i dL/dy`` (what ``jax.grad``
returns); ``fd_grad`` builds it element by element, perturbing the real and the imaginary part of
each element separately. The vjp of a result ``w`` with cotangent ``c`` is the gradient of
``L = Re(sum(c * w))`` (JAX's pairing, no conjugate), which ``check_vjp`` differentiates.
"""

import copy

import numpy as np

import flowgrad

EPS = 1e-6


def _call(fn, args):
    return fn(*copy.deepcopy(tuple(args)))


def _with(args, pos, value):
    out = list(copy.deepcopy(tuple(args)))
    out[pos] = value
    return out


def _bump(value, flat, step):
    """``value`` with element ``flat`` (of the flattened array, or the scalar) moved by ``step``."""
    if isinstance(value, np.ndarray):
        out = value.copy()
        out.reshape(-1)[flat] += step
        return out
    return type(value)(value + step)


def fd_grad(loss, args, pos, eps=EPS):
    """``dL/dx - i dL/dy`` (``dL/dx`` for a real argument) of real ``loss`` by argument ``pos``."""
    value = args[pos]
    is_complex = np.iscomplexobj(value)
    size = np.size(value)
    out = np.zeros(size, dtype=np.complex128 if is_complex else np.float64)
    for k in range(size):
        for part, weight in ((1.0, 1.0), (1j, -1j)) if is_complex else ((1.0, 1.0),):
            hi = float(np.real(loss(*_with(args, pos, _bump(value, k, eps * part)))))
            lo = float(np.real(loss(*_with(args, pos, _bump(value, k, -eps * part)))))
            out[k] += weight * (hi - lo) / (2 * eps)
    return out.reshape(np.shape(value)) if isinstance(value, np.ndarray) else out[0]


def _close(got, want, what, rtol, atol):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * scale, err_msg=what)


def positions(fn, args, wrt):
    names = list(fn.__code__.co_varnames[:fn.__code__.co_argcount])
    wrt = wrt if isinstance(wrt, tuple) else (wrt,)
    return wrt, [names.index(w) if isinstance(w, str) else w for w in wrt]


def check_grad(fn, args, wrt, backend, rtol=1e-6, atol=1e-7):
    """``flowgrad.value_and_grad``: the value as plain NumPy's, each gradient of its argument's
    dtype and shape and equal to the central differences (``fd_grad``). Returns the gradients."""
    wrt, pos = positions(fn, args, wrt)
    saved = copy.deepcopy(tuple(args))
    value, grads = flowgrad.value_and_grad(fn, wrt=wrt, backend=backend)(*args)
    for before, after in zip(saved, args):
        if isinstance(before, np.ndarray):
            np.testing.assert_array_equal(after, before, err_msg="the caller's argument changed")
    _close(value, _call(fn, args), f"{fn.__name__}: value", 1e-10, 1e-12)
    for p, g in zip(pos, grads):
        a = args[p]
        if isinstance(a, np.ndarray):
            assert isinstance(g, np.ndarray) and g.dtype == a.dtype and g.shape == a.shape, \
                f"{fn.__name__}: gradient by argument {p} is {g!r}, for a {a.dtype} array of shape {a.shape}"
        else:
            assert isinstance(g, complex if isinstance(a, complex) else float), (type(g), type(a))
        _close(g, fd_grad(fn, args, p), f"{fn.__name__}: gradient by argument {p}", rtol, atol)
    return grads


def check_vjp(fn, args, wrt, cotangent, backend, rtol=1e-6, atol=1e-7):
    """``flowgrad.vjp`` with ``cotangent``: the gradients of ``Re(sum(cotangent * fn(*args)))``."""
    wrt, pos = positions(fn, args, wrt)
    out, pull = flowgrad.vjp(fn, *args, wrt=wrt, backend=backend)
    _close(out, _call(fn, args), f"{fn.__name__}: result", 1e-10, 1e-12)
    grads = pull(cotangent)

    def loss(*a):
        return np.real(np.sum(cotangent * fn(*a)))
    for p, g in zip(pos, grads):
        _close(g, fd_grad(loss, args, p), f"{fn.__name__}: vjp by argument {p}", rtol, atol)
    return grads


def check_jax_grad(fn, jax_fn, args, wrt, backend, rtol=1e-9):
    """flowgrad's gradient equals ``jax.grad`` of the JAX twin (x64)."""
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    wrt, pos = positions(fn, args, wrt)
    ours = flowgrad.grad(fn, wrt=wrt, backend=backend)(*args)
    theirs = jax.grad(jax_fn, argnums=tuple(pos))(*[jnp.asarray(a) if isinstance(a, np.ndarray) else a
                                                     for a in args])
    for p, g, j in zip(pos, ours, theirs):
        _close(g, np.asarray(j), f"{fn.__name__}: flowgrad and jax.grad by argument {p}", rtol, 1e-12)


def check_jax_vjp(fn, jax_fn, args, wrt, cotangent, backend, rtol=1e-9):
    """flowgrad's pullback of ``cotangent`` equals ``jax.vjp``'s (for the ``wrt`` arguments)."""
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    wrt, pos = positions(fn, args, wrt)
    _, pull = flowgrad.vjp(fn, *args, wrt=wrt, backend=backend)
    ours = pull(cotangent)
    jargs = [jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
    out, jpull = jax.vjp(jax_fn, *jargs)
    theirs = jpull(jnp.asarray(cotangent, dtype=out.dtype))
    for p, g in zip(pos, ours):
        _close(g, np.asarray(theirs[p]), f"{fn.__name__}: flowgrad and jax.vjp by argument {p}", rtol, 1e-12)
