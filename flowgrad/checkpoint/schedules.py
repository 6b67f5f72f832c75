"""Loop checkpoint schedules: store-all, periodic snapshots, and binomial (revolve-style).

A schedule reverses ``T`` iterations of a loop starting from a snapshot of the loop's state in
slot 0. It is a list of actions, each a row ``(op, a, b)``:

- SNAP a: copy the loop state into slot a;       RESTORE a: copy slot a back into the state;
- ADVANCE a b: run iterations a..b-1 without recording (the state moves to iteration b);
- RECORD a b: run iterations a..b-1 pushing what their adjoints need;
- REVERSE a b: run the adjoints of iterations b-1..a (popping what RECORD pushed).

Every REVERSE is followed by a RESTORE (or another REVERSE, or the schedule's end): what a
reversal leaves in the state is never read, so a restore only its own pass reads need not be
stored (``autodiff.restores.read_in_pass``).

Periodic(k) keeps ceil(T/k) snapshots and the tape of k iterations (memory ~ sqrt(T) for
k ~ sqrt(T)); binomial(c) keeps c snapshots and one iteration's tape, with the minimal number
of extra iterations for that many snapshots (Griewank's revolve bound), so memory ~ log T.
"""
from __future__ import annotations

from array import array
from functools import lru_cache
from math import comb

import numpy as np

SNAP, RESTORE, ADVANCE, RECORD, REVERSE = 0, 1, 2, 3, 4
STORE_ALL, PERIODIC, BINOMIAL, ONLINE = 0, 1, 2, 3
KIND_NAMES = {STORE_ALL: "store_all", PERIODIC: "periodic", BINOMIAL: "binomial", ONLINE: "online"}


class _Actions:
    """A compact, growable list of (op, a, b) rows (8 bytes per number, no Python tuples)."""

    def __init__(self):
        self.data = array("q")

    def add(self, op, a, b=0):
        if op == ADVANCE and a == b:
            return
        self.data.extend((op, a, b))

    def rows(self):
        return np.frombuffer(self.data, dtype=np.int64).reshape(-1, 3) if self.data else \
            np.zeros((0, 3), dtype=np.int64)


def periodic(T: int, k: int):
    """Snapshots every k iterations; each segment is recorded whole, then reversed."""
    k = max(1, int(k))
    acts = _Actions()
    acts.add(RESTORE, 0)
    starts = list(range(0, T, k))
    for n, s in enumerate(starts):
        if n:
            acts.add(SNAP, n)
        if n + 1 < len(starts):
            acts.add(ADVANCE, s, min(T, s + k))
    for n in range(len(starts) - 1, -1, -1):
        s, e = starts[n], min(T, starts[n] + k)
        acts.add(RESTORE, n)
        acts.add(RECORD, s, e)
        acts.add(REVERSE, s, e)
    return acts.rows()


def periodic_slots(T: int, k: int) -> int:
    return max(1, -(-T // max(1, int(k))))


@lru_cache(maxsize=None)
def _cost_table(T: int, c: int):
    """F[l][j]: fewest ADVANCE iterations to reverse l iterations from a stored start with j free
    snapshots, and the best first split for each (dynamic programming over Griewank's recursion)."""
    F = np.zeros((c + 1, T + 1), dtype=np.int64)
    split = np.zeros((c + 1, T + 1), dtype=np.int64)
    ls = np.arange(T + 1, dtype=np.int64)
    F[0] = ls * (ls - 1) // 2
    for j in range(1, c + 1):
        F[j, 1] = 0
        for length in range(2, T + 1):
            m = np.arange(1, length, dtype=np.int64)
            cost = m + F[j - 1, length - m] + F[j, m]
            best = int(np.argmin(cost))
            F[j, length] = cost[best]
            split[j, length] = m[best]
    return F, split


def binomial(T: int, c: int):
    """Revolve-style schedule with ``c`` snapshots besides slot 0."""
    c = max(0, int(c))
    acts = _Actions()
    if T == 0:
        return acts.rows()
    F, split = _cost_table(T, c)

    def rev(s, e, slot, free):
        # the state at iteration s is in ``slot``
        if e - s == 1:
            acts.add(RESTORE, slot)
            acts.add(RECORD, s, e)
            acts.add(REVERSE, s, e)
            return
        if free == 0:
            for j in range(e - 1, s - 1, -1):
                acts.add(RESTORE, slot)
                acts.add(ADVANCE, s, j)
                acts.add(RECORD, j, j + 1)
                acts.add(REVERSE, j, j + 1)
            return
        m = s + int(split[free, e - s])
        acts.add(RESTORE, slot)
        acts.add(ADVANCE, s, m)
        acts.add(SNAP, slot + 1)
        rev(m, e, slot + 1, free - 1)
        rev(s, m, slot, free)

    rev(0, T, 0, c)
    return acts.rows()


def binomial_slots(T: int, c: int) -> int:
    return 1 + max(0, int(c))


def min_advances(T: int, c: int) -> int:
    """The fewest ADVANCE iterations any schedule with c snapshots needs (the DP optimum)."""
    return int(_cost_table(T, c)[0][c, T]) if T else 0


def revolve_formula(T: int, c: int) -> int:
    """Griewank's closed form for the iterations run without recording when reversing T
    iterations with the start state plus ``c`` snapshots (s = c + 1 checkpoints in his count):
    with r the smallest integer such that C(s + r, s) >= T, it is r*T - C(s + r, s + 1).
    """
    if T <= 1:
        return 0
    s = c + 1
    r = 0
    while comb(s + r, s) < T:
        r += 1
    return r * T - comb(s + r, s + 1)


def count_advances(actions) -> int:
    return int(sum(b - a for op, a, b in np.asarray(actions).tolist() if op == ADVANCE))


def schedule_bytes(T: int, slots: int) -> int:
    """An upper bound on a schedule's size in memory (rows of three int64)."""
    return 24 * (4 * T + 2 * slots + 4)


def schedule(kind: int, T: int, param: int) -> np.ndarray:
    """The action rows for a loop of T iterations (called by generated code at run time)."""
    T = int(T)
    if kind == PERIODIC:
        return periodic(T, param)
    if kind == BINOMIAL:
        return binomial(T, param)
    raise ValueError(f"no schedule for kind {kind}")


def slots(kind: int, T: int, param: int) -> int:
    return periodic_slots(int(T), param) if kind == PERIODIC else binomial_slots(int(T), param)


def split_forward(rows):
    """Let the forward sweep take a schedule's first snapshots: ``(rows', nf, at)``.

    A schedule starts from slot 0 with advances and snapshots (periodic: one per segment;
    binomial: the first path of the recursion). The forward sweep runs the loop anyway, so it
    performs ``rows'[:nf]`` (only SNAP and ADVANCE rows), stopping at the last snapshot, taken
    at iteration ``at``, and then runs the remaining iterations plainly. The backward sweep
    runs ``rows'[nf:]``, which starts by restoring that snapshot. A RESTORE of a slot the state
    still equals is dropped."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1, 3)
    same = {0}                 # slots the current state equals
    done, k, pos = [], 0, 0    # done: positions of the rows the forward sweep runs, in order
    last = (0, 0, 0)           # (rows done, slot, iteration) at the last snapshot
    if len(rows) and rows[0, 0] == RESTORE and rows[0, 1] == 0:
        k = 1
    while k < len(rows):
        op, a, b = (int(v) for v in rows[k])
        if op == RESTORE and a in same:
            k += 1
            continue
        if op == ADVANCE:
            pos, same = b, set()
        elif op == SNAP:
            same.add(a)
            last = (len(done) + 1, a, pos)
        else:
            break
        done.append(k)
        k += 1
    nf, slot, at = last
    out = np.concatenate([rows[done[:nf]], np.array([[RESTORE, slot, 0]], dtype=np.int64), rows[done[nf:]],
                          rows[k:]])
    return out, nf, at


def forward_advances(kind: int, T: int, param: int) -> int:
    """Iterations the backward sweep re-runs without recording, once the forward sweep has
    taken the first snapshots (``split_forward``)."""
    rows, nf, _ = split_forward(schedule(kind, T, param))
    return count_advances(rows[nf:])


def online_snapshots(c: int, T: int):
    """Where the online schedule of a ``while`` loop with ``c`` (even) snapshot slots keeps its
    snapshots after ``T`` iterations: ``(k, m)``, every ``k``-th iteration from 0, ``m`` of them.

    Going forward it snapshots every k-th iteration (k = 1 first); when the slots are full it keeps
    every other snapshot and doubles k, so at most ``c`` are kept whatever the count."""
    k, m = 1, 0
    for j in range(T):
        if j % k == 0:
            if m == c:
                m, k = c // 2, 2 * k
            if j % k == 0:
                m += 1
    return k, m


def segment_rows(T: int, k: int, s: int, c: int, extra: int):
    """The actions reversing segment ``s`` (iterations s*k .. min(T, s*k + k) - 1) of an online
    schedule: a binomial schedule with ``extra`` snapshots over the segment, whose slot 0 is
    the online snapshot ``s`` and whose other slots follow the ``c`` online ones. Returns
    ``(rows, number of rows)``."""
    start = int(s) * int(k)
    rows = binomial(min(int(T), start + int(k)) - start, extra).copy()
    moves = (rows[:, 0] == ADVANCE) | (rows[:, 0] == RECORD) | (rows[:, 0] == REVERSE)
    rows[moves, 1:] += start
    slots = (rows[:, 0] == SNAP) | (rows[:, 0] == RESTORE)
    rows[slots, 1] = np.where(rows[slots, 1] == 0, int(s), int(c) + rows[slots, 1] - 1)
    return rows, rows.shape[0]


def all_rows(kind: int, T: int, param: int):
    """(actions, number of actions) of the whole schedule, its first snapshots included, for
    generated code reversing a loop whose forward run took none (``loops.apply_nested``)."""
    acts = schedule(kind, T, param)
    return acts, acts.shape[0]


def schedule_rows(kind: int, T: int, param: int):
    """(actions, number of actions, actions the forward sweep runs, iteration after them) for
    generated code (see ``split_forward``)."""
    acts, nf, at = split_forward(schedule(kind, T, param))
    return acts, acts.shape[0], nf, at
