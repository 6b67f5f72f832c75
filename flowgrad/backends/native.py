"""Native backend: the IR lowered to explicit loop nests in Python source, compiled by Numba.

Every array statement becomes a loop nest over its destination, with the whole expression
tree evaluated per element (fused, no temporaries). A statement whose destination overlaps
what it reads at a different position first evaluates into a temporary (NumPy semantics).
Matrix products and solves stay BLAS/LAPACK calls; reductions, gathers, scatters, einsum and
the like become loops. Large nests whose iterations are independent run their outer loop as a
``prange`` over threads (``native_parallel.ParallelNests.splits``). Tapes are flat, growable buffers. The
generated source is written to a cache directory and compiled with ``numba.njit(cache=True)``,
so a new process reuses the machine code.
"""
from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np

from ..ir.core import (Assign, Call, Const, Container, For, If, Index, NewAxis, Op, Pop, Push, Read, Take, Ref,
                       Slice, While, apart, const_value, is_cheap, iter_reads, loop_range, rename, same_expr, same_ref,
                       stmt_containers, stmt_reads, stmt_writes, walk)
from ..ir.elements import ELEMENTS
from ..ir.printer import expr_text
from . import Located
from .native_calls import (CALL_LOWERING, _scalar_type, lead_reduction, lower_product_sum, new_array, reduction_start,
                           row_reduction, whole_reduction)
from .native_collapse import CollapsedNests
from .native_deps import (_apart_in_inner_loop, _arrays, _conflict, _element_parts, _much_smaller, _placed_reads,
                          _product_sums, _reads_ahead, _reads_off, _renamed, _tape_views, _view)
from .native_locals import NestLocals
from .native_kernel import (Deferred, Kernel, available, cache_dir, compile_source,  # noqa: F401 (the backend's
                            tiered)                                                   # interface)
from .native_parallel import ParallelNests
from .native_shifts import ShiftedMembers
from .native_tapes import TapeTraffic, _written
from .native_runtime import VECTOR_MATH
from .numpy import dtype_src



_VECTOR_MIN_SIZE = 1024     # elements; below this the object-mode call (~2 us) costs more than it saves
# element functions the runtime emits as instructions of the loop over the elements that uses
# them, where they vectorise (see ``native_math``): no temporary, and faster than NumPy's
# ufuncs where those are scalar code. A scalar statement keeps the C library's function, whose
# latency is shorter (a scalar recurrence through log ran 1.7x slower with the compiled one).
_COMPILED_MATH = {(name, np.dtype(np.float64)): f"_rt.{function}"
                  for name, function in (("exp", "exp64"), ("log", "log64"), ("tanh", "tanh64"), ("sin", "sin64"),
                                         ("cos", "cos64"), ("arctan", "arctan64"), ("arctan2", "arctan2_64"))}


def _const_src(v):
    if isinstance(v, complex):
        return repr(v) if np.isfinite(v) else f"complex({_const_src(v.real)}, {_const_src(v.imag)})"
    if isinstance(v, float) and not np.isfinite(v):
        return "np.nan" if np.isnan(v) else ("np.inf" if v > 0 else "-np.inf")
    return repr(v)


def _vector_math(e):
    """Whether element function ``e`` runs as a NumPy ufunc over a temporary when it is large."""
    return e.name in VECTOR_MATH and (e.name, np.dtype(e.dtype)) not in _COMPILED_MATH


def _costly(e):
    return not is_cheap(e)


def _full(shape, space):
    """Whether an operand of ``shape`` covers ``space`` (it is not broadcast over it)."""
    return len(shape) == len(space) and all(same_expr(a, b) for a, b in zip(shape, space))


def _smaller(shape, space):
    """Whether an operand of ``shape`` broadcast over ``space`` repeats (has fewer elements)."""
    if len(shape) < len(space):
        return True
    return any(const_value(d) == 1 and const_value(sp) != 1 for d, sp in zip(shape[len(shape) - len(space):], space))



class Lowering(ParallelNests, CollapsedNests, NestLocals, TapeTraffic, ShiftedMembers, Located):
    """Emits Numba-compilable source for a list of IR statements."""

    def __init__(self, containers, body=()):
        self.containers = containers
        self.product_sums = _product_sums(body)      # calls lowered with the sum that follows them
        self.tape_views = _tape_views(body)          # containers a pop rebinds to the tape's memory
        self.tape_of = {}           # vector its pushes and pops bind to its tape's memory -> the tape (``_renamed``)
        self.old_places = {}        # id of a push moving a vector along its tape -> what names its old place
        self.lines = []
        self.counter = 0
        self.allocated_at_start = set()
        self.scratch = []           # allocations of fixed-shape temporaries, emitted once at entry
        self.workspace = []         # (dtype, ndim, variable, fixed shape or None) of each buffer kept between calls
        self.outputs = []           # (dtype, ndim, position) of each fixed-shape array handed over
        self.carved = {}            # array of run-time shape -> the workspace buffer it is carved from
        self.reserved = set()       # tapes with room reserved for every push of the enclosing loop
        self.ranges = {}            # variable -> ``loop_range`` of the loops around it
        self.once = {}              # values computed by statements that run once per call (see nn_ops)
        self.parallel = False       # whether some loop nest runs its outer loop over threads
        self.invariant = None       # while a fused nest is emitted: where and what to load ahead of its inner loop
        self.reads = Counter(r.ref.container for s in walk(body) for r in stmt_reads(s))
        self.returned = set()       # containers handed to the caller (see ``_prologue``)
        self.locals = {}            # while a fused nest is emitted: containers it holds an element of in a variable
        self.rest = []              # while a fused nest is emitted: the statements after it in its block
        self.owners = []            # the loops and branches around the statement being lowered, innermost last
        self.threads = self.parallel_mode(body)     # "off", "on" or the work a nest needs per thread
        self.loc = None             # the user's line of the statement being lowered
        self.sites = []             # user lines of the index checks, by the number each raises

    def site(self):
        """The number an index check raises with, naming the user's line it is on (``SITES_*``)."""
        where = str(self.loc) if self.loc is not None else ""
        if where not in self.sites:
            self.sites.append(where)
        return self.sites.index(where)

    def wrap(self, i, n):
        """Source of NumPy's integer index ``i`` into an axis of length ``n``, checked."""
        return f"_rt.wrap({i}, {n}, {self.site()})"

    # ------------------------------------------------------------ helpers

    def fresh(self, hint):
        self.counter += 1
        return f"_{hint}{self.counter}"

    def line(self, text, ind):
        self.lines.append("    " * ind + text)

    def src(self, e):
        """Source of a scalar (0-d) expression."""
        return self.elem(e, [], ())

    def elem(self, e, idx, space):
        """Source of expression ``e``'s element at iteration-space position ``idx`` (broadcasting)."""
        if isinstance(e, Const):
            return _const_src(e.value)
        if isinstance(e, Read):
            return self.read(e.ref, idx, space)
        if isinstance(e, Take):
            at = [self.wrap(self.elem(i, idx, space), self.src(d))
                  for i, d in zip(e.index, e.source.container.shape)]
            return f"{e.source.container.name}[{', '.join(at)}]"
        if isinstance(e, Op):
            args = [self.elem(a, idx, space) for a in e.args]
            if any(not isinstance(a, Const) and a.dtype == np.float32 for a in e.args):
                # a Python float next to float32 data stays float32 (NEP 50), so the arithmetic
                # runs in single precision (twice the SIMD width) as NumPy's would
                args = [f"np.float32({t})" if isinstance(a, Const) and isinstance(a.value, float) else t
                        for a, t in zip(e.args, args)]
            name = e.name
            el = ELEMENTS[name]
            if el.infix:
                return f"({args[0]} {el.infix} {args[1]})"
            if name == "negative":
                return f"(-{args[0]})"
            if name == "logical_and":
                return f"({args[0]} and {args[1]})"
            if name == "logical_or":
                return f"({args[0]} or {args[1]})"
            if name == "logical_not":
                return f"(not {args[0]})"
            if name == "where":
                return f"({args[1]} if {args[0]} else {args[2]})"
            if name == "square":
                return f"({args[0]} * {args[0]})"
            if el.native.startswith("."):        # parts and conjugate, as Numba types them
                return f"({args[0]}){el.native}"
            if name == "checked_index":
                return self.wrap(*args)
            if space and (name, np.dtype(e.dtype)) in _COMPILED_MATH:
                # they take float64 arguments only: an integer one is converted, as NumPy's ufunc does
                args = [t if isinstance(a, Const) and isinstance(a.value, float) or np.dtype(a.dtype) == e.dtype
                        else f"np.float64({t})" for a, t in zip(e.args, args)]
                return f"{_COMPILED_MATH[name, np.dtype(e.dtype)]}({', '.join(args)})"
            return f"{el.native}({', '.join(args)})"
        raise TypeError(f"cannot lower {e!r}")

    def hoist(self, e, space, ind, memo=None):
        """Evaluate parts of ``e`` ahead of the loop nest over ``space`` that uses it, into
        temporaries the returned expression reads instead:

        - a costly sub-expression of smaller shape than ``space`` (``cos(t1)`` of a column
          broadcast over a matrix) is computed once over its own shape, not once per element;
        - a large transcendental of ``VECTOR_MATH`` runs as one NumPy ufunc call on a temporary
          holding its argument (SIMD, where NumPy has it, several times faster than Numba's scalar
          libm calls), unless the runtime compiles it into the loop (``_COMPILED_MATH``).

        A sub-expression that occurs more than once in ``e`` (``tanh(u) * tanh(u)`` in the adjoint
        of ``tanh``) is evaluated once.

        Reads happen earlier than in the fused nest, so callers use this only where the statement
        reads no element that another element's write changes first."""
        if not isinstance(e, Op):
            return e
        memo = {} if memo is None else memo
        key = (expr_text(e), str(e.dtype), space is None)
        if key not in memo:
            memo[key] = self._hoist(e, space, ind, memo)
        return memo[key]

    def _hoist(self, e, space, ind, memo):
        if space is not None and _costly(e) and _smaller(e.shape, space):
            inner = self.hoist(e, None, ind, memo)
            return self.materialise(inner, ind)
        args = [self.hoist(a, space, ind, memo) for a in e.args]
        if all(x is y for x, y in zip(args, e.args)):
            out = e
        else:
            out = Op(e.name, args, e.dtype, e.shape)
        if _vector_math(e) and self.large(e.shape) and _full(args[0].shape, e.shape):
            tmp = self.materialise(args[0], ind, e.dtype)
            code = VECTOR_MATH.index(e.name)
            if len(args) == 1:
                self.line(f"_rt.vector_math({code}, {tmp.ref.container.name})  # np.{e.name}", ind)
            else:
                other = self.materialise(args[1], ind, e.dtype)
                self.line(f"_rt.vector_math2({code}, {tmp.ref.container.name}, {other.ref.container.name})"
                          f"  # np.{e.name}", ind)
            return tmp
        return out

    def scratch_array(self, hint, shape, dtype, ind):
        """A fresh temporary array's name: taken from the workspace at function entry when its
        shape is fixed (the generated code reuses it on every pass and every call), else
        allocated here."""
        name = self.fresh(hint)
        shape = [Const(d) if isinstance(d, int) else d for d in shape]
        fixed = _fixed(shape)
        if fixed is not None:
            self.scratch += self.from_workspace(name, self.shape_tuple(shape), dtype, len(shape), fixed)
        else:
            self.line(f"{name} = {new_array(self.shape_tuple(shape), dtype)}", ind)
        return name

    def from_workspace(self, name, shape, dtype, ndim, fixed=None):
        """Lines binding ``name`` to its workspace buffer (allocated, zeroed, when missing or of
        another shape) and remembering that buffer for the next call. Each buffer belongs to one
        name, so what a call leaves in it is what that name's statements wrote. ``fixed``: its
        shape where known here (ints): the caller then allocates the buffer, and the function
        does not hand it back (see ``_finish``)."""
        k = len(self.workspace)
        self.workspace.append((np.dtype(dtype).name, ndim, f"_ws{k}", fixed))
        return [f"{name} = _rt.fitted(_ws[{k}], {shape}, True)",
                f"_ws{k} = {name}"]

    def from_outputs(self, name, shape, dtype, ndim, position):
        """Lines binding ``name``, an array handed to the caller (at ``position`` of the flat
        list of results and gradients), to the buffer the caller offers for it (``_out``: one it
        gave out before and nobody holds any more, see ``Kernel``), allocated when none is
        offered. Like a fresh ``np.empty``, its contents are undefined."""
        k = len(self.outputs)
        self.outputs.append((np.dtype(dtype).name, ndim, position))
        return [f"{name} = _rt.offered(_out[{k}], {shape})"]

    def materialise(self, e, ind, dtype=None):
        """A Read of a fresh temporary holding ``e`` (over its own shape)."""
        dtype = e.dtype if dtype is None else dtype
        if not e.shape:
            name = self.fresh("h")
            self.line(f"{name} = {_scalar_type(dtype)}({self.src(e)})", ind)
            return Read(Ref(Container(name, dtype, ())))
        tmp = Container(self.scratch_array("h", e.shape, dtype, ind), dtype, e.shape)
        names, inner = self.nest(e.shape, ind)
        self.line(f"{tmp.name}[{', '.join(names)}] = {self.elem(e, names, e.shape)}", inner)
        return Read(Ref(tmp))

    @staticmethod
    def large(shape):
        if not shape:
            return False
        size = 1
        for d in shape:
            v = const_value(d)
            if v is None:
                return True      # known at run time only: assume large
            size *= v
        return size >= _VECTOR_MIN_SIZE

    def ahead(self, e, space):
        """Whether ``hoist`` evaluates element function ``e`` (in full) ahead of a nest over ``space``."""
        return (_vector_math(e) and self.large(e.shape) and _full(e.args[0].shape, e.shape)) or \
            (_costly(e) and _smaller(e.shape, space))

    def hoistable(self, e, space):
        return isinstance(e, Op) and (self.ahead(e, space) or any(self.hoistable(a, space) for a in e.args))

    def hoisted_reads(self, e, space):
        """The containers read by the parts of ``e`` that ``hoist`` evaluates ahead of a nest over
        ``space``."""
        if not isinstance(e, Op):
            return set()
        if self.ahead(e, space):
            return {r.ref.container for r in iter_reads(e)}
        return set().union(*(self.hoisted_reads(a, space) for a in e.args))

    def read(self, ref, idx, space):
        c = ref.container
        if c.ndim == 0:
            return c.name
        if c in self.locals:
            return self.locals[c]
        text = f"{c.name}[{', '.join(self.container_index(ref, idx, space))}]"
        if self.invariant is not None and idx:
            # an element the innermost loop of a fused nest does not move (``s[i, 0]`` broadcast
            # along a row) and no statement of the nest writes is loaded once before that loop:
            # the stores in the loop would otherwise make the compiler load it again each time,
            # which keeps a loop with a division from vectorising (measured 3.5x slower); so is one
            # the nest writes only elsewhere (``g_x[i]`` beside ``g_x[0:i]``)
            _, inner, loads, written = self.invariant
            if not re.search(rf"\b{inner}\b", text) and all(apart(ref, w, self.ranges) for w in written.get(c, ())):
                if text not in loads:
                    loads[text] = self.fresh("ld")
                return loads[text]
        return text

    def container_index(self, ref, idx, space):
        """Container indices of a view element, the view broadcast against ``space``."""
        vshape = ref.shape
        r, k = len(vshape), len(space)
        view_idx = []
        for a in range(r):
            sa = k - r + a
            if const_value(vshape[a]) == 1 and (sa < 0 or const_value(space[sa]) != 1):
                view_idx.append("0")
            else:
                view_idx.append(idx[sa])
        if ref.perm is not None:
            under = [None] * r
            for a, p in enumerate(ref.perm):
                under[p] = view_idx[a]
            view_idx = under
        out, it = [], iter(view_idx)
        for item in ref.items:
            if isinstance(item, Index):
                out.append(self.src(item.at))
            elif isinstance(item, NewAxis):
                next(it)
            else:
                i = next(it)
                start, step = const_value(item.start), const_value(item.step)
                term = i if step == 1 else f"{i} * {self.src(item.step)}"
                index = term if start == 0 else f"{self.src(item.start)} + {term}"
                if start is None or start < 0 or step is None or step < 0:
                    # Numba adds the extent to a negative index. Where the compiler cannot tell
                    # that the index never is (an offset known at run time, a backward slice in
                    # a reversed loop: durbin's adjoint), that select keeps the loop from
                    # vectorising (measured 2.6x slower). A view's element index is never
                    # negative: unsigned, it is taken as it is.
                    index = f"np.uint64({index})"
                out.append(index)
        return out

    def extents(self, shape):
        return [self.src(d) for d in shape]

    def nest(self, shape, ind, hint="i", parallel=False, order=None):
        """Open loops over ``shape``; returns (index names, inner indent). With ``parallel`` the
        outer loop is a ``prange``: its iterations are split over threads (see ``splits``).
        ``order``: the axes from the outermost loop in, when not in order."""
        extents = self.extents(shape)
        names = [self.fresh(hint) for _ in extents]
        for k, axis in enumerate(order or range(len(extents))):
            if parallel and k == 0:
                self.line(f"for {names[axis]} in numba.prange({extents[axis]}):", ind)
                self.parallel = True
            else:
                self.line(f"for {names[axis]} in range({extents[axis]}):", ind)
            ind += 1
        return names, ind

    def view_src(self, ref):
        """A NumPy-style view of a Ref, for BLAS and LAPACK calls."""
        c = ref.container
        if c.ndim == 0:
            return c.name
        if ref.is_whole():
            return c.name
        parts = []
        for it in ref.items:
            if isinstance(it, Index):
                parts.append(self.src(it.at))
            elif isinstance(it, NewAxis):
                parts.append("np.newaxis")
            else:
                start, size, step = self.src(it.start), self.src(it.size), self.src(it.step)
                if const_value(it.step) == 1:
                    parts.append(f"{start}:{start} + {size}")
                else:
                    parts.append(f"{start}:_rt.slice_end({start}, {size}, {step}):{step}")
        text = f"{c.name}[{', '.join(parts)}]"
        if ref.perm is not None:
            text = f"np.transpose({text}, {ref.perm!r})" if len(ref.perm) > 2 else f"{text}.T"
        return text

    # ------------------------------------------------------------ statements

    @property
    def nesting(self):
        """How many loops and branches are around the statement being lowered."""
        return len(self.owners)

    def block(self, stmts, ind, boundary=None):
        """Lower ``stmts``; ``boundary``: ``(n, emit)``, ``emit()`` called once the first ``n``
        statements are lowered (right after the nest holding the last of them)."""
        if not stmts:
            self.line("pass", ind)
        k = 0
        while k < len(stmts) or boundary is not None:
            if boundary is not None and k >= boundary[0]:
                boundary[1]()
                boundary = None
                continue
            if self.product_sum(stmts, k, ind):
                k += 2
                continue
            before, group, later = self.gather(stmts, k)
            if len(group) > 1:
                for s in before:
                    self.stmt(s, ind)
                self.rest = later + stmts[k + len(before) + len(group) + len(later):]
                self.fused(group, ind)
                for s in later:
                    self.stmt(s, ind)
            else:
                self.stmt(stmts[k], ind)
            k += len(before) + len(group) + len(later)

    def product_sum(self, stmts, k, ind):
        """Lower ``t = matmul_tn_flat(a, g); w += t`` as one BLAS call adding the product to ``w``
        (see ``lower_product_sum``) where every read of ``t`` is such a sum, and say whether it
        did: a weight gradient summed over the uses of the weight, the steps of a loop or the row
        blocks of the outer-product pass then needs no product array and no pass adding it."""
        if id(stmts[k]) not in self.product_sums:
            return False
        lower_product_sum(self, stmts[k], stmts[k + 1].dst, ind)
        return True

    def gather(self, stmts, k):
        """The loop-nest group starting at ``stmts[k]`` (see ``joins``), with the statements of
        one element (or of a much smaller space, see ``elsewhere``) between its members, which
        run before the nest (``g_s = g / n`` between a forward's sum and its adjoint's
        element-wise write) or after it (``g_p += s1`` between two reductions; the restore of an
        element from a tape), and the pops binding a vector to the tape, which run before it
        where they can (a later member may read the vector: deriche's adjoint steps then run one
        nest each instead of four, its gradient 1.07x faster): one that runs before touches
        nothing an earlier member or a statement moved after the nest writes, nor writes what
        they read; one that runs after touches nothing a later member writes, nor writes what it
        reads."""
        group, before, later, pending = [stmts[k]], [], [], []
        if not (self.fusable(stmts[k]) or self.reduces(stmts[k])):
            return before, group, later
        for s in stmts[k + 1:]:
            if (not s.dst.shape if isinstance(s, Assign) else isinstance(s, (Push, Pop)) and
                    (not s.ref.shape or self.binds(s))) or self.elsewhere(group, s):
                pending.append(s)             # one element, computed, saved or restored; a vector bound to the
                continue                      # tape; a statement over another space
            if not self.joins(group, s) or any(self.conflict(d, s) for d in later):
                break
            up = []                         # what ``s`` needs, directly or through another
            for j in range(len(pending) - 1, -1, -1):
                d = pending[j]
                if self.conflict(d, s) or any(self.conflict(d, u) for u in up) or self.binds(d) and \
                        not any(self.conflict(d, e) for e in group + later + pending[:j]):
                    up.insert(0, d)         # (a binding copies nothing: it runs first where it can)
            down = [d for d in pending if d not in up]
            moved = {}
            for d in up:                    # it runs before the nest: past the group and past
                passed = [e for e in pending[:pending.index(d)] if e not in up]   # what runs after it
                past = [e for e in group + later + passed if self.conflict(d, e)]
                if past and not (self.moves_along(d) and all(e in group and self.only_reads(e, d.ref.container)
                                                              for e in past)):
                    return before, group, later
                moved.update((id(e), d) for e in past)
            for k, e in enumerate(group):   # members reading the vector a push moves on read its old place
                if id(e) in moved:
                    group[k] = self.reading_old_place(e, moved[id(e)])
            before += up
            group.append(s)
            later += down
            pending = []
        return before, group, later

    def moves_along(self, s):
        """Whether ``s`` is a push moving a vector along its tape (``_renamed``): the vector's old
        values stay where they were, below the new place the push binds it to."""
        return isinstance(s, Push) and s.ref.container in self.tape_of

    @staticmethod
    def only_reads(s, c):
        return all(w.container is not c for w in stmt_writes(s))

    def reading_old_place(self, s, push):
        """``s`` reading, instead of the vector ``push`` moves along its tape, the place the vector
        had before it (``old_places``, bound by the push): a member of a loop nest that the push
        runs before. deriche's forward sweep computes a column from the state ``ym2`` and then
        moves ``ym2 = ym1`` on: one pass over each column instead of two (strided, the passes
        cost a cache line per element)."""
        c = push.ref.container
        old = self.old_places.get(id(push))
        if old is None:
            old = self.old_places[id(push)] = Container(self.fresh(c.name + "_was"), c.dtype, c.shape)
        return rename([s], {c: old})[0]

    def elsewhere(self, group, s):
        """Whether ``s`` is an element-wise statement over a space much smaller than ``group``'s
        (a row or a column of it), which may run before or after its nest as one element's
        statements do: a softmax's row sums join the nest computing the exponentials past the
        push saving the sums' old values and the fill starting them. Not a statement as large
        as the nest, which may share a nest of its own with its neighbours."""
        if not (isinstance(s, (Assign, Push, Pop)) and _view(s).shape):
            return False
        return _much_smaller(_view(s).shape, self.space(group))

    def fusable(self, s):
        if isinstance(s, (Push, Pop)):
            return self.copies_elements(s)
        if not (isinstance(s, Assign) and s.dst.container.ndim > 0 and len(s.dst.shape) > 0):
            return False
        return not self.needs_temp(s)

    def allocates(self, s):
        """Whether ``s`` is a whole write binding its container to fresh memory (a transient of
        run-time shape): the nest it joins binds it before it starts, so no earlier member may
        touch the container (``joins``). binomial_option's adjoint copies the values' adjoint
        for the pass that adds it to a shifted view in the nest that reads it for three sums."""
        return isinstance(s, Assign) and s.dst.container.ndim > 0 and s.dst.is_whole() and \
            not s.accumulate and self.needs_allocation(s.dst.container)

    def copies_elements(self, s):
        """Whether push or pop ``s`` copies its view element by element between its container and
        the tape, so it can run in a loop nest over the view: the forward sweep of deriche saves
        three state vectors in the pass computing its column, not in three passes of their own
        (its gradient 9.0 -> 8.4 ms; binomial_option's 17.1 -> 16.2, durbin's 12.8 -> 11.3). Not
        a whole array of several axes, one block of memory that one flat copy moves fastest
        (vadv's 128 x 128 planes, joining its nests, made its gradient 1.1x slower); nor a
        container whose shape the tape records, nor a vector a pop binds to the tape's memory
        (``_tape_views``), which copies nothing."""
        whole_block = s.ref.is_whole() and s.ref.container.ndim > 1
        return bool(s.ref.shape) and not whole_block and not self.dynamic_whole(s.ref) and not self.binds(s)

    def binds(self, s):
        """Whether push or pop ``s`` binds its container to memory on the tape instead of copying:
        a pop of a vector to the popped part (``_tape_views``), a push or pop of a vector that
        moves along its tape (``_renamed``)."""
        if not isinstance(s, (Push, Pop)):
            return False
        c = s.ref.container
        return c in self.tape_of or isinstance(s, Pop) and c in self.tape_views and s.ref.is_whole()

    def conflict(self, a, b):
        """``_conflict``, where a push binding its container to new memory writes the container:
        no statement touching it may move past the push."""
        for p, t in ((a, b), (b, a)):
            if isinstance(p, Push) and p.ref.container in self.tape_of and p.ref.container in stmt_containers(t):
                return True
        return _conflict(a, b)

    def reduces(self, s):
        """The expression ``s`` reduces to one value over an iteration space of its own, or to one
        value per row of it, when it can share a loop nest (see ``joins``), else None."""
        x = (whole_reduction(s) or row_reduction(s) or _lead_along_rows(s)) if isinstance(s, Call) else None
        if x is None or not x.shape:
            return None
        return x

    @staticmethod
    def space(group):
        first = group[0]
        return first.inputs[0].shape if isinstance(first, Call) else _view(first).shape

    def joins(self, group, s):
        """Whether ``s`` can run in the same loop nest as ``group`` (adjacent statements over the
        same iteration space whose dependences stay element-wise). Reductions of whole
        expressions over that space (or of their rows) join a group too: their values are taken
        as the elements are written, in the same pass over memory, and exist once the nest is
        done; a later statement may then overwrite the element a reduction has just read (an
        adjoint cleared after its last use). So do pushes and pops copying a view (see
        ``copies_elements``), one per tape: a push reads its view, a pop writes it. A nest streams
        at most ``STREAMS`` arrays through memory: vadv's forward, whose nests had grown to 16,
        ran in 30 ms instead of 35 with them split at 10 (and 34 at 8). Vectors broadcast along
        its axes and reductions' outputs stay in cache and do not count (see ``_arrays``):
        arc_distance's gradient, whose one pass over the pairs reads four such vectors, ran in
        two passes before (29.5 against 18.9 ms, with its temporaries held in variables)."""
        shape = self.space(group)
        if len(set().union(*(_arrays(g, shape) for g in group + [s]))) > self.STREAMS:
            return False
        x = self.reduces(s)
        e = x if x is not None else _element_parts(s)[1] if isinstance(s, (Assign, Push, Pop)) else None
        written = {w.container for g in group for w in stmt_writes(g)}
        if any(c in written for c in self.hoisted_reads(e, shape)):
            return False            # its hoisted parts run before the nest (see ``fused``)
        if x is not None:
            if len(x.shape) != len(shape) or not all(same_expr(a, b) for a, b in zip(x.shape, shape)):
                return False
            for g in group:
                if isinstance(g, Call):   # an earlier reduction's value is not ready yet
                    if any(r.ref.container is g.outputs[0] for r in iter_reads(x)):
                        return False
                    continue
                dst, _, _ = _element_parts(g)
                if dst is not None and _reads_off(x, dst) and not self.reads_further(group, x, g):
                    return False
            return True
        if not self.fusable(s) or self.allocates(s) and any(s.dst.container in stmt_containers(g) for g in group):
            return False
        view = _view(s)
        if len(view.shape) != len(shape) or not all(same_expr(a, b) for a, b in zip(view.shape, shape)):
            return False
        if self.carried_base(group, s) is not None:
            return True             # a sum one element further than the nest's
        if self.writes_carried(group, s):
            return False
        dst, expr, accumulate = _element_parts(s)
        for g in group:
            if isinstance(g, Call):   # its value exists after the nest: ``s`` must not need it, and
                # ``s`` may write what it reads only at the element it reads (which it reads first)
                if any(r.ref.container is g.outputs[0] for r in stmt_reads(s)) or dst is not None and \
                        _reads_off(g.inputs[0], dst):
                    return False
                continue
            if isinstance(g, (Push, Pop)) and isinstance(s, (Push, Pop)) and g.tape is s.tape:
                return False
            g_dst, g_expr, g_accumulate = _element_parts(g)
            ahead = self.reads_further(group, expr, g) and (dst is None or dst.container is not g_dst.container)
            if g_dst is not None and dst is not None and g_dst.container is dst.container and \
                    not same_ref(g_dst, dst) and not (g_accumulate and accumulate and _apart_in_inner_loop(g_dst, dst)):
                # two sums into overlapping views commute (no statement of the group reads the
                # container at another position, checked below): an adjoint's ``g[i, :] += a``,
                # ``g[i + 1, :] += b`` run in one pass. Not ``g[:, j] += a``, ``g[:, j + 1] += b``:
                # the innermost loop would then carry a dependence through memory and not vectorise
                return False
            for (later, later_expr), earlier in (((dst, expr), g_dst), ((g_dst, g_expr), dst)):
                if earlier is None:
                    continue
                if later_expr is not None and _reads_off(later_expr, earlier) and not (ahead and earlier is g_dst):
                    return False
                for ie in later.index_exprs() if later is not None else ():
                    if any(r.ref.container is earlier.container for r in iter_reads(ie)):
                        return False
        return True

    STREAMS = 10     # arrays one nest may stream through memory (see ``joins``)

    def fused(self, group, ind):
        """One loop nest running several element-wise statements and reductions per element,
        each reduction with one accumulator (the function reassociates, so the compiler
        vectorises them). A reduction to one value per row starts its accumulator
        before the innermost loop and stores it after: a softmax adjoint's ``g_e = g_t / s`` and
        its row sum of ``g_t * e`` take one pass over the scores, not two. A push stores its
        view's elements at the tape's top in C order, the top moving past them after the nest;
        a pop moves the top back before the nest and loads them from there. Either goes through
        a view of that part of the tape shaped as the nest, indexed by the loop indices alone:
        indexed by ``top + i``, whose sign the compiler cannot know, the loop would not vectorise."""
        members = [s for s in group if not isinstance(s, Call)]
        reductions = [s for s in group if isinstance(s, Call)]
        local = self.local_containers(group)
        for s in members:
            if self.allocates(s) and s.dst.container not in local:
                self.allocate(s.dst.container, ind)
        # a reduction along the leading axes sums into its output's elements in memory: the
        # adjoint of a matrix-vector product ``A @ x`` for ``x`` (a column sum) then reads ``A``
        # in the pass writing the adjoint for ``A``, not in a pass of its own
        leads = {id(s): lead for s in reductions if whole_reduction(s) is None and row_reduction(s) is None
                 for lead in [lead_reduction(s)] if lead is not None}
        rows = {id(s) for s in reductions if whole_reduction(s) is None and id(s) not in leads}
        pairs = [_element_parts(s)[:2] for s in members] + [(None, s.inputs[0]) for s in reductions]
        # costly parts of a smaller shape, and large vector math, run ahead of the nest (``joins``
        # let in only statements whose hoisted parts read nothing the group writes): a layer
        # norm's adjoint computes ``sqrt(var + eps)`` per row once and still fuses its passes
        memo = {}
        pairs = [(dst, self.hoist(e, self.space(group), ind, memo)) for dst, e in pairs]
        further, carried = self.shifted_members(group)
        unstored = self.unstored_pops(group, further)
        self.locals = {c: self.fresh("el") for c in local}     # (named after the hoisted parts')
        parallel = not reductions and not (further or carried or unstored) and self.splits(self.space(group), pairs)
        if rows or leads or further or carried or unstored:
            shape = self.space(group)          # rows stay rows: no trailing axes merged
        else:
            pairs, shape = self.collapse(pairs, self.space(group), ind)
        accs = []
        for s in reductions:
            accs.append(self.fresh("acc"))
            c = s.outputs[0]
            if id(s) not in rows and id(s) not in leads:
                self.line(f"{accs[-1]} = {reduction_start(s)[0]}", ind)
                continue
            if self.needs_allocation(c):
                self.allocate(c, ind)
            if id(s) in leads:
                names, inner = self.nest(c.shape, ind, "o")
                self.line(f"{c.name}[{', '.join(names)}] = {reduction_start(s)[0]}", inner)
                r = leads[id(s)][1]         # its "accumulator": the output element of the loop indices
                accs[-1] = lambda names, c=c, r=r: \
                    f"{c.name}[{', '.join(['0'] * (c.ndim - len(names) + r) + list(names[r:]))}]"
        tapes = [s for s in members if isinstance(s, (Push, Pop))]
        size = " * ".join(self.extents(shape))
        slots = {}                    # the part of the tape a push fills or a pop reads, shaped as the nest
        for s in tapes:
            tape, top = s.tape.name, s.tape.name + "_top"
            if isinstance(s, Pop):
                self.line(f"{top} -= {size}", ind)
            elif tape not in self.reserved:
                self.line(f"{tape} = _rt.room({tape}, {top} + {size})", ind)
            slots[id(s)] = self.fresh("slot")
            self.line(f"{slots[id(s)]} = {tape}[{top}:{top} + {size}]" +
                      (f".reshape({self.shape_tuple(shape)})" if len(shape) > 1 else ""), ind)
        names, inner = self.nest(self.main_loop_shape(shape, further), ind, parallel=parallel and len(shape) > 1)
        written = {}                  # container -> the views the nest writes of it
        for w in (w for s in members for w in stmt_writes(s)):
            written.setdefault(w.container, []).append(w)
        self.invariant = (len(self.lines) - 1, names[-1], {}, written)
        work = dict(zip(map(id, members + reductions), pairs))
        acc_of = dict(zip(map(id, reductions), accs))
        # per element: the reductions that read nothing an earlier statement of the group writes,
        # then the statements, then the other reductions, then, from the first statement that
        # overwrites what an earlier reduction reads, the rest in the group's order. Sums go
        # first where they may: after a store, LLVM must assume the loads feeding a sum may see
        # it, and gave up vectorising nonlinear_diffusion_2d's adjoint pass (its update of
        # ``g_u`` and its sum for ``g_kappa``: 0.30 ms a step, 0.13 with the sum first)
        def overwrites(s, g):
            return any(r.ref.container is w.container for r in iter_reads(g.inputs[0]) for w in stmt_writes(s))

        late = next((k for k, s in enumerate(group) if not isinstance(s, Call) and any(
            isinstance(g, Call) and overwrites(s, g) for g in group[:k])), len(group))
        first = [g for k, g in enumerate(group[:late]) if isinstance(g, Call) and not any(
            not isinstance(s, Call) and overwrites(s, g) for s in group[:k])]
        order = first + [s for s in group[:late] if not isinstance(s, Call)] + \
            [s for s in group[:late] if isinstance(s, Call) and all(s is not g for g in first)] + group[late:]
        regs = {}                     # (sum, container) -> the register carrying its element (``carried_sum``)
        values = {}                   # container -> the source of the element a member wrote of it
        sources = self.carried_containers(group, carried, written)

        def body(in_loop):
            for s in order:
                member(s, *work[id(s)], in_loop)

        def member(s, dst, expr, in_loop):
            if in_loop and id(s) in further:
                expr = self.from_slots(expr, further[id(s)], slots, shape)
            if unstored and expr is not None:
                expr = self.at_slots(expr, unstored, slots, shape)
            if id(s) in carried:
                self.carried_sum(s, dst, expr, names, shape, inner, regs, values)
            elif isinstance(s, Assign) and s.dst.container in self.locals:
                self.line(f"{self.locals[s.dst.container]} {'+=' if s.accumulate else '='} "
                          f"{self.elem(expr, names, shape)}", inner)
                values[s.dst.container] = self.locals[s.dst.container]
            elif isinstance(s, Assign) and s.dst.container in sources:
                values[s.dst.container] = self.fresh("v")
                self.line(f"{values[s.dst.container]} = {self.elem(expr, names, shape)}", inner)
                self.line(f"{self.read(dst, names, shape)} = {values[s.dst.container]}", inner)
            elif isinstance(s, Push):
                self.line(f"{slots[id(s)]}[{', '.join(names)}] = {self.elem(expr, names, shape)}", inner)
            elif isinstance(s, Pop):
                values[s.ref.container] = f"{slots[id(s)]}[{', '.join(names)}]"
                if s not in unstored:
                    self.line(f"{self.read(dst, names, shape)} = {values[s.ref.container]}", inner)
            elif isinstance(s, Assign):
                target = self.read(dst, names, shape)
                self.line(f"{target} {'+=' if s.accumulate else '='} {self.elem(expr, names, shape)}", inner)
            else:
                acc = acc_of[id(s)]
                acc = acc(names) if callable(acc) else acc
                self.line(f"{acc} = {reduction_start(s)[1].format(a=acc, b=self.elem(expr, names, shape))}", inner)

        body(True)
        last = self.src(shape[-1]) if shape else None
        if further:                   # the last element, which its pop does not restore, read in place
            self.line(f"if {last} > 0:", inner - 1)
            self.line(f"{names[-1]} = {last} - 1", inner)
            body(False)
        at, _, loads, _ = self.invariant
        self.invariant = None
        self.locals = {}
        starts = [f"{acc} = {reduction_start(s)[0]}" for s, acc in zip(reductions, accs) if id(s) in rows]
        self.lines[at:at] = ["    " * (inner - 1) + line
                             for line in starts + [f"{name} = {text}" for text, name in loads.items()] +
                             self.register_starts(regs)]
        for s in (s for s in order if id(s) in carried):      # the last element's sums
            dst, expr = work[id(s)]
            expr = self.at_slots(expr, unstored, slots, shape) if unstored else expr
            self.carried_sum(s, dst, expr, names, shape, inner - 1, regs, values, at=last)
        for s, acc in zip(reductions, accs):      # after the innermost loop
            c = s.outputs[0]
            if id(s) in rows:
                at_row = names[:-1] + (["0"] if c.ndim == len(shape) else [])
                self.line(f"{c.name}[{', '.join(at_row)}] = {acc}", inner - 1)
        for s, acc in zip(reductions, accs):      # after the nest
            c = s.outputs[0]
            if id(s) not in rows and id(s) not in leads:
                self.line(f"{c.name} = {_scalar_type(c.dtype)}({acc})", ind)
        for s in tapes:
            if isinstance(s, Push):
                self.line(f"{s.tape.name}_top += {size}", ind)

    def _stmt(self, s, ind):
        if isinstance(s, Assign):
            self.assign(s, ind)
        elif isinstance(s, Call):
            CALL_LOWERING[s.op](self, s, ind)
        elif isinstance(s, (For, While, If)):
            self.owners.append(s)
            if isinstance(s, For):
                self.for_loop(s, ind)
            elif isinstance(s, While):
                self.line(f"while {self.src(s.cond)}:", ind)
                self.block(s.body, ind + 1)
            else:
                self.line(f"if {self.src(s.cond)}:", ind)
                self.block(s.then, ind + 1)
                if s.orelse:
                    self.line("else:", ind)
                    self.block(s.orelse, ind + 1)
            self.owners.pop()
        elif isinstance(s, Push):
            self.push(s, ind)
        elif isinstance(s, Pop):
            self.pop(s, ind)
        else:
            raise TypeError(f"cannot lower {s!r}")

    def for_loop(self, s, ind):
        bounds = loop_range(s)
        if bounds is not None:
            self.ranges[s.var] = bounds
        try:
            self._for_loop(s, ind)
        finally:
            self.ranges.pop(s.var, None)

    def _for_loop(self, s, ind):
        start, stop, step = self.src(s.start), self.src(s.stop), self.src(s.step)
        if not s.reverse:
            reserved = self.reserve(s, ind)
            rng = f"range({start}, {stop})" if const_value(s.step) == 1 else f"range({start}, {stop}, {step})"
            self.line(f"for {s.var.name} in {rng}:", ind)
            self.block(s.body, ind + 1)
            self.reserved -= reserved
            return
        trips = self.fresh("trips")
        k = self.fresh("k")
        self.line(f"{trips} = _rt.trip_count({start}, {stop}, {step})", ind)
        self.line(f"for {k} in range({trips}):", ind)
        self.line(f"{s.var.name} = {start} + ({trips} - 1 - {k}) * {step}", ind + 1)
        self.block(s.body, ind + 1)

    def needs_temp(self, s):
        """Whether the right side reads the destination at positions the loop nest writes before
        it reads them (NumPy reads them all first). Reading ahead of the write, at a constant
        offset the ascending nest reaches later (``V[:n] = f(V[1:n + 1], V[:n])``), or rows it
        never writes, or elements apart from what it writes (``g_x[0:i] += g_x[i] * L[i, 0:i]``)
        is safe."""
        dst = s.dst
        if not dst.shape:
            return False      # one element: the right side is computed before the store
        for r, placed in _placed_reads(s.expr):
            if r.ref.container is dst.container and dst.container.ndim and not apart(r.ref, dst, self.ranges):
                if not placed or not (same_ref(r.ref, dst) and len(r.ref.shape) == len(dst.shape)) and \
                        not _reads_ahead(dst, r.ref):
                    return True
        return False

    def assign(self, s, ind):
        c = s.dst.container
        if c.ndim == 0:
            op = "+=" if s.accumulate else "="
            value = self.src(s.expr)
            if not s.accumulate:
                value = f"{_scalar_type(c.dtype)}({value})"
            self.line(f"{c.name} {op} {value}", ind)
            return
        allocate = s.dst.is_whole() and not s.accumulate and self.needs_allocation(c)
        shape = s.dst.shape
        e = s.expr
        if s.dst.is_whole() and not s.accumulate and isinstance(e, Op) and _vector_math(e) and \
                len(e.args) == 1 and self.large(e.shape) and _full(e.args[0].shape, e.shape) and \
                e.dtype == c.dtype and not any(r.ref.container is c for r in iter_reads(e)):
            # ``c = tanh(a)``: ``a`` is written into ``c`` and the ufunc runs there in place, with
            # no temporary and no copy
            if allocate:
                self.allocate(c, ind)
            arg = self.hoist(e.args[0], shape, ind)
            [(dst, arg)], flat = self.collapse([(s.dst, arg)], shape, ind)
            names, inner = self.nest(flat, ind)
            self.line(f"{self.read(dst, names, flat)} = {self.elem(arg, names, flat)}", inner)
            self.line(f"_rt.vector_math({VECTOR_MATH.index(e.name)}, {c.name})  # np.{e.name}", ind)
            return
        expr = self.hoist(s.expr, shape, ind)
        reads_self = any(r.ref.container is c for r in iter_reads(expr))
        if self.needs_temp(s) or (allocate and reads_self):
            # the right side is evaluated in full before the destination is (re)allocated or written
            tmp = self.scratch_array("tmp", shape, c.dtype, ind)
            parallel = self.splits(shape)          # each nest writes what it does not read
            names, inner = self.nest(shape, ind, parallel=parallel)
            self.line(f"{tmp}[{', '.join(names)}] = {self.elem(expr, names, shape)}", inner)
            if allocate:
                self.allocate(c, ind)
            names, inner = self.nest(shape, ind, parallel=parallel)
            target = self.read(s.dst, names, shape)
            self.line(f"{target} {'+=' if s.accumulate else '='} {tmp}[{', '.join(names)}]", inner)
            return
        if allocate:
            self.allocate(c, ind)
        parallel = self.splits(shape, [(s.dst, expr)])
        [(dst, expr)], shape = self.collapse([(s.dst, expr)], shape, ind)
        # a transposed destination (``g_A.T += ...``, the adjoint of ``A.T @ x``) is written in
        # its memory's order: the loops follow its container's axes
        order = sorted(range(len(shape)), key=dst.perm.__getitem__) \
            if dst.perm is not None and len(dst.perm) == len(shape) else None
        names, inner = self.nest(shape, ind, parallel=parallel and len(shape) > 1, order=order)
        target = self.read(dst, names, shape)
        self.line(f"{target} {'+=' if s.accumulate else '='} {self.elem(expr, names, shape)}", inner)

    def allocate(self, c, ind):
        """Bind array ``c``, of a shape known at run time, to fresh memory for a whole write: the
        front of its workspace buffer (grown when too small, kept between passes and calls), so
        that a loop allocating it on every pass allocates nothing once the buffer is large
        enough (binomial_option's gradient 16.8 -> 15.9 ms, its 4,000 passes each allocating a
        copy of the values' adjoint), else a new array."""
        buf = self.carved.get(c.name)
        if buf is None:
            self.line(f"{c.name} = {new_array(self.shape_tuple(c.shape), c.dtype)}", ind)
            return
        size = " * ".join(self.extents(c.shape))
        self.line(f"{buf} = _rt.room({buf}, {size})", ind)
        self.line(f"{c.name} = {buf}[:{size}]" + (f".reshape({self.shape_tuple(c.shape)})" if c.ndim > 1 else ""),
                  ind)

    def needs_allocation(self, c):
        """Whether a whole write must allocate: only transients whose shape is known late."""
        return c.kind != "arg" and c.name not in self.allocated_at_start

    def shape_tuple(self, shape):
        return "(" + "".join(f"{x}, " for x in self.extents(shape)) + ")"



# ---------------------------------------------------------------- whole functions


HEADER = ("import numpy as np\nimport numba\nfrom flowgrad.backends import native_runtime as _rt\n"
          "from flowgrad.checkpoint import schedules as _ckpt\n\n"
          "_jit = numba.njit(cache=True, error_model='numpy', fastmath={'reassoc'})\n"
          "_jit_parallel = numba.njit(cache=True, error_model='numpy', fastmath={'reassoc'}, parallel=_rt.PRANGE)\n\n")


def _static_shape(c, params):
    """Whether a container's shape can be evaluated at function entry."""
    param_set = set(params)
    for d in c.shape:
        for r in iter_reads(d):
            if r.ref.container not in param_set:
                return False
    return True


def _used(stmts):
    """The containers ``stmts`` read or write (a container the passes left unused needs no memory)."""
    return {r.ref.container for s in walk(stmts) for r in stmt_reads(s)} | _written(stmts)


def _prologue(low, prog, containers, tapes, ind, body, returned):
    """Parameter copies, container and tape bindings. Fixed-shape containers and tapes come from
    the workspace (``_ws``, kept by the caller between calls so that their memory is not
    allocated, and paged in, again); ``returned`` containers (each with its position among the
    results and gradients) are handed to the caller, in buffers the caller no longer holds when
    there are such (``_out``)."""
    params = prog.params + list(prog.inputs)
    written, used = _written(body), _used(body)
    low.returned = set(returned)
    for p in prog.params:
        if p in low.tape_of:
            continue
        if p.ndim and p in written and (p in returned or not _large(p)):   # the caller's arrays are
            low.line(f"{p.name} = {p.name}.copy()", ind)                      # never modified
        elif p.ndim and p in written:      # a large one is written in a copy kept between calls
            k = len(low.workspace)
            low.workspace.append((np.dtype(p.dtype).name, p.ndim, f"_ws{k}", None))
            low.line(f"{p.name} = _rt.copied(_ws[{k}], {p.name})", ind)
            low.line(f"_ws{k} = {p.name}", ind)
        elif p.ndim:                       # C order, so that loops may read it through flat views
            low.line(f"{p.name} = np.ascontiguousarray({p.name})", ind)
    for c in sorted(containers, key=lambda c: c.name):
        if c.kind == "arg" or c in tapes or c in low.tape_of or c not in used and c not in returned:
            continue
        if c.ndim == 0:
            low.line(f"{c.name} = {_scalar_type(c.dtype)}(0)", ind)
        elif _static_shape(c, params):
            shape = low.shape_tuple(c.shape)
            lines = low.from_outputs(c.name, shape, c.dtype, c.ndim, returned[c]) if c in returned \
                else low.from_workspace(c.name, shape, c.dtype, c.ndim, _fixed(c.shape))
            for text in lines:
                low.line(text, ind)
            low.allocated_at_start.add(c.name)
        else:
            low.line(f"{c.name} = np.empty({(0,) * c.ndim!r}, dtype={dtype_src(c.dtype)})", ind)
            if c not in returned:
                k = len(low.workspace)
                low.workspace.append((np.dtype(c.dtype).name, 1, f"_ws{k}", None))
                low.line(f"_ws{k} = _ws[{k}]", ind)
                low.carved[c.name] = f"_ws{k}"
    for t in tapes:
        k = len(low.workspace)
        low.workspace.append((np.dtype(t.dtype).name, 1, t.name, None))     # returned as grown
        low.line(f"{t.name} = _rt.room(_ws[{k}], 1024)", ind)
        low.line(f"{t.name}_top = 0", ind)
    for c, tape in sorted(low.tape_of.items(), key=lambda ct: ct[0].name):  # first memory: the tape's bottom
        size = " * ".join(low.extents(c.shape))
        low.line(f"{tape} = _rt.room({tape}, {size})", ind)
        if c in prog.params:        # holding the caller's values
            slot = low.fresh("slot")
            low.line(f"{slot} = {low.on_tape(c, tape, '0')}", ind)
            low.line(f"{slot}[...] = {c.name}", ind)
            low.line(f"{c.name} = {slot}", ind)
        else:
            low.line(f"{c.name} = {low.on_tape(c, tape, '0')}", ind)
        low.line(f"{tape}_top = {size}", ind)
        low.allocated_at_start.add(c.name)


def _fixed(shape):
    """``shape`` as a tuple of ints, or None where a dimension is known only at run time."""
    sizes = tuple(const_value(d) for d in shape)
    return None if None in sizes else tuple(int(d) for d in sizes)


def _large(c):
    """Whether container ``c`` has a fixed size past the 2 MiB of a core's cache, so that a copy
    of it written into new memory on every call pays for mapping its pages (``_rt.copied``): gemver's
    30 MiB matrix, copied into a kept buffer, took its forward from 22 to 8.4 ms, while a kept copy
    of adi's 0.17 MiB grid, which a fresh allocation gives back from cache, made its forward 1.2x
    slower (doitgen's 7 MiB array: no difference beyond noise)."""
    sizes = _fixed(c.shape)
    return sizes is not None and math.prod(sizes) * np.dtype(c.dtype).itemsize > 2 << 20


# Numba's parallel passes rename the versions of a variable bound more than once (``x`` ->
# ``x.1``) to ``x_1`` and fail when that is another variable's name ("key already in
# dictionary"); in functions with parallel loops, names ending in ``_<digits>`` get a trailing
# underscore so that none can be such a renamed version.
_PARALLEL_SAFE_NAME = re.compile(r"(?<![\w.])([A-Za-z_]\w*_\d+)\b")


def _finish(low, name, entry, returns):
    """Insert the scratch bindings at ``entry``, return ``returns`` and the workspace buffers a
    call may replace (tapes, arrays of run-time shape), and declare the workspace's buffers for
    the caller (``WORKSPACE_<name>``: dtype, dimensions, and the shape of one of fixed shape,
    which the caller allocates and keeps) and the fixed-shape arrays it hands over
    (``OUTPUTS_<name>``: type and position of each). Numba makes a Python object of each array
    a function returns, about 0.9 us apiece: symm's gradient handed back its 18 buffers of fixed
    shape on every call."""
    low.lines[entry:entry] = ["    " + a for a in low.scratch]
    ws = "".join(var + ", " for _, _, var, fixed in low.workspace if fixed is None)
    low.line(f"return {returns}, ({ws})", 1)
    if low.parallel:
        low.lines[0] = "@_jit_parallel"
        low.lines = [_PARALLEL_SAFE_NAME.sub(r"\1_", line) for line in low.lines]
    types = tuple((dt, nd, fixed) for dt, nd, _, fixed in low.workspace)
    flushes = any("_rt.flush_subnormals()" in line for line in low.lines)
    return (HEADER + "\n".join(low.lines) + f"\n\n\nWORKSPACE_{name} = {types!r}\n"
            f"OUTPUTS_{name} = {tuple(low.outputs)!r}\nSITES_{name} = {tuple(low.sites)!r}\n"
            f"FLUSHES_{name} = {flushes!r}\n")


def emit_forward(prog) -> str:
    """``<name>(*params, _ws, _out) -> (result, workspace)``; a program with several results (a
    tangent program: the value and its tangent) gives ``(first, (others...), workspace)``, a
    scalar among the others as an array of one element."""
    low = Lowering(prog.containers, prog.body)
    names = ", ".join(p.name for p in prog.params)
    low.line("@_jit", 0)
    low.line(f"def {prog.name}({names}{', ' if names else ''}_ws, _out):", 0)
    tapes = [c for c in prog.containers.values() if c.kind == "tape"]
    _prologue(low, prog, [c for c in prog.containers.values()], tapes, 1, prog.body,
              {c: k for k, c in enumerate(prog.results)})
    entry = len(low.lines)
    low.block(prog.body, 1)
    returns = prog.results[0].name
    if len(prog.results) > 1:
        rest = [c.name if c.ndim else f"np.full((1,), {c.name})" for c in prog.results[1:]]
        returns += f", ({''.join(r + ', ' for r in rest)})"
    return _finish(low, prog.name, entry, returns)


def emit_grad(prog, gp, wrt) -> str:
    """``<name>_grad(*params, cotangent, _ws, _out) -> (result, (grads...), workspace)``:
    forward and backward in one function."""
    result, forward = prog.results[0], list(gp.forward)
    containers = [c for c in gp.containers.values() if c is not gp.cotangent]
    if any(w.container is result for t in walk(gp.backward) for w in stmt_writes(t)):
        # the backward sweep restores the result's earlier values (it was updated in place):
        # what the call returns is kept as the forward sweep left it
        kept = Container(result.name + "_value", result.dtype, result.shape)
        forward.append(Assign(Ref(kept) if kept.ndim else Ref(kept, ()), Read(Ref(result) if result.ndim
                                                                               else Ref(result, ()))))
        containers.append(kept)
        result = kept
    low = Lowering({**gp.containers, result.name: result}, forward + gp.backward)
    names = ", ".join([p.name for p in prog.params] + [gp.cotangent.name])
    low.line("@_jit", 0)
    low.line(f"def {prog.name}_grad({names}, _ws, _out):", 0)
    tapes = [c for c in containers if c.kind == "tape"]     # a gradient program's own tapes too (reverse over reverse)
    returned = {result: 0}
    returned.update({gp.grads[w]: 1 + k for k, w in enumerate(wrt) if w in gp.grads})
    low.tape_of = {c: tape.name for c, tape in _renamed(forward, gp.backward, returned).items()}
    _prologue(low, prog, containers, tapes, 1, forward + gp.backward, returned)
    entry = len(low.lines)
    # the adjoint sweep flushes subnormal numbers to zero (see native_math) from the end of the
    # nest computing the forward's last statement on (a forward's last pass may share its nest
    # with the backward's first); the forward's float scalars read later, and the result, are
    # computed before the mode changes
    later = {r.ref.container.name for s in walk(gp.backward) for r in stmt_reads(s)} | {result.name}

    def flush():
        for c in dict.fromkeys(w.container for s in walk(forward) for w in stmt_writes(s)):
            if c.ndim == 0 and c.name in later and np.dtype(c.dtype).kind in "fc":
                low.line(f"{c.name} = _rt.held({c.name})", 1)
        low.line("_fp_mode = _rt.flush_subnormals()", 1)
    low.block(forward + gp.backward, 1, (len(forward), flush))
    low.line("_rt.restore_fp_mode(_fp_mode)", 1)
    outs = []
    for w in wrt:
        g = gp.grads.get(w)
        if g is None:
            outs.append(f"np.zeros({low.shape_tuple(w.shape)}, dtype={dtype_src(w.dtype)})" if w.ndim
                        else "0.0")
        else:
            outs.append(g.name)       # a scalar's as a number: an array of one element costs a Python object
    return _finish(low, prog.name + "_grad", entry, f"{result.name}, ({''.join(o + ', ' for o in outs)})")


def _lead_along_rows(s):
    """The expression of a reduction along leading axes (``lead_reduction``) whose arrays the
    innermost loop walks along their rows (or not at all), else None. ``A.T @ g``'s adjoint for
    ``g`` walks ``A``'s columns: sharing that strided pass with the adjoint for ``A`` measured 1.4x
    slower than two passes (mvt's gradient)."""
    lead = lead_reduction(s)
    if lead is None:
        return None
    for r in iter_reads(lead[0]):
        ref = r.ref
        if ref.container.ndim and not isinstance(ref.items[-1], NewAxis) and not (
                ref.perm is None and isinstance(ref.items[-1], Slice) and const_value(ref.items[-1].step) == 1):
            return None
    return lead[0]
