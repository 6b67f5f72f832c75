"""Cheap loop-local values the backward sweep evaluates again instead of keeping on a tape
(``autodiff/replays.py``): where the replay may stand, and where it may not. Each case checks the
gradient against finite differences and the tapes in the IR."""
import re

import numpy as np

import flowgrad
from oracle import check_grad


def _sweeps(fn, args, wrt, backend):
    text = flowgrad.grad(fn, wrt=wrt, backend=backend).ir(*args)
    forward, backward = text.split("# backward")
    return forward, backward


def _tapes(forward):
    return set(re.findall(r"push (tape_\w+) <-", forward))


def shifted_steps(u, nu):
    # each step's rolls of u are shifted again from the u the step's restore puts back, not
    # kept on tapes beside it
    for t in range(6):
        up = np.roll(u, -1)
        um = np.roll(u, 1)
        u = u + nu * (up - 2.0 * u + um) * u
    return np.sum(u * u)


def test_rolls_of_a_state_the_step_overwrites_are_replayed_after_its_restore(backend):
    rng = np.random.default_rng(0)
    u, nu = rng.uniform(0.5, 1.5, 12), 0.3
    check_grad(shifted_steps, (u, nu), ("u", "nu"), backend=backend)
    forward, backward = _sweeps(shifted_steps, (u, nu), ("u", "nu"), backend)
    tapes = _tapes(forward)
    assert tapes and all("roll" not in t for t in tapes), forward
    assert re.search(r"pop tape_u\w* -> u", backward), backward
    # in the reversed step, the rolls follow the restore of u
    body = backward[re.search(r"pop tape_u\w* -> u", backward).start():]
    assert re.search(r"roll\w*\[.*\] = u\[", body), backward


def read_after_the_state_changes(u, w, nu):
    # r is read after u is overwritten: its replay would have to stand both after u's restore and
    # before the adjoint that reads it, which comes first; r stays on its tape
    for t in range(5):
        r = np.roll(u, 1)
        u = u * nu + 0.1
        w = w + r * np.sin(u)
    return np.sum(w * w) + np.sum(u)


def test_a_value_read_after_its_inputs_change_keeps_its_tape(backend):
    rng = np.random.default_rng(1)
    u, w, nu = rng.uniform(0.5, 1.5, 9), rng.uniform(-1.0, 1.0, 9), 0.9
    check_grad(read_after_the_state_changes, (u, w, nu), ("u", "w", "nu"), backend=backend)
    forward, _ = _sweeps(read_after_the_state_changes, (u, w, nu), ("u", "w", "nu"), backend)
    assert any("roll" in t for t in _tapes(forward)), forward


def chained(u, nu):
    # b reads a, which reads u: both are replayed, b after a, and both after u's restore
    for t in range(5):
        a = np.roll(u, 2)
        b = a * a + u
        u = np.tanh(u + nu * b)
    return np.sum(u)


def test_a_chain_of_definitions_is_replayed_in_order(backend):
    rng = np.random.default_rng(2)
    u, nu = rng.uniform(-1.0, 1.0, 8), 0.4
    check_grad(chained, (u, nu), ("u", "nu"), backend=backend)
    forward, _ = _sweeps(chained, (u, nu), ("u", "nu"), backend)
    tapes = _tapes(forward)
    assert not any("roll" in t for t in tapes), forward


def reset_spikes(v, w):
    # the mask's replay would need v from before the reset, a tape of eight bytes per element
    # the reset itself does not need: the one-byte mask stays on its tape
    out = 0.0
    for t in range(5):
        v = v + 0.3 * np.tanh(w * v)
        mask = v > 1.0
        out += np.sum(v[mask] ** 2)
        v[mask] = 0.0
    return out + np.sum(v * v)


def test_a_replay_that_would_need_a_new_tape_is_not_made(backend):
    rng = np.random.default_rng(3)
    v, w = rng.uniform(0.6, 1.3, 10), rng.uniform(0.5, 2.0, 10)
    check_grad(reset_spikes, (v, w), ("v", "w"), backend=backend)
    forward, _ = _sweeps(reset_spikes, (v, w), ("v", "w"), backend)
    assert any("mask" in t for t in _tapes(forward)), forward


# ---------------------------------------------------------------- restores from the previous pass


def causal_filter(img, a, b):
    # each pass copies a column of the image and one of its output for the next: reversed, pass j
    # takes them from column j - 1 again (pass 0 from the copies made before the loop)
    w, h = img.shape
    y = np.zeros_like(img)
    xm1 = np.zeros(w)
    ym1 = np.zeros(w)
    for j in range(h):
        y[:, j] = a * img[:, j] + b * ym1 + a * b * xm1
        xm1 = img[:, j]
        ym1 = y[:, j]
    return np.sum(y * y)


def test_a_copy_carried_to_the_next_pass_is_restored_from_where_it_was_copied(backend):
    rng = np.random.default_rng(4)
    args = (rng.uniform(0.0, 1.0, (4, 7)), 0.6, 0.3)
    check_grad(causal_filter, args, (0, 1, 2), backend=backend)
    forward, backward = _sweeps(causal_filter, args, (0, 1, 2), backend)
    assert "push tape_" not in forward, forward
    assert re.search(r"if \(j != 0\):\n\s+array\w* = (img|array\w*)\[0:\+4, \(j - 1\)\]", backward), backward


def test_the_gradient_of_such_a_gradient(backend):
    rng = np.random.default_rng(5)
    img, a, b = rng.uniform(0.0, 1.0, (3, 5)), 0.6, 0.3
    d = rng.standard_normal(img.shape)

    def along(img, a, b):
        return np.sum(flowgrad.grad(causal_filter, wrt=0, backend=backend)(img, a, b) * d)
    check_grad(along, (img, a, b), (0, 1, 2), backend=backend, rtol=1e-5)


def two_way_filter(img, a):
    # the anti-causal pass counts down and carries a column of its output, which a sweep of rows
    # overwrites afterwards: that sweep's restores now keep the output, once, for the columns
    w, h = img.shape
    y = np.zeros_like(img)
    yp1 = np.zeros(w)
    for j in range(h - 1, -1, -1):
        y[:, j] = img[:, j] + a * yp1
        yp1 = y[:, j]
    for i in range(w):
        y[i, :] = np.tanh(y[i, :])
    return np.sum(y * img)


def test_a_carried_output_column_comes_from_the_output_restored_by_the_rows_sweep(backend):
    rng = np.random.default_rng(6)
    args = (rng.uniform(-1.0, 1.0, (5, 6)), 0.7)
    check_grad(two_way_filter, args, (0, 1), backend=backend)
    forward, backward = _sweeps(two_way_filter, args, (0, 1), backend)
    assert _tapes(forward) == {"tape_array"}, forward
    assert re.search(r"if \(j != 5\):\n\s+array\w* = array\[0:\+5, \(j \+ 1\)\]", backward), backward


def source_changed_between_passes(x, a):
    # pass j writes x[:, j - 1], the column pass j - 1 copied: the copy stays on its tape
    w, h = x.shape
    prev = np.zeros(w)
    out = 0.0
    for j in range(1, h):
        out += np.sum(np.sin(a * prev) * x[:, j])
        x[:, j - 1] = np.cos(x[:, j - 1])
        prev = x[:, j]
    return out


def test_a_copy_whose_source_changes_between_passes_keeps_its_tape(backend):
    rng = np.random.default_rng(7)
    args = (rng.uniform(-1.0, 1.0, (3, 6)), 0.8)
    check_grad(source_changed_between_passes, args, (0, 1), backend=backend)
    forward, _ = _sweeps(source_changed_between_passes, args, (0, 1), backend)
    assert any(t != "tape_x" for t in _tapes(forward)), forward


def second_order_filters(img, a, b):
    # each filter carries two columns of its output (and of its input): ym2 = ym1 before
    # ym1 = y[:, j]. Reversed, pass j takes ym2 from column j - 2 (pass 1 from ym1's copy made
    # before the loop, pass 0 from ym2's); the anti-causal one counts down from a column inside
    w, h = img.shape
    y = np.zeros_like(img)
    ym1, ym2, xm1, xm2 = np.zeros(w), np.zeros(w), np.zeros(w), np.zeros(w)
    for j in range(1, h):
        y[:, j] = a * img[:, j] + b * ym1 - 0.5 * b * ym2 + a * b * xm2
        xm2 = xm1
        xm1 = img[:, j]
        ym2 = ym1
        ym1 = y[:, j]
    z = np.zeros_like(img)
    yp1, yp2 = np.full(w, 0.1), np.full(w, 0.2)
    for j in range(h - 2, -1, -2):
        z[:, j] = a * y[:, j] + b * yp1 * yp2
        yp2 = yp1
        yp1 = z[:, j]
    return np.sum(z * img) + np.sum(y * y)


def test_a_copy_of_a_carried_copy_is_restored_from_two_passes_back(backend):
    rng = np.random.default_rng(9)
    args = (rng.uniform(0.0, 1.0, (4, 9)), 0.6, 0.3)
    check_grad(second_order_filters, args, (0, 1, 2), backend=backend)
    forward, backward = _sweeps(second_order_filters, args, (0, 1, 2), backend)
    assert "push tape_" not in forward, forward
    assert re.search(r"if \(\(j - 1\) != 1\):\n\s+array\w* = (img|array\w*)\[0:\+4, \(j - 2\)\]", backward), backward
    assert re.search(r"if \(\(j_?\d* \+ 2\) != 7\):\n\s+array\w* = array\w*\[0:\+4, \(j_?\d* \+ 4\)\]", backward), \
        backward
    d = rng.standard_normal(args[0].shape)

    def along(img, a, b):
        return np.sum(flowgrad.grad(second_order_filters, wrt=0, backend=backend)(img, a, b) * d)
    check_grad(along, args, (0, 1, 2), backend=backend, rtol=1e-5)


def source_changed_two_passes_back(x, a):
    # pass j writes x[:, j - 1], the column pass j - 1 copied into prev, which pass j copies on
    # into older: older stays on its tape
    w, h = x.shape
    prev, older = np.zeros(w), np.zeros(w)
    out = 0.0
    for j in range(1, h):
        out += np.sum(np.sin(a * older) * x[:, j])
        older = prev
        x[:, j - 1] = np.cos(x[:, j - 1])
        prev = x[:, j].copy()
    return out


def test_a_copy_of_a_copy_whose_source_changes_in_between_keeps_its_tape(backend):
    rng = np.random.default_rng(10)
    args = (rng.uniform(-1.0, 1.0, (3, 7)), 0.8)
    check_grad(source_changed_two_passes_back, args, (0, 1), backend=backend)
    forward, _ = _sweeps(source_changed_two_passes_back, args, (0, 1), backend)
    assert any(t != "tape_x" for t in _tapes(forward)), forward


def index_copies(x, s):
    # j copies the loop's variable; the gradient program runs the loop reversed, and the gradient
    # of that gradient restores j over a reversed loop, whose previous pass is j + 1
    for i in range(x.shape[0] - 1):
        j = i
        x[j] += 0.1 * np.tanh(s * x[j + 1])
        x[j] *= 0.9
    return np.sum(np.sin(x))


def test_the_gradient_of_a_gradient_over_a_reversed_loop_with_a_copied_index(backend):
    rng = np.random.default_rng(8)
    x, s = rng.uniform(-1.0, 1.0, 6), 0.7
    d = rng.standard_normal(6)

    def along(x, s):
        return np.sum(flowgrad.grad(index_copies, wrt=0, backend=backend)(x, s) * d)
    check_grad(along, (x, s), (0, 1), backend=backend, rtol=1e-5)


def update_reading_a_replayed_value(x, s):
    # run backwards (allow_uncompute), x[i] += 0.1 * t reads t, which the replay puts back only
    # after the restores of what t reads: t is kept instead
    for i in range(x.shape[0] - 1):
        t = np.tanh(s * x[i + 1])
        x[i] += 0.1 * t
        x[i + 1] *= 0.9
    return np.sum(np.sin(x))


def test_a_value_an_undone_update_reads_is_not_replayed_after_it(backend):
    rng = np.random.default_rng(9)
    args = (rng.uniform(-1.0, 1.0, 7), 0.8)
    vg = flowgrad.value_and_grad(update_reading_a_replayed_value, wrt=(0, 1), backend=backend, allow_uncompute=True)
    check_grad(update_reading_a_replayed_value, args, (0, 1), backend=backend, vg=vg)
