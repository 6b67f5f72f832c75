"""Elements a loop nest holds in variables instead of arrays (``NestLocals``, a part of
``native.Lowering``)."""
from __future__ import annotations

from ..ir.core import Assign, same_expr, same_ref, stmt_reads, stmt_writes


class NestLocals:
    """The temporaries of a fused nest that need no array, for a ``Lowering`` (which gives
    ``space``, ``reads``: the reads of each container in the whole program,
    ``returned`` and ``tape_views``)."""

    def local_containers(self, group):
        """The temporaries the nest of ``group`` writes whole, element by element (and may then
        sum into there), and that no statement reads but later members of the nest at the element
        just written (arc_distance's ``g_temp``, the adjoint of the sum its three partial
        derivatives take): no array holds them, nor is one allocated for them."""
        out = []
        space = self.space(group)
        for k, s in enumerate(group):
            if not isinstance(s, Assign) or s.accumulate or not s.dst.is_whole():
                continue
            c = s.dst.container
            if c.kind != "transient" or c in self.returned or c in self.tape_views or c in self.tape_of or \
                    len(s.dst.shape) != len(space) or \
                    not all(same_expr(a, b) for a, b in zip(s.dst.shape, space)):
                continue
            reads = [r for t in group[k + 1:] for r in stmt_reads(t) if r.ref.container is c]
            sums = [t for t in group[k + 1:] if any(w.container is c for w in stmt_writes(t))]
            if any(r.ref.container is c for t in group[:k + 1] for r in stmt_reads(t)) or \
                    not all(isinstance(t, Assign) and t.accumulate and same_ref(t.dst, s.dst) for t in sums) or \
                    len(reads) != self.reads[c] or not all(same_ref(r.ref, s.dst) for r in reads):
                continue
            out.append(c)
        return out
