"""Store or recompute: an integer linear program over the forward values the backward sweep needs.

Candidates are top-level loops, whose per-iteration tapes can be stored for every iteration or
replaced by a checkpoint schedule: periodic or binomial for a ``for`` loop, online for a
``while`` loop (its count is known only once it has run); an inner loop's tape is part of its
top-level loop's. Memory is predicted on the allocation timeline of the forward
and backward sweeps (``timeline``); SciPy's ``milp`` (HiGHS) minimises the recomputation FLOPs
subject to the predicted memory staying under the budget at every point. ``Plan.values`` says,
per value the backward sweep needs, how it comes back.
"""
from __future__ import annotations

import math
import re
import warnings

import numpy as np

from ..errors import FlowgradError, InputError
from ..ir.core import (Assign, Call, Const, For, If, Op, Read, While, iter_reads, stmt_reads,
                       stmt_writes, walk)
from . import schedules as S
from . import timeline as TL
from . import values as V
from .timeline import HELD, REVERSING

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(budget) -> int | None:
    """``512 * 2**20``, ``"512MiB"``, ``"1.5 GB"`` -> bytes; None -> None."""
    if budget is None:
        return None
    if isinstance(budget, (int, np.integer)) and not isinstance(budget, bool):
        return int(budget)
    if isinstance(budget, float):
        return int(budget)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(budget))
    if not m or m.group(2).lower() not in _UNITS:
        raise InputError(f"memory_budget {budget!r} is not a size: use bytes or a string like '512MiB'")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def fmt_bytes(n) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


class _Unknown(Exception):
    pass


def evaluate(e, env):
    """The integer value of an index/shape expression given argument values (or _Unknown)."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Read):
        c = e.ref.container
        if c.ndim == 0 and c in env:
            return env[c]
        raise _Unknown(c.name)
    if isinstance(e, Op):
        args = [evaluate(a, env) for a in e.args]
        fn = {"add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b,
              "floor_divide": lambda a, b: a // b, "maximum": max, "minimum": min,
              "negative": lambda a: -a, "mod": lambda a, b: a % b}.get(e.name)
        if fn is None:
            raise _Unknown(e.name)
        return fn(*args)
    raise _Unknown(repr(e))


class Sizer:
    """Sizes at one call: ``sizer(container)`` its bytes, ``sizer.dim(expr)`` an extent (None
    where the arguments do not fix them)."""

    def __init__(self, env):
        self.env = env

    def __call__(self, c):
        try:
            return nbytes(c, self.env)
        except _Unknown:
            return None

    def dim(self, d):
        try:
            return evaluate(d, self.env)
        except _Unknown:
            return None


def nbytes(c, env):
    n = c.dtype.itemsize
    for d in c.shape:
        n *= evaluate(d, env)
    return n


def stmt_flops(s, env, strict=False):
    """Floating-point operations of one execution of a statement (nested loops multiplied out).
    A size not known from ``env`` counts as 1, or raises ``_Unknown`` when ``strict``."""
    from ..autodiff.rules import CALLS, ELEMENTWISE_FLOPS

    def size(shape):
        n = 1
        for d in shape:
            try:
                n *= evaluate(d, env)
            except _Unknown:
                if strict:
                    raise
        return n

    if isinstance(s, Assign):
        ops = sum(ELEMENTWISE_FLOPS.get(e.name, 1) for e in _ops(s.expr))
        return max(1, ops) * size(s.dst.shape)
    if isinstance(s, Call):
        return CALLS[s.op].flops(s, size)
    if isinstance(s, For):
        try:
            trips = len(range(evaluate(s.start, env), evaluate(s.stop, env), evaluate(s.step, env)))
        except _Unknown:
            if strict:
                raise
            trips = 1
        return trips * sum(stmt_flops(t, env, strict) for t in s.body)
    if isinstance(s, If):
        return max(sum(stmt_flops(t, env, strict) for t in s.then), sum(stmt_flops(t, env, strict) for t in s.orelse))
    if isinstance(s, While):
        return sum(stmt_flops(t, env, strict) for t in s.body)
    return 0


def _ops(e):
    if isinstance(e, Op):
        yield e
        for a in e.args:
            yield from _ops(a)


# A nested loop's option of being part of the tape of the loop it is nested in (which is then
# checkpointed): its parameter in ``LoopCandidate.options``
INSIDE = -1

# A while loop's trip count is known only when it has run: its online schedules are costed for
# this many iterations (the memory they need does not depend on the count).
NOMINAL_TRIPS = 1000


class LoopCandidate:
    """A top-level loop whose tape the plan may replace: ``key`` (``loops.top_loops``), its
    iterations (None for a ``while`` loop), tape bytes per iteration (mean and largest), state
    bytes, FLOPs per iteration, and why it cannot be checkpointed (or None)."""

    def __init__(self, key, loop, trips, iter_bytes, state_bytes, iter_flops, reason=None, most_bytes=None,
                 own_bytes=None):
        self.key, self.loop, self.trips = key, loop, trips
        self.iter_bytes, self.state_bytes, self.iter_flops = iter_bytes, state_bytes, iter_flops
        self.most_bytes = iter_bytes if most_bytes is None else most_bytes   # the largest iteration's tape
        # per iteration, the tape besides that of the nested loops planned on their own
        self.own_bytes = iter_bytes if own_bytes is None else own_bytes
        self.reason = reason
        self.replay_bytes = 0    # arrays and temporaries replaying iterations adds while reversing
        self.parent = None       # a nested loop (``loops.nested_loops``): the candidate it is nested in, ...
        self.runs = 1            # ... how often it runs in the call ...
        self.entry_bytes = 0     # ... and the bytes of a tape entry besides its data
        self.inside_from = None  # the first of a nested loop's options applying inside a checkpointed parent

    @property
    def name(self):
        what = f"loop over {self.loop.var.name}" if isinstance(self.loop, For) else "while loop"
        return what + (f" ({self.loop.loc})" if self.loop.loc else "")

    def options(self):
        """(kind, param, memory while reversing, memory held from the loop on, extra FLOPs); a
        ``while`` loop's store-all memory is None (it grows with a count not known yet).

        Option 0 stores every iteration's tape (besides the nested loops planned on their own). A
        nested loop's memory is that of all its runs, held with its top-level loop's tape, and
        its options from ``inside_from`` on apply when the loop it is nested in is checkpointed:
        to be part of that loop's tape (``INSIDE``), or, inside a binomial schedule of it, to be
        scheduled in each iteration it records (``loops.apply_nested``), which changes the
        memory while that loop is reversed by the difference (a negative number)."""
        if self.trips is None:
            return self._online_options()
        T, R = self.trips, self.runs
        opts = [(S.STORE_ALL, 0, R * T * self.own_bytes, R * T * self.own_bytes, 0)]
        scheds = self._schedules(split=self.parent is None) if self.reason is None and T >= 2 else []
        if self.parent is None:
            return opts + scheds
        state = self.state_bytes + self.entry_bytes          # kept per run
        opts += [(kind, param, R * state + rev, R * state, R * flops) for kind, param, rev, _, flops in scheds]
        self.inside_from = len(opts)
        # per iteration of the loop around, its runs keep a state each instead of their tapes;
        # replaying that loop's iterations already counts the arrays and temporaries replaying adds
        per = R / (self.parent.runs * self.parent.trips)
        return opts + [(S.STORE_ALL, INSIDE, 0, 0, 0)] + \
            [(kind, param, rev - self.replay_bytes + per * (state - T * self.iter_bytes), 0, R * flops)
             for kind, param, rev, _, flops in scheds]

    def _schedules(self, split):
        """The periodic and binomial options: (kind, param, memory while reversing, snapshots held,
        extra FLOPs). ``split``: the forward sweep takes the first snapshots (``split_forward``:
        the schedule is built, then split, with copies), else the reversal does, and the
        snapshots live only while it runs."""
        T, B, Sb, C, most = self.trips, self.iter_bytes, self.state_bytes, self.iter_flops, self.most_bytes
        copies = 3 if split else 1
        opts = []
        ks = sorted({k for k in (2, 4, 8, 16, 32, 64, 128, 256, 512, int(math.isqrt(T)) or 1,
                                 int(math.isqrt(T)) + 1) if 1 < k < T})
        for k in ks:
            # split: the forward sweep takes every snapshot, the backward only records each segment
            # again; else the reversal advances through the loop first
            slots = S.periodic_slots(T, k)
            held, sched = slots * Sb if split else 0, copies * S.schedule_bytes(T, slots)
            opts.append((S.PERIODIC, k, slots * Sb + min(k * most, T * B) + sched + self.replay_bytes, held,
                         T * C if split else 2 * T * C))
        for c in range(0, min(T, 40)):
            adv = S.revolve_formula(T, c)
            held, sched = (c + 1) * Sb if split else 0, copies * S.schedule_bytes(T, c + 1)
            opts.append((S.BINOMIAL, c, (c + 1) * Sb + most + sched + self.replay_bytes, held, (adv + T) * C))
            if S.binomial_slots(T, c) >= T:
                break
        return opts

    def _online_options(self):
        """Store-all, then online schedules with c (even) snapshots going forward and c more per
        segment: 2c states and one iteration's tape, whatever the count; costed at
        ``NOMINAL_TRIPS`` iterations."""
        Sb, C, most, T = self.state_bytes, self.iter_flops, self.most_bytes, NOMINAL_TRIPS
        opts = [(S.STORE_ALL, 0, None, None, 0)]
        if self.reason is not None:
            return opts
        for c in (2, 4, 8, 16, 32, 64):
            seg = -(-3 * T // (2 * c))                   # segments hold T/c to 2T/c iterations
            adv = -(-T // seg) * S.revolve_formula(seg, c) + T
            opts.append((S.ONLINE, c, 2 * c * Sb + most + 3 * S.schedule_bytes(2 * seg, c + 1) + self.replay_bytes,
                         2 * c * Sb, adv * C))
        return opts


class Plan:
    """The planner's decision: per loop a schedule, per intermediate store/recompute, and the report."""

    def __init__(self):
        self.loops = []          # (LoopCandidate, kind, param, memory, flops)
        self.budget = None
        self.peak = 0
        self.store_all_peak = 0
        self.min_peak = 0
        self.strategy = "store_all"
        self.notes = []
        self.points = []         # the allocation timeline (``timeline.Point``)
        self.memory = {}         # decision key -> bytes by phase of the chosen option
        self.values = []         # ``Value`` per forward value the backward sweep needs
        self.recompute = ()      # names of the values evaluated again in the backward sweep
        self.value_flops = {}    # value name -> FLOPs evaluating it again costs
        self.inside = set()      # nested loops scheduled within each iteration a checkpointed parent records

    def loop_plan(self, param_containers):
        """``build_reverse``'s loop_plan: loop key -> (kind, parameter container)."""
        return {cand.key: (kind, param_containers[cand.key])
                for cand, kind, param, _, _ in self.loops if kind != S.STORE_ALL}

    def params(self):
        return {cand.key: param for cand, kind, param, _, _ in self.loops}

    def key(self):
        return tuple((cand.key, kind) for cand, kind, _, _, _ in self.loops)

    def plot(self, path):
        """Draw the predicted memory timeline of the plan into ``path`` (matplotlib): per step
        of the forward and backward sweeps, the arrays and temporaries live there and each
        loop's tape or snapshots, against the budget."""
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as exc:
            raise FlowgradError("explain(..., plot=...) needs matplotlib: pip install matplotlib") from exc
        mib = 2.0 ** 20
        xs = np.arange(len(self.points))
        layers = [("arrays and temporaries", [p.base / mib for p in self.points])]
        for v, mem in self.memory.items():
            layers.append((f"{v}: tape / snapshots" if v in {c.key for c, *_ in self.loops} else f"value {v}",
                           [mem.get(p.phases.get(v), 0) / mib for p in self.points]))
        fig, ax = plt.subplots(figsize=(8, 4))
        ax.stackplot(xs, *[ys for _, ys in layers], labels=[name for name, _ in layers], step="mid", alpha=0.8)
        if self.budget is not None:
            ax.axhline(self.budget / mib, color="k", ls="--", lw=1, label=f"budget {fmt_bytes(self.budget)}")
        split = sum(1 for p in self.points if p.what[0] == "forward")
        ax.axvline(split - 0.5, color="grey", lw=0.8)
        ax.set_xticks(xs)
        ax.set_xticklabels([(str(p.what[1]).rsplit("/", 1)[-1] if p.what[1] else p.what[2]) for p in self.points],
                           rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("MiB")
        ax.set_title(f"predicted memory: forward | backward (peak {fmt_bytes(self.peak)})")
        ax.legend(fontsize=7, loc="upper left")
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)

    @property
    def extra_flops(self):
        return sum(f for *_, f in self.loops) + sum(self.value_flops[k] for k in self.recompute)

    def __str__(self):
        lines = [f"memory plan ({self.strategy})"]
        if self.budget is not None:
            lines.append(f"  budget:          {fmt_bytes(self.budget)}")
        store = fmt_bytes(self.store_all_peak) + \
            (" and every while loop iteration" if any(c.trips is None for c, *_ in self.loops) else "")
        lines.append(f"  predicted peak:  {fmt_bytes(self.peak)}  (store-all: {store}, "
                     f"minimum possible: {fmt_bytes(self.min_peak)})")
        lines.append(f"  extra FLOPs:     {self.extra_flops:.3g}")
        if not self.loops:
            lines.append("  no loop tapes to plan: every value the backward sweep needs is stored")
        for cand, kind, param, mem, flops in self.loops:
            trips = "iterations not known yet" if cand.trips is None else f"{cand.trips} iterations"
            if cand.parent is not None:
                trips += f" per run, {cand.runs} runs (in the {cand.parent.name})"
            memory = "grows with the iterations" if mem is None else fmt_bytes(mem)
            extra = f"+{flops:.3g} FLOPs" + (f" (at {NOMINAL_TRIPS} iterations)" if cand.trips is None else "")
            if param == INSIDE:
                how = f"part of the tape of the {cand.parent.name}, which is checkpointed"
            elif cand.key in self.inside:
                how = f"{schedule_text(kind, param)} in each iteration the {cand.parent.name} records, {extra}"
            else:
                how = f"{schedule_text(kind, param)}: {memory}, {extra}"
            lines.append(f"  {cand.name}: {trips} x {fmt_bytes(cand.iter_bytes)} tape, "
                         f"state {fmt_bytes(cand.state_bytes)} -> {how}" + (f"  [{cand.reason}]" if cand.reason else ""))
        if self.values:
            lines.append("  values the backward sweep needs:")
            lines.extend(f"    {v}" for v in self.values)
        for n in self.notes:
            lines.append(f"  note: {n}")
        return "\n".join(lines)


class Chosen:
    """A plan's schedules as the program cache keeps them: ``(loop key, kind, parameter)`` per
    loop not storing every iteration (``Plan.key`` and ``Plan.params`` of that plan)."""

    recompute = ()

    def __init__(self, loops):
        self.loops = loops

    def key(self):
        return tuple((key, kind) for key, kind, _ in self.loops)

    def params(self):
        return {key: param for key, _, param in self.loops}


def schedule_text(kind, param):
    return {S.STORE_ALL: "store every iteration", S.PERIODIC: f"periodic snapshots every {param}",
            S.BINOMIAL: f"binomial schedule with {param} snapshots",
            S.ONLINE: f"online schedule with {param} + {param} snapshots"}[kind]


class _Program:
    """The 0/1 program's matrices: one variable per option of each decision (``solve``); one
    memory row per distinct set of phases on the timeline, with its largest base."""

    def __init__(self, items, points, constraints=()):
        from scipy.optimize import LinearConstraint
        rows = TL.rows(points)
        self.items, self.n = items, sum(len(opts) for _, opts in items)
        self.base = np.array(list(rows.values()), dtype=float)
        self.cost = np.zeros(self.n)
        onehot = np.zeros((len(items), self.n))
        self.A = np.zeros((len(rows), self.n))
        k = 0
        for gi, (var, opts) in enumerate(items):
            for memory, c in opts:
                self.cost[k] = c
                onehot[gi, k] = 1
                for ri, key in enumerate(rows):
                    self.A[ri, k] = memory.get(dict(key).get(var), 0)
                k += 1
        self.scale = max(1.0, float(np.max(np.abs(self.A))) if self.A.size else 1.0)
        self.cons = [LinearConstraint(onehot, 1, 1)]
        if constraints:
            first = np.cumsum([0] + [len(opts) for _, opts in items])
            A = np.zeros((len(constraints), self.n))
            for r, (terms, _, _) in enumerate(constraints):
                for (g, o), coef in terms:
                    A[r, first[g] + o] += coef
            self.cons.append(LinearConstraint(A, [lo for _, lo, _ in constraints], [hi for _, _, hi in constraints]))

    def minimum(self):
        """The smallest peak any choice reaches: minimise p with every row's memory <= p."""
        from scipy.optimize import Bounds, LinearConstraint, milp
        if not self.n:
            return float(max(self.base, default=0))
        A = np.hstack([self.A / self.scale, -np.ones((len(self.base), 1))])
        cons = [LinearConstraint(np.hstack([c.A, np.zeros((c.A.shape[0], 1))]), c.lb, c.ub) for c in self.cons]
        cons.append(LinearConstraint(A, -np.inf, -self.base / self.scale))
        objective = np.zeros(self.n + 1)
        objective[-1] = 1
        res = milp(objective, constraints=cons, integrality=np.r_[np.ones(self.n), 0],
                   bounds=Bounds(np.r_[np.zeros(self.n), -np.inf], np.r_[np.ones(self.n), np.inf]))
        x = np.round(res.x[:-1])
        return float(np.max(self.base + self.A @ x))

    def choose(self, budget):
        """The cheapest choice within ``budget`` (an option index per decision), or None."""
        from scipy.optimize import Bounds, LinearConstraint, milp
        if not self.n:
            return []
        cons = self.cons + [LinearConstraint(self.A / self.scale, -np.inf, (budget - self.base) / self.scale)]
        tie = self.A.max(axis=0) / self.scale * 1e-9 * max(1.0, float(np.max(self.cost)))   # equal cost: less memory
        res = milp(self.cost + tie, constraints=cons, integrality=np.ones(self.n), bounds=Bounds(0, 1))
        if not res.success:
            return None
        x = np.round(res.x).astype(int)
        choice, k = [], 0
        for _, opts in self.items:
            choice.append(next(j for j in range(len(opts)) if x[k + j]))
            k += len(opts)
        return choice


def solve(items, budget, points, constraints=()):
    """The 0/1 program shared by every planner.

    ``items``: per decision (a loop's schedule, a value stored or recomputed) ``(key, options)``,
    each option ``(memory, cost)`` with ``memory`` its bytes by phase (``timeline``: a point's
    phase of that key), of which exactly one is chosen; ``points``: the timeline. Minimise total
    cost subject to the memory at every point staying within ``budget`` and to ``constraints``:
    each ``(terms, low, high)``, ``low <= sum of coefficient * chosen <= high`` over its terms
    ``((decision, option), coefficient)``. Returns the chosen option index per decision, or raises
    FlowgradError naming the minimum budget.
    """
    program = _Program(items, points, constraints)
    choice = program.choose(budget) if max(program.base, default=0) <= budget else None
    if choice is None:
        raise FlowgradError(_infeasible(budget, program.minimum()))
    return choice


def peak_of(points, memory):
    """The largest memory on the timeline given ``memory``: key -> bytes by phase."""
    return max((p.total(memory) for p in points), default=0)


def _infeasible(budget, minimum):
    return (f"memory_budget {fmt_bytes(budget)} is below the minimum this gradient needs: "
            f"{fmt_bytes(minimum)} ({int(minimum)} bytes); raise the budget to at least that")


def plan_program(prog, gp, env, budget, strategy, backend="numpy", report=True):
    """Plan the loops of a captured program for one call (``env``: argument containers -> values).
    ``report``: predict the memory on the timeline and say how each value comes back (for
    ``explain`` and budgets); without it, the ``"fastest"`` strategy only chooses the loops'
    schedules (a first call then does not pay for the timeline and the 0/1 program)."""
    plan = Plan()
    plan.budget = budget
    plan.strategy = strategy
    cands = []
    envs = _envs_at_loops(prog.body, env)
    from . import loops as loop_ckpt
    recorded_loops = dict(loop_ckpt.top_loops(gp.forward))
    for key, loop in loop_ckpt.top_loops(prog.body):
        lenv = envs[id(loop)]
        trips = None
        if isinstance(loop, For):
            try:
                trips = len(range(evaluate(loop.start, lenv), evaluate(loop.stop, lenv), evaluate(loop.step, lenv)))
            except _Unknown:
                _unplanned(plan, loop, "its trip count is not known from the arguments")
                continue
        recorded = recorded_loops.get(key, loop)

        def tape_bytes(e, recorded=recorded):
            return _pushed_bytes(recorded.body, e, TL.ENTRY_BYTES[backend])

        try:
            iter_bytes, most_bytes = _over_iterations(loop, lenv, tape_bytes)
        except _Unknown:
            _unplanned(plan, loop, "its tape's size is not known from the arguments")
            continue
        if iter_bytes == 0:
            continue
        rest = [s for s in prog.body if s is not loop]
        state = loop_ckpt.state_containers(loop, rest)
        reason = loop_ckpt.checkpointable(loop, state)
        try:
            state_bytes = sum(nbytes(c, lenv) for c in state)
        except _Unknown:
            state_bytes, reason = 0, reason or "state size not known"
        try:
            flops, _ = _over_iterations(loop, lenv, lambda e: sum(stmt_flops(s, e, True) for s in loop.body))
        except _Unknown:
            flops = sum(stmt_flops(s, lenv) for s in loop.body)
        cands.append(LoopCandidate(key, loop, trips, iter_bytes, state_bytes, flops, reason, most_bytes))
    if strategy == "fastest" and not report:      # (it schedules no loop holding loops: no nested candidates)
        _record(plan, cands, faster_recomputed(cands, backend))
        return plan
    tops = len(cands)
    cands += _nested_candidates(prog, gp, cands, envs, backend)
    sizer = Sizer(env)
    found = V.candidates(gp, sizer, lambda s: stmt_flops(s, env)) if backend == "numpy" else []
    plan.points, replay, recomputable = TL.build(gp, sizer, _positions(gp, [c.key for c in cands[:tops]]), backend,
                                                 [(key, c, chain) for key, c, chain, _ in found])
    for c in cands:
        top = _top(c)
        c.replay_bytes = replay.get(top.key, 0)
        if c is not top:                # a nested loop's tape lives and goes with its top-level loop's
            for p in plan.points:
                if top.key in p.phases:
                    p.phases[c.key] = p.phases[top.key]
    # per loop: its options the timeline can count (a while loop's store-all cannot be)
    allowed = [[j for j, o in enumerate(c.options()) if o[2] is not None] for c in cands]
    items = [(c.key, [(_phases(c.options()[j]), c.options()[j][4]) for j in js]) for c, js in zip(cands, allowed)]
    # per value: kept (option 0) or evaluated again (option 1)
    values = [(key, c, flops) for key, c, _, flops in found if key in recomputable]
    items += [(key, [({TL.GAP: recomputable[key][0], TL.AGAIN: recomputable[key][0]}, 0),
                     ({TL.AGAIN: sum(recomputable[key][:2])}, flops)]) for key, _, flops in values]
    # evaluating a value again reads what its definition read: not both it and one of those
    # recomputed later (that one is not there yet)
    at = {c: (len(cands) + k, recomputable[key][2]) for k, (key, c, _) in enumerate(values)}
    exclusive = [((at[c][0], 1), (at[u][0], 1)) for key, c, _ in values for u in recomputable[key][3]
                 if u in at and at[u][1] > at[c][1]]
    constraints = [([(a, 1), (b, 1)], -np.inf, 1) for a, b in exclusive] + _nesting(cands)
    plan.store_all_peak = peak_of(plan.points, {key: opts[0][0] for key, opts in items
                                                if key not in {c.key for c in cands}} |
                                  {c.key: _phases(c.options()[0]) for c in cands if c.options()[0][2] is not None})
    plan.min_peak = _Program(items, plan.points, constraints).minimum()
    if strategy == "store_all":
        choice = [0] * len(items)
    elif strategy == "fastest":
        choice = faster_recomputed(cands, backend) + [0] * (len(items) - len(cands))
    elif strategy == "recompute_all":
        conflicts = {frozenset((i, j)) for (i, _), (j, _) in exclusive}
        chosen = set()              # every value it may: none excluded by one already chosen
        for k in range(len(cands), len(items)):
            if not any(frozenset((k, j)) in conflicts for j in chosen):
                chosen.add(k)
        loops = []
        for c in cands:                 # a nested loop scheduled where it may: inside a binomial one too
            opts = c.options()
            if c.parent is None:
                loops.append(_logarithmic(c, range(len(opts))))
                continue
            around = c.parent.options()[loops[cands.index(c.parent)]]
            among = range(c.inside_from) if loops[cands.index(c.parent)] == 0 else \
                range(c.inside_from + 1, len(opts)) if around[0] == S.BINOMIAL else ()
            loops.append(_logarithmic(c, among) if among else c.inside_from)
        choice = loops + [int(k in chosen) for k in range(len(cands), len(items))]
    else:
        picked = solve(items, budget if budget is not None else float("inf"), plan.points, constraints)
        choice = [js[j] for js, j in zip(allowed, picked)] + picked[len(cands):]
    _record(plan, cands, choice)
    plan.memory = {cand.key: _phases(cand.options()[j]) for cand, j in zip(cands, choice)
                   if cand.options()[j][2] is not None}
    for (key, opts), j in zip(items[len(cands):], choice[len(cands):]):
        plan.memory[key] = opts[j][0]
    plan.recompute = tuple(sorted(key for (key, _, _), j in zip(values, choice[len(cands):]) if j == 1))
    plan.value_flops = {key: flops for key, _, flops in values}
    plan.peak = peak_of(plan.points, plan.memory)
    plan.values = _values(prog, gp, Sizer(env), plan)
    return plan


def _record(plan, cands, choice):
    """Put the chosen option of each loop candidate (an index into its options) into ``plan``."""
    for cand, j in zip(cands, choice):
        kind, param, mem, _, flops = cand.options()[j]
        plan.loops.append((cand, kind, param, mem, flops))
        if cand.inside_from is not None and j > cand.inside_from:
            plan.inside.add(cand.key)
        if mem is None:
            _unplanned(plan, cand.loop, "storing every iteration of a while loop, whose count is not known "
                                        "before it runs")


# A tape up to this size stays in the cache between the forward sweep and the backward (the
# benchmark machine's last-level cache is 32 MiB, shared): storing it costs no traffic to memory.
CACHED_TAPE = 8 * 2**20
# Running a loop again costs less than streaming its tape to memory and back when it takes fewer
# FLOPs than this per byte of tape. Measured with native code, one extra forward of the loop
# (periodic snapshots) against storing every iteration, gradient times: binomial_option 0.62
# FLOPs per byte, 12.5 -> 8.4 ms; durbin 0.62, 6.9 -> 6.3; heat_1d_explicit 0.50, 39.6 -> 34.3;
# subcycled_reaction_diffusion 0.65, 30.0 -> 25.0; but nonlinear_diffusion_2d 1.25, 71 -> 89 ms;
# masked_histogram 1.50, floyd_warshall_soft 1.37 and burgers_1d 1.88, 1.26-1.5x slower.
RECOMPUTE_FLOPS_PER_TAPE_BYTE = 0.8


def faster_recomputed(cands, backend):
    """The ``"fastest"`` strategy's option per loop candidate (an index into its options): every
    iteration stored, except a top-level loop of straight-line statements, run by the native
    backend, for which periodic snapshots (the schedule holding the least) save more than
    ``CACHED_TAPE`` of tape and running the loop once more takes fewer FLOPs than
    ``RECOMPUTE_FLOPS_PER_TAPE_BYTE`` per byte saved. The backward sweep then runs the loop again
    a segment at a time, with a tape of one segment. Not a loop holding loops: replaying them
    loses the tapes their nests save at once (gramschmidt, 0.50 FLOPs per byte, ran 1.55x slower)."""
    choice = []
    for c in cands:
        opts = c.options()
        periodic = [j for j, o in enumerate(opts) if o[0] == S.PERIODIC]
        if backend != "native" or c.parent is not None or c.trips is None or not periodic or \
                any(isinstance(s, (For, While)) for s in walk(c.loop.body)):
            choice.append(0)
            continue
        j = min(periodic, key=lambda j: opts[j][2])
        # (the arrays replaying adds, known only on the timeline, left out: ``explain`` decides
        # as a call does)
        saved = c.trips * c.iter_bytes - (opts[j][2] - c.replay_bytes)
        choice.append(j if saved > CACHED_TAPE and opts[j][4] < RECOMPUTE_FLOPS_PER_TAPE_BYTE * saved else 0)
    return choice


def _nested_candidates(prog, gp, cands, envs, backend):
    """Candidates for the ``for`` loops nested in planned top-level ``for`` loops whose counts,
    tapes and states the arguments size (``loops.nested_loops``); each with its parent (the
    candidate of the nearest loop around it) and its runs in the call. Sets the parents' tapes
    besides those of their nested candidates (``own_bytes``)."""
    from . import loops as loop_ckpt
    by_key = {c.key: c for c in cands if isinstance(c.loop, For) and c.trips is not None}
    recorded = {s.var.name: s for s in walk(gp.forward) if isinstance(s, For)}
    entry = TL.ENTRY_BYTES[backend]
    out = []
    for key, loop, outer in loop_ckpt.nested_loops(prog.body):
        top = by_key.get(outer[0].var.name)
        if top is None or key not in recorded:
            continue
        env = envs[id(top.loop)]
        try:
            runs = math.prod(len(range(evaluate(o.start, env), evaluate(o.stop, env), evaluate(o.step, env)))
                             for o in outer)
            trips = len(range(evaluate(loop.start, env), evaluate(loop.stop, env), evaluate(loop.step, env)))
            iter_bytes, most_bytes = _over_iterations(loop, env, lambda e: _pushed_bytes(
                recorded[key].body, e, entry))
            state = loop_ckpt.state_containers(loop, loop_ckpt.outside(prog.body, loop))
            state_bytes = sum(nbytes(c, env) for c in state)
        except _Unknown:
            continue                     # sized with the loop it is nested in, as part of its tape
        try:
            flops = _over_iterations(loop, env, lambda e: sum(stmt_flops(s, e, True) for s in loop.body))[0]
        except _Unknown:
            flops = sum(stmt_flops(s, env) for s in loop.body)
        if iter_bytes == 0 or runs == 0:
            continue
        cand = LoopCandidate(key, loop, trips, iter_bytes, state_bytes, flops,
                             loop_ckpt.checkpointable(loop, state), most_bytes)
        cand.parent = next(by_key[o.var.name] for o in reversed(outer) if o.var.name in by_key)
        cand.runs, cand.entry_bytes = runs, entry
        by_key[key] = cand
        out.append(cand)
    for parent in [c for c in cands if c.key in by_key] + out:
        inner = {c.key for c in out if c.parent is parent}
        if inner:
            env = envs[id(_top(parent).loop)]
            parent.own_bytes = _over_iterations(parent.loop, env, lambda e, parent=parent, inner=inner: _pushed_bytes(
                recorded[parent.key].body, e, entry, inner))[0]
    return out


def _nesting(cands):
    """The constraints tying each nested loop's options to its parent's (``LoopCandidate.options``;
    a ``for`` loop's options are its decision's, in order): those before ``inside_from`` exactly
    when the parent stores every iteration (its option 0); a schedule inside the parent only
    under a binomial schedule of it (one iteration recorded at a time)."""
    out = []
    for k, c in enumerate(cands):
        if c.parent is None:
            continue
        p = cands.index(c.parent)
        n = len(c.options())
        out.append(([((k, j), 1) for j in range(c.inside_from)] + [((p, 0), -1)], 0, 0))
        binomial = [j for j, o in enumerate(c.parent.options()) if o[0] == S.BINOMIAL]
        out.append(([((k, j), 1) for j in range(c.inside_from + 1, n)] + [((p, j), -1) for j in binomial],
                    -np.inf, 0))
    return out


def _top(cand):
    """The top-level loop candidate ``cand`` is nested in (``cand`` itself at the top level)."""
    while cand.parent is not None:
        cand = cand.parent
    return cand


class Value:
    """One forward value the backward sweep needs, and how the plan gets it back."""

    __slots__ = ("what", "bytes", "where", "decision")

    def __init__(self, what, nbytes, where, decision):
        self.what, self.bytes, self.where, self.decision = what, nbytes, where, decision

    def __str__(self):
        return f"{self.what} ({fmt_bytes(self.bytes)}{', ' + str(self.where) if self.where else ''}): {self.decision}"


def _values(prog, gp, size, plan):
    """Per value: what the backward sweep needs, its size, the user's line, the decision."""
    from ..ir.printer import ref_text
    from .loops import top_loops
    out = []
    chosen = {cand.key: (cand, kind, param) for cand, kind, param, _, _ in plan.loops}
    scheduled = {k for k, (_, kind, _) in chosen.items() if kind != S.STORE_ALL}
    in_loops = set()
    for top_key, top_recorded in top_loops(gp.forward):
        for push, loops in _pushes(top_recorded):
            # the loop that decides: a scheduled one around the push, else the innermost planned
            key = next((k for k in loops if k in scheduled), None) or \
                next((k for k in reversed(loops) if k in chosen), top_key)
            recorded = loops[key] if key in loops else top_recorded
            cand, kind, param = chosen.get(key, (None, None, None))
            where = f"the loop over {key}" if isinstance(recorded, For) else "the while loop"
            in_loops.add(id(push))
            try:       # per iteration of the loop; a slice whose size follows the loop: its largest
                each = _over_iterations(recorded, size.env, lambda env, push=push, recorded=recorded: nbytes_of(
                    push.ref, Sizer(env)) * _multiplicity(recorded, push, env))[1]
            except _Unknown:
                each = 0
            if cand is None:
                how = "stored every iteration (loop not planned)"
            elif kind == S.STORE_ALL:
                count = "" if cand.trips is None else f"{cand.trips} iterations" + \
                    (f" of each of {cand.runs} runs" if cand.parent is not None else "") + ", "
                how = f"stored every iteration of {where} ({count}at most {fmt_bytes(each)} each)"
            else:
                how = f"recomputed: {where} replayed by its {schedule_text(kind, param)}" + \
                    (" from its state kept at each run's start" if cand.parent is not None else "")
            out.append(Value(ref_text(push.ref), each, push.loc, how))
    for s in walk(gp.forward):
        if s.__class__.__name__ == "Push" and id(s) not in in_loops:
            try:
                b = nbytes_of(s.ref, size)
            except _Unknown:
                b = 0
            out.append(Value(ref_text(s.ref), b, s.loc, "stored: one tape entry"))
    for ref, loc in gp.uncomputed:
        try:
            b = nbytes_of(ref, size)
        except _Unknown:
            b = 0
        out.append(Value(ref_text(ref), b, loc, "uncomputed: its update run backwards, nothing stored"))
    used_back = {r.ref.container for t in walk(gp.backward) for r in stmt_reads(t)}
    made = {}                           # forward container -> the user's line first writing it
    for t in walk(gp.forward):
        for w in stmt_writes(t):
            made.setdefault(w.container, getattr(t, "loc", None))
    for c in gp.forward_containers:
        if c.kind == "transient" and c.ndim and c in used_back and c in made:
            how = f"recomputed: evaluated again where the backward sweep first reads it " \
                f"(+{plan.value_flops[c.name]:.3g} FLOPs)" if c.name in plan.recompute else \
                "kept alive from the forward sweep to the backward"
            out.append(Value(c.name, size(c) or 0, made[c], how))
    for s in walk(prog.body):
        if isinstance(s, Call) and s.op == "fixed_point":
            out.append(Value(s.outputs[0].name, size(s.outputs[0]) or 0, s.loc,
                             "implicit: the fixed point's adjoint is solved at convergence, no iteration kept"))
    return out


def _pushes(loop):
    """(push, {variable: loop} of the ``for`` loops around it inside ``loop``, outermost first)
    for each push in ``loop``'s body."""
    out = []

    def visit(stmts, loops):
        for s in stmts:
            if s.__class__.__name__ == "Push":
                out.append((s, loops))
            elif isinstance(s, For):
                visit(s.body, {**loops, s.var.name: s})
            else:
                for block in (s.then, s.orelse) if isinstance(s, If) else (s.body,) if isinstance(s, While) else ():
                    visit(block, loops)
    visit(loop.body, {})
    return out


def nbytes_of(ref, size):
    n = ref.container.dtype.itemsize
    for d in ref.shape:
        v = size.dim(d)
        if v is None:
            raise _Unknown(ref.container.name)
        n *= v
    return n


def _phases(option):
    """A loop option's memory by timeline phase: its snapshots (or tape) held, and its memory while
    it is reversed."""
    return {HELD: option[3], REVERSING: option[2]}


def _unplanned(plan, loop, why):
    """A loop the planner cannot size: stored whole, outside the predicted peak. Under a budget
    that is worth a warning, since the budget may then be exceeded."""
    note = (f"loop over {loop.var.name}" if isinstance(loop, For) else "while loop") + \
        (f" ({loop.loc})" if loop.loc else "") + \
        f": {why}; every iteration is stored, and not counted in the predicted peak"
    plan.notes.append(note)
    if plan.budget is not None:
        warnings.warn(f"flowgrad memory_budget: {note}", RuntimeWarning, stacklevel=4)


def _envs_at_loops(body, env):
    """Per top-level loop, ``env`` with the integer scalars the statements before it define
    (``n = steps``, ``m = n // 2``): its trip count and sizes may read them."""
    env, out = dict(env), {}
    for s in body:
        if isinstance(s, (For, While)):
            out[id(s)] = dict(env)
        if isinstance(s, Assign) and not s.accumulate and s.dst.container.ndim == 0 \
                and s.dst.container.dtype.kind in "iu":
            try:
                env[s.dst.container] = evaluate(s.expr, env)
            except _Unknown:
                env.pop(s.dst.container, None)
            continue
        for t in walk([s]):
            for w in stmt_writes(t):
                if w.container.ndim == 0:
                    env.pop(w.container, None)
    return out


def _over_iterations(loop, env, fn, samples=64):
    """The mean and the largest value of ``fn(env)`` over the iterations of ``loop``: ``env``
    binds the loop variable where ``fn`` depends on it (a tape of ``V[:i + 1]``), evaluated at up
    to ``samples`` evenly spaced iterations."""
    try:
        value = fn(env)
        return value, value
    except _Unknown:
        if not isinstance(loop, For):
            raise
    values = range(evaluate(loop.start, env), evaluate(loop.stop, env), evaluate(loop.step, env))
    if not values:
        return 0, 0
    picks = sorted({values[round(j * (len(values) - 1) / max(1, samples - 1))] for j in range(samples)})
    got = [fn({**env, loop.var: v}) for v in picks]
    return sum(got) / len(got), max(got)


def _logarithmic(cand, among):
    """Of the options ``among``, the binomial one with about log2(T) snapshots (memory ~ log T),
    else the smallest."""
    opts = cand.options()
    want = max(1, math.ceil(math.log2(max(2, cand.trips or NOMINAL_TRIPS))))
    binom = [j for j in among if opts[j][0] in (S.BINOMIAL, S.ONLINE)]
    if not binom:
        return min(among, key=lambda j: opts[j][2] if opts[j][2] is not None else math.inf)
    return min(binom, key=lambda j: abs(opts[j][1] - want))


def _positions(gp, keys):
    """Loop key -> (index of the loop in the forward sweep, index of its reversal in the backward
    sweep): a ``for`` loop's reversal runs over its variable, a ``while`` loop's over its count."""
    from .loops import top_loops
    fwd = dict(top_loops(gp.forward))
    index = {id(s): k for k, s in enumerate(gp.forward)}
    out = {}
    for key in keys:
        loop = fwd.get(key)
        if loop is None:
            continue
        if isinstance(loop, For):
            back = lambda s, loop=loop: s.var is loop.var                    # noqa: E731
        else:
            counts = {t.dst.container for t in loop.body if isinstance(t, Assign) and t.accumulate}
            back = lambda s, counts=counts: isinstance(s.stop, Read) and s.stop.ref.container in counts  # noqa: E731
        bi = next((k for k, s in enumerate(gp.backward) if isinstance(s, For) and back(s)), None)
        out[key] = (index[id(loop)], bi)
    return out


def _pushed_bytes(stmts, env, entry_bytes, skip=frozenset()):
    """Bytes one run of ``stmts`` pushes on tapes: nested loops multiplied out (a trip count not
    known counts once), a branch as its larger arm (an upper bound on every path); each entry
    with ``entry_bytes`` besides its data (a Python list tape's array object). ``skip``: the
    variables of nested loops left out."""
    total = 0
    for s in stmts:
        if s.__class__.__name__ == "Push":
            n = s.ref.container.dtype.itemsize
            for d in s.ref.shape:
                n *= evaluate(d, env)
            total += n + entry_bytes
        elif isinstance(s, For):
            if s.var.name in skip:
                continue
            try:
                trips = len(range(evaluate(s.start, env), evaluate(s.stop, env), evaluate(s.step, env)))
            except _Unknown:
                trips = 1
            total += trips * _pushed_bytes(s.body, env, entry_bytes, skip)
        elif isinstance(s, If):
            total += max(_pushed_bytes(s.then, env, entry_bytes, skip), _pushed_bytes(s.orelse, env, entry_bytes, skip))
        elif isinstance(s, While):
            total += _pushed_bytes(s.body, env, entry_bytes, skip)
    return total


def _multiplicity(loop, push, env):
    """How many times a push inside ``loop``'s body runs per iteration (nested loops multiplied)."""
    def find(stmts, mult):
        for s in stmts:
            if s is push:
                return mult
            if isinstance(s, For):
                try:
                    trips = len(range(evaluate(s.start, env), evaluate(s.stop, env), evaluate(s.step, env)))
                except _Unknown:
                    trips = 1
                r = find(s.body, mult * trips)
                if r is not None:
                    return r
            elif isinstance(s, If):
                r = find(s.then, mult) or find(s.orelse, mult)
                if r is not None:
                    return r
            elif isinstance(s, While):
                r = find(s.body, mult)
                if r is not None:
                    return r
        return None
    return find(loop.body, 1) or 1


__all__ = ["parse_bytes", "plan_program", "solve", "Plan", "fmt_bytes", "iter_reads", "stmt_reads",
           "stmt_writes"]
