"""Views with constant bounds as boxes: per axis of the container, ``(start, stop)``.

Passes that compare regions a program builds with bounds known when it is built (a zero fill and
the sums that cover it, ``np.roll``'s two pieces that make up a whole array) use these; views whose
bounds are known only at run time give None, and callers leave those alone.
"""
from __future__ import annotations

from .core import Index, Slice, const_value


def box(ref):
    """``[(start, stop), ...]`` per axis of the container of a view with constant bounds and unit
    steps (transposed or not: the elements are the same), or None."""
    out = []
    for it in ref.items:
        if isinstance(it, Index) and const_value(it.at) is not None:
            out.append((const_value(it.at), const_value(it.at) + 1))
        elif isinstance(it, Slice) and const_value(it.step) == 1 and \
                None not in (const_value(it.start), const_value(it.size)):
            out.append((const_value(it.start), const_value(it.start) + const_value(it.size)))
        else:
            return None
    return out


def whole_box(c):
    """The box of all of container ``c``, or None where its shape is known only at run time."""
    shape = [const_value(n) for n in c.shape]
    return None if None in shape else [(0, n) for n in shape]


def region(ref):
    """The box of a view, its whole container's for a reference without items."""
    return box(ref) if ref.items else whole_box(ref.container)


def inside(a, b):
    return all(b0 <= a0 and a1 <= b1 for (a0, a1), (b0, b1) in zip(a, b))


def disjoint(a, b):
    return any(a1 <= b0 or b1 <= a0 for (a0, a1), (b0, b1) in zip(a, b))


def volume(b):
    n = 1
    for a0, a1 in b:
        n *= max(a1 - a0, 0)
    return n


def tile(refs, c):
    """Whether the views ``refs`` of container ``c`` are pairwise disjoint and together make up all
    of it."""
    whole = whole_box(c)
    parts = [region(r) for r in refs]
    if whole is None or None in parts or not all(inside(p, whole) for p in parts):
        return False
    if any(not disjoint(p, q) for k, p in enumerate(parts) for q in parts[k + 1:]):
        return False
    return sum(volume(p) for p in parts) == volume(whole)
