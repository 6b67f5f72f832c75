"""Library functions flowgrad implements as NumPy source, inlined like the user's helpers.

Each is an ordinary NumPy function here (so its derivative comes from the operations it uses,
with no rule of its own) that the Python frontend inlines where the user's code calls the
library function: ``np.append``, ``np.atleast_3d``, and, where the user's code imported
``scipy.stats``, the ``logpdf``/``pdf`` (and for ``norm``, ``logcdf``/``cdf``) of ``norm``, ``t``
and ``multivariate_normal`` (also frozen: ``norm(0.0, 2.0).logpdf(x)``), in ``scipy_stats.py``.
"""
from __future__ import annotations

import functools
import sys
import types

import numpy as np


# the modules holding such source (their functions call each other, inlined too)
SOURCE_MODULES = ("flowgrad.frontends.library", "flowgrad.frontends.scipy_stats")


def append(arr, values, axis=None):
    if axis is None:
        return np.concatenate((np.ravel(arr), np.ravel(values)))
    return np.concatenate((arr, values), axis=axis)


def atleast_3d(a):
    a = np.asarray(a)
    if a.ndim == 0:
        return np.reshape(a, (1, 1, 1))
    if a.ndim == 1:
        return a[np.newaxis, :, np.newaxis]
    if a.ndim == 2:
        return a[:, :, np.newaxis]
    return a


def _inlined(fn):
    def handler(fe, where, /, *args, **kwargs):      # positional-only: a keyword may be called loc
        return fe.inline(fn, list(args), kwargs, where)
    return handler


def _each(fn):
    """NumPy's ``atleast_*d(*arys)``: one array for one argument, else a list."""
    def handler(fe, loc, *arys):
        out = [fe.inline(fn, [a], {}, loc) for a in arys]
        return out[0] if len(out) == 1 else fe.pyobjs.add(fe, out)
    return handler


FUNCTIONS = {np.append: _inlined(append), np.atleast_3d: _each(atleast_3d)}


@functools.lru_cache(maxsize=1)
def _scipy_stats():
    from . import scipy_stats          # SciPy is optional: imported once the user's code has
    return scipy_stats.handlers(_inlined)


def handler_for(fn):
    """The inlining handler for library function ``fn``, or None."""
    try:
        h = FUNCTIONS.get(fn)
    except TypeError:
        return None
    if h is None and "scipy.stats" in sys.modules:
        table, frozen = _scipy_stats()
        try:
            h = table.get(fn)
        except TypeError:
            h = None
        if h is None and isinstance(fn, types.MethodType) and isinstance(fn.__self__, frozen):
            h = fn.__self__.handler(fn.__name__)
    return h
