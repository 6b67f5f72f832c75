"""flowgrad.dask on a LocalCluster of two worker processes: a sweep, an ensemble sum and mean
(the tree reduction on the cluster), a chunked dask.array, a vjp pullback run on a worker, and
a worker dying mid-run. Results are checked against flowgrad in this process (equal to
rounding: the same code on the same values) and against central differences of the plain
NumPy function or closed-form derivatives."""
import linecache
import os

import numpy as np
import pytest

dask = pytest.importorskip("dask", reason="flowgrad.dask needs dask: pip install 'flowgrad[dask]'")
distributed = pytest.importorskip("distributed", reason="the Dask tests run a distributed.LocalCluster: "
                                  "pip install 'flowgrad[dask]'")
import dask.array as da  # noqa: E402

import dask_kernels as dk  # noqa: E402
import flowgrad  # noqa: E402
import flowgrad.dask as fd  # noqa: E402
from conftest import BACKENDS, REPO_ROOT, TESTS_DIR  # noqa: E402
from flowgrad.errors import InputError  # noqa: E402

pytestmark = pytest.mark.dask

RNG = np.random.default_rng(7)
N, STEPS = 24, 12
OBS = [RNG.standard_normal(N) for _ in range(8)]
THETA = RNG.standard_normal(N)


def _fd(f, x, rng, eps=1e-6):
    """(direction, central difference of ``f`` at ``x`` along it)."""
    d = rng.standard_normal(np.shape(x))
    return d, (f(x + eps * d) - f(x - eps * d)) / (2 * eps)


# ---------------------------------------------------------------- no cluster: checks and this process


def _no_client():
    try:
        distributed.default_client()
    except ValueError:
        return
    pytest.skip("a distributed client exists in this process; these tests run without one")


def test_without_a_client_the_work_runs_here_with_the_same_results():
    _no_client()
    vg = flowgrad.value_and_grad(dk.misfit, wrt="theta", backend="numpy")
    out = fd.map_value_and_grad(dk.misfit, [(o, THETA, STEPS) for o in OBS[:3]], wrt="theta", backend="numpy")
    for (v, g), o in zip(out, OBS[:3]):
        want_v, want_g = vg(o, THETA, STEPS)
        assert v == want_v
        np.testing.assert_array_equal(g, want_g)
    with pytest.raises(InputError, match=r"gather=False\) returns Dask futures, which need a distributed client"):
        fd.map_value_and_grad(dk.misfit, [(OBS[0], THETA, STEPS)], wrt="theta", gather=False)


def test_bad_input_is_refused_before_any_work_with_what_to_do():
    cases = [
        (lambda: fd.map_value_and_grad(dk.misfit, OBS, wrt="theta"),
         r"batch_of_args\[0\] is a ndarray, not a tuple of arguments: pass one tuple per call"),
        (lambda: fd.map_value_and_grad(dk.misfit, [(OBS[0], THETA)], wrt="theta"),
         r"batch_of_args\[0\]: calling misfit: missing a required argument: 'steps'"),
        (lambda: fd.map_value_and_grad(dk.misfit, [(OBS[0], THETA, STEPS)], wrt="steps"),
         r"batch_of_args\[0\]: wrt argument 'steps' is an integer"),
        (lambda: fd.map_value_and_grad(dk.misfit, [(OBS[0], THETA, STEPS)], wrt="theta", memory_budjet="1MiB"),
         r"unknown option 'memory_budjet'; the transform options are: memory_budget"),
        (lambda: fd.ensemble_value_and_grad(dk.misfit, [(OBS[0],), (OBS[1], THETA)], shared=(STEPS,)),
         r"members\[1\] has 2 arguments but members\[0\] has 1"),
        (lambda: fd.ensemble_value_and_grad(dk.misfit, [(o,) for o in OBS], shared=(THETA, STEPS), reduce="max"),
         r"reduce must be 'sum' or 'mean', not 'max'"),
        (lambda: fd.ensemble_value_and_grad(dk.misfit, [(o,) for o in OBS], shared=THETA),
         r"shared must be a tuple of arguments, not a ndarray: pass shared=\(theta,\)"),
        (lambda: fd.ensemble_value_and_grad(dk.misfit, [], shared=(THETA, STEPS)), r"members is empty"),
        (lambda: fd.ensemble_value_and_grad(dk.misfit, [(o, THETA) for o in OBS], shared=(STEPS,)),
         r"no shared argument holds floats to differentiate; pass wrt="),
        (lambda: fd.chunked_value_and_grad(dk.columns, np.ones((4, 3)), np.ones(3), 0.1),
         r"takes a dask array, not a ndarray: pass dask.array.from_array"),
        (lambda: fd.chunked_value_and_grad(dk.columns, da.ones((4, 4), chunks=(2, 2)), np.ones(4), 0.1),
         r"x is chunked along axis 1 too .*x = x.rechunk\(\{1: -1\}\)"),
        (lambda: fd.chunked_value_and_grad(dk.columns, da.ones((4, 3), chunks=(2, 3)), np.ones(3), 0.1, axis=2),
         r"axis 2 is not an axis of x"),
    ]
    for call, message in cases:
        with pytest.raises(InputError, match=message):
            call()


# ---------------------------------------------------------------- on a LocalCluster


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """Two worker processes with one thread each, importing this folder's modules and caching
    compiled code in a folder of their own."""
    cache = tmp_path_factory.mktemp("worker-cache")
    path = os.pathsep.join([str(TESTS_DIR), str(REPO_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    cluster = distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None,
                                       env={"FLOWGRAD_CACHE_DIR": str(cache), "PYTHONPATH": path})
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


def test_map_over_members_equals_this_process_and_finite_differences(client):
    batch = [(o, THETA, STEPS) for o in OBS]
    out = fd.map_value_and_grad(dk.misfit, batch, wrt="theta", backend="numpy")
    futures = fd.map_value_and_grad(dk.misfit, batch, wrt=("obs", "theta"), backend="numpy", gather=False)
    assert len(futures) == len(OBS) and all(isinstance(f, distributed.Future) for f in futures)
    both = client.gather(futures)
    vg = flowgrad.value_and_grad(dk.misfit, wrt="theta", backend="numpy")
    rng = np.random.default_rng(1)
    for k, ((value, g), (_, (g_obs, g_theta)), o) in enumerate(zip(out, both, OBS)):
        want_v, want_g = vg(o, THETA, STEPS)
        np.testing.assert_allclose(value, want_v, rtol=1e-14, err_msg=f"member {k}")
        np.testing.assert_allclose(g, want_g, rtol=1e-14, atol=1e-300, err_msg=f"member {k}")
        np.testing.assert_array_equal(g_theta, g)
        assert value == pytest.approx(dk.misfit(o, THETA, STEPS), rel=1e-14)
        d, fd_theta = _fd(lambda t: dk.misfit(o, t, STEPS), THETA, rng)
        assert np.dot(g, d) == pytest.approx(fd_theta, rel=1e-6)
        d, fd_obs = _fd(lambda x: dk.misfit(x, THETA, STEPS), o, rng)
        assert np.dot(g_obs, d) == pytest.approx(fd_obs, rel=1e-6)


@pytest.mark.native
@pytest.mark.skipif("native" not in BACKENDS, reason="the native backend needs numba")
def test_map_on_the_native_backend(client):
    out = fd.map_value_and_grad(dk.misfit, [(o, THETA, STEPS) for o in OBS[:2]], wrt="theta", backend="native")
    ref = flowgrad.value_and_grad(dk.misfit, wrt="theta", backend="numpy")
    for (value, g), o in zip(out, OBS[:2]):
        want_v, want_g = ref(o, THETA, STEPS)
        np.testing.assert_allclose(value, want_v, rtol=1e-12)
        np.testing.assert_allclose(g, want_g, rtol=1e-11, atol=1e-14)


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_ensemble_of_shared_parameters_reduced_on_the_cluster(client, reduce):
    members = [(o,) for o in OBS]
    with distributed.get_task_stream(client) as stream:
        value, (g,) = fd.ensemble_value_and_grad(dk.misfit, members, shared=(THETA, STEPS), reduce=reduce,
                                                 backend="numpy")
    # the members' gradients were added by 7 pairwise tasks on the workers, not here
    adds = [t for t in stream.data if str(t["key"]).startswith("_add-")]
    assert len(adds) == len(OBS) - 1
    vg = flowgrad.value_and_grad(dk.misfit, wrt="theta", backend="numpy")
    each = [vg(o, THETA, STEPS) for o in OBS]
    scale = 1.0 / len(OBS) if reduce == "mean" else 1.0
    np.testing.assert_allclose(value, scale * sum(v for v, _ in each), rtol=1e-13)
    np.testing.assert_allclose(g, scale * np.sum([gk for _, gk in each], axis=0), rtol=1e-12, atol=1e-15)
    total = lambda t: scale * sum(dk.misfit(o, t, STEPS) for o in OBS)     # noqa: E731
    d, fd_theta = _fd(total, THETA, np.random.default_rng(2))
    assert np.dot(g, d) == pytest.approx(fd_theta, rel=1e-6)
    # one future of the whole result; the same numbers
    future = fd.ensemble_value_and_grad(dk.misfit, members, shared=(THETA, STEPS), reduce=reduce, backend="numpy",
                                        gather=False)
    again, (g_again,) = future.result()
    assert again == value
    np.testing.assert_array_equal(g_again, g)


def test_ensemble_gradients_of_member_and_shared_arguments(client):
    members = [(o,) for o in OBS[:5]]
    value, (g_obs, g_theta) = fd.ensemble_value_and_grad(dk.misfit, members, shared=(THETA, STEPS),
                                                         wrt=("obs", 1), reduce="mean", backend="numpy")
    vg = flowgrad.value_and_grad(dk.misfit, wrt=("obs", "theta"), backend="numpy")
    each = [vg(o, THETA, STEPS) for o, in members]
    assert isinstance(g_obs, list) and len(g_obs) == 5
    for got, (_, (want, _)) in zip(g_obs, each):
        np.testing.assert_allclose(got, want / 5, rtol=1e-14)
    np.testing.assert_allclose(g_theta, np.mean([g for _, (_, g) in each], axis=0), rtol=1e-12, atol=1e-15)
    # a single wrt gives a single gradient
    _, g_single = fd.ensemble_value_and_grad(dk.misfit, members, shared=(THETA, STEPS), wrt="theta",
                                             backend="numpy")
    np.testing.assert_allclose(g_single, 5 * g_theta, rtol=1e-12, atol=1e-15)


def test_chunked_dask_array_gradient_has_the_chunks_of_x(client):
    X = RNG.standard_normal((40, 3))
    w, c = RNG.standard_normal(3), 0.3
    x = da.from_array(X, chunks=(15, 3))
    value, (gx, gw, gc) = fd.chunked_value_and_grad(dk.columns, x, w, c, wrt=(0, "w", "c"), backend="numpy")
    assert isinstance(value, da.Array) and isinstance(gx, da.Array)
    assert gx.chunks == x.chunks and gw.shape == (3,) and gc.shape == ()
    value, gx, gw, gc = dask.compute(value, gx, gw, gc)         # on the cluster: the default client
    t = np.tanh(X * w)
    np.testing.assert_allclose(value, np.sum(t ** 2) + c * np.sum(X ** 3), rtol=1e-13)
    np.testing.assert_allclose(gx, 2 * t * (1 - t ** 2) * w + 3 * c * X ** 2, rtol=1e-13)
    np.testing.assert_allclose(gw, np.sum(2 * t * (1 - t ** 2) * X, axis=0), rtol=1e-12)
    np.testing.assert_allclose(gc, np.sum(X ** 3), rtol=1e-12)
    # along the other axis: columns as the members
    xt = da.from_array(X.T.copy(), chunks=(3, 16))
    _, gxt = fd.chunked_value_and_grad(dk.columns_t, xt, w, c, axis=1, backend="numpy")
    assert gxt.chunks == xt.chunks
    np.testing.assert_allclose(gxt.compute(), gx.T, rtol=1e-13)



def test_a_vjp_pullback_runs_on_a_worker(client):
    out, pull = flowgrad.vjp(dk.misfit, OBS[0], THETA, STEPS, wrt="theta", backend="numpy")
    future = client.submit(pull, 2.0)
    here = pull(2.0)
    (g,) = future.result()
    np.testing.assert_allclose(g, here[0], rtol=1e-14, atol=1e-300)
    d, fd_theta = _fd(lambda t: dk.misfit(OBS[0], t, STEPS), THETA, np.random.default_rng(3))
    assert np.dot(g, d) == pytest.approx(2.0 * fd_theta, rel=1e-6)
    assert out == pytest.approx(dk.misfit(OBS[0], THETA, STEPS), rel=1e-14)


def test_a_worker_dying_mid_run_is_replaced_and_the_result_is_right(client, tmp_path):
    marker = tmp_path / "crashed"
    before = set(client.run(os.getpid).values())
    members = [(o,) for o in OBS]
    # member 5's observations come from a task that kills its worker the first time it runs,
    # after the other members' gradients have been computed (some of them on that worker)
    members[5] = (dask.delayed(dk.crash_once, pure=False)(str(marker), OBS[5], 0.5),)
    value, (g,) = fd.ensemble_value_and_grad(dk.misfit, members, shared=(THETA, STEPS), reduce="mean",
                                             backend="numpy")
    assert marker.exists(), "the crashing task never ran"
    client.wait_for_workers(2, timeout=60)
    assert set(client.run(os.getpid).values()) != before, "no worker process was replaced"
    want, (want_g,) = fd.ensemble_value_and_grad(dk.misfit, [(o,) for o in OBS], shared=(THETA, STEPS),
                                                 reduce="mean", backend="numpy")
    assert value == want
    np.testing.assert_array_equal(g, want_g)
    vg = flowgrad.value_and_grad(dk.misfit, wrt="theta", backend="numpy")
    np.testing.assert_allclose(g, np.mean([vg(o, THETA, STEPS)[1] for o in OBS], axis=0), rtol=1e-12,
                               atol=1e-15)


NOTEBOOK_CELL = '''
def cell_helper(u, kappa):
    return u[1:-1] + kappa * (u[2:] - 2.0 * u[1:-1] + u[:-2])


def cell_heat(u, kappa, steps):
    for t in range(steps):
        u[1:-1] = cell_helper(u, kappa)
    return np.sum(u * u)
'''


def test_functions_from_a_notebook_cell_run_on_the_workers(client):
    # as in a notebook: the cell's source is only in linecache, its functions belong to __main__,
    # so Dask pickles them by value (cloudpickle drops the file name) and no worker has the file
    name = "/nonexistent/notebook-cell-1.py"
    lines = NOTEBOOK_CELL.splitlines(keepends=True)
    linecache.cache[name] = (len(NOTEBOOK_CELL), None, lines, name)
    scope = {"__name__": "__main__", "np": np}
    exec(compile(NOTEBOOK_CELL, name, "exec"), scope)     # noqa: S102 - the test's own source
    heat = scope["cell_heat"]
    u = np.linspace(0.0, 1.0, 16) ** 2
    out = fd.map_value_and_grad(heat, [(u, k, 20) for k in (0.1, 0.2)], wrt=("u", "kappa"), backend="numpy")
    for (value, (gu, gk)), k in zip(out, (0.1, 0.2)):
        want_v, (want_u, want_k) = flowgrad.value_and_grad(heat, wrt=("u", "kappa"), backend="numpy")(u, k, 20)
        assert value == want_v and gk == want_k
        np.testing.assert_array_equal(gu, want_u)
        assert (heat(u.copy(), k + 1e-6, 20) - heat(u.copy(), k - 1e-6, 20)) / 2e-6 == pytest.approx(gk, rel=1e-6)
