"""FFTs for the native backend's generated code (``_rt.fft.transform``).

Numba has no FFT. The transforms run NumPy's pocketfft through one object-mode call each: its
mixed-radix and Bluestein code is exact for every length, where a compiled radix-2 loop would
serve powers of two only (STYLE.md, rule 11). The call costs about 2 us more than calling
``np.fft.fft`` from Python (measured 6.8 against 5.0 us for 8 points; 33 against 29 us for 4096;
on par at 65536).
"""
from __future__ import annotations

import numba

from . import fft_runtime


@numba.njit(cache=True)
def transform(code, x, out, axis, norm, n):
    """``out[...] = `` transform ``fft_runtime.TRANSFORMS[code]`` of ``x`` along ``axis`` (``norm``:
    a position in ``fft_runtime.NORMS``; ``n``: the real length, for irfft and the adjoints). Kept
    out of the generated functions, as ``native_runtime.vector_math`` is."""
    with numba.objmode():
        fft_runtime.transform(code, x, out, axis, norm, n)
