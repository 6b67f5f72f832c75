"""What the code around a statement proves about its integer index expressions.

Inside ``for i in range(start, stop, step)`` the variable lies between ``start`` and
``stop - 1`` (``stop + 1`` and ``start`` for a negative step), and the body runs only if those
bounds are in order; inside ``if k == 0: ... else: ...`` the branch's condition holds, or its
negation; after ``lo = h * 64`` the scalar ``lo`` equals its definition until something writes
``lo`` or ``h``. ``Facts.nonneg`` uses what is known to prove an index expression
non-negative: the expression, minus one known non-negative form (or nothing), is put in linear
form over its scalar reads, each loop variable (innermost first) is replaced by a bound that
makes the form smallest, and what is left must be a constant of at least zero.

The frontend uses it to leave out NumPy's wrap-around and clipping of slice bounds and integer
indices where they cannot apply (``x[k - 1:]`` inside ``for k in range(1, n)``, ``x[k - 1]`` in
the ``else`` of ``if k == 0``), so that those views stay affine.
"""
from __future__ import annotations

from .core import Const, Expr, Op, Read, const_value, iter_reads, op, same_expr, substitute


def _key(e):
    """A structural key of an integer expression (equal keys: equal values)."""
    if isinstance(e, Const):
        return ("c", e.value)
    if isinstance(e, Read):
        return ("r", id(e.ref.container), tuple(
            tuple(_key(getattr(it, f)) for f in ("at", "start", "size", "step") if hasattr(it, f))
            for it in e.ref.items))
    if isinstance(e, Op):
        return (e.name,) + tuple(_key(a) for a in e.args)
    return ("?", id(e))


def linear(e):
    """``(terms, constant)``: ``e`` as ``constant + sum(coefficient * atom)`` with ``terms``
    mapping an atom's key to ``[coefficient, atom]``; atoms are whatever is not a sum, a
    difference, a negation or a product with a constant."""
    v = const_value(e)
    if v is not None:
        return {}, int(v)
    if isinstance(e, Op) and e.name in ("add", "subtract"):
        (ta, ca), (tb, cb) = linear(e.args[0]), linear(e.args[1])
        return _combine(ta, tb, 1 if e.name == "add" else -1), ca + (cb if e.name == "add" else -cb)
    if isinstance(e, Op) and e.name == "negative":
        t, c = linear(e.args[0])
        return _scale(t, -1), -c
    if isinstance(e, Op) and e.name == "multiply":
        for a, b in (e.args, e.args[::-1]):
            k = const_value(b)
            if k is not None:
                t, c = linear(a)
                return _scale(t, int(k)), c * int(k)
    return {_key(e): [1, e]}, 0


def _scale(terms, k):
    return {key: [c * k, a] for key, (c, a) in terms.items() if c * k}


def _combine(ta, tb, sign):
    out = {key: list(v) for key, v in ta.items()}
    for key, (c, a) in tb.items():
        cur = out.setdefault(key, [0, a])
        cur[0] += sign * c
        if not cur[0]:
            del out[key]
    return out


def _minus(a, b):
    return _combine(a[0], b[0], -1), a[1] - b[1]


def _is_var(atom, var):
    return isinstance(atom, Read) and atom.ref.container is var and not atom.ref.items


_NEGATE = {"less": "greater_equal", "less_equal": "greater", "greater": "less_equal",
           "greater_equal": "less", "equal": "not_equal", "not_equal": "equal"}


def _conditions(cond, holds):
    """The comparisons ``(name, a, b)`` that hold when ``cond`` is ``holds``: both sides of an
    ``and`` that holds, both negated sides of an ``or`` that does not."""
    if isinstance(cond, Op):
        if cond.name == "logical_not":
            return _conditions(cond.args[0], not holds)
        if cond.name == ("logical_and" if holds else "logical_or"):
            return _conditions(cond.args[0], holds) + _conditions(cond.args[1], holds)
        if cond.name in _NEGATE and all(a.shape == () and a.dtype.kind in "iu" for a in cond.args):
            return [(cond.name if holds else _NEGATE[cond.name], *cond.args)]
    return []


class Facts:
    """What the loops and branches around the point being captured tell about integer scalars.

    Each entry (``enter_loop``, ``enter_branch``; innermost last) carries facts ``form >= 0``
    on linear forms; a loop's also carries its variable and that variable's least and greatest
    value, a branch's the values a variable is known to differ from (``k != 0`` in the ``else``
    of ``if k == 0``). An entry's ``used`` tells whether a proof relied on it: the frontend
    then checks that the code under it does not write what the entry reads (``reads``)."""

    def __init__(self):
        self.entries = []
        self.defs = {}       # integer scalar container -> (linear form, containers read) of its value

    def define(self, c, e):
        """Scalar ``c`` was just assigned integer expression ``e`` (``lo = h * size``)."""
        reads = {r.ref.container for r in iter_reads(e)}
        if e.shape == () and e.dtype.kind in "iu" and c not in reads:
            self.defs[c] = (linear(e), reads, e)

    def written(self, containers):
        """Forget the definitions that a write to ``containers`` ends."""
        hit = set(containers)
        if hit and self.defs:
            self.defs = {c: d for c, d in self.defs.items() if c not in hit and not d[1] & hit}

    def open_scope(self, loop):
        """Definitions known inside a block about to be captured: those from before it in a
        branch, none in a loop body (a later iteration sees what the body writes after the
        read). Returns what ``close_scope`` needs."""
        saved = self.defs
        self.defs = {} if loop else dict(saved)
        return saved

    def close_scope(self, saved, written):
        """After the block: the definitions from before it that it did not end."""
        self.defs = saved
        self.written(written)

    def enter_loop(self, var, start, stop, step, hoist=True):
        """``for var in range(start, stop, step)``: returns the entry, for ``leave``. With
        ``hoist``, index checks may be moved ahead of the loop (``hoist_check``)."""
        step = const_value(step)
        entry = self._entry([start, stop], var=var)
        if step:
            lo, hi = (start, op("subtract", stop, 1)) if step > 0 else (op("add", stop, 1), start)
            entry["lo"], entry["hi"] = [linear(lo)], [linear(hi)]
            entry["facts"].append(_minus(linear(hi), linear(lo)))     # the body runs: lo <= hi
            if hoist:
                # the first and the last value the variable takes (a step of 3 may stop short of
                # stop - 1), and whether it takes any
                sign = 1 if step > 0 else -1
                last = op("add", start, op("multiply", op("floor_divide", op("subtract", op("subtract", stop, start),
                                                                               sign), step), step))
                entry["ends"] = (start, last)
                entry["runs"] = op("less", start, stop) if step > 0 else op("greater", start, stop)
        return self._push(entry)

    def enter_opaque(self):
        """Code that may not run on every pass of the loop around it (a while loop's body, what
        follows a ``continue``): no index check is moved out of it."""
        return self._push(self._entry([]))

    def hoist_check(self, i, dim):
        """Check index ``i`` into an axis of length ``dim`` once, ahead of the loop it is in,
        instead of on every pass: possible when ``i`` is linear in that loop's variable (so
        its extreme values are those at the loop's first and last value) and the loop runs
        this code on every pass. Returns whether the check was taken; the frontend emits the
        entry's ``checks`` before the loop, and starts capture again without them if the loop
        turns out to leave passes early or to change what they read."""
        if not self.entries or "ends" not in self.entries[-1]:
            return False
        loop = self.entries[-1]
        e = self._expand_expr(i)
        terms, _ = linear(e)
        if any(not _is_var(a, loop["var"]) and loop["var"] in {r.ref.container for r in iter_reads(a)}
               for _, a in terms.values()) or loop["var"] in {r.ref.container for r in iter_reads(dim)}:
            return False                           # not linear in the variable (x[idx[i]]), or the axis moves
        first, last = (substitute(e, loop["var"], end) for end in loop["ends"])
        checks = loop.setdefault("checks", [])
        if not any(same_expr(a, first) and same_expr(b, last) and same_expr(n, dim) for a, b, n in checks):
            checks.append((first, last, dim))
        loop["check_reads"] = loop.get("check_reads", set()) | {
            r.ref.container for x in (first, last, dim) for r in iter_reads(x)}
        return True

    def _expand_expr(self, e, depth=8):
        """``e`` with scalars that have a known definition replaced by it (as an expression)."""
        if depth == 0:
            return e
        if isinstance(e, Read) and not e.ref.items and e.ref.container in self.defs:
            return self._expand_expr(self.defs[e.ref.container][2], depth - 1)
        if isinstance(e, Op):
            args = [self._expand_expr(a, depth) for a in e.args]
            if all(a is b for a, b in zip(args, e.args)):
                return e
            return op(e.name, *args)
        return e

    def enter_branch(self, cond, holds):
        """The branch of ``if cond`` taken when ``cond`` is ``holds``."""
        entry = self._entry([cond])
        for name, a, b in _conditions(cond, holds):
            if name in ("greater", "greater_equal"):
                name, a, b = ("less" if name == "greater" else "less_equal"), b, a
            d = _minus(linear(b), linear(a))
            if name == "less":
                entry["facts"].append((d[0], d[1] - 1))
            elif name == "less_equal":
                entry["facts"].append(d)
            elif name == "equal":
                entry["facts"] += [d, _minus(linear(a), linear(b))]
            else:
                entry["differ"] += [(a, linear(b)), (b, linear(a))]
        return self._push(entry)

    def _entry(self, exprs, var=None):
        reads = {r.ref.container for e in exprs for r in iter_reads(e)}
        return {"var": var, "lo": [], "hi": [], "facts": [], "differ": [], "used": False,
                "reads": reads | ({var} if var is not None else set())}

    def _push(self, entry):
        self.entries.append(entry)
        return entry

    def leave(self, entry):
        self.entries.remove(entry)

    def nonneg(self, e: Expr) -> bool:
        """Whether integer expression ``e`` is at least zero wherever the code around lets it
        run: ``e`` minus one known non-negative form (or nothing) is bounded below by zero once
        each loop variable is replaced by one of its bounds."""
        v = const_value(e)
        if v is not None:
            return v >= 0
        form = self._expand(linear(e))
        for owner, fact in [(None, ({}, 0))] + [(en, f) for en in self.entries for f in en["facts"]]:
            used = self._bounded(_minus(form, fact), 8)
            if used is not None:
                for en in used + ([owner] if owner is not None else []):
                    en["used"] = True
                return True
        return False

    def _expand(self, form, depth=8):
        """``form`` with scalars that have a known definition replaced by it."""
        terms, c = form
        for _ in range(depth):
            hit = [k for k, (_, a) in terms.items() if isinstance(a, Read) and not a.ref.items
                   and a.ref.container in self.defs]
            if not hit:
                break
            for k in hit:
                coef, a = terms.pop(k)
                t, k0 = self.defs[a.ref.container][0]
                terms, c = _combine(terms, _scale(t, coef), 1), c + coef * k0
        return terms, c

    def _bounded(self, form, depth):
        """The entries a proof of ``form >= 0`` used, or None."""
        terms, c = form
        if not terms:
            return [] if c >= 0 else None
        for key, (coef, a) in terms.items():
            # maximum(a, b) >= a and >= b; minimum(a, b) <= a and <= b: either bound will do
            if depth and isinstance(a, Op) and a.name == ("maximum" if coef > 0 else "minimum"):
                rest = ({k: v for k, v in terms.items() if k != key}, c)
                for arg in a.args:
                    found = self._bounded(_combine_form(rest, self._expand(linear(arg)), coef), depth - 1)
                    if found is not None:
                        return found
                return None
        loops = [i for i, en in enumerate(self.entries) if en["var"] is not None and en["lo"]]
        for i in reversed(loops):
            loop = self.entries[i]
            hit = [k for k, (_, a) in terms.items() if _is_var(a, loop["var"])]
            if not hit:
                continue
            if depth == 0:
                return None
            coef = terms[hit[0]][0]
            rest = ({k: v for k, v in terms.items() if k != hit[0]}, c)
            for bound, used in self._bounds(i, coef > 0):
                found = self._bounded(_combine_form(rest, bound, coef), depth - 1)
                if found is not None:
                    return found + used
            return None
        return None

    def _bounds(self, i, lower):
        """``(form, entries)``: bounds of loop ``i``'s variable from below (``lower``) or above:
        the loop's own and those of branch facts inside it, moved by one where a branch says the
        variable differs from that bound."""
        loop = self.entries[i]
        var = loop["var"]
        inner = self.entries[i + 1:]
        out = [(b, [loop]) for b in (loop["lo"] if lower else loop["hi"])]
        for en in inner:
            for terms, c in en["facts"]:
                hit = [k for k, (_, a) in terms.items() if _is_var(a, var)]
                if hit and terms[hit[0]][0] == (1 if lower else -1):
                    # var - e >= 0 (e = var - fact) or e - var >= 0 (e = fact + var)
                    rest = ({k: v for k, v in terms.items() if k != hit[0]}, c)
                    out.append((_scale_form(rest, -1) if lower else rest, [en]))
        moved = []
        for form, used in out:
            for en in inner:
                for a, other in en["differ"]:
                    if _is_var(a, var) and _minus(form, other) == ({}, 0):
                        form, used = (form[0], form[1] + (1 if lower else -1)), used + [en]
            moved.append((form, used))
        return moved


def _scale_form(form, k):
    return _scale(form[0], k), form[1] * k


def _combine_form(rest, bound, coef):
    """``rest + coef * bound``."""
    return _combine(rest[0], _scale(bound[0], coef), 1), rest[1] + coef * bound[1]
