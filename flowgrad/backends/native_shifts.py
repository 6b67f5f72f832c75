"""Loop-nest members one element from the nest's own (a part of ``native.Lowering``): a read of
what a pop restores one element further along the innermost axis, and a sum into the view one
element further than the nest writes. Either would split the nest in two passes. binomial_option's
adjoint step restores the values from the tape, takes three sums over them and their neighbours,
scales its adjoint and adds it one element further: one pass instead of three (its gradient
8.5 -> 5.8 ms at the bench size)."""
from __future__ import annotations

from ..ir.core import (Assign, Call, Container, For, Pop, Ref, Slice, const_value, iter_reads, map_expr_refs, op,
                       same_ref, stmt_reads, stmt_writes, walk)
from .native_calls import _scalar_type
from .native_deps import _element_parts, _one_further, _placed_reads, _read_further


def _member_expr(s):
    return s.inputs[0] if isinstance(s, Call) else _element_parts(s)[1]


def _in_pass(pop, owner):
    """Whether ``pop``, lowered in a block of ``owner``, is a local pop (``Pop.local``: the
    variable of the loop whose passes only read what it restores) at the top of a pass of that
    loop: its body, or the body of a checkpointed segment's loop setting that variable first."""
    var = pop.local
    if var is None or not isinstance(owner, For):
        return False
    first = owner.body[0] if owner.body else None
    return owner.var is var or isinstance(first, Assign) and first.dst.container is var and not first.dst.items


def _writes(s, c):
    return not isinstance(s, Call) and any(w.container is c for w in stmt_writes(s))


class ShiftedMembers:
    """For a ``Lowering`` (which gives ``line``, ``fresh``, ``read``, ``elem``, ``src`` and
    ``locals``)."""

    def reads_further(self, earlier, e, pop):
        """Whether ``e``, of a member joining a nest after the members ``earlier``, reads what
        ``pop`` (one of them) restores one element further along the innermost axis, and the
        popped container only there and at the element: the nest then reads that element from
        the tape, where the pop takes it from one element later, and the last element, which the
        pop does not restore, from the container, in a last iteration of its own. Not where
        another member writes the container."""
        return isinstance(pop, Pop) and e is not None and self.along(earlier) and _read_further(e, pop.ref) and \
            not any(_writes(g, pop.ref.container) for g in earlier if g is not pop)

    def carried_base(self, earlier, s):
        """The view ``W`` that members ``earlier`` write of the container ``s`` sums into, where
        ``s`` is ``g[W + 1] += e`` (``_one_further``): the nest adds, at element ``k`` of ``W``,
        ``e`` at element ``k - 1``, once the members before ``s`` are done with ``g[W][k]`` and
        before those after it start; the last element's sum comes after the loop. ``e``'s reads
        of what the nest writes are at the element and are carried in registers from one element
        to the next; its other reads are read at the element before. Else None: ``s`` reads ``g``
        or a reduction of the nest, or a member reads ``g`` elsewhere than at ``W``, or writes a
        view of it other than ``W``."""
        if not (isinstance(s, Assign) and s.accumulate and s.dst.container.ndim) or s.dst.perm is not None or \
                not self.along(earlier):
            return None
        c = s.dst.container
        writers = [g for g in earlier if _writes(g, c)]
        if not writers or not all(isinstance(g, Assign) and same_ref(g.dst, writers[0].dst) for g in writers):
            return None
        base = writers[0].dst
        if not _one_further(base, s.dst):
            return None
        for g in earlier:
            e = _member_expr(g)
            if e is not None and any(r.ref.container is c and not (placed and same_ref(r.ref, base))
                                     for r, placed in _placed_reads(e)):
                return None
            if not isinstance(g, Call) and any(r.ref.container is c for w in stmt_writes(g)
                                               for ie in w.index_exprs() for r in iter_reads(ie)):
                return None
        written = {}
        for g in earlier:
            if not isinstance(g, Call):
                for w in stmt_writes(g):
                    written.setdefault(w.container, []).append(g)
        outputs = {g.outputs[0] for g in earlier if isinstance(g, Call)}
        for r, placed in _placed_reads(s.expr):
            x = r.ref.container
            if x is c or x in outputs:
                return None
            if x in written:            # carried: written once, by a copy or an assignment, read at the element
                [*others, g] = written[x]
                dst = _element_parts(g)[0]
                if others or not placed or not same_ref(r.ref, dst) or isinstance(g, Assign) and g.accumulate:
                    return None
        if any(r.ref.container in written or r.ref.container in outputs
               for ie in s.dst.index_exprs() for r in iter_reads(ie)):
            return None
        return base

    def writes_carried(self, group, s):
        """Whether ``s`` writes what a sum one element further in ``group`` reads: the sum reads
        it at the element before, after ``s`` has written there."""
        written = {w.container for w in stmt_writes(s)}
        return any(isinstance(g, Assign) and g.accumulate and self.carried_base(group[:k], g) is not None and
                   any(r.ref.container in written for r in iter_reads(g.expr)) for k, g in enumerate(group))

    def along(self, group):
        """Whether the innermost axis of ``group``'s nest may hold more than one element (where it
        holds one, a neighbour's member gains nothing)."""
        space = self.space(group) if group else ()
        return bool(space) and const_value(space[-1]) != 1

    def shifted_members(self, group):
        """``(further, carried)`` of a nest's members: per member, the pops whose containers it
        reads one element further (``reads_further``); the members that are sums one element
        further (``carried_base``)."""
        further, carried = {}, set()
        for k, s in enumerate(group):
            e = _member_expr(s)
            pops = [g for g in group[:k] if self.reads_further(group[:k], e, g)]
            if pops:
                further[id(s)] = pops
            elif self.carried_base(group[:k], s) is not None:
                carried.add(id(s))
        return further, carried

    @staticmethod
    def from_slots(e, pops, slots, shape):
        """``e`` reading, where it reads a popped container one element further, the element
        after the nest's in the part of the tape the pop takes (``slots``, shaped as the nest)."""
        views = {}
        for pop in pops:
            slot = Container(slots[id(pop)], pop.ref.container.dtype, tuple(shape))
            views[pop.ref.container] = (pop.ref, Ref(slot, [Slice(0, d) for d in shape[:-1]] + [Slice(1, shape[-1])]))

        def to_slot(r):
            hit = views.get(r.container)
            return hit[1] if hit is not None and _one_further(hit[0], r) else r
        return map_expr_refs(e, to_slot)

    def unstored_pops(self, group, further):
        """The pops of ``group`` that need not store what they restore: each ``local`` (only the
        statements after it in its pass read it: ``autodiff.restores.read_in_pass``) and lowered
        at the top of that pass (``_in_pass``: a pass may have moved it), with no
        statement after the nest in its block reading the container, and every member reading it
        after the pop and only at the pop's view (``at_slots``) or one element further, from the
        tape (``reads_further``). binomial_option's adjoint step then restores nothing into ``V``
        (5.5 -> 4.9 ms)."""
        out = []
        owner = self.owners[-1] if self.owners else None
        for k, pop in enumerate(group):
            x = pop.ref.container if isinstance(pop, Pop) and _in_pass(pop, owner) else None
            if x is None or any(r.ref.container is x for t in walk(self.rest) for r in stmt_reads(t)):
                continue
            ok = True
            for j, s in enumerate(group):
                e = _member_expr(s) if s is not pop else None
                reads = [r for r in stmt_reads(s) if r.ref.container is x]
                served = [r for r, placed in _placed_reads(e) if r.ref.container is x and placed and (
                    same_ref(r.ref, pop.ref) or pop in further.get(id(s), ()) and _one_further(pop.ref, r.ref))] \
                    if e is not None else []
                ok = ok and len(served) == len(reads) and (not reads or j > k) and (s is pop or not _writes(s, x))
            if ok:
                out.append(pop)
        return out

    @staticmethod
    def at_slots(e, pops, slots, shape):
        """``e`` reading, where it reads what one of ``pops`` restores at the nest's element, that
        element in the part of the tape the pop takes (``slots``, shaped as the nest)."""
        views = {pop.ref.container: (pop.ref, Ref(Container(slots[id(pop)], pop.ref.container.dtype, tuple(shape)),
                                                   [Slice(0, d) for d in shape])) for pop in pops}

        def to_slot(r):
            hit = views.get(r.container)
            return hit[1] if hit is not None and same_ref(hit[0], r) else r
        return map_expr_refs(e, to_slot)

    def carried_sum(self, s, dst, expr, names, shape, ind, regs, values, at=None):
        """Lower sum ``s`` one element further (``carried_base``) into ``dst`` of ``expr`` at
        element ``names`` of a nest: the element before's sum, where there is one, and the
        registers of ``s`` (each sum its own: two sums may carry one array) taking this element's
        values of the arrays the nest writes (``values``: container -> the
        source of the value the member writing it wrote at this element) for the next. Not the
        arrays themselves: loaded after the stores between, the register kept the loop from
        vectorising (binomial_option's gradient took 14.5 ms instead of 5.8). With ``at`` (the
        innermost index's extent), the last element's sum, after the loop."""
        carried = dict.fromkeys(r.ref.container for r, _ in _placed_reads(expr) if r.ref.container in values)
        for c in carried:
            if (id(s), c) not in regs:
                regs[id(s), c] = self.fresh("carry")
        before = list(names[:-1]) + [f"({names[-1] if at is None else at} - 1)"]
        mine = self.locals
        self.locals = {**mine, **{c: regs[id(s), c] for c in carried}}
        text = f"{self.read(dst, before, shape)} += {self.elem(expr, before, shape)}"
        self.locals = mine
        self.line(f"if {names[-1] if at is None else at} > 0:", ind)
        self.line(text, ind + 1)
        if at is None:
            for c in carried:
                self.line(f"{regs[id(s), c]} = {values[c]}", ind)

    @staticmethod
    def carried_containers(group, carried, written):
        """The containers whose elements the sums ``carried`` carry from one element to the next
        (of ``written``, those the nest writes)."""
        return {r.ref.container for s in group if id(s) in carried for r in iter_reads(s.expr)
                if r.ref.container in written}

    @staticmethod
    def register_starts(regs):
        return [f"{reg} = {_scalar_type(c.dtype)}(0)" for (_, c), reg in regs.items()]

    @staticmethod
    def main_loop_shape(shape, further):
        """The nest's loops over ``shape``, the innermost one a step short where a member reads
        one element further than a pop (that last element runs after the loop)."""
        return tuple(shape) if not further else tuple(shape[:-1]) + (op("subtract", shape[-1], 1),)
