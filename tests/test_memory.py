"""Memory planning: the ILP, loop checkpoint schedules, and measured memory under a budget."""
import tracemalloc
import warnings

import numpy as np
import pytest

import flowgrad
from flowgrad.checkpoint import schedules as S
from flowgrad.checkpoint.plan import INSIDE, parse_bytes, solve
from flowgrad.checkpoint.timeline import ENTRY_BYTES, HELD, REVERSING, Point
from oracle import check_grad

MiB = 2 ** 20


# ---------------------------------------------------------------- the published worked example

def _one_point(groups, base=0):
    """Groups of (memory, cost) options all held at one moment: the timeline of a single point."""
    items = [(f"v{k}", [({REVERSING: m}, c) for m, c in g]) for k, g in enumerate(groups)]
    return items, [Point(base, {v: REVERSING for v, _ in items}, ("backward", None, "loop"))]


def _worked_example(budget):
    """Three overwritten 50 MiB intermediates, recompute costs 13, 26 and 39 MFLOP: each is a
    group of two options, (memory, cost) for store and for recompute."""
    items, points = _one_point([[(50 * MiB, 0), (0, cost * 10**6)] for cost in (13, 26, 39)])
    return solve(items, budget, points)


def test_the_constraint_holds_at_every_point_of_the_timeline():
    """Loop a's tape is held while b runs (100 MiB live besides), b's only while it reverses:
    at 160 MiB a must shrink (a: 50 held + b: 0 + 100 base at the first point), b need not."""
    items = [("a", [({HELD: 50 * MiB, REVERSING: 50 * MiB}, 0), ({HELD: 5 * MiB, REVERSING: 5 * MiB}, 7)]),
             ("b", [({HELD: 40 * MiB, REVERSING: 40 * MiB}, 0), ({HELD: 4 * MiB, REVERSING: 4 * MiB}, 9)])]
    points = [Point(100 * MiB, {"a": HELD}, ("forward", None, "call")),
              Point(10 * MiB, {"a": HELD, "b": REVERSING}, ("backward", None, "loop")),
              Point(10 * MiB, {"a": REVERSING}, ("backward", None, "loop"))]
    assert solve(items, 160 * MiB, points) == [0, 0]
    assert solve(items, 140 * MiB, points) == [1, 0]
    with pytest.raises(flowgrad.FlowgradError, match=r"minimum this gradient needs: 105\.0 MiB"):
        solve(items, 100 * MiB, points)


def test_worked_example_budget_for_all_three_stores_all():
    assert _worked_example(150 * MiB) == [0, 0, 0]


def test_worked_example_budget_for_two_recomputes_the_cheapest():
    assert _worked_example(100 * MiB) == [1, 0, 0]


def test_worked_example_infeasible_budget_names_the_minimum():
    items, points = _one_point([[(50 * MiB, 0), (10 * MiB, cost * 10**6)] for cost in (13, 26, 39)])
    with pytest.raises(flowgrad.FlowgradError, match=r"minimum this gradient needs: 30\.0 MiB"):
        solve(items, 20 * MiB, points)


def test_parse_bytes_units():
    assert parse_bytes("512MiB") == 512 * MiB
    assert parse_bytes("1.5 GB") == 1_500_000_000
    assert parse_bytes(1024) == 1024
    with pytest.raises(flowgrad.InputError, match="memory_budget"):
        parse_bytes("lots")


# ---------------------------------------------------------------- schedules


@pytest.mark.parametrize("T,c", [(2, 1), (10, 2), (37, 3), (100, 4), (1000, 10)])
def test_binomial_schedule_matches_revolve_formula(T, c):
    acts = S.binomial(T, c)
    assert S.count_advances(acts) == S.revolve_formula(T, c) == S.min_advances(T, c)
    rows = acts.tolist()
    recorded = sorted(j for op, a, b in rows if op == S.RECORD for j in range(a, b))
    reversed_ = [j for op, a, b in rows if op == S.REVERSE for j in range(b - 1, a - 1, -1)]
    assert recorded == list(range(T)) and reversed_ == list(range(T - 1, -1, -1))
    assert max(a for op, a, b in rows if op in (S.SNAP, S.RESTORE)) <= c


@pytest.mark.parametrize("T,k", [(1, 1), (7, 3), (10, 5), (12, 4)])
def test_periodic_schedule_reverses_every_iteration_once(T, k):
    acts = S.periodic(T, k).tolist()
    reversed_ = [j for op, a, b in acts if op == S.REVERSE for j in range(b - 1, a - 1, -1)]
    assert reversed_ == list(range(T - 1, -1, -1))
    assert S.periodic_slots(T, k) == -(-T // k)


@pytest.mark.parametrize("kind,T,param", [(S.PERIODIC, 1, 1), (S.PERIODIC, 12, 4), (S.PERIODIC, 100, 7),
                                           (S.BINOMIAL, 1, 0), (S.BINOMIAL, 37, 3), (S.BINOMIAL, 1000, 10),
                                           (S.BINOMIAL, 200, 0)])
def test_a_reversal_is_followed_by_a_restore_or_the_end(kind, T, param):
    # what a reversal leaves in the loop's state is never read: restores only their own pass
    # reads are not stored (``autodiff.restores.read_in_pass``)
    for rows in (S.schedule(kind, T, param), S.schedule_rows(kind, T, param)[0],
                 S.segment_rows(T, max(1, T // 3), 1, 4, param)[0] if T > 3 else S.schedule(kind, T, param)):
        ops = [op for op, _, _ in rows.tolist()]
        for k, op in enumerate(ops):
            if op == S.REVERSE:
                assert k + 1 == len(ops) or ops[k + 1] in (S.RESTORE, S.REVERSE), ops[k:k + 3]


def _replay_split(rows, nf, at, T):
    """Run a split schedule on positions: check every action starts where the state is, and
    return the iterations reversed (in order) and the iterations run without recording."""
    slot, pos, advanced = {0: 0}, 0, 0
    for op, a, b in rows[:nf].tolist():
        assert op in (S.SNAP, S.ADVANCE)
        if op == S.SNAP:
            slot[a] = pos
        else:
            assert pos == a
            pos = b
    assert pos == at and at <= T
    pos, reversed_ = T, []
    for op, a, b in rows[nf:].tolist():
        if op == S.SNAP:
            slot[a] = pos
        elif op == S.RESTORE:
            pos = slot[a]
        elif op in (S.ADVANCE, S.RECORD):
            assert pos == a, (op, a, b, pos)
            pos = b
            advanced += (b - a) if op == S.ADVANCE else 0
        else:
            assert pos == b
            reversed_ += list(range(b - 1, a - 1, -1))
            pos = a
    return reversed_, advanced


@pytest.mark.parametrize("kind,T,param", [(S.PERIODIC, 10, 3), (S.PERIODIC, 9, 3), (S.PERIODIC, 3, 5),
                                          (S.BINOMIAL, 1, 2), (S.BINOMIAL, 10, 2), (S.BINOMIAL, 100, 4),
                                          (S.BINOMIAL, 37, 0)])
def test_the_forward_sweep_takes_the_first_snapshots(kind, T, param):
    full = S.schedule(kind, T, param)
    rows, nf, at = S.split_forward(full)
    reversed_, advanced = _replay_split(rows, nf, at, T)
    assert reversed_ == list(range(T - 1, -1, -1))
    assert advanced == S.forward_advances(kind, T, param)
    if kind == S.PERIODIC and T > param:
        assert advanced == 0 and at == (T - 1) // param * param     # every snapshot taken going forward
    if kind == S.BINOMIAL and param and T > 2:
        assert advanced < S.count_advances(full)


# ---------------------------------------------------------------- checkpointed gradients


def nonlinear_steps(u, nu, steps):
    un = np.empty_like(u)
    for t in range(steps):
        f = 0.5 * u * u
        un[1:-1] = u[1:-1] - 0.1 * (f[2:] - f[:-2]) + nu * (u[2:] - 2.0 * u[1:-1] + u[:-2])
        un[0] = u[0]
        un[-1] = u[-1]
        u, un = un, u
    return np.sum(np.sin(u))


def _args(n=64, steps=40):
    rng = np.random.default_rng(3)
    return (0.5 + 0.3 * rng.standard_normal(n), 0.2, steps)


def _budget_between(fn, args, wrt, backend, where):
    """A budget ``where`` of the way from the smallest feasible peak up to the store-all peak."""
    store = flowgrad.explain(fn, *args, wrt=wrt, backend=backend)
    return int(store.min_peak + where * (store.store_all_peak - store.min_peak))


@pytest.mark.parametrize("where", [None, 0.5, 0.01])
def test_checkpointed_gradient_equals_store_all(where, backend):
    args = _args()
    ref = flowgrad.grad(nonlinear_steps, wrt=("u", "nu"), backend=backend)(*args)
    budget = None if where is None else _budget_between(nonlinear_steps, args, ("u", "nu"), backend, where)
    g = flowgrad.grad(nonlinear_steps, wrt=("u", "nu"), backend=backend, memory_budget=budget)
    out = g(*args)
    np.testing.assert_allclose(out[0], ref[0], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(out[1], ref[1], rtol=1e-13)
    if budget is not None:
        plan = g.planned(args)[2]
        assert plan.loops and plan.loops[0][1] != S.STORE_ALL, str(plan)


def test_checkpointed_gradient_matches_finite_differences():
    check_grad(nonlinear_steps, _args(16, 9), ("u", "nu"))


def time_dependent_steps_backwards(x, n):
    for t in reversed(range(n)):
        x = x + 0.01 * t * np.sin(x)      # each step depends on its t: replayed in its own order
    return np.sum(x * x)


@pytest.mark.parametrize("where", [0.5, 0.01])
def test_checkpointed_reversed_range(where, backend):
    args = (np.linspace(0.0, 1.0, 300), 60)
    ref = flowgrad.grad(time_dependent_steps_backwards, wrt="x", backend=backend)(*args)
    budget = _budget_between(time_dependent_steps_backwards, args, "x", backend, where)
    g = flowgrad.grad(time_dependent_steps_backwards, wrt="x", backend=backend, memory_budget=budget)
    np.testing.assert_allclose(g(*args), ref, rtol=1e-13, atol=1e-15)
    assert g.planned(args)[2].loops[0][1] != S.STORE_ALL
    check_grad(time_dependent_steps_backwards, (np.linspace(0.0, 1.0, 5), 7), "x", backend=backend)


def test_recompute_all_strategy_uses_a_binomial_schedule():
    args = _args(32, 20)
    g = flowgrad.grad(nonlinear_steps, wrt="u", backend="numpy", strategy="recompute_all")
    np.testing.assert_allclose(g(*args), flowgrad.grad(nonlinear_steps, wrt="u", backend="numpy")(*args),
                               rtol=1e-13, atol=1e-15)
    assert g.planned(args)[2].loops[0][1] == S.BINOMIAL


def test_budget_below_minimum_raises_with_the_minimum():
    g = flowgrad.grad(nonlinear_steps, wrt="u", backend="numpy", memory_budget=1000)
    with pytest.raises(flowgrad.FlowgradError, match=r"below the minimum this gradient needs: .* bytes"):
        g(*_args())


def test_explain_reports_plan(capsys):
    plan = flowgrad.explain(nonlinear_steps, *_args(), wrt="u", memory_budget="100KiB", backend="numpy")
    out = capsys.readouterr().out
    assert "predicted peak" in out and "loop over t" in out and "budget" in out
    assert plan.peak <= 100 * 1024


def test_measured_memory_stays_within_budget_and_falls():
    args = _args(4096, 200)
    store = flowgrad.explain(nonlinear_steps, *args, wrt="u", backend="numpy")
    budgets = [None, store.store_all_peak // 2, store.store_all_peak // 5, int(store.min_peak * 1.05)]
    peaks = []
    for budget in budgets:
        g = flowgrad.grad(nonlinear_steps, wrt="u", backend="numpy", memory_budget=budget)
        g(*args)
        tracemalloc.start()
        g(*args)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        if budget is not None:
            assert peak <= budget, (budget, peak)
        peaks.append(peak)
    assert peaks == sorted(peaks, reverse=True), peaks


def test_thousand_step_binomial_memory_is_logarithmic():
    """1000 steps with c = 10 snapshots: memory ~ (c + 1) states + one step's tape, not 1000 steps."""
    args = _args(2048, 1000)
    state = 2048 * 8
    g = flowgrad.grad(nonlinear_steps, wrt="u", backend="numpy", strategy="recompute_all")
    g(*args)
    plan = g.planned(args)[2]
    _, kind, c, _, _ = plan.loops[0]
    assert kind == S.BINOMIAL and c <= 12
    tracemalloc.start()
    g(*args)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    store_all_tape = 1000 * plan.loops[0][0].iter_bytes
    assert peak < store_all_tape / 10
    assert peak <= plan.peak, (peak, plan.peak)
    assert plan.loops[0][0].state_bytes * (c + 1) <= 12 * 2 * state


def backward_induction(v, p, steps):
    for i in range(steps - 1, -1, -1):
        v[:i + 1] = np.sin(p * v[1:i + 2] + (1.0 - p) * v[:i + 1])    # the slice shrinks each step
    return v[0]


def test_a_loop_whose_tape_shrinks_is_planned(backend):
    rng = np.random.default_rng(5)
    steps = 200         # a tape (160 KB) well above a schedule's own rows
    args = (rng.uniform(-1, 1, steps + 1), 0.3, steps)
    store = flowgrad.explain(backward_induction, *args, wrt=("v", "p"), backend=backend)
    cand = store.loops[0][0]
    # the tape of v[:i + 1] holds i + 1 values: 8 * (1 + ... + steps) bytes in all, the largest
    # 8 * steps, each entry with the backend's own bytes besides (a NumPy array object)
    extra = ENTRY_BYTES[backend]
    assert cand.trips * cand.iter_bytes == pytest.approx(8 * steps * (steps + 1) / 2 + steps * extra, rel=0.05)
    assert cand.most_bytes == 8 * steps + extra
    budget = (store.store_all_peak + store.min_peak) // 2
    g = flowgrad.grad(backward_induction, wrt=("v", "p"), backend=backend, memory_budget=budget)
    plan = g.planned(args)[2]
    assert plan.loops[0][1] != S.STORE_ALL and plan.peak <= budget, str(plan)
    ref = flowgrad.grad(backward_induction, wrt=("v", "p"), backend=backend)(*args)
    for got, want in zip(g(*args), ref):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    check_grad(backward_induction, args, ("v", "p"), backend=backend)


def linear_induction(v, p, steps):
    for i in range(steps - 1, -1, -1):
        v[:i + 1] = p * v[1:i + 2] + (1.0 - p) * v[:i + 1]     # 3 FLOPs per 8 bytes of tape
    return v[0]


@pytest.mark.native
def test_the_fastest_plan_runs_a_cheap_loop_again_instead_of_streaming_its_tape():
    steps = 2000                # a tape of 16 MB: it leaves the cache between the sweeps
    args = (np.random.default_rng(4).uniform(-1, 1, steps + 1), 0.3, steps)
    g = flowgrad.grad(linear_induction, wrt=("v", "p"), backend="native")
    assert [kind for _, kind, *_ in g.planned(args)[2].loops] == [S.PERIODIC]
    store = flowgrad.grad(linear_induction, wrt=("v", "p"), backend="native", strategy="store_all")
    assert not store.planned(args)[1]
    for got, want in zip(g(*args), store(*args)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    # a loop taking more FLOPs per byte of tape keeps it; so does the NumPy backend's
    assert [kind for _, kind, *_ in flowgrad.grad(backward_induction, wrt=("v", "p"), backend="native")
            .planned(args)[2].loops] == [S.STORE_ALL]
    assert not flowgrad.grad(linear_induction, wrt=("v", "p"), backend="numpy").planned(args)[1]
    with pytest.raises(flowgrad.InputError, match="strategy 'fastest' plans without a memory budget"):
        flowgrad.grad(linear_induction, memory_budget="1MiB", strategy="fastest")
    small = (args[0][:201], 0.3, 200)                           # a tape the cache holds
    assert not g.planned(small)[1]
    check_grad(linear_induction, small, ("v", "p"), backend="native")


def levinson(r):
    n = r.shape[0]
    y = np.zeros(n)
    z = np.zeros(n)
    y[0] = -r[0]
    beta, alpha = 1.0, -r[0]
    for k in range(1, n):                   # y and z grow a value each step: both are the state
        beta = (1.0 - alpha * alpha) * beta
        alpha = -(r[k] + r[k - 1::-1] @ y[:k]) / beta
        z[:k] = y[:k] + alpha * y[k - 1::-1]
        y[:k] = z[:k]
        y[k] = alpha
    return np.sum(y * y)


def test_a_loop_with_two_state_arrays_is_planned(backend):
    # the snapshots of y and z are zeroed in one loop nest, which binds both to their buffers
    # before it starts (a native nest once flattened a snapshot array before binding it)
    r = 0.5 ** np.arange(300) * np.random.default_rng(3).uniform(0.5, 1.0, 300)
    store = flowgrad.explain(levinson, r, wrt="r", backend=backend)
    budget = (store.store_all_peak + store.min_peak) // 2
    g = flowgrad.grad(levinson, wrt="r", backend=backend, memory_budget=budget)
    plan = g.planned((r,))[2]
    assert plan.loops[0][1] != S.STORE_ALL and plan.peak <= budget, str(plan)
    np.testing.assert_allclose(g(r), flowgrad.grad(levinson, wrt="r", backend=backend)(r), rtol=1e-12, atol=1e-14)
    check_grad(levinson, (r,), "r", backend=backend)


def csr_steps(indptr, indices, data, x, n_steps):
    n = indptr.shape[0] - 1
    for t in range(n_steps):
        y = np.zeros(n)
        for i in range(n):
            start = indptr[i]                   # recomputed in the backward, not taped
            end = indptr[i + 1]
            y[i] = data[start:end] @ x[indices[start:end]]
        x = np.tanh(y + x)
    return np.sum(x * x)


def test_checkpointed_loop_with_recomputed_row_values(backend):
    rng = np.random.default_rng(9)
    n = 200
    counts = rng.integers(0, 4, n)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    indices = np.concatenate([rng.choice(n, k, replace=False) for k in counts]).astype(np.int64)
    args = (indptr, indices, 0.3 * rng.standard_normal(indptr[-1]), rng.standard_normal(n), 30)
    store = flowgrad.explain(csr_steps, *args, wrt=("data", "x"), backend=backend)
    budget = (store.store_all_peak + store.min_peak) // 2
    g = flowgrad.grad(csr_steps, wrt=("data", "x"), backend=backend, memory_budget=budget)
    assert g.planned(args)[2].loops[0][1] != S.STORE_ALL
    ref = flowgrad.grad(csr_steps, wrt=("data", "x"), backend=backend)(*args)
    for got, want in zip(g(*args), ref):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    n = 8
    indptr, indices = indptr[:n + 1], indices[:indptr[n]] % n
    check_grad(csr_steps, (indptr, indices, args[2][:indptr[n]], args[3][:n], 3), ("data", "x"), backend=backend)


def nested_steps(x, steps):
    y = x.copy()
    n = y.shape[0]
    for t in range(steps):
        for i in range(1, n):
            y[i] = np.sin(y[i] + 0.3 * y[i - 1])
    return np.sum(y * y)


def steps_through_a_name(x, steps):
    n = steps // 2 + 1
    for t in range(n):
        x = np.sin(x) * 1.05
    return np.sum(x)


def data_dependent_steps(x):
    for t in range(np.argmax(x)):
        x = np.sin(x) * 1.05
    return np.sum(x)


def test_planner_sizes_nested_and_named_loops():
    x = np.linspace(0.0, 1.0, 30)
    plan = flowgrad.grad(nested_steps, wrt="x", memory_budget="1MiB").planned((x, 40))[2]
    assert plan.loops[0][0].iter_bytes >= 29 * 8, str(plan)          # every pass of the inner loop
    plan = flowgrad.grad(steps_through_a_name, wrt="x", memory_budget="1MiB").planned((x, 20))[2]
    assert plan.loops and plan.loops[0][0].trips == 11, str(plan)


def test_a_loop_the_planner_cannot_size_is_reported():
    x = np.linspace(0.0, 1.0, 30)
    g = flowgrad.grad(data_dependent_steps, wrt="x", memory_budget="1MiB")
    with pytest.warns(RuntimeWarning, match="not counted in the predicted peak"):
        out = g(x)
    np.testing.assert_allclose(out, flowgrad.grad(data_dependent_steps, wrt="x")(x), rtol=1e-13)


# ---------------------------------------------------------------- the allocation timeline


def _measured_peak(g, args):
    g(*args)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        g(*args)
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("name,sizes", [("nonlinear_diffusion_2d", (120, 12)), ("burgers_1d", None),
                                        ("vadv", None), ("adi", None)])
def test_the_timeline_bounds_the_measured_peak_tightly(name, sizes):
    """The predicted peak of the NumPy backend's store-all gradient is an upper bound on the
    measured one, and not a loose one: the planner's floor rests on it."""
    from benchmarks import kernels
    mod = kernels.load(name)
    args = mod.args("test")
    if sizes:
        n, steps = sizes
        args = (np.random.default_rng(0).uniform(0, 0.5, (n, n)), 0.1, steps)
    plan = flowgrad.explain(mod.kernel, *args, wrt=mod.WRT, backend="numpy")
    peak = _measured_peak(flowgrad.grad(mod.kernel, wrt=mod.WRT, backend="numpy"), args)
    assert peak <= plan.peak, (peak, plan.peak)
    assert plan.peak <= 1.25 * peak + 64 * 1024, (peak, plan.peak)


def temporaries(x):
    a = np.sin(x) * 2.0               # used once, early: let go before the rest runs
    s = np.sum(a * a)
    b = np.cos(x) + 1.0
    c = np.exp(b) * x
    return s + np.sum(c)


def test_numpy_backend_lets_arrays_go_after_their_last_use():
    x = np.linspace(0.0, 1.0, 200_000)          # 1.5 MiB per array
    g = flowgrad.grad(temporaries, backend="numpy")
    peak = _measured_peak(g, (x,))
    plan = flowgrad.explain(temporaries, x, backend="numpy")
    assert peak <= plan.peak
    # the forward keeps what the backward reads (b, for exp(b)'s adjoint: 1 array), the backward
    # its adjoints and temporaries; far below every array of the program held at once (> 10)
    assert peak < 8 * x.nbytes, peak / x.nbytes


def test_explain_names_each_value_and_draws_the_timeline(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "plan.png"
    args = _args(4096, 100)
    store = flowgrad.explain(nonlinear_steps, *args, wrt="u", backend="numpy")
    budget = (store.store_all_peak + store.min_peak) // 4
    plan = flowgrad.explain(nonlinear_steps, *args, wrt="u", backend="numpy", memory_budget=budget, plot=str(path))
    assert path.stat().st_size > 10_000
    (value,) = [v for v in plan.values if v.what == "u"]
    assert value.bytes == 4096 * 8 and "test_memory.py" in str(value.where)
    assert "recomputed" in value.decision and "loop over t" in value.decision
    store_value = [v for v in store.values if v.what == "u"][0]
    assert store_value.decision.startswith("stored every iteration")
    # the per-point constraint: every point of the chosen plan's timeline is within the budget
    assert max(p.total(plan.memory) for p in plan.points) == plan.peak <= budget


def leapfrog(q, p, steps):
    for t in range(steps):
        p -= 0.01 * np.sin(q)
        q += 0.01 * p
    return np.sum(q * q) + np.sum(p * p)


def test_explain_reports_uncomputed_values():
    args = (np.linspace(0, 1, 64), np.zeros(64), 10)
    plan = flowgrad.explain(leapfrog, *args, wrt=("q", "p"), backend="numpy", allow_uncompute=True)
    uncomputed = [v for v in plan.values if v.decision.startswith("uncomputed")]
    assert {v.what.split("[")[0] for v in uncomputed} == {"q", "p"}


# ---------------------------------------------------------------- while loops: the online schedule


def march(u, nu, tend):
    """A time loop of unknown count: float time and an integer counter carried."""
    t = 0.0
    k = 0
    while t < tend:
        f = 0.5 * u * u
        un = u.copy()
        un[1:-1] = u[1:-1] - 0.1 * (f[2:] - f[:-2]) + nu * (u[2:] - 2.0 * u[1:-1] + u[:-2])
        if k % 3 == 2:                    # a branch in the loop
            un = un * (1.0 - 0.01 * nu)
        u = un
        t = t + 0.01
        k += 1
    return np.sum(np.sin(u)) + 0.001 * k


def _march_args(n=512, tend=0.5):
    return (0.5 + 0.3 * np.random.default_rng(7).standard_normal(n), 0.2, tend)


@pytest.mark.parametrize("tend", [0.0, 0.005, 0.07, 0.5])        # 0, 1, 7 and 50 iterations
def test_online_schedule_gradient_equals_store_all(tend, backend):
    args = _march_args(tend=tend)
    ref = flowgrad.grad(march, wrt=("u", "nu"), backend=backend)(*args)
    store = flowgrad.explain(march, *args, wrt=("u", "nu"), backend=backend)
    g = flowgrad.grad(march, wrt=("u", "nu"), backend=backend, memory_budget=int(store.min_peak * 1.01))
    got = g(*args)
    plan = g.planned(args)[2]
    (cand, kind, param, _, _), = plan.loops
    assert kind == S.ONLINE, str(plan)
    if tend == 0.5:                       # 50 iterations: the forward thins its snapshots again and again
        assert S.online_snapshots(param, 50)[0] >= 4
    np.testing.assert_array_equal(got[0], ref[0])
    assert got[1] == ref[1]
    assert "online schedule" in str(plan)


def test_online_schedule_memory_does_not_grow_with_the_count():
    peaks = {}
    for strategy in ("store_all", "recompute_all"):
        g = flowgrad.grad(march, wrt=("u", "nu"), backend="numpy", strategy=strategy)
        peaks[strategy] = [_measured_peak(g, _march_args(4096, tend)) for tend in (0.5, 2.0)]   # 50, 200 steps
    assert peaks["store_all"][1] > 3 * peaks["store_all"][0]
    assert peaks["recompute_all"][1] <= 1.1 * peaks["recompute_all"][0], peaks
    assert peaks["recompute_all"][1] < peaks["store_all"][1] / 4, peaks
    check_grad(march, _march_args(8, 0.05), ("u", "nu"), backend="numpy")


def test_a_while_loop_under_a_budget_is_planned_not_warned():
    args = _march_args(4096, 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = flowgrad.grad(march, wrt=("u", "nu"), backend="numpy", memory_budget="2MiB")
        g(*args)
    plan = g.planned(args)[2]
    assert plan.loops[0][1] == S.ONLINE and plan.peak <= 2 * MiB
    assert _measured_peak(g, args) <= 2 * MiB


@pytest.mark.parametrize("T,c,extra", [(0, 2, 1), (1, 2, 0), (7, 4, 2), (37, 4, 1), (100, 6, 3), (1000, 8, 8)])
def test_online_schedule_reverses_every_iteration_once_within_its_slots(T, c, extra):
    every, taken = S.online_snapshots(c, T)
    assert taken <= c and taken == -(-T // every) and (T <= c or every < 2 * T / c + 1)
    reversed_, advanced = [], 0
    for s in reversed(range(taken)):
        rows, n = S.segment_rows(T, every, s, c, extra)
        assert n == len(rows)
        for op, a, b in rows.tolist():
            if op == S.REVERSE:
                reversed_ += list(range(b - 1, a - 1, -1))
            elif op == S.ADVANCE:
                advanced += b - a
            elif op == S.RESTORE:
                assert a == s or c <= a < c + extra       # its own online snapshot or a segment slot
            elif op == S.SNAP:
                assert c <= a < c + extra                 # never over an online snapshot
    assert reversed_ == list(range(T - 1, -1, -1))


# ---------------------------------------------------------------- values: store or recompute


def deep(x, Ws):
    h = x
    for W in Ws:                          # a tuple of weights: unrolled, one top-level value per layer
        h = np.tanh(h @ W)
    return np.sum(h * h)


def _deep_args(n=600, d=128, layers=8):
    rng = np.random.default_rng(11)
    return rng.standard_normal((n, d)), tuple(rng.standard_normal((d, d)) / 12 for _ in range(layers))


def test_values_are_recomputed_under_a_budget_and_the_peak_follows():
    args = _deep_args()
    store = flowgrad.explain(deep, *args, wrt="Ws", backend="numpy")
    ref = flowgrad.grad(deep, wrt="Ws", backend="numpy")(*args)
    peaks = []
    for where in (None, 0.5, 0.0):
        budget = None if where is None else int(store.min_peak + where * (store.store_all_peak - store.min_peak)) + 1
        g = flowgrad.grad(deep, wrt="Ws", backend="numpy", memory_budget=budget)
        got = g(*args)
        for a, b in zip(got, ref):
            np.testing.assert_array_equal(a, b)           # the same operations, evaluated again
        peak = _measured_peak(g, args)
        peaks.append(peak)
        if budget is not None:
            plan = g.planned(args)[2]
            assert plan.recompute and peak <= 1.1 * budget, (peak, budget, str(plan))
    assert peaks == sorted(peaks, reverse=True) and peaks[-1] < 0.8 * peaks[0], peaks
    # every other layer at the floor: a value evaluated again reads the one before it, kept
    plan = flowgrad.explain(deep, *args, wrt="Ws", backend="numpy", memory_budget=int(store.min_peak) + 1)
    again = [v for v in plan.values if v.decision.startswith("recomputed: evaluated again")]
    assert len(again) == 4 and plan.extra_flops > 0


def test_recompute_all_recomputes_values_it_may():
    args = _deep_args(200, 64, 5)
    g = flowgrad.grad(deep, wrt="Ws", backend="numpy", strategy="recompute_all")
    ref = flowgrad.grad(deep, wrt="Ws", backend="numpy")(*args)
    for a, b in zip(g(*args), ref):
        np.testing.assert_array_equal(a, b)
    d = np.random.default_rng(2).standard_normal(args[1][2].shape)          # the oracle: differences
    moved = lambda eps: deep(args[0], args[1][:2] + (args[1][2] + eps * d,) + args[1][3:])  # noqa: E731
    assert np.sum(ref[2] * d) == pytest.approx((moved(1e-6) - moved(-1e-6)) / 2e-6, rel=1e-6)


def dag(x, w, v):
    a = np.sin(x * w)                    # read by b, c and the backward sweep
    b = np.exp(-a * a)
    c = np.tanh(a + v)
    d = b * c
    d[0] += 1.0                          # d changes after its definition: kept, not recomputed
    e = np.cos(d) * a
    return np.sum(e * e) + np.sum(b * c)


def test_recomputed_values_of_a_dag_equal_store_all():
    rng = np.random.default_rng(4)
    big = (rng.standard_normal((300, 100)), rng.standard_normal(100), rng.standard_normal((300, 100)))
    ref = flowgrad.grad(dag, wrt=(0, 1, 2), backend="numpy")(*big)
    g = flowgrad.grad(dag, wrt=(0, 1, 2), backend="numpy", strategy="recompute_all")
    for got, want in zip(g(*big), ref):
        np.testing.assert_array_equal(got, want)
    plan = g.planned(big)[2]
    assert plan.recompute and "d" not in plan.recompute
    check_grad(dag, (big[0][:3, :5], big[1][:5], big[2][:3, :5]), (0, 1, 2), backend="numpy")


# ---------------------------------------------------------------- nested loops planned on their own


def substeps(u, k, steps, sub):
    for t in range(steps):
        v = u * 1.0
        for j in range(sub):                    # many small steps per outer step: the bulk of the tape
            v = v + 0.1 * k * np.sin(v)
        u = 0.5 * (u + v)
    return np.sum(u * u)


def three_levels(x, a, steps):
    n = x.shape[0]
    for t in range(steps):
        for i in range(3):
            if a > 0:
                for j in reversed(range(1, n)):            # a reversed range, in a branch
                    x[j] = np.sin(x[j] + a * x[j - 1])
            s = np.sum(x)                                  # a scalar the next inner loop carries
            for j2 in range(4):
                s = s * 0.9 + a * np.cos(s)
                x = x + 0.01 * s
    return np.sum(x * x)


def _forced(fn, args, wrt, backend, kinds, params):
    """(value, gradients) with the loops ``kinds`` names checkpointed (their ``params``)."""
    from flowgrad.api import _Compiled, _run_vjp
    entry = _Compiled(fn, args, wrt, backend, "reverse", kinds)
    value, pullback = _run_vjp(entry, tuple(np.copy(a) if isinstance(a, np.ndarray) else a for a in args), params)
    return value, pullback(1.0)


@pytest.mark.parametrize("kinds,params", [({"j": S.BINOMIAL}, {"j": 1}), ({"j2": S.PERIODIC}, {"j2": 2}),
                                          ({"i": S.BINOMIAL}, {"i": 0}),
                                          ({"j": S.PERIODIC, "j2": S.BINOMIAL}, {"j": 3, "j2": 0}),
                                          ({"i": S.BINOMIAL, "j": S.BINOMIAL}, {"i": 1, "j": 0}),
                                          ({"t": S.BINOMIAL, "i": S.PERIODIC, "j2": S.BINOMIAL},
                                           {"t": 0, "i": 2, "j2": 1})])
def test_nested_loop_schedules_equal_store_all(kinds, params, backend):
    """Any nested loop, any schedule, also inside a checkpointed loop: the gradient is the
    store-all one, bit for bit."""
    args = (np.linspace(0.1, 0.9, 7), 0.3, 3)
    ref = _forced(three_levels, args, ("x", "a"), backend, {}, {})
    got = _forced(three_levels, args, ("x", "a"), backend, kinds, params)
    assert got[0] == ref[0]
    for g, r in zip(got[1], ref[1]):
        np.testing.assert_array_equal(g, r)


def test_the_planner_schedules_an_inner_loop_and_the_measured_peak_follows():
    """Four outer steps of 60 sub-steps: checkpointing the outer loop still keeps one outer
    step's 60 tapes; scheduling the inner loop keeps one state per run instead, so the floor
    falls below one outer step's tape, and the measured peak follows the budget down."""
    args = (np.linspace(0.1, 1.0, 20000), 0.3, 4, 60)
    store = flowgrad.explain(substeps, *args, wrt=("u", "k"), backend="numpy")
    outer = next(c for c, *_ in store.loops if c.key == "t")
    assert store.min_peak < outer.most_bytes / 2, str(store)
    ref = flowgrad.grad(substeps, wrt=("u", "k"), backend="numpy")(*args)
    peaks = []
    for budget in (None, store.store_all_peak // 2, store.store_all_peak // 8, int(store.min_peak * 1.02)):
        g = flowgrad.grad(substeps, wrt=("u", "k"), backend="numpy", memory_budget=budget)
        peak = _measured_peak(g, args)
        for got, want in zip(g(*args), ref):
            np.testing.assert_array_equal(got, want)
        if budget is not None:
            assert peak <= 1.1 * budget, (budget, peak, str(g.planned(args)[2]))
        peaks.append(peak)
    assert peaks == sorted(peaks, reverse=True), peaks
    plan = g.planned(args)[2]
    kinds = {c.key: kind for c, kind, *_ in plan.loops}
    assert kinds["j"] == S.BINOMIAL, str(plan)
    assert "from its state kept at each run's start" in str(plan)
    middle = flowgrad.grad(substeps, wrt=("u", "k"), backend="numpy", memory_budget=int(store.min_peak * 1.6))
    assert {c.key: kind for c, kind, *_ in middle.planned(args)[2].loops}["j"] != S.STORE_ALL
    check_grad(substeps, (np.linspace(0.1, 1.0, 6), 0.3, 2, 5), ("u", "k"), backend="numpy")


def test_recompute_all_schedules_loops_inside_checkpointed_ones():
    args = (np.linspace(0.1, 1.0, 50), 0.3, 4, 10)
    g = flowgrad.grad(substeps, wrt=("u", "k"), backend="numpy", strategy="recompute_all")
    plan = g.planned(args)[2]
    assert [(c.key, kind) for c, kind, *_ in plan.loops] == [("t", S.BINOMIAL), ("j", S.BINOMIAL)]
    assert "in each iteration the loop over t" in str(plan)
    for got, want in zip(g(*args), flowgrad.grad(substeps, wrt=("u", "k"), backend="numpy")(*args)):
        np.testing.assert_array_equal(got, want)


def test_a_nested_loop_is_part_of_a_periodic_parents_tape():
    """A periodic schedule records several iterations of the loop around at once: the nested
    loop stays on that tape (the 0/1 program's nesting constraints)."""
    args = (np.linspace(0.1, 1.0, 20000), 0.3, 16, 30)
    store = flowgrad.explain(substeps, *args, wrt="u", backend="numpy")
    for budget in np.geomspace(store.store_all_peak, store.min_peak * 1.01, 8)[1:]:
        plan = flowgrad.grad(substeps, wrt="u", backend="numpy", memory_budget=int(budget)).planned(args)[2]
        (_, outer, *_), (_, inner, param, *_) = plan.loops
        assert outer != S.PERIODIC or param == INSIDE, str(plan)
        assert plan.peak <= budget
