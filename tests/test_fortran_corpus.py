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
