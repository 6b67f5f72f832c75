"""Defects that Fortran written as scientists write it found in the front door, each pinned by
a test against gfortran (forward) and central differences of the gfortran routine (gradient)."""
import numpy as np
import pytest

from fortran_oracle import Gfortran, check_program, check_source, needs_fortran

pytestmark = needs_fortran

RNG = np.random.default_rng(11)


def _z(*shape, dtype=np.float64):
    return np.zeros(shape, dtype)

RECORDS = """
module pset
  implicit none
  type tp
    real(8) :: a = 1d0
    real(8) :: b = 2d0
    real(8) :: w(2) = [0.5d0, 0.25d0]
  end type tp
  type(tp) :: modp = tp(3d0, w=[1d0, 2d0], b=4d0)
  type(tp), parameter :: fixed = tp(b=-1d0)
  real(8) :: c(3) = [1d0, 2d0, 3d0]
end module pset

subroutine records(x, y)
  use pset
  implicit none
  real(8), intent(in) :: x
  real(8), intent(out) :: y(5)
  type(tp) :: loc = tp(5d0, 6d0)
  type(tp) :: r, s
  r = tp(x * 2d0, x + 1d0, [x, 3d0])
  s = fixed
  y(1) = loc%a * x + loc%b + loc%w(1)
  y(2) = modp%a * x + modp%b + modp%w(2)
  y(3) = fixed%a + fixed%b * x + fixed%w(2)
  y(4) = r%a * r%b + r%w(1) * r%w(2) + s%b
  y(5) = c(2) * c(3) * x
end subroutine records
"""


def test_structure_constructors_initialise_records_and_module_arrays(backend):
    """TYPE(T) :: P = T(...) (a local, a module variable, a PARAMETER, with keywords and component
    defaults) and P = T(...) in the body; the local's initial value was silently ignored, the
    PARAMETER and the module array's array-constructor initial value were refused."""
    import flowgrad
    prog, _ = check_source(RECORDS, "records", (0.7, _z(5)), backend)
    assert prog.module_inputs == ["pset.modp", "pset.c"]
    got = prog(0.7, modules={"pset": {"modp": {"b": 10.0}, "c": [1.0, 1.0, 1.0]}}, backend=backend)
    np.testing.assert_allclose(got[[1, 4]], [3 * 0.7 + 10 + 2, 0.7])
    g = flowgrad.grad(lambda x: prog(x)[3], backend=backend)(0.7)
    assert g == pytest.approx(2 * (0.7 + 1) + 2 * 0.7 + 3)


ENERGY = RECORDS.split("subroutine records")[0] + """
subroutine energy(x, e)
  use pset
  real(8), intent(in) :: x
  real(8), intent(out) :: e
  e = modp%a * x**2 + modp%b * sum(c * c) * x
end subroutine energy
"""


def test_grad_takes_module_variables_as_wrt(backend):
    """grad and value_and_grad take wrt="module.variable" (any case), as vjp does; a module
    array's gradient comes in its Fortran shape."""
    import flowgrad
    prog = flowgrad.from_fortran(ENERGY, "energy")
    ga, gc, gx = flowgrad.grad(prog, wrt=("pset.modp.a", "PSET.C", "x"), backend=backend)(0.7)
    assert ga == pytest.approx(0.49)
    np.testing.assert_allclose(gc, 2 * 4.0 * 0.7 * np.array([1.0, 2.0, 3.0]))
    assert gx == pytest.approx(2 * 3 * 0.7 + 4 * 14)
    value, gb = flowgrad.value_and_grad(prog, wrt="pset.modp.b", backend=backend)(0.7)
    assert (value, gb) == (pytest.approx(3 * 0.49 + 4 * 14 * 0.7), pytest.approx(14 * 0.7))
    with pytest.raises(flowgrad.InputError, match="not an argument of energy"):
        flowgrad.grad(prog, wrt="pset.nothing")(0.7)


SIGNED_ZERO = """
subroutine upwind_signs(n, u, y)
  integer, intent(in) :: n
  real(8), intent(in) :: u(n)
  real(8), intent(out) :: y(n)
  integer :: i
  do i = 1, n
    y(i) = sign(1d0, -u(i) * 0d0) * u(i) + sign(u(i), -0d0) + sign(2d0, u(i) - u(i)) + sign(3, -i) * u(i)
  end do
end subroutine
"""


def test_sign_takes_the_sign_of_a_negative_zero(backend):
    """SIGN(A, -0.0) is -|A| (gfortran's processor has signed zeros); it was |A|."""
    check_source(SIGNED_ZERO, "upwind_signs", (3, RNG.random(3) + 0.5, _z(3)), backend)


CHARACTER_CASE = """
subroutine apply(n, op, x, y)
  integer, intent(in) :: n
  character(len=*), intent(in) :: op
  real(8), intent(in) :: x(n)
  real(8), intent(out) :: y(n)
  select case (op)
  case ('square')
    y = x * x
  case ('exp', 'EXP')
    y = exp(x)
  case ('m':'p')
    y = -x
  case default
    y = x
  end select
end subroutine
subroutine driver(n, x, y)
  integer, intent(in) :: n
  real(8), intent(in) :: x(n)
  real(8), intent(out) :: y(n)
  real(8) :: t(n)
  call apply(n, 'exp', x, t)
  call apply(n, 'square', t, y)
  call apply(n, 'neg', y, t)
  call apply(n, 'copy', t, y)
end subroutine
"""


def test_select_case_on_a_character_value_known_when_captured(backend):
    check_source(CHARACTER_CASE, "driver", (5, RNG.random(5), _z(5)), backend)


KEYWORD_NAMES = """
subroutine scaled(n, in, is, lambda, def)
  integer, intent(in) :: n
  real(8), intent(in) :: in(n), is
  real(8), intent(out) :: lambda(n), def
  integer :: if
  if = 2
  lambda = in * is + if
  def = sum(lambda)
end subroutine
"""


def test_dummies_named_like_python_keywords():
    """IN, IS, LAMBDA are Fortran names like any other: passed by position, or by keyword with a
    trailing underscore (in_=...)."""
    import flowgrad
    prog = flowgrad.from_fortran(KEYWORD_NAMES, "scaled")
    x = RNG.random(3)
    lam, d = prog(3, in_=x, is_=1.5, backend="numpy")
    np.testing.assert_allclose(lam, 1.5 * x + 2)
    check_program(prog, Gfortran(prog, KEYWORD_NAMES), (3, x, 1.5, _z(3), 0.0), "numpy")


RUN_TIME_STRIDE = """
subroutine strided(n, k, x, s)
  integer, intent(in) :: n, k
  real(8), intent(in) :: x(n)
  real(8), intent(out) :: s
  integer :: i
  s = 0
  do i = n, 1, k
    s = s * 0.5d0 + x(i)
  end do
  s = s + sum(x(n:1:k) ** 2)
end subroutine
"""


def test_a_section_with_a_negative_stride_known_only_at_run_time(backend):
    """x(n:1:k) with k = -2 at run time reaches x(1); the NumPy backend's slice stopped at the
    end of the axis instead (a negative stop counts from the end)."""
    check_source(RUN_TIME_STRIDE, "strided", (9, -2, RNG.random(9), 0.0), backend)
    check_source(RUN_TIME_STRIDE, "strided", (9, 3, RNG.random(9), 0.0), backend)


SPECIAL_FUNCTIONS = """
! a gamma-distribution closure, as microphysics schemes write them
subroutine closure(n, mu, x, y, total)
  integer, intent(in) :: n
  real(8), intent(in) :: mu, x(n)
  real(8), intent(out) :: y(n), total
  real(8) :: m(n, 2)
  integer :: i
  do i = 1, n
    y(i) = gamma(mu + 4d0) / gamma(mu + 1d0) * x(i) ** 3 + 0.5d0 * (1d0 + erf((x(i) - 0.5d0) / sqrt(2d0))) &
           + atan(x(i)) + datan(2d0 * x(i))
  end do
  m(:, 1) = hypot(x, y)
  m(:, 2) = erf(x) * gamma(-x - 0.5d0) + log_gamma(x + 1d0)
  total = norm2(m) + sum(norm2(m, dim=2))
end subroutine
"""


def test_special_functions_erf_gamma_hypot_norm2_and_one_argument_atan(backend):
    """ERF, GAMMA (negative arguments too), HYPOT, NORM2 (with DIM) and ATAN(X), which failed
    with a KeyError (its argument was looked up as ATAN2's)."""
    check_source(SPECIAL_FUNCTIONS, "closure", (5, 1.5, RNG.random(5) + 0.1, _z(5), 0.0), backend)


@pytest.mark.parametrize("call, name", [("erfc(x)", "ERFC"), ("bessel_j0(x)", "BESSEL_J0"),
                                        ("dble(ishft(n, 2)) * x", "ISHFT")])
def test_standard_intrinsics_not_supported_are_named_as_intrinsics(call, name):
    import flowgrad
    prog = flowgrad.from_fortran(f"""
subroutine s(n, x, y)
  integer, intent(in) :: n
  real(8), intent(in) :: x
  real(8), intent(out) :: y
  y = {call}
end subroutine
""", "s")
    with pytest.raises(flowgrad.UnsupportedError, match=f"<fortran source>:6: unsupported intrinsic {name}"):
        prog(2, 0.5, backend="numpy")


DIMENSIONED_BY_A_RECORD = """
module grid_kinds
  implicit none
  type grid_t
    integer :: nx, nz
    real(8) :: dz
  end type grid_t
contains
  subroutine diffuse(g, kappa, t, flux)
    type(grid_t), intent(in) :: g
    real(8), intent(in) :: kappa
    real(8), intent(inout) :: t(g%nx, g%nz)
    real(8), intent(out) :: flux(g%nx, 0:g%nz)
    flux(:, 1:g%nz-1) = -kappa * (t(:, 2:g%nz) - t(:, 1:g%nz-1)) / g%dz
    flux(:, 0) = 0d0
    flux(:, g%nz) = 0d0
    t = t - (flux(:, 1:g%nz) - flux(:, 0:g%nz-1)) / g%dz
  end subroutine diffuse
end module grid_kinds

subroutine column_model(nx, nz, nsteps, kappa, t, heat)
  use grid_kinds
  implicit none
  integer, intent(in) :: nx, nz, nsteps
  real(8), intent(in) :: kappa
  real(8), intent(inout) :: t(nx, nz)
  real(8), intent(out) :: heat
  type(grid_t) :: g
  real(8) :: f(nx, 0:nz)
  integer :: k
  g%nx = nx
  g%nz = nz
  g%dz = 1d0 / nz
  do k = 1, nsteps
    call diffuse(g, kappa, t, f)
  end do
  heat = sum(t) + sum(f(:, 1:nz-1) ** 2)
end subroutine column_model
"""


def test_dummies_dimensioned_by_values_known_only_at_run_time(backend):
    """Explicit-shape dummies sized by a derived type's components (set at run time) take their
    actual arguments as they are, checked when the program runs; they were refused."""
    import flowgrad
    prog, _ = check_source(DIMENSIONED_BY_A_RECORD, "column_model", (3, 6, 4, 1e-3, RNG.random((3, 6)), 0.0),
                           backend)
    for old, new, extents in [("g%nx = nx", "g%nx = nx - 1", "2 declared where it has 3, 6 declared where it has 6"),
                              ("g%nz = nz", "g%nz = nz + 1", "3 declared where it has 3, 7 declared where it has 6")]:
        prog = flowgrad.from_fortran(DIMENSIONED_BY_A_RECORD.replace(old, new), "column_model")
        with pytest.raises(ValueError, match=f":35: dummy t of diffuse does not fit its actual argument t: an "
                                             f"extent {extents};"):
            prog(3, 6, 4, 1e-3, RNG.random((3, 6)), backend=backend)


EMPTY_EXTREMES = """
subroutine extremes(n, k1, k2, a, s, cm, rm)
  integer, intent(in) :: n, k1, k2
  real(8), intent(in) :: a(n, 3)
  real(8), intent(out) :: s, cm(3), rm(n)
  s = maxval(a(k1:k2, 1)) + minval(a(k1:k2, :)) * 1d-300 + maxval(a(:, 1))
  cm = maxval(a(k1:k2, :), dim=1)
  rm = minval(a(:, 1:k2-k1), dim=2)
  if (k2 < k1) then
    s = -s * 1d-300
    cm = cm * 1d-300
    rm = rm * 1d-300
  end if
end subroutine
"""


@pytest.mark.parametrize("k1, k2", [(3, 2), (2, 4)])
def test_maxval_and_minval_of_no_elements_are_minus_and_plus_huge(k1, k2, backend):
    """Over a section with no elements (k2 < k1 at run time) MAXVAL is -HUGE and MINVAL HUGE; the
    NumPy backend raised a ValueError, the native one gave -inf."""
    check_source(EMPTY_EXTREMES, "extremes", (4, k1, k2, RNG.random((4, 3)), 0.0, _z(3), _z(4)), backend)


NAN_GUARD = """
subroutine guarded(n, x, y, bad)
  use, intrinsic :: ieee_arithmetic, only: ieee_is_nan, ieee_is_finite
  integer, intent(in) :: n
  real(8), intent(in) :: x(n)
  real(8), intent(out) :: y(n)
  logical, intent(out) :: bad
  bad = any(ieee_is_nan(x)) .or. .not. all(ieee_is_finite(x))
  where (ieee_is_finite(x))
    y = 2 * x
  elsewhere
    y = 0
  end where
end subroutine
"""


def test_ieee_arithmetic_nan_and_finite_tests(backend):
    """USE IEEE_ARITHMETIC was refused as a module whose source is missing."""
    check_source(NAN_GUARD, "guarded", (3, RNG.random(3), _z(3), False), backend)
    check_source(NAN_GUARD, "guarded", (3, np.array([1.0, np.nan, -np.inf]), _z(3), False), backend, grad=False)


PROCEDURE_ARGUMENTS = """
module integrators
  implicit none
  integer, parameter :: dp = kind(1d0)
  abstract interface
    subroutine rhs_iface(n, t, y, dydt, p)
      import :: dp
      integer, intent(in) :: n
      real(dp), intent(in) :: t, y(n), p
      real(dp), intent(out) :: dydt(n)
    end subroutine
  end interface
contains
  subroutine rk2(f, n, t0, dt, nsteps, y, p)
    procedure(rhs_iface) :: f
    integer, intent(in) :: n, nsteps
    real(dp), intent(in) :: t0, dt, p
    real(dp), intent(inout) :: y(n)
    real(dp) :: k1(n), k2(n), t
    integer :: i
    t = t0
    do i = 1, nsteps
      call f(n, t, y, k1, p)
      call f(n, t + dt, y + dt * k1, k2, p)
      y = y + 0.5_dp * dt * (k1 + k2)
      t = t + dt
    end do
  end subroutine
  real(dp) function quad(g, a, b, m)
    real(dp), external :: g
    real(dp), intent(in) :: a, b
    integer, intent(in) :: m
    integer :: i
    real(dp) :: h
    h = (b - a) / m
    quad = 0.5_dp * (g(a) + g(b))
    do i = 1, m - 1
      quad = quad + g(a + i * h)
    end do
    quad = quad * h
  end function
end module
module models
  use integrators, only: dp
  implicit none
  real(dp) :: decay = 0.3_dp
contains
  subroutine oscillator(n, t, y, dydt, p)
    integer, intent(in) :: n
    real(dp), intent(in) :: t, y(n), p
    real(dp), intent(out) :: dydt(n)
    dydt(1) = y(2)
    dydt(2) = -p * y(1) - decay * y(2) + 0.1_dp * sin(t)
  end subroutine
  real(dp) function bump(x)
    real(dp), intent(in) :: x
    bump = exp(-decay * x * x)
  end function
end module
subroutine solve(p, y, area)
  use integrators
  use models
  real(dp), intent(in) :: p
  real(dp), intent(inout) :: y(2)
  real(dp), intent(out) :: area
  call rk2(oscillator, 2, 0.0_dp, 0.05_dp, 40, y, p)
  area = quad(bump, -1.0_dp, 2.0_dp * y(1), 16)
end subroutine
"""


def test_procedures_passed_as_arguments_are_inlined(backend):
    """An integrator taking its right-hand side as PROCEDURE(iface), a quadrature taking an
    EXTERNAL function: the procedure a call passes is inlined where the dummy is called (the
    declaration was refused, even in routines never called)."""
    check_source(PROCEDURE_ARGUMENTS, "solve", (2.0, np.array([1.0, 0.0]), 0.0), backend)


def test_an_entry_taking_a_procedure_is_refused_by_name():
    import flowgrad
    with pytest.raises(flowgrad.UnsupportedError, match=r"<fortran source>:\d+: unsupported dummy procedure f of the "
                                                        r"entry rk2: call the routine from a Fortran routine"):
        flowgrad.from_fortran(PROCEDURE_ARGUMENTS, "rk2")


DIRECTIVES = """
subroutine scale_omp(x, n, y, w)
  real(8), intent(in) :: x(n), w(size(x))
  integer, intent(in) :: n
  real(8), intent(out) :: y(n)
  integer :: i
!$omp parallel do private(i)
  do i = 1, n
    y(i) = 2 * x(i) * w(i)
  end do
!$omp end parallel do
!$ y(1) = -1d0
  !$acc kernels
  y = y + 1
  !$acc end kernels
end subroutine
"""


def test_directive_lines_are_comments_and_declarations_use_dummies_declared_later(backend):
    """OpenMP and OpenACC directives and !$ conditional lines are comments, as gfortran without
    -fopenmp reads them; x(n) may be declared before n (untested until now)."""
    check_source(DIRECTIVES, "scale_omp", (RNG.random(4), 4, _z(4), RNG.random(4)), backend)


# FORTRAN 77 as punched on cards: columns 73-80 hold sequence numbers, which compilers ignore
SEQUENCE_NUMBERED = """\
C     LEGACY F77: SEQUENCE NUMBERS, REAL*8, DATA WITH IMPLIED DO, COMMA LABELS
      SUBROUTINE LEGACY(N, X, Y)                                        LEG00010
      IMPLICIT REAL*8 (A-H,O-Z)                                         LEG00020
      INTEGER*4 N                                                       LEG00030
      REAL*8 X(N), Y(N), W(3), V(4)                                     LEG00040
      PARAMETER (HALF = 0.5D0, NW = 3)                                  LEG00050
      LOGICAL*4 POS                                                     LEG00060
      DATA (W(I), I = 1, NW) / 0.25D0, 0.5D0, 0.25D0 /                  LEG00070
      DATA V / 4*1.0D0 /                                                LEG00080
      DO 10, I = 1, N                                                   LEG00090
        Y(I) = X(I)                                                     LEG00100
   10 CONTINUE                                                          LEG00110
      DO 20 I = 2, N - 1, 2                                             LEG00120
        Y(I) = W(1) * X(I-1) + W(2) * X(I) + W(3) * X(I+1)               LEG00130
        POS = Y(I) .GT. HALF                                            LEG00140
        IF (POS) THEN                                                   LEG00150
          Y(I) = Y(I) * V(1)                                            LEG00160
        ELSE IF (Y(I) .LT. 0.1D0) THEN                                  LEG00170
          Y(I) = 0.1D0                                                  LEG00180
        ENDIF                                                           LEG00190
   20 CONTINUE                                                          LEG00200
      RETURN                                                            LEG00210
      END                                                               LEG00220
"""


def test_fixed_form_ignores_columns_past_72_and_data_takes_implied_dos(backend, tmp_path):
    """Card sequence numbers past column 72 failed to parse; DATA for an implied DO, elements and
    sections was refused."""
    path = tmp_path / "legacy.f"
    path.write_text(SEQUENCE_NUMBERED)
    assert max(len(line) for line in SEQUENCE_NUMBERED.splitlines()) > 72
    check_source([str(path)], "legacy", (7, RNG.random(7), _z(7)), backend)


DATA_TABLES = """
      SUBROUTINE TABLES(X, Y)
      DOUBLE PRECISION X, Y(6), A(2, 3), B(5), C, D(0:2)
      INTEGER I, J
      DATA ((A(I, J), I = 1, 2), J = 1, 3) / 1D0, 2D0, 3D0, 4D0, 5D0, 6D0 /
      DATA B(1), B(5) / -1D0, -5D0 /, B(2:4) / 3*0.5D0 /
      DATA C / 7D0 /, (D(I), I = 2, 0, -1) / 0.1D0, 0.2D0, 0.3D0 /
      Y(1) = A(1, 2) * X + A(2, 3)
      Y(2) = SUM(B) * X
      Y(3) = C * X * X
      Y(4) = D(0) + D(1) * 10 + D(2) * 100
      Y(5) = A(2, 1) * B(5)
      Y(6) = SUM(A(:, 3)) * X
      END
"""


def test_data_statements_with_implied_dos_elements_and_sections(backend):
    check_source(DATA_TABLES, "tables", (0.7, _z(6)), backend)


TYPE_BOUND = """
module shapes_mod
  implicit none
  integer, parameter :: dp = kind(1d0)
  type :: relaxer
    real(dp) :: rate = 0.5_dp
    real(dp) :: u(5)
  contains
    procedure :: step => relax_step
    procedure :: norm
    procedure, nopass :: clip
    procedure, pass(this) :: scale_by
  end type relaxer
  type, extends(relaxer) :: damped_relaxer
    real(dp) :: damping = 0.1_dp
  contains
    procedure :: step => damped_step
  end type damped_relaxer
contains
  subroutine relax_step(self, dt)
    class(relaxer), intent(inout) :: self
    real(dp), intent(in) :: dt
    self%u(2:4) = self%u(2:4) + dt * self%rate * (self%u(1:3) - 2 * self%u(2:4) + self%u(3:5))
  end subroutine
  subroutine damped_step(self, dt)
    class(damped_relaxer), intent(inout) :: self
    real(dp), intent(in) :: dt
    self%u(2:4) = self%u(2:4) + dt * self%rate * (self%u(1:3) - 2 * self%u(2:4) + self%u(3:5))
    call self%scale_by(1 - self%damping * dt)
  end subroutine
  real(dp) function norm(self)
    class(relaxer), intent(in) :: self
    norm = sqrt(sum(self%u ** 2))
  end function
  pure real(dp) function clip(x)
    real(dp), intent(in) :: x
    clip = min(max(x, 0.0_dp), 1.0_dp)
  end function
  subroutine scale_by(f, this)
    real(dp), intent(in) :: f
    class(relaxer), intent(inout) :: this
    this%u = this%u * f
  end subroutine
end module shapes_mod
subroutine simulate(u0, dt, n1, n2)
  use shapes_mod
  implicit none
  real(dp), intent(in) :: u0(5), dt
  real(dp), intent(out) :: n1, n2
  type(relaxer) :: a
  type(damped_relaxer) :: b
  integer :: k
  a%u = u0
  b%u = u0
  b%rate = 0.7_dp
  do k = 1, 4
    call a%step(dt)
    call b%step(dt)
  end do
  n1 = a%norm() + a%clip(a%u(3))
  n2 = b%norm() * b%damping
end subroutine
"""


def test_type_bound_procedures_and_extended_types(backend):
    """CALL X%STEP(DT) and X%NORM(), with PASS(this), NOPASS, a type that EXTENDS another and
    overrides a binding, and CLASS(T) passed-object dummies (refused: CLASS declarations, calls
    through a designator; an extended type lacked its parent's components)."""
    check_source(TYPE_BOUND, "simulate", (RNG.random(5), 0.3, 0.0, 0.0), backend)


RESHAPE_ORDER = """
subroutine reorder(x, y, z)
  real(8), intent(in) :: x(24)
  real(8), intent(out) :: y(2, 3, 4), z
  y = reshape(x, [2, 3, 4], order=[3, 1, 2])
  z = sum(y(:, 2, 1:3) * y(:, :, 1)) + sum(reshape(x(1:6), [3, 2], order=[2, 1]) * spread([1d0, 2d0, 3d0], 2, 2))
end subroutine
"""


def test_reshape_with_order(backend):
    """RESHAPE(..., ORDER=) fills the result in permuted subscript order (it was refused)."""
    check_source(RESHAPE_ORDER, "reorder", (RNG.random(24), _z(2, 3, 4), 0.0), backend)


MASKED_LOCATIONS = """
subroutine locations(n, m, a, t, i1, i2, i3, i4, i5)
  integer, intent(in) :: n, m
  real(8), intent(in) :: a(n, m), t
  integer, intent(out) :: i1(2), i2(m), i3(n), i4(2), i5
  i1 = maxloc(a, mask=a < t)
  i2 = minloc(a, dim=1, mask=a > t)
  i3 = maxloc(a, dim=2, mask=a < t)
  i4 = minloc(a, mask=a > 2d0)
  i5 = maxloc([1, 3, 3, 2], dim=1, mask=[.true., .false., .true., .true.])
end subroutine
"""


def test_maxloc_and_minloc_with_mask(backend):
    """MAXLOC/MINLOC with MASK (refused): the first selected extreme, ties included, and 0 where
    the mask selects nothing."""
    a = np.round(RNG.random((4, 5)) * 4) / 4            # ties
    check_source(MASKED_LOCATIONS, "locations", (4, 5, a, 0.6, _z(2, dtype=np.int32), _z(5, dtype=np.int32),
                                                 _z(4, dtype=np.int32), _z(2, dtype=np.int32), 0), backend, grad=False)
