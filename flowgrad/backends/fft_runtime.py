"""The FFTs' adjoints (``flowgrad.fft_ops``) for generated code (``_rt.fft.<name>``), with NumPy's
pocketfft; the native backend calls the same functions through object mode (``native_fft``).

In JAX's convention for complex adjoints, a transform that is linear over the complex numbers
(``fft``, ``ifft``) has its transpose as adjoint, which for the symmetric DFT matrix is the same
transform with the same ``norm``. ``rfft`` and ``irfft`` are linear over the reals only: their
adjoints are derived here (and match ``jax.vjp``).
"""
from __future__ import annotations

import numpy as np

_DUAL = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def rfft_vjp(g, n, axis, norm):
    """Adjoint of ``y = rfft(x)`` (``x`` real of length ``n`` along ``axis``, ``y`` its ``n // 2 + 1``
    non-negative frequencies): ``y = P F x`` with ``F`` the DFT and ``P`` keeping those rows, so
    ``x``'s adjoint is the real part of ``F P^T g``, the fft of ``g`` padded with zeros to ``n``."""
    g = np.asarray(g)
    shape = list(g.shape)
    shape[axis] = n
    full = np.zeros(shape, dtype=g.dtype)
    index = [slice(None)] * g.ndim
    index[axis] = slice(0, g.shape[axis])
    full[tuple(index)] = g
    return np.fft.fft(full, axis=axis, norm=norm).real


def irfft_vjp(g, n, axis, norm):
    """Adjoint of ``y = irfft(x, n)`` (``x`` complex of length ``n // 2 + 1`` along ``axis``, ``y``
    real of length ``n``): ``y_t = s sum_k c_k Re(x_k e^{2 pi i k t / n})`` with ``c_k`` 2 for the
    frequencies that stand for their mirror images too and 1 for ``k = 0`` (and ``n / 2`` for even
    ``n``), ``s`` the scale of ``norm``; so ``x_k``'s adjoint is ``c_k s sum_t g_t e^{2 pi i k t / n}``,
    ``c_k`` times the conjugate of ``rfft(g)`` scaled as the dual ``norm`` scales (JAX's rule)."""
    x = np.fft.rfft(np.asarray(g), n=n, axis=axis, norm=_DUAL[norm])
    mask = np.full(x.shape[axis], 2.0)
    mask[0] = 1.0
    if n % 2 == 0:
        mask[-1] = 1.0
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    return np.conj(x) * mask.reshape(shape)


# the transforms by number, for the native backend's object-mode call
def transform(code, x, out, axis, norm, n):
    """``out[...] = `` the transform numbered ``code`` of ``x`` (``TRANSFORMS``)."""
    norm = NORMS[norm]
    if code == 0:
        out[...] = np.fft.fft(x, axis=axis, norm=norm)
    elif code == 1:
        out[...] = np.fft.ifft(x, axis=axis, norm=norm)
    elif code == 2:
        out[...] = np.fft.rfft(x, axis=axis, norm=norm)
    elif code == 3:
        out[...] = np.fft.irfft(x, n=n, axis=axis, norm=norm)
    elif code == 4:
        out[...] = rfft_vjp(x, n, axis, norm)
    else:
        out[...] = irfft_vjp(x, n, axis, norm)


TRANSFORMS = ("fft", "ifft", "rfft", "irfft", "rfft_vjp", "irfft_vjp")
NORMS = ("backward", "ortho", "forward")
