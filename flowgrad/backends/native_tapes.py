"""Tape traffic of the native lowering (``TapeTraffic``, a part of ``native.Lowering``): pushes
and pops copying views to and from a tape, or binding a vector to the tape's memory
(``native_deps._renamed``, ``_tape_views``), and the room a forward loop's pushes need,
reserved before the loop."""
from __future__ import annotations

from ..ir.core import For, If, Push, While, iter_reads, stmt_writes, walk
from .numpy import dtype_src


def _written(stmts):
    return {w.container for s in walk(stmts) for w in stmt_writes(s)}


class TapeTraffic:
    """For a ``Lowering`` (which gives ``line``, ``fresh``, ``src``, ``extents``, ``nest``,
    ``read``, ``shape_tuple``, ``needs_allocation``, ``reserved`` and ``tape_of``)."""

    def reserve(self, loop, ind):
        """Before a forward loop: grow each tape it pushes to, once, to hold every push of all its
        iterations, where that total is known at loop entry (sizes and nested trip counts fixed
        by then). The pushes inside then skip their capacity checks. Returns the tapes reserved.

        Where an iteration's pushes depend on the loop variable alone (durbin's ``y[:k]``, a
        triangular inner loop), a loop over the same range first adds them up. A capacity check
        in the loop, whose branch may rebind the tape, kept durbin's inner loops from being
        optimised: its forward sweep ran 4x slower with the checks than without."""
        varying = _written(loop.body) | {loop.var}
        trips = f"_rt.trip_count({self.src(loop.start)}, {self.src(loop.stop)}, {self.src(loop.step)})"
        fixed = self.demand([loop], varying - {loop.var}, trips)
        moving = self.demand(loop.body, varying - {loop.var})
        totals, summed = {}, {}
        for tape, per_trip in fixed.items():
            if tape in self.reserved:
                continue
            if per_trip is not None:
                totals[tape] = per_trip
            elif moving.get(tape) is not None:
                summed[tape] = moving[tape]
        if summed:
            rng = f"range({self.src(loop.start)}, {self.src(loop.stop)}, {self.src(loop.step)})"
            needs = {tape: self.fresh("need") for tape in summed}
            for tape, need in needs.items():
                self.line(f"{need} = 0", ind)
            self.line(f"for {loop.var.name} in {rng}:", ind)
            for tape, need in needs.items():
                self.line(f"{need} += {summed[tape]}", ind + 1)
            totals.update(needs)
        for tape, total in totals.items():
            top = tape + "_top"
            self.line(f"{tape} = _rt.room({tape}, {top} + {total})", ind)
            for c in (c for c, on in self.tape_of.items() if on == tape):    # the tape may have moved, and
                size = " * ".join(self.extents(c.shape))                        # so the vector lying on it
                self.line(f"{c.name} = {self.on_tape(c, tape, f'{top} - {size}')}", ind)
        self.reserved |= set(totals)
        return set(totals)

    def demand(self, stmts, varying, trips=None):
        """Per tape pushed in ``stmts``: the source of the number of elements pushed, or None where
        it is not known ahead (a while loop; a size or trip count ``stmts`` change)."""
        out = {}

        def add(tape, text):
            if tape in out and (out[tape] is None or text is None):
                out[tape] = None
            else:
                out[tape] = text if tape not in out else f"{out[tape]} + {text}"

        def fixed(*exprs):
            return not any(r.ref.container in varying for e in exprs for r in iter_reads(e))

        for s in stmts:
            if isinstance(s, Push):
                if self.dynamic_whole(s.ref) or not fixed(*s.ref.shape):
                    add(s.tape.name, None)
                else:
                    add(s.tape.name, " * ".join(f"({x})" for x in self.extents(s.ref.shape)) or "1")
            elif isinstance(s, For):
                inner_varying = varying | _written(s.body) | {s.var}
                count = trips if trips is not None else \
                    f"_rt.trip_count({self.src(s.start)}, {self.src(s.stop)}, {self.src(s.step)})"
                known = fixed(s.start, s.stop, s.step)
                for tape, d in self.demand(s.body, inner_varying).items():
                    add(tape, f"{count} * ({d})" if known and d is not None else None)
            elif isinstance(s, If):
                then, orelse = self.demand(s.then, varying), self.demand(s.orelse, varying)
                for tape in dict.fromkeys(list(then) + list(orelse)):     # in program order
                    a, b = then.get(tape, "0"), orelse.get(tape, "0")
                    add(tape, None if a is None or b is None else f"max({a}, {b})")
            elif isinstance(s, While):
                for t in walk(s.body):
                    if isinstance(t, Push):
                        add(t.tape.name, None)
        return out

    def dynamic_whole(self, ref):
        """A whole container whose shape varies at run time: tapes record its actual extents."""
        return ref.is_whole() and ref.container.ndim and self.needs_allocation(ref.container)

    def push(self, s, ind):
        tape, top = s.tape.name, s.tape.name + "_top"
        shape = s.ref.shape
        if self.dynamic_whole(s.ref):
            c = s.ref.container
            self.line(f"{tape} = _rt.room({tape}, {top} + {c.name}.size + {c.ndim})", ind)
            self.flat_copy(f"{tape}[{top} + {{k}}]", c.name, c.ndim, "to tape", ind)
            self.line(f"{top} += {c.name}.size", ind)
            for d in range(c.ndim):
                self.line(f"{tape}[{top} + {d}] = {c.name}.shape[{d}]", ind)
            self.line(f"{top} += {c.ndim}", ind)
            return
        size = " * ".join(self.extents(shape)) or "1"
        if tape not in self.reserved:
            self.line(f"{tape} = _rt.room({tape}, {top} + {size})", ind)
        if s.ref.container in self.tape_of:     # its old values stay where they are, below the top
            if id(s) in self.old_places:
                self.line(f"{self.old_places[id(s)].name} = {s.ref.container.name}", ind)
            self.line(f"{s.ref.container.name} = {self.on_tape(s.ref.container, tape, top)}", ind)
            self.line(f"{top} += {size}", ind)
            return
        if not shape:
            self.line(f"{tape}[{top}] = {self.read(s.ref, [], ())}", ind)
            self.line(f"{top} += 1", ind)
            return
        self.copy_tape(s.ref, tape, top, True, ind)

    def on_tape(self, c, tape, start):
        """Source of the part of ``tape`` from ``start`` on that holds vector ``c``."""
        return f"{tape}[{start}:{start} + {' * '.join(self.extents(c.shape))}]"

    def flat_copy(self, slot, name, ndim, direction, ind):
        """Copy array ``name`` (C-contiguous where it has several axes) element by element to (or
        from) ``slot`` (a format string of the tape position ``{k}``): no temporary views or
        copies, which cost more than the copy itself for the short arrays pushed in inner loops."""
        k = self.fresh("k")
        flat = name
        if ndim > 1:
            flat = self.fresh("flat")
            self.line(f"{flat} = np.ascontiguousarray({name}).reshape({name}.size)", ind)
        self.line(f"for {k} in range({name}.size):", ind)
        pair = (slot.format(k=k), f"{flat}[{k}]")
        self.line(f"{pair[0]} = {pair[1]}" if direction == "to tape" else f"{pair[1]} = {pair[0]}", ind + 1)

    def copy_tape(self, ref, tape, cursor, to_tape, ind):
        """Copy a view to (or from) ``tape`` at ``cursor`` in C order, advancing the cursor past
        it: a whole matrix (or array of more axes) as one flat slice; any other view in one loop
        nest over it, the tape indexed by the cursor plus the element's C-order position as an
        unsigned integer, which spares the compiler a negative index's wrap-around, so that the
        innermost loop vectorises. No array object is made per row: copying rows as slices ran a
        scalar loop per row plus the row view's reference counting, a fifth of
        nonlinear_diffusion_2d's gradient. (The whole matrix's slice copy measured faster in
        gnn_scatter's gradient than a loop over its elements.)"""
        shape = ref.shape
        extents = self.extents(shape)
        size = " * ".join(extents)
        if ref.is_whole() and ref.container.ndim > 1:
            flat = self.fresh("flat")
            self.line(f"{flat} = {ref.container.name}.reshape(({size},))", ind)
            buf = f"{tape}[{cursor}:{cursor} + {size}]"
            self.line(f"{buf} = {flat}" if to_tape else f"{flat}[:] = {buf}", ind)
        else:
            names, inner = self.nest(shape, ind)
            at = names[0]
            for name, extent in zip(names[1:], extents[1:]):
                at = f"({at}) * ({extent}) + {name}"
            buf, view = f"{tape}[np.uint64({cursor} + {at})]", self.read(ref, names, shape)
            self.line(f"{buf} = {view}" if to_tape else f"{view} = {buf}", inner)
        self.line(f"{cursor} += {size}", ind)

    def pop(self, s, ind):
        tape, top = s.tape.name, s.tape.name + "_top"
        shape = s.ref.shape
        if self.dynamic_whole(s.ref):
            c = s.ref.container
            dims = [self.fresh("d") for _ in range(c.ndim)]
            self.line(f"{top} -= {c.ndim}", ind)
            for d, n in enumerate(dims):
                self.line(f"{n} = int({tape}[{top} + {d}]{'.real' if c.dtype.kind == 'c' else ''})", ind)
            self.line(f"{top} -= {' * '.join(dims)}", ind)
            self.line(f"{c.name} = np.empty(({', '.join(dims)},), dtype={dtype_src(c.dtype)})", ind)
            self.flat_copy(f"{tape}[{top} + {{k}}]", c.name, c.ndim, "from tape", ind)
            return
        if not shape:
            self.line(f"{top} -= 1", ind)
            self.line(f"{self.read(s.ref, [], ())} = {tape}[{top}]", ind)
            return
        size = " * ".join(self.extents(shape))
        self.line(f"{top} -= {size}", ind)
        c = s.ref.container
        if c in self.tape_of:           # the memory the push left below the top
            self.line(f"{c.name} = {self.on_tape(c, tape, f'{top} - {size}')}", ind)
            return
        if c in self.tape_views and s.ref.is_whole():
            self.line(f"{c.name} = {tape}[{top}:{top} + {size}]", ind)
            return
        start = self.fresh("p")
        self.line(f"{start} = {top}", ind)
        self.copy_tape(s.ref, tape, start, False, ind)
