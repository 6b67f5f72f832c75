"""flowgrad inside JAX: ``flowgrad.jax.function(fn)`` is a ``jax.custom_vjp`` function.

The forward pass and the vector-Jacobian product run on the host through
``jax.pure_callback``, so the function works under ``jax.jit``, ``jax.grad`` and ``jax.vjp``.
The backward callback runs flowgrad's reverse program (forward sweep included) on the saved
inputs: JAX keeps only arrays between the two passes. Importing this module imports JAX;
``import flowgrad`` alone does not.
"""
from __future__ import annotations

import functools

import jax
import numpy as np

from . import api
from .errors import InputError


def _host(a):
    """A callback argument as flowgrad expects it: 0-d arrays become Python numbers."""
    a = np.asarray(a)
    return a.item() if a.ndim == 0 else a


def function(fn, backend=None):
    """Wrap a flowgrad-differentiable NumPy function as a JAX function with a custom VJP.

    Args:
      fn: a Python function using NumPy (loops, in-place updates, views, branches) returning one
        array or float; its result shape must follow from the argument shapes.
      backend: the flowgrad backend (default: flowgrad's default).

    Returns:
      ``f(*args)`` on JAX arrays (and numbers), usable under ``jax.jit`` and ``jax.grad``.
      Gradients flow to every floating-point and complex argument; integer arguments get none.

    Example:
      >>> sim = flowgrad.jax.function(simulate)                         # doctest: +SKIP
      >>> jax.jit(jax.grad(lambda u: sim(u, 0.1, 50).sum()))(u0)        # doctest: +SKIP
    """
    forward = api.jit(fn, backend=backend)
    transforms = {}

    def result_struct(args):
        """The result's shape and dtype, from a capture at the arguments' shapes and dtypes."""
        probe = [np.zeros(np.shape(a), dtype=np.asarray(a).dtype if not hasattr(a, "aval") else a.dtype)
                 for a in args]
        entry = forward.compiled([_host(p) for p in probe])
        shape = tuple(getattr(d, "value", None) for d in entry.result.shape)
        if None in shape:
            raise InputError(f"flowgrad.jax.function: the result shape of {getattr(fn, '__name__', 'fn')} "
                             "depends on argument values; JAX needs it from the argument shapes")
        return jax.ShapeDtypeStruct(shape, entry.result.dtype)

    def differentiable(args):
        # complex arguments too: flowgrad's cotangents of complex values are JAX's (no conjugate)
        return tuple(k for k, a in enumerate(args) if np.dtype(a.dtype).kind in "fc")

    def host_forward(*args):
        return np.asarray(forward(*[_host(a) for a in args]))

    def host_vjp(wrt, ct, *args):
        host = [_host(a) for a in args]
        t = transforms.get(wrt)
        if t is None:
            t = transforms[wrt] = api._Transform(fn, wrt, backend or api.DEFAULT_BACKEND, "reverse")
        entry = t.compiled(host)
        _, pull = entry.func(*entry.call_args(host))
        ct = np.asarray(ct, dtype=entry.result.dtype)
        grads = pull(ct if ct.ndim else ct.item())
        return tuple(np.asarray(g, dtype=np.asarray(args[k]).dtype).reshape(np.shape(args[k]))
                     for g, k in zip(grads, wrt))

    @jax.custom_vjp
    def wrapped(*args):
        return jax.pure_callback(host_forward, result_struct(args), *args)

    def fwd(*args):
        return wrapped(*args), args

    def bwd(args, ct):
        wrt = differentiable(args)
        structs = tuple(jax.ShapeDtypeStruct(np.shape(args[k]), args[k].dtype) for k in wrt)
        grads = jax.pure_callback(functools.partial(host_vjp, wrt), structs, ct, *args) if wrt else ()
        out = [None] * len(args)
        for k, g in zip(wrt, grads):
            out[k] = g
        return tuple(out)

    wrapped.defvjp(fwd, bwd)

    @functools.wraps(fn)
    def call(*args):
        return wrapped(*[jax.numpy.asarray(a) for a in args])
    return call


__all__ = ["function"]
