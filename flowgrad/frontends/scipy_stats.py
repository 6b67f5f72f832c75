"""``scipy.stats`` densities as NumPy source (inlined by ``library``), checked against
``jax.scipy.stats`` in the tests."""
from __future__ import annotations

import math

import numpy as np
import scipy.special
import scipy.stats

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def norm_logpdf(x, loc=0.0, scale=1.0):
    z = (x - loc) / scale
    return -0.5 * (z * z) - np.log(scale) - _HALF_LOG_2PI


def norm_pdf(x, loc=0.0, scale=1.0):
    return np.exp(norm_logpdf(x, loc, scale))


def norm_cdf(x, loc=0.0, scale=1.0):
    return 0.5 * (1.0 + scipy.special.erf((x - loc) / (scale * math.sqrt(2.0))))


def norm_logcdf(x, loc=0.0, scale=1.0):
    return np.log(norm_cdf(x, loc, scale))


def t_logpdf(x, df, loc=0.0, scale=1.0):
    z = (x - loc) / scale
    return (scipy.special.gammaln(0.5 * (df + 1.0)) - scipy.special.gammaln(0.5 * df)
            - 0.5 * np.log(df * math.pi) - np.log(scale) - 0.5 * (df + 1.0) * np.log1p(z * z / df))


def t_pdf(x, df, loc=0.0, scale=1.0):
    return np.exp(t_logpdf(x, df, loc, scale))


def mvn_logpdf(x, mean=None, cov=1, allow_singular=False):
    x = np.asarray(x)
    d = x.shape[-1] if x.ndim else 1
    dev = x if mean is None else x - mean
    cov = np.asarray(cov)
    if cov.ndim == 2:
        L = np.linalg.cholesky(cov)
        z = np.linalg.solve(L, dev.T)
        maha = np.sum(z * z, axis=0)
        logdet = 2.0 * np.sum(np.log(np.diagonal(L)))
    elif cov.ndim == 1:                     # the diagonal of the covariance
        maha = np.sum(dev * dev / cov, axis=-1)
        logdet = np.sum(np.log(cov))
    else:                                   # a multiple of the identity
        maha = np.sum(dev * dev, axis=-1) / cov
        logdet = d * np.log(cov)
    return -0.5 * (maha + logdet) - d * _HALF_LOG_2PI


def mvn_pdf(x, mean=None, cov=1, allow_singular=False):
    return np.exp(mvn_logpdf(x, mean, cov, allow_singular))


_SOURCES = {
    "norm": {"logpdf": norm_logpdf, "pdf": norm_pdf, "cdf": norm_cdf, "logcdf": norm_logcdf},
    "t": {"logpdf": t_logpdf, "pdf": t_pdf},
    "multivariate_normal": {"logpdf": mvn_logpdf, "pdf": mvn_pdf},
}


class Frozen:
    """``scipy.stats.norm(loc, scale)`` in captured code: its methods inline with those arguments."""

    def __init__(self, name, args, kwargs, inlined):
        self.name, self.args, self.kwargs, self._inlined = name, list(args), dict(kwargs), inlined

    def handler(self, method):
        fn = _SOURCES[self.name].get(method)
        if fn is None:
            return None
        h = self._inlined(fn)
        return lambda fe, where, x, /, *rest: h(fe, where, x, *self.args, *rest, **self.kwargs)

    def logpdf(self, x):
        raise TypeError("only in captured code")

    pdf = cdf = logcdf = logpdf


def handlers(inlined):
    """``(table, Frozen)``: handlers for the distributions' methods and for freezing them."""
    table = {}
    for name, methods in _SOURCES.items():
        dist = getattr(scipy.stats, name)
        for method, fn in methods.items():
            table[getattr(dist, method)] = inlined(fn)
        table[dist] = (lambda n: lambda fe, where, /, *args, **kwargs: Frozen(n, args, kwargs, inlined))(name)
    return table, Frozen
