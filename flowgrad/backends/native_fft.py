"""FFTs for the native backend's generated code (``_rt.fft.transform``).

Numba has no FFT. The transforms run NumPy's pocketfft through one object-mode call each (about
2 us of overhead, as ``native_runtime.vector_math``): its mixed-radix and Bluestein code is exact
and fast for every length, where a compiled radix-2 loop would serve powers of two only and be
slower than pocketfft's SIMD kernels.
"""
from __future__ import annotations

import numba

from . import fft_runtime


@numba.njit(cache=True)
def transform(code, x, out, axis, norm, n):
    """``out[...] = `` transform ``fft_runtime.TRANSFORMS[code]`` of ``x`` along ``axis`` (``norm``:
    a position in ``fft_runtime.NORMS``; ``n``: the real length, for irfft and the adjoints)."""
    with numba.objmode():
        fft_runtime.transform(code, x, out, axis, norm, n)
