"""Numba-compiled helpers called by the native backend's generated code (imported there as ``_rt``)."""
from __future__ import annotations

import numba
import numpy as np

_jit = numba.njit(cache=True, nogil=True)


@_jit
def grow(buf, need):
    """A larger tape buffer holding ``buf``'s contents (capacity at least doubles)."""
    cap = max(need, 2 * buf.shape[0])
    out = np.empty(cap, dtype=buf.dtype)
    out[:buf.shape[0]] = buf
    return out


@_jit
def trip_count(start, stop, step):
    """len(range(start, stop, step))."""
    if step > 0:
        return max(0, (stop - start + step - 1) // step)
    return max(0, (start - stop - step - 1) // (-step))


@_jit
def slice_end(start, size, step):
    """The stop of a slice with ``size`` elements from ``start`` by ``step`` (-1 past the front means none)."""
    stop = start + size * step
    if stop < 0:
        return -(1 << 62)
    return stop


@_jit
def slice_indices(start, stop, step, n):
    """(start, stop, step, length) of a Python slice over an axis of length ``n``."""
    st = 1 if step is None else step
    if st > 0:
        lo = 0 if start is None else (start + n if start < 0 else start)
        hi = n if stop is None else (stop + n if stop < 0 else stop)
        lo = min(max(lo, 0), n)
        hi = min(max(hi, 0), n)
        length = max(0, (hi - lo + st - 1) // st)
    else:
        lo = n - 1 if start is None else (start + n if start < 0 else start)
        hi = -1 if stop is None else (stop + n if stop < 0 else stop)
        lo = min(max(lo, -1), n - 1)
        hi = min(max(hi, -1), n - 1)
        length = max(0, (lo - hi - st - 1) // (-st))
    return lo, hi, st, length


@_jit
def wrap(i, n):
    """A NumPy index: negative counts from the end."""
    return i + n if i < 0 else i



@_jit
def ckpt_slots(kind, trips, param):
    """Snapshot slots of a loop checkpoint schedule (see flowgrad.checkpoint.schedules)."""
    if kind == 1:
        return max(1, (trips + max(1, param) - 1) // max(1, param))
    return 1 + max(0, param)
