"""NumPy indexing in the frontend: basic indexing composes views (Refs); integer-array and
boolean-mask indexing become gather/scatter Calls with NumPy's exact semantics."""
from __future__ import annotations

import numpy as np

from ..errors import FlowgradError, unsupported
from ..ir.core import (BOOL, I64, Assign, Call, Const, Expr, Index, NewAxis, Read, Ref, Slice,
                       broadcast_shapes, const_value, op, scalar)


def _is_int(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) or \
        isinstance(v, Expr) and v.shape == () and v.dtype.kind in "iu"


def _is_array_index(v):
    return isinstance(v, Expr) and v.shape != () or isinstance(v, np.ndarray) or \
        isinstance(v, (tuple, list)) and len(v) > 0 and not isinstance(v, str)


def _normalize(base_ndim, index, loc):
    if not isinstance(index, tuple):
        index = (index,)
    n_ell = sum(1 for i in index if i is Ellipsis)
    if n_ell > 1:
        raise FlowgradError(f"{loc}: an index can only have a single ellipsis")
    used = sum(1 for i in index if i is not None and i is not Ellipsis and not _is_bool_mask(i))
    used += sum(len(i.shape) for i in index if _is_bool_mask(i))
    if used > base_ndim:
        raise FlowgradError(f"{loc}: too many indices for an array of rank {base_ndim}")
    out = []
    for i in index:
        if i is Ellipsis:
            out += [slice(None)] * (base_ndim - used)
        else:
            out.append(i)
    if not n_ell:
        out += [slice(None)] * (base_ndim - used)
    return out


def _is_bool_mask(i):
    return isinstance(i, Expr) and i.shape != () and i.dtype == BOOL or \
        isinstance(i, np.ndarray) and i.dtype == np.bool_


def _norm_int(i, dim, loc, facts=None):
    """NumPy's integer index ``i`` (negative counts from the end) into an axis of length
    ``dim``: checked at run time unless its value, or the loops and branches around it
    (``facts``), prove it inside the axis."""
    d = const_value(dim)
    if not isinstance(i, Expr):
        i = int(i)
        if d is not None:
            if not -d <= i < d:
                raise FlowgradError(f"{loc}: index {i} is out of bounds for an axis of size {d}")
            return Const(i % d)
        i = Const(i)
    inside = _nonneg(dim - 1 - i, facts) and _nonneg(i + dim, facts)
    if inside or facts is not None and facts.hoist_check(i, dim):     # checked once, ahead of the loop
        return i if _nonneg(i, facts) else op("where", op("less", i, 0), i + dim, i)
    return op("checked_index", i, dim)


def _nonneg(e, facts):
    v = const_value(e)
    if v is not None:
        return v >= 0
    return facts is not None and facts.nonneg(e)


def _slice_bound(v, dim, lo, facts):
    """NumPy's value of slice bound ``v`` over an axis of length ``dim``: a negative bound
    counts from the end, and the result is clipped to ``lo .. dim + lo`` (``lo`` is 0 for a
    positive step, -1 for a negative one). Each correction is left out where the bound's
    constant value or the loops around it (``facts``) prove it cannot apply, so that views
    with bounds like ``i + 1`` stay affine."""
    if isinstance(v, Expr):
        e = v if _nonneg(v, facts) else op("where", op("less", v, 0), op("maximum", v + dim, lo), v)
    else:
        v = int(v)
        if v >= 0:
            e = Const(v)
        else:
            e = dim + v
            return e if _nonneg(e - lo, facts) else op("maximum", e, lo)
    return e if _nonneg(dim + lo - v, facts) else op("minimum", e, dim + lo)


def norm_slice(s: slice, dim, loc, facts=None):
    """(start, size, step) of a Python slice over an axis of length ``dim``; ``facts``
    (``ranges.Facts``) tells which bounds known only at run time need NumPy's wrap-around
    and clipping."""
    step = 1 if s.step is None else s.step
    if isinstance(step, Expr):
        raise unsupported(loc, "slice with a run-time step", "use a constant step")
    step = int(step)
    if step == 0:
        raise FlowgradError(f"{loc}: slice step cannot be zero")
    d = const_value(dim)
    vals = (s.start, s.stop)
    if d is not None and all(v is None or isinstance(v, (int, np.integer)) for v in vals):
        start, stop, step = slice(s.start, s.stop, step).indices(d)
        return Const(start), Const(len(range(start, stop, step))), Const(step)
    lo = 0 if step > 0 else -1
    # an omitted start is the first element (the last for a negative step); an omitted stop
    # runs through the end (through index 0)
    start = Const(0) if s.start is None and step > 0 else dim - 1 if s.start is None else \
        _slice_bound(s.start, dim, lo, facts)
    stop = dim if s.stop is None and step > 0 else Const(-1) if s.stop is None else \
        _slice_bound(s.stop, dim, lo, facts)
    size = op("maximum", 0, stop - start if step > 0 else start - stop)
    if abs(step) != 1:
        size = op("floor_divide", size + (abs(step) - 1), abs(step))
    if step < 0 and not _nonneg(start, facts):
        start = op("maximum", start, 0)      # -1: an empty view, which must not name the last element
    return start, size, Const(step)


def view(ref: Ref, index, loc, facts=None) -> Ref:
    """Compose basic indexing (ints, slices, None) onto a view (``facts``: see ``norm_slice``)."""
    n_view = len(ref.shape)
    index = _normalize(n_view, index, loc)
    if ref.perm is not None:
        if any(i is None for i in index):
            raise unsupported(loc, "np.newaxis on a transposed view", "copy the transposed array first")
        per_axis = [None] * n_view
        for k, p in enumerate(ref.perm):
            per_axis[p] = index[k]
        index = per_axis
    out, survivors = [], []     # survivors: the old view axis of each kept axis (None: new axis)
    items = iter(ref.items)

    def next_view_item():
        for it in items:
            if not isinstance(it, Index):
                return it
            out.append(it)
        raise FlowgradError(f"{loc}: too many indices")

    axis = 0
    for idx in index:
        if idx is None:
            out.append(NewAxis())
            survivors.append(None)
            continue
        it, k = next_view_item(), axis
        axis += 1
        if isinstance(it, NewAxis):
            if isinstance(idx, slice):
                out.append(it)
                survivors.append(k)
            continue        # an integer index on a length-1 new axis removes it
        if _is_int(idx):
            out.append(Index(it.start + _norm_int(idx, it.size, loc, facts) * it.step))
        elif isinstance(idx, slice):
            start, size, step = norm_slice(idx, it.size, loc, facts)
            out.append(Slice(it.start + start * it.step, size, it.step * step))
            survivors.append(k)
        else:
            kind = idx.dtype.name if isinstance(idx, Expr) else type(idx).__name__
            raise unsupported(loc, f"index of type {kind}", "use ints (int(...) of a float), slices, arrays or masks")
    out += list(items)
    perm = None
    if ref.perm is not None:
        order = [p for p in ref.perm if p in survivors]
        perm = tuple(survivors.index(p) for p in order)
        if perm == tuple(range(len(perm))):
            perm = None
    return Ref(ref.container, out, perm)


def _facts(fe):
    """The loop facts of a frontend that tracks them (the Python one), else None."""
    return getattr(fe, "facts", None)


def _as_view_source(fe, base, loc):
    if isinstance(base, Read):
        return base
    if isinstance(base, Expr):
        return fe.materialize(base, "t", loc)
    if isinstance(base, np.ndarray):
        return fe.const_array(base)
    raise unsupported(loc, f"indexing a {type(base).__name__}", "index arrays")


def getitem(fe, base, index, loc):
    """``base[index]`` with NumPy semantics."""
    base = _as_view_source(fe, base, loc)
    if base.shape == ():
        raise FlowgradError(f"{loc}: cannot index a scalar")
    idx = index if isinstance(index, tuple) else (index,)
    if any(_is_bool_mask(i) for i in idx):
        return _mask_gather(fe, base, idx, loc)
    if any(_is_array_index(i) for i in idx):
        return _gather(fe, base, idx, loc)
    return Read(view(base.ref, index, loc, _facts(fe)))


def _whole_source(fe, base, loc):
    """A Read covering a whole container (views are copied) for gather-style Calls."""
    if base.ref.is_whole():
        return base
    return fe.materialize(base, "t", loc)


def _index_arrays(fe, idx, loc):
    arrays = []
    for i in idx:
        if _is_array_index(i):
            e = fe.to_expr(np.asarray(i) if isinstance(i, (tuple, list)) else i, loc)
            if e.dtype.kind not in "iu":
                raise FlowgradError(f"{loc}: arrays used as indices must be integers or booleans")
            if not isinstance(e, Read) or not e.ref.is_whole():
                e = fe.materialize(e, "idx", loc)
            arrays.append(e)
        else:
            arrays.append(None)
    return arrays


def _gather_spec(fe, src, idx, loc):
    """The Call spec for an advanced index and the shape of what it selects."""
    idx = _normalize(len(src.shape), idx, loc)
    if any(i is None for i in idx):
        raise unsupported(loc, "np.newaxis mixed with integer-array indexing", "index in two steps")
    arrays = _index_arrays(fe, idx, loc)
    spec, inputs, adv_shapes, adv_pos, basic_dims = [], [], [], [], []
    for k, (i, arr) in enumerate(zip(idx, arrays)):
        dim = src.shape[k]
        if arr is not None:
            spec.append(("array",))
            inputs.append(arr)
            adv_shapes.append(arr.shape)
            adv_pos.append(k)
        elif _is_int(i):
            at = _norm_int(i, dim, loc, _facts(fe))
            spec.append(("int", at))
            adv_shapes.append(())
            adv_pos.append(k)
        else:
            start, size, step = norm_slice(i, dim, loc, _facts(fe))
            py = (fe.to_expr(i.start) if i.start is not None else None,
                  fe.to_expr(i.stop) if i.stop is not None else None,
                  fe.to_expr(i.step) if i.step is not None else None)
            spec.append(("slice",) + py)
            basic_dims.append((k, size))
    bshape = broadcast_shapes(*adv_shapes)
    adjacent = adv_pos == list(range(adv_pos[0], adv_pos[0] + len(adv_pos)))
    if adjacent:
        before = [s for k, s in basic_dims if k < adv_pos[0]]
        after = [s for k, s in basic_dims if k > adv_pos[-1]]
        shape = tuple(before) + bshape + tuple(after)
    else:
        shape = bshape + tuple(s for _, s in basic_dims)
    return tuple(spec), inputs, shape


def _gather(fe, base, idx, loc):
    src = _whole_source(fe, base, loc)
    spec, inputs, shape = _gather_spec(fe, src, idx, loc)
    out = fe.container("gather", src.dtype, shape)
    fe.emit(Call("gather", [src] + inputs, [out], {"spec": spec}, loc=loc))
    return Read(Ref(out) if out.ndim else Ref(out, ()))


def _mask_of(fe, base, idx, loc):
    if len(idx) != 1:
        raise unsupported(loc, "boolean mask combined with other indices", "index with the mask alone")
    m = fe.to_expr(idx[0], loc)
    if len(m.shape) != len(base.shape):
        raise unsupported(loc, "boolean mask of a different rank than the array",
                          "use a mask of the array's full shape")
    if not isinstance(m, Read) or not m.ref.is_whole():
        m = fe.materialize(m, "mask", loc)
    return m


def _mask_gather(fe, base, idx, loc):
    src = _whole_source(fe, base, loc)
    m = _mask_of(fe, src, idx, loc)
    count = fe.container("count", I64, ())
    fe.emit(Call("sum", [m], [count], {"axis": None, "keepdims": False}, loc=loc))
    out = fe.container("masked", src.dtype, (scalar(count),))
    fe.emit(Call("mask_gather", [src, m], [out], loc=loc))
    return Read(Ref(out))


class StandIn:
    """A copy standing where NumPy would have a view of ``source``: the result of
    ``reshape``/``ravel``, or a name bound to (a view of) another array on some paths only (a
    branch, a loop that may make no pass, a helper returning one of its arguments) or that a
    loop rebinds. ``what`` names it in errors, ``fix`` says what to write instead; ``depth``:
    the loops around where it was made."""

    def __init__(self, sources, what, where, depth, fix):
        self.sources, self.what, self.where, self.depth, self.fix = sources, what, where, depth, fix


def stand_in(fe, copy, source, what, where, fix):
    """Record ``copy`` as standing for memory of ``source`` (or of what that stands for); a copy
    standing for either of two arrays (``u if c else v``) is recorded for each."""
    stand_ins = getattr(fe, "stand_ins", None)
    if stand_ins is None:
        return
    sources = list(stand_ins[source].sources) if source in stand_ins else [source]
    if copy in stand_ins:
        stand_ins[copy].sources += [x for x in sources if x not in stand_ins[copy].sources]
    else:
        stand_ins[copy] = StandIn(sources, what, where, fe.loop_depth(), fix)


def check_writable(fe, c, loc):
    """Keep stand-in copies (``StandIn``) from differing from NumPy's views unseen. A write into a
    stand-in or into its source makes the other side (the source and its other stand-ins, or
    the stand-ins) ``stale``: NumPy would show the write there, so reading them later is refused
    (``check_fresh``). Inside a loop, where a later pass reads again what the body read before
    the write, such a write is refused at once when the body read the other side."""
    stand_ins = getattr(fe, "stand_ins", {})
    s = stand_ins.get(c)
    if s is not None and any(held(fe, x) for x in s.sources):
        others = s.sources + [k for k, t in stand_ins.items() if k is not c and set(t.sources) & set(s.sources)]
        _written(fe, s, loc, others, f"a write at {loc} through a copy standing for its memory")
    for copy, s in stand_ins.items():
        if c in s.sources and held(fe, copy):
            _written(fe, s, loc, [copy], f"a write at {loc} into the array whose memory it stands for")


def _written(fe, s, loc, seen_by, what):
    read = set().union(*getattr(fe, "loop_reads", [])[s.depth:])   # in the loops made after the stand-in
    if fe.loop_depth() > s.depth and read & set(seen_by):
        raise unsupported(loc, f"writing, in a loop, through memory that {s.what} ({s.where}, before the loop) "
                               "shares with another array in NumPy, while both are in use (a later read would "
                               "show the write in NumPy, not in flowgrad, which holds a copy)", s.fix)
    for c in seen_by:
        fe.stale[c] = (what, s)


def check_fresh(fe, name, value, loc):
    """Refuse reading (through ``name``) an array that NumPy would have changed through a view
    flowgrad holds as a copy (``check_writable``)."""
    if isinstance(value, Read) and value.ref.container in getattr(fe, "stale", {}):
        what, s = fe.stale[value.ref.container]
        raise unsupported(loc, f"reading {name!r} after {what}: {s.what} ({s.where}) shares memory with "
                               "another array in NumPy, so this read would show the write; flowgrad holds a copy",
                          s.fix)


def held(fe, c, but=None):
    """Whether an argument is ``c`` or a name (other than ``but``) still reads it."""
    return c.kind == "arg" or any(isinstance(v, Read) and v.ref.container is c
                                  for f in fe.frames for n, v in f.env.items() if n != but)


def check_value_dtype(value, container, loc):
    """Refuse writing complex values into a real array (NumPy would drop their imaginary parts, or
    raise for a single element)."""
    if value.dtype.kind == "c" and container.dtype.kind != "c":
        raise unsupported(loc, f"assignment of complex values into a {container.dtype} array",
                          "make the array complex (np.zeros(n, dtype=complex), x.astype(complex)), or assign "
                          "np.real(...) of the values")


def _target(fe, base, loc):
    if not isinstance(base, Read) or base.ref.container.ndim == 0:
        raise unsupported(loc, "assignment into a computed value", "assign into a named array")
    check_writable(fe, base.ref.container, loc)
    if base.ref.container.kind == "arg" and base.ref.container.name.startswith("const"):
        raise unsupported(loc, "assignment into a module-level constant array",
                          "copy the constant first (np.copy) and modify the copy")
    return base


def setitem(fe, base, index, value, loc):
    """``base[index] = value`` with NumPy semantics (right side first, last write wins)."""
    base = _target(fe, base, loc)
    idx = index if isinstance(index, tuple) else (index,)
    if any(_is_bool_mask(i) for i in idx):
        m = _mask_of(fe, base, idx, loc)
        v = fe.to_expr(value, loc)
        check_value_dtype(v, base.ref.container, loc)
        if v.shape == ():
            fe.emit(Assign(base.ref, op("where", m, v, base), loc=loc))
            return
        if not isinstance(v, Read):
            v = fe.materialize(v, "v", loc)
        through_view(fe, base, loc, lambda whole: Call("mask_scatter", [v, m], [whole], loc=loc))
        return
    if any(_is_array_index(i) for i in idx):
        spec, inputs, shape = _gather_spec(fe, base, idx, loc)
        v = fe.to_expr(value, loc)
        check_value_dtype(v, base.ref.container, loc)
        _check_value_shape(v.shape, shape, loc)
        if not isinstance(v, (Read, Const)):
            v = fe.materialize(v, "v", loc)
        through_view(fe, base, loc, lambda whole: Call("scatter", [v] + inputs, [whole],
                                                       {"spec": spec, "value_shape": shape}, loc=loc))
        return
    fe.write_ref(view(base.ref, index, loc, _facts(fe)), value, loc)


def through_view(fe, base, loc, make_call):
    """Emit the scatter-style Call ``make_call(container)`` (it writes some elements of a whole
    container) on the array ``base`` reads: on a view, the Call writes a copy of the view, which
    is then written back, so the elements it does not pick keep their values as in NumPy."""
    if base.ref.is_whole():
        fe.emit(make_call(base.ref.container))
        return
    copy = fe.materialize(base, "view", loc)
    fe.emit(make_call(copy.ref.container))
    fe.write_ref(base.ref, copy, loc)


def _check_value_shape(value, into, loc):
    """NumPy's error for values that cannot broadcast to what an index picks, where both sizes
    are known now (``passes.checks`` checks the others at run time)."""
    sizes = [(const_value(a), const_value(b)) for a, b in zip(value[::-1], into[::-1])]
    if len(value) > len(into) or any(a is not None and b is not None and a not in (1, b) for a, b in sizes):
        text = [tuple(const_value(d) if const_value(d) is not None else "?" for d in sh) for sh in (value, into)]
        raise FlowgradError(f"{loc}: shape mismatch: value array of shape {text[0]} could not be broadcast "
                            f"to indexing result of shape {text[1]}")


def element(fe, base, index, loc):
    """``base[index]`` where it picks one element of an array by basic indexing (a value NumPy
    copies out), else None (a view, which NumPy shares, or an advanced index)."""
    idx = index if isinstance(index, tuple) else (index,)
    if not (isinstance(base, Read) and base.ref.container.ndim and base.shape) or \
            any(_is_bool_mask(i) or _is_array_index(i) for i in idx):
        return None
    e = Read(view(base.ref, index, loc, _facts(fe)))
    return e if e.shape == () else None


def augmented_setitem(fe, base, index, opname, rhs, loc):
    """``base[index] op= rhs``: NumPy reads base[index], combines, then writes it back."""
    base = _target(fe, base, loc)
    idx = index if isinstance(index, tuple) else (index,)
    fancy = any(_is_bool_mask(i) or _is_array_index(i) for i in idx)
    if not fancy:
        ref = view(base.ref, index, loc, _facts(fe))
        cur = Read(ref)
        fe.write_ref(ref, fe.binop(opname, cur, rhs, loc), loc, rhs=rhs, opname=opname)
        return
    cur = getitem(fe, base, index, loc)
    if any(_is_bool_mask(i) for i in idx) and fe.to_expr(rhs, loc).shape == ():
        m = _mask_of(fe, base, idx, loc)
        fe.emit(Assign(base.ref, op("where", m, fe.binop(opname, base, rhs, loc), base), loc=loc))
        return
    setitem(fe, base, index, fe.binop(opname, cur, rhs, loc), loc)
