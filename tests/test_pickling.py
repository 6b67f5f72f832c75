"""Transforms pickle (to another process, a Dask worker): the function and its options travel,
nothing compiled; the other process compiles once or finds the native code in the shared cache."""
import os
import pickle
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import flowgrad
from conftest import REPO_ROOT

KERNEL = '''
import numpy as np

def heat(u, kappa, steps):
    for t in range(steps):
        u[1:-1] += kappa * (u[2:] - 2.0 * u[1:-1] + u[:-2])
    return np.sum(u * u)
'''


def _module(tmp_path):
    (tmp_path / "picklekernel.py").write_text(KERNEL)
    sys.path.insert(0, str(tmp_path))
    import picklekernel
    return picklekernel


def test_transforms_pickle_into_working_functions_in_another_process(tmp_path, backend):
    mod = _module(tmp_path)
    try:
        transforms = {
            "grad": flowgrad.grad(mod.heat, wrt=("u", "kappa"), backend=backend),
            "value_and_grad": flowgrad.value_and_grad(mod.heat, wrt="kappa", backend=backend,
                                                      memory_budget="1MiB"),
            "jit": flowgrad.jit(mod.heat, backend=backend),
            "jacfwd": flowgrad.jacfwd(mod.heat, wrt="kappa", backend=backend),
            "hessian": flowgrad.hessian(mod.heat, wrt="kappa", backend=backend),
        }
        u = np.linspace(0.0, 1.0, 9) ** 2
        args = (u, 0.2, 5)
        expected = {k: t(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in args])
                    for k, t in transforms.items()}
        blob = tmp_path / "transforms.pkl"
        blob.write_bytes(pickle.dumps((transforms, args)))
        # the same objects back in this process work too
        again = pickle.loads(blob.read_bytes())[0]
        assert again["value_and_grad"].memory_budget == 1 << 20
        script = textwrap.dedent(f"""
            import pickle, sys
            import numpy as np
            sys.path.insert(0, {str(tmp_path)!r})
            transforms, args = pickle.loads(open({str(blob)!r}, "rb").read())
            out = {{k: t(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in args]) for k, t in transforms.items()}}
            sys.stdout.buffer.write(pickle.dumps(out))
        """)
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=600)
        assert run.returncode == 0, run.stderr.decode()[-2000:]
        got = pickle.loads(run.stdout)
        for k in expected:
            for a, b in zip(np.atleast_1d(np.asarray(expected[k], dtype=object)).ravel(),
                            np.atleast_1d(np.asarray(got[k], dtype=object)).ravel()):
                np.testing.assert_allclose(np.asarray(b, dtype=float), np.asarray(a, dtype=float), rtol=1e-14,
                                           err_msg=k)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("picklekernel", None)


# ---------------------------------------------------------------- vjp pullbacks and program objects


def _run_elsewhere(tmp_path, calls, env=None):
    """``{name: f(*args)}`` for ``calls``, ``{name: (f, args)}`` pickled: unpickled in a fresh Python
    process, called there, and the results pickled back."""
    blob = tmp_path / "calls.pkl"
    blob.write_bytes(calls)
    script = textwrap.dedent(f"""
        import pickle, sys
        sys.path.insert(0, {str(tmp_path)!r})
        calls = pickle.loads(open({str(blob)!r}, "rb").read())
        sys.stdout.buffer.write(pickle.dumps({{k: f(*args) for k, (f, args) in calls.items()}}))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=600, env=env,
                         cwd=str(REPO_ROOT))
    assert run.returncode == 0, run.stderr.decode()[-2000:]
    return pickle.loads(run.stdout)


def _assert_same(got, want, where=""):
    """Equal structure, equal numbers (to rounding: the same code on the same values)."""
    if isinstance(want, dict):
        assert sorted(got) == sorted(want), where
        for k in want:
            _assert_same(got[k], want[k], f"{where}[{k!r}]")
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want), where
        for k, (g, w) in enumerate(zip(got, want)):
            _assert_same(g, w, f"{where}[{k}]")
    elif want is None:
        assert got is None, where
    else:
        assert np.shape(got) == np.shape(want), where
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-14, atol=0, err_msg=where)


def test_vjp_pullback_pickles_without_residuals_and_recomputes_elsewhere(tmp_path, backend):
    mod = _module(tmp_path)
    try:
        n, steps = 400, 200
        u = np.sin(np.linspace(0.0, 3.0, n)) + 2.0      # no value of it is in any compiled code
        out, pull = flowgrad.vjp(mod.heat, u, 0.1, steps, wrt=("u", "kappa"), backend=backend)
        u[:] = 0.0                      # the pullback differentiates at the values vjp saw
        blob = pickle.dumps(pull)
        # the forward sweep's tape (steps x n floats) stays here: the arguments and options travel
        assert len(blob) < n * 8 * 3, len(blob)
        assert isinstance(out, float) and out > 0.0
        # in this process: the same pullback, unpickled, gives the gradients of the original
        want = pull(1.5)
        again = pickle.loads(blob)(1.5)
        _assert_same(again, want)
        cache = tmp_path / "cache"
        env = dict(os.environ, FLOWGRAD_CACHE_DIR=str(cache))
        got = _run_elsewhere(tmp_path, pickle.dumps({"pullback": (pull, (1.5,))}), env)["pullback"]
        _assert_same(got, want)
        # against central differences of the plain function, in kappa
        eps = 1e-6
        u0 = np.sin(np.linspace(0.0, 3.0, n)) + 2.0
        fd = (mod.heat(u0.copy(), 0.1 + eps, steps) - mod.heat(u0.copy(), 0.1 - eps, steps)) / (2 * eps)
        np.testing.assert_allclose(want[1], 1.5 * fd, rtol=1e-6)
        # the other process's cache holds code, never the arguments
        marker = u0.tobytes()[8 * 100:8 * 104]
        for f in cache.rglob("*") if cache.exists() else ():
            if f.is_file():
                assert marker not in f.read_bytes(), f"argument values written into the cache: {f.name}"
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("picklekernel", None)


@pytest.mark.ml
def test_torch_program_and_its_pullback_pickle(tmp_path):
    torch = pytest.importorskip("torch", reason="from_torch needs torch (pip install torch==2.13.0)")
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2)).double().eval()
    x = np.random.default_rng(0).standard_normal((3, 4))
    prog = flowgrad.from_torch(module, x)
    out, pull = flowgrad.vjp(prog, x)
    ct = np.random.default_rng(1).standard_normal(out.shape)
    calls = {"forward": (prog, (x,)), "pullback": (pull, (ct,))}
    blob = pickle.dumps(calls)
    want = {"forward": prog(x), "pullback": pull(ct)}
    got = _run_elsewhere(tmp_path, blob)
    _assert_same(got, want)
    # against torch.autograd
    xt = torch.from_numpy(x).requires_grad_(True)
    (module(xt) * torch.from_numpy(ct)).sum().backward()
    np.testing.assert_allclose(got["pullback"][0][0], xt.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(got["pullback"][1]["0.weight"], module[0].weight.grad.numpy(), rtol=1e-12)


@pytest.mark.ml
def test_onnx_program_pickles_with_its_current_initializers(tmp_path):
    pytest.importorskip("onnx", reason="from_onnx needs onnx (pip install onnx)")
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(2)
    w, b = rng.standard_normal((4, 3)), rng.standard_normal(4)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1), helper.make_node("Tanh", ["h"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [2, 4])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    prog = flowgrad.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    prog.initializers["b"] = b + 0.25           # as a training loop updates them
    x = rng.standard_normal((2, 3))
    out, pull = flowgrad.vjp(prog, x)
    ct = rng.standard_normal(out.shape)
    blob = pickle.dumps({"forward": (prog, (x,)), "pullback": (pull, (ct,))})
    want = {"forward": prog(x), "pullback": pull(ct)}
    got = _run_elsewhere(tmp_path, blob)
    _assert_same(got, want)
    # against NumPy: y = tanh(x w^T + b)
    y = np.tanh(x @ w.T + b + 0.25)
    np.testing.assert_allclose(got["forward"], y, rtol=1e-14)
    np.testing.assert_allclose(got["pullback"][1]["b"], np.sum(ct * (1 - y ** 2), axis=0), rtol=1e-12)


SMOOTH_F90 = """
module coefs
  implicit none
  double precision :: c = 0.5d0
end module coefs

subroutine smooth(n, x, y)
  use coefs
  implicit none
  integer, intent(in) :: n
  double precision, intent(in) :: x(n)
  double precision, intent(out) :: y(n)
  integer :: i
  y(1) = x(1)
  y(n) = x(n)
  do i = 2, n - 1
    y(i) = SCALE * (c * x(i) + 0.25d0 * (x(i - 1) + x(i + 1))) ** 2
  end do
end subroutine smooth
"""


@pytest.mark.fortran
@pytest.mark.skipif(shutil.which("gfortran") is None, reason="gfortran is not installed (apt-get install gfortran)")
def test_fortran_program_pickles_as_its_sources(tmp_path):
    pytest.importorskip("fparser", reason="from_fortran needs fparser (pip install fparser)")
    prog = flowgrad.from_fortran(SMOOTH_F90, "smooth", defines={"SCALE": "3.0d0"}).with_modules({"coefs": {"c": 0.75}})
    x = np.linspace(0.5, 1.5, 7)
    y, pull = flowgrad.vjp(prog, 7, x, wrt="x", backend="numpy")
    ct = np.arange(1.0, 8.0)
    blob = pickle.dumps({"forward": (prog, (7, x)), "pullback": (pull, (ct,))})
    want = {"forward": prog(7, x), "pullback": pull(ct)}
    got = _run_elsewhere(tmp_path, blob)
    _assert_same(got, want)
    # against NumPy: the defines and the bound module value travelled with the program
    inner = 3.0 * (0.75 * x[1:-1] + 0.25 * (x[:-2] + x[2:])) ** 2
    np.testing.assert_allclose(got["forward"][1:-1], inner, rtol=1e-14)
    d = 2.0 * 3.0 * (0.75 * x[1:-1] + 0.25 * (x[:-2] + x[2:])) * ct[1:-1]
    gx = ct * np.r_[1.0, np.zeros(5), 1.0]
    gx[1:-1] += 0.75 * d
    gx[:-2] += 0.25 * d
    gx[2:] += 0.25 * d
    np.testing.assert_allclose(got["pullback"][0], gx, rtol=1e-13)
