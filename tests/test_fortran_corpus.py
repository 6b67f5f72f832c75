"""The Fortran corpus (``benchmarks/fortran``): every routine's forward pass equals gfortran's
build of the same source, and its gradient matches central differences of the gfortran routine,
on both backends."""
import numpy as np
import pytest

from fortran_oracle import Gfortran, check_program, needs_fortran

pytestmark = needs_fortran

from benchmarks.fortran import CASES  # noqa: E402


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_corpus_routine(case, backend):
    import flowgrad
    prog = flowgrad.from_fortran(case.files, case.entry, include_dirs=case.include_dirs)
    if case.modules:
        prog = prog.with_modules(case.modules)
    oracle = Gfortran(prog, case.files, include_dirs=case.include_dirs)
    if case.setup is not None:
        case.setup(oracle.lib)
    args = case.args(np.random.default_rng(0), "test")
    # the numpy backend runs the forward program too; native checks the gradient program's outputs
    check_program(prog, oracle, args, backend, rtol=case.rtol, grad_rtol=case.grad_rtol, fd_step=case.fd_step,
                  forward=backend == "numpy")


def test_corpus_size():
    assert len(CASES) >= 25


def _fortran_loss(name):
    """The loss of ``benchmarks/kernels/<name>.py`` computed by the Fortran corpus routine."""
    import flowgrad
    from benchmarks.fortran import BY_NAME
    case = BY_NAME[name]
    prog = flowgrad.from_fortran(case.files, case.entry)
    if name == "gemm":
        def loss(alpha, beta, C, A, B):
            out = prog(A.shape[0], B.shape[1], A.shape[1], alpha, beta, C, A, B)
            return np.sum(out * out) / (C.shape[0] * C.shape[1])
    elif name == "jacobi-2d":
        def loss(A, B, tsteps):
            a, b = prog(tsteps, A.shape[0], A, B)
            return np.sum(a * a) / (A.shape[0] * A.shape[0])
    elif name == "trisolv":
        def loss(L, b):
            x = prog(L.shape[0], L, None, b)
            return np.sum(x * x) + np.sum(x)
    return loss


@pytest.mark.parametrize("name, module", [("gemm", "gemm"), ("jacobi-2d", "jacobi_2d"), ("trisolv", "trisolv")])
def test_fortran_gradient_equals_the_numpy_kernels_gradient(name, module, backend):
    """flowgrad's gradient of a corpus routine (called from a NumPy loss) equals its gradient of
    the same kernel written in NumPy (``benchmarks/kernels``)."""
    import importlib
    import flowgrad
    kernel = importlib.import_module(f"benchmarks.kernels.{module}")
    args = kernel.args("test")
    wrt = tuple(k for k, a in enumerate(args) if isinstance(a, (float, np.ndarray)))
    want = flowgrad.grad(kernel.kernel, wrt=wrt, backend="numpy")(*args)
    got = flowgrad.grad(_fortran_loss(name), wrt=wrt, backend=backend)(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-11, atol=1e-13)


def test_arrays_the_loops_revisit_are_copied_column_major():
    """gemm's loops revisit every element of its matrices (copied into column-major order); atax
    reads each element of A about once (read where it lies)."""
    import flowgrad
    from benchmarks.fortran import BY_NAME
    gemm, atax = BY_NAME["gemm"], BY_NAME["atax"]
    assert {"a", "b", "c"} <= flowgrad.from_fortran(gemm.files, gemm.entry).reused
    assert "a" not in flowgrad.from_fortran(atax.files, atax.entry).reused
