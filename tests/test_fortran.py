"""The Fortran front door: Fortran semantics checked against gfortran (forward to 1e-12, gradients
against central differences of the gfortran routine), the program object's conventions, modules,
calls from NumPy and PyTorch code, and the errors and warnings a user can cause."""
import warnings

import numpy as np
import pytest

from conftest import have_module
from fortran_oracle import Gfortran, check_program, check_source, needs_fortran

pytestmark = needs_fortran


def fortran(src, entry, **kw):
    import flowgrad
    return flowgrad.from_fortran(src, entry, **kw)


RNG = np.random.default_rng(0)

# ---------------------------------------------------------------- semantics against gfortran

INTEGER_ARITHMETIC = """
subroutine intdiv(n, k, x, out, iout)
  integer, intent(in) :: n, k
  double precision, intent(in) :: x(n)
  double precision, intent(out) :: out(n)
  integer, intent(out) :: iout(8)
  integer :: i, m
  iout(1) = (-7) / 2
  iout(2) = k / 3
  iout(3) = mod(-7, 3)
  iout(4) = modulo(-7, 3)
  iout(5) = mod(k, -4)
  iout(6) = sign(3, -k)
  m = 0
  do i = 10, 1, -3
    m = m + i
  end do
  iout(7) = m * 100 + i
  do i = 5, 1
    m = m + 1
  end do
  iout(8) = i + m
  do i = 1, n
    out(i) = mod(x(i), 0.7d0) + modulo(x(i), -0.3d0) + sign(x(i), -1d0) + dble(i / 2) + real(i, 8) / 2 &
             + dim(x(i), 0.5d0) + nint(x(i) * 3) + floor(x(i)) + ceiling(x(i)) + int(x(i) * 2.5d0) &
             + anint(x(i) * 2) + aint(x(i) * 3)
  end do
end subroutine
"""


def test_integer_division_mod_modulo_sign_and_loop_counts(backend):
    x = np.array([-1.9, -1.1, 0.13, 0.95, 1.77])
    prog, _ = check_source(INTEGER_ARITHMETIC, "intdiv", (5, -11, x, np.zeros(5), np.zeros(8, np.int32)), backend)
    _, iout = prog(5, -11, x, backend=backend)
    # -7/2 = -3 (truncated), mod(-7,3) = -1, modulo(-7,3) = 2; DO 10,1,-3 runs 10,7,4,1 and leaves i = -2
    assert list(iout[:4]) == [-3, -3, -1, 2] and iout[6] == 22 * 100 - 2 and iout.dtype == np.int32
    assert iout[7] == 5 + 22            # a zero-trip DO leaves the variable at its start


CONTROL = """
subroutine ctrl(n, x, y, s)
  integer, intent(in) :: n
  double precision, intent(in) :: x(n)
  double precision, intent(out) :: y(n), s
  integer :: i, j, cnt
  logical :: big
  s = 0d0
  cnt = 0
  outer: do i = 1, n
    big = x(i) > 0.5d0
    if (big .and. i > 2) then
      y(i) = x(i) ** 2
    else if (x(i) < -0.5d0) then
      y(i) = -x(i) ** 3
      cycle outer
    else
      y(i) = sin(x(i))
    end if
    do j = 1, n
      if (j > i) exit
      if (j == 2) cycle
      s = s + x(j) * y(i)
      if (s > 100d0) exit outer
    end do
    select case (mod(i, 4))
    case (0)
      s = s + 1d0
    case (1:2)
      s = s * 1.01d0
    case default
      s = s - x(i)
    end select
    if (x(i) > 0.9d0) s = s + exp(x(i))
  end do outer
  do while (s > 2d0 .and. cnt < 50)
    s = s * 0.9d0
    cnt = cnt + 1
  end do
  do
    cnt = cnt + 1
    if (cnt > 60) exit
    s = s + 0.001d0 * cnt
  end do
end subroutine
"""


def test_control_flow_exit_cycle_named_loops_select_case_do_while(backend):
    check_source(CONTROL, "ctrl", (7, RNG.uniform(-1, 1, 7), np.zeros(7), 0.0), backend)


PRECISION = """
subroutine prec(x, y, z, w)
  double precision, intent(in) :: x
  double precision, intent(out) :: y, z
  real, intent(inout) :: w
  y = x * 0.7
  z = x * 0.7d0 + real(0.7, kind=8) + max(1d0, 2.5d0, x) + min(x, 3d0, -x)
  w = w * 0.3 + sqrt(w)
end subroutine
"""


def test_single_precision_literals_and_variables(backend):
    prog, _ = check_source(PRECISION, "prec", (1.3, 0.0, 0.0, np.float32(2.0)), backend, rtol=1e-6, fd_step=1e-3,
                    grad_rtol=1e-3)
    y, z, w = prog(1.3, None, None, np.float32(2.0), backend=backend)
    assert y == 1.3 * float(np.float32(0.7)) != 1.3 * 0.7     # 0.7 is single precision
    assert isinstance(w, np.float32)


ARRAYS = """
subroutine arr(n, a, b, c, s)
  integer, intent(in) :: n
  double precision, intent(in) :: a(0:n), b(-1:1, 2:4)
  double precision, intent(inout) :: c(n, 3)
  double precision, intent(out) :: s(8)
  double precision :: t(n)
  t = a(1:n) * 2d0
  t(2:n-1) = t(1:n-2) + t(3:n)
  c(:, 1) = c(:, 1) + t
  c(1:n:2, 2) = a(0:n-1:2)
  c(:, 3) = matmul(c(:, 1:2), b(0, 2:3))
  s(1) = sum(a)
  s(2) = sum(c(:, 2:3))
  s(3) = maxval(b) + minval(b(:, 3))
  s(4) = dot_product(a(1:3), b(:, 4))
  s(5) = sum(sum(b, dim=1)) + product(b(1, :)) + sum(maxval(b, dim=2))
  s(6) = size(a) + size(b, 2) + lbound(a, 1) + ubound(b, 1) + lbound(b, 2) + count(a > 0.5d0)
  s(7) = sum(merge(a, -a, a > 0.5d0)) + sum(matmul(transpose(b), b))
  s(8) = sum(transpose(b) * 2) + epsilon(1d0) * 1d10 + tiny(1d0) * 1d300 + huge(1d0) * 1d-308
  where (c > 0.5d0)
    c = c * 2
  elsewhere (c > 0.2d0)
    c = -c
  elsewhere
    c = 0.1d0
  end where
end subroutine
"""


def test_lower_bounds_sections_reductions_matmul_where(backend):
    check_source(ARRAYS, "arr", (5, RNG.random(6), RNG.random((3, 3)), RNG.random((5, 3)), np.zeros(8)), backend)


MODULES = """
module kinds
  implicit none
  integer, parameter :: jprb = selected_real_kind(13, 300)
  integer, parameter :: jpim = selected_int_kind(9)
end module kinds
module consts
  use kinds, only: jprb
  implicit none
  real(kind=jprb), parameter :: rtt = 273.16_jprb
  real(kind=jprb) :: rgas = 287.0_jprb
  real(jprb), parameter :: coef(3) = (/ 1.0_jprb, 0.5_jprb, 0.25_jprb /)
end module consts
module phys
  use kinds
  use consts, only: tfreeze => rtt, rgas, coef
  implicit none
  interface density
    module procedure dens
  end interface
contains
  function poly(x) result(p)
    real(jprb), intent(in) :: x
    real(jprb) :: p
    p = coef(1) + x * (coef(2) + x * coef(3))
  end function poly
  real(jprb) function dens(p, t)
    real(jprb), intent(in) :: p, t
    dens = p / (rgas * t)
  end function
  subroutine unused(x)
    real(jprb) :: x
    x = x + 1
  end subroutine
  subroutine column(n, t, p, rho, scale)
    integer(jpim), intent(in) :: n
    real(jprb), intent(in) :: t(n), p(n)
    real(jprb), intent(out) :: rho(n)
    real(jprb), intent(in), optional :: scale
    integer :: jk
    do jk = 1, n
      rho(jk) = density(p(jk), t(jk)) * poly(t(jk) - tfreeze)
      if (present(scale)) rho(jk) = rho(jk) * scale
    end do
    call clip(rho, n)
  contains
    subroutine clip(r, m)
      integer, intent(in) :: m
      real(jprb), intent(inout) :: r(m)
      r = min(r, 5.0_jprb * coef(1))
    end subroutine
  end subroutine column
  subroutine driver(n, t, p, rho)
    integer, intent(in) :: n
    real(jprb), intent(in) :: t(n), p(n)
    real(jprb), intent(out) :: rho(n)
    real(jprb) :: work(n)
    call column(n, t, p, work, scale=2.0_jprb)
    call column(n, t, p, rho)
    rho = rho + work
  end subroutine
end module phys
"""


def test_modules_use_only_renames_kinds_functions_optional_internal(backend):
    t, p = 260 + 30 * RNG.random(6), 1e5 * (0.5 + RNG.random(6))
    prog, _ = check_source(MODULES, "driver", (6, t, p, np.zeros(6)), backend)
    assert prog.module_inputs == ["consts.rgas"]


TRIDAG_F77 = """
      SUBROUTINE TRIDAG(A, B, C, R, U, N)
      DIMENSION A(N), B(N), C(N), R(N), U(N), GAM(100)
      DOUBLE PRECISION A, B, C, R, U, GAM, BET
      BET = B(1)
      U(1) = R(1) / BET
      DO 11 J = 2, N
        GAM(J) = C(J-1) / BET
        BET = B(J) - A(J)*GAM(J)
        U(J) = (R(J) - A(J)*U(J-1)) / BET
   11 CONTINUE
      DO 12 J = N-1, 1, -1
        U(J) = U(J) - GAM(J+1)*U(J+1)
   12 CONTINUE
      RETURN
      END
"""


def test_fixed_form_implicit_typing(backend):
    n = 8
    prog, _ = check_source(TRIDAG_F77, "TRIDAG", (RNG.random(n), 4 + RNG.random(n), RNG.random(n), RNG.random(n),
                                            np.zeros(n), n), backend)
    assert prog.outputs == ["u"]


SATADJ = """
module yomcst
  implicit none
  real(8), parameter :: rtt = 273.16d0, r2es = 611.21d0, r3les = 17.502d0, r4les = 32.19d0
  real(8), parameter :: rlvtt = 2.5008d6, rcpd = 1004.7d0
end module
subroutine satadj(klon, pt, pq, pout)
  use yomcst
  implicit none
  integer, parameter :: jprb = 8
  integer, intent(in) :: klon
  real(jprb), intent(in) :: pt(klon), pq(klon)
  real(jprb), intent(out) :: pout(klon, 2)
  type point
    real(jprb) :: t, q
    real(jprb) :: hist(3)
  end type
  type(point) :: st
  integer :: jl
  real(jprb) :: zqs
#include "fcttre.h"
  do jl = 1, klon
    st%t = pt(jl)
    st%q = pq(jl)
    st%hist = (/ 1.0_jprb, 2.0_jprb, 3.0_jprb /)
    associate (t => st%t, q => st%q, h => st%hist)
      zqs = foeew(t) / 1.0e5_jprb
#ifdef CLIP
      zqs = min(0.05_jprb, zqs)
#endif
      if (q > zqs) then
        pout(jl, 1) = t + foeldcp(t) * (q - zqs)
        pout(jl, 2) = zqs
      else
        pout(jl, 1) = t + sum(h) * 0.0_jprb
        pout(jl, 2) = q
      end if
    end associate
  end do
end subroutine
"""
FCTTRE = """      REAL(KIND=JPRB) :: FOEEW, FOELDCP, PTARE
      FOEEW(PTARE) = R2ES*EXP(R3LES*(PTARE-RTT)/(PTARE-R4LES))
      FOELDCP(PTARE) = RLVTT/RCPD
"""


def test_statement_functions_from_include_defines_derived_types_associate(backend, tmp_path):
    (tmp_path / "fcttre.h").write_text(FCTTRE)
    pt, pq = 260 + 40 * RNG.random(6), 0.02 * RNG.random(6)
    check_source(SATADJ, "satadj", (6, pt, pq, np.zeros((6, 2))), backend, include_dirs=[tmp_path],
          defines={"CLIP": None})


SHAPES = """
module shp
contains
  subroutine scale2(a, f)
    real(8), intent(inout) :: a(:, :)
    real(8), intent(in) :: f
    integer :: i, j
    do j = 1, size(a, 2)
      do i = lbound(a, 1), ubound(a, 1)
        a(i, j) = a(i, j) * f + i
      end do
    end do
  end subroutine
end module
subroutine col(n, x, s)
  integer :: n
  real(8) :: x(*), s
  integer :: i
  do i = 1, n
    s = s + x(i) ** 2
  end do
end subroutine
subroutine shapes(n, m, a, b, s)
  use shp
  integer, intent(in) :: n, m
  real(8), intent(inout) :: a(n, m), b(0:n-1)
  real(8), intent(out) :: s(m)
  real(8), allocatable :: w(:)
  real(8) :: c(3)
  integer :: j
  call scale2(a, 2.0d0)
  call scale2(a(2:n, 1:m:2), 0.5d0)
  allocate(w(n))
  w = b
  do j = 1, m
    s(j) = 0
    call col(n, a(1, j), s(j))
  end do
  call col(n, w, s(1))
  c = [1d0, 2d0, b(1)]
  s(m) = s(m) + sum(c)
  b(1:n-1) = [(dble(j) * b(j), j = 1, 3)]
end subroutine
"""


def test_assumed_shape_assumed_size_sequence_association_allocatable_constructors(backend):
    check_source(SHAPES, "shapes", (4, 3, RNG.random((4, 3)), RNG.random(4), np.zeros(3)), backend)


ENERGY = """
real(8) function energy(n, x, flag)
  integer, intent(in) :: n
  real(8), intent(in) :: x(n)
  logical, intent(in) :: flag
  integer :: i
  energy = 0
  do i = 2, n
    energy = energy + (x(i) - x(i-1)) ** 2
  end do
  if (flag) energy = energy * 0.5d0
end function
"""


def test_function_entry_with_grad_value_and_grad_jit(backend):
    import flowgrad
    prog, _ = check_source(ENERGY, "energy", (5, RNG.random(5), True), backend)
    x = RNG.random(5)
    d = np.diff(x)
    want = np.zeros(5)
    want[1:] += d
    want[:-1] -= d
    np.testing.assert_allclose(flowgrad.grad(prog, wrt="x", backend=backend)(5, x, True), want, rtol=1e-12)
    value, gx = flowgrad.value_and_grad(prog, wrt="x", backend=backend)(5, x, False)
    assert value == pytest.approx(np.sum(d * d), rel=1e-12)
    np.testing.assert_allclose(gx, 2 * want, rtol=1e-12)
    assert flowgrad.jit(prog, backend=backend)(5, x, True) == pytest.approx(0.5 * np.sum(d * d), rel=1e-12)


PROCEDURES = """
module mm
contains
  elemental real(8) function sq(x)
    real(8), intent(in) :: x
    sq = x * x
  end function
  function twice(v) result(w)
    real(8), intent(in) :: v(:)
    real(8) :: w(size(v))
    w = 2 * v
  end function
  subroutine opt(x, y, z)
    real(8), intent(inout) :: x
    real(8), intent(in), optional :: y, z
    if (present(y)) x = x + y
    if (present(z)) x = x * z
  end subroutine
  subroutine pass(x, y)
    real(8), intent(inout) :: x
    real(8), intent(in), optional :: y
    call opt(x, y)
    call opt(x, z=3d0)
  end subroutine
end module
subroutine rt(klon, kidia, kfdia, m, pt, out, s, found)
  use mm
  implicit none
  integer, intent(in) :: klon, kidia, kfdia, m
  real(8), intent(in) :: pt(klon, 3)
  real(8), intent(out) :: out(klon, 3), s
  integer, intent(out) :: found
  real(8) :: w(m), acc
  integer :: jk, i
  out = 0
  acc = 0
  do jk = 1, 3
    out(kidia:kfdia, jk) = pt(kidia:kfdia, jk) * jk
    where (out(:, jk) > 1d0) out(:, jk) = sq(out(:, jk) - 1d0) + 1d0
  end do
  w = 1d0
  w(1:min(m, klon)) = twice(pt(1:min(m, klon), 1))
  s = sum(w) + sq(pt(1, 1))
  call host_add(pt(2, 2))
  call pass(s, 0.5d0)
  call pass(s)
  found = -1
  do i = 1, klon
    if (pt(i, 3) > 0.7d0) exit
  end do
  found = i
contains
  subroutine host_add(v)
    real(8), intent(in) :: v
    acc = acc + v
    s = s + acc
  end subroutine
end subroutine
"""


def test_elemental_and_array_valued_functions_optional_pass_through_host_association(backend):
    """Also: sections with bounds known only at run time (``kidia:kfdia``), an automatic array sized
    by an integer that sizes no argument, and the DO variable's value after EXIT."""
    a = RNG.random((6, 3)) * 1.5
    prog, _ = check_source(PROCEDURES, "rt", (6, 2, 5, 4, a, np.zeros((6, 3)), 0.0, 0), backend)
    found = prog(6, 2, 5, 4, a, backend=backend)[2]
    assert found == next(i + 1 for i in range(6) if a[i, 2] > 0.7) and found.dtype == np.int32


DATA_F77 = """
      SUBROUTINE DATAS(X, MODE)
      DOUBLE PRECISION X
      CHARACTER*(*) MODE
      DIMENSION A(4), B(2)
      DATA A /3*1.5, 2.0/, B /1., -2./
      DATA C, K /2.5, 3/
      IF (MODE .EQ. 'ADD') THEN
        X = X + A(1) + A(4) + C + K + B(2)
      ELSE
        X = X * C
      END IF
      END
      SUBROUTINE DRIVE(X)
      DOUBLE PRECISION X
      CALL DATAS(X, 'ADD')
      CALL DATAS(X, 'MUL')
      END
"""


def test_data_statements_and_character_mode_arguments(backend):
    check_source(DATA_F77, "drive", (0.25,), backend)


INTRINSICS = """
subroutine intr(n, a, b, s, k)
  integer, intent(in) :: n
  real(8), intent(in) :: a(n)
  real(8), intent(inout) :: b(n, 3)
  real(8), intent(out) :: s(10)
  integer, intent(out) :: k(4)
  real(8) :: m(2, 3), sp(3, n)
  integer :: i, j
  m = reshape([(dble(i) * a(1), i = 1, 6)], [2, 3])
  sp = spread(a, 1, 3)
  s(1) = sum(m(2, :)) + sum(sp(2, :))
  s(2) = sum(a, mask=a > 0.5d0) + product(a(1:3))
  s(3) = sum(product(b, dim=2))
  s(4) = sum(cshift(a, 2)) * a(1) + sum(cshift(a, 2) * a)
  s(5) = sum(eoshift(a, -1) * a) + sum(eoshift(b, 1, dim=2) * b)
  s(6) = sum(cshift(b, -1, dim=1) * b)
  s(7) = maxval(a, mask=a < 0.9d0) + minval(b(:, 2))
  s(8) = merge(1d0, 2d0, any(a > 0.9d0)) + merge(1d0, 2d0, all(a > 0d0))
  s(9) = dble(count(b > 0.5d0))
  s(10) = sum(m) + sum(sum(m, dim=2))
  k(1) = maxloc(a, dim=1)
  k(2:2) = minloc(a)
  k(3) = count(a > 0.3d0)
  k(4) = size(sp, 2)
  do concurrent (i = 1:n, j = 1:3, b(i, j) > 0.2d0)
    b(i, j) = b(i, j) * a(i) + j
  end do
end subroutine
"""


def test_transformational_intrinsics_and_do_concurrent(backend):
    check_source(INTRINSICS, "intr", (6, RNG.random(6), RNG.random((6, 3)), np.zeros(10), np.zeros(4, np.int32)),
                 backend)


NEWTON = """
module newton
  implicit none
contains
  real(8) function resid(x, c)
    real(8), intent(in) :: x, c
    resid = x * x * x - c
  end function
  subroutine find(c, x, iters)
    real(8), intent(in) :: c
    real(8), intent(inout) :: x
    integer, intent(out) :: iters
    iters = 0
    do while (abs(resid(x, c)) > 1d-12)
      x = x - resid(x, c) / (3 * x * x)
      iters = iters + 1
      if (iters >= 40) return
    end do
  end subroutine
  real(8) function first_big(n, v, t)
    integer, intent(in) :: n
    real(8), intent(in) :: v(n), t
    integer :: i
    first_big = -1d0
    do i = 1, n
      if (v(i) > t) then
        first_big = v(i) * i
        return
      end if
    end do
    first_big = sum(v)
  end function
end module
subroutine solve(n, c, x, v, out, iters)
  use newton
  integer, intent(in) :: n
  real(8), intent(in) :: c(n), v(n)
  real(8), intent(inout) :: x(n)
  real(8), intent(out) :: out
  integer, intent(out) :: iters
  integer :: i, it
  iters = 0
  do i = 1, n
    call find(c(i), x(i), it)
    iters = iters + it
  end do
  out = first_big(n, v, 0.8d0) + first_big(n, v, 2d0)
end subroutine
"""


def test_do_while_on_a_function_value_and_return_inside_loops(backend):
    args = (4, 1 + RNG.random(4), 1 + RNG.random(4), RNG.random(4), 0.0, 0)
    prog, _ = check_source(NEWTON, "solve", args, backend)
    x, out, iters = prog(*args[:4], backend=backend)
    np.testing.assert_allclose(x ** 3, args[1], rtol=1e-12)
    assert iters > 4


def test_explain_takes_a_program():
    import flowgrad
    plan = flowgrad.explain(fortran(NEWTON, "first_big"), 4, RNG.random(4), 0.5, wrt="v", backend="numpy")
    assert "memory plan" in str(plan)


def test_recursion_is_refused():
    import flowgrad
    with pytest.raises(flowgrad.UnsupportedError, match="recursive call of fact"):
        fortran(RECURSIVE, "fact")(5, backend="numpy")


RECURSIVE = """
recursive integer function fact(n) result(f)
  integer, intent(in) :: n
  if (n <= 1) then
    f = 1
  else
    f = n * fact(n - 1)
  end if
end function
"""


SPELLINGS = """module prec
  use, intrinsic :: iso_fortran_env, only: dp => real64, int32
  implicit none
  integer, parameter :: wp = kind(1.d0)
end module
subroutine misc(n, a, b)
  use prec
  implicit real*8 (a-h, o-z)
  integer(int32), intent(in) :: n
  real(dp), dimension(n), intent(in out) :: a
  real(wp), intent(out) :: b(2)
  real(dp) :: c(3)
  c = [real(dp) :: 1, 2, 3]
  b(1) = sum(c) + size(a, dim=1)
  b(2) = maxval(abs(a))
  a(n:1:-1) = a * 2
end subroutine
"""


def test_intrinsic_modules_in_out_typed_constructors_negative_strides(backend):
    prog, _ = check_source(SPELLINGS, "misc", (4, RNG.standard_normal(4), np.zeros(2)), backend)
    assert prog.outputs == ["a", "b"]          # INTENT(IN OUT) is INTENT(INOUT)


IFS_IDIOMS = """
MODULE YOMHOOK
  IMPLICIT NONE
  INTEGER, PARAMETER :: JPHOOK = SELECTED_REAL_KIND(13, 300)
  LOGICAL :: LHOOK = .FALSE.
CONTAINS
  SUBROUTINE DR_HOOK(CDNAME, KSWITCH, PKEY)
    CHARACTER(LEN=*), INTENT(IN) :: CDNAME
    INTEGER, INTENT(IN) :: KSWITCH
    REAL(KIND=JPHOOK), INTENT(INOUT) :: PKEY
  END SUBROUTINE
END MODULE
SUBROUTINE ABOR1(CDTEXT)
  CHARACTER(LEN=*) :: CDTEXT
  WRITE(*, *) CDTEXT
  STOP
END SUBROUTINE
SUBROUTINE SCHEME(KLON, KLEV, PT, PQ, LDFLAG, PTEND)
  USE YOMHOOK, ONLY : LHOOK, DR_HOOK, JPHOOK
  IMPLICIT NONE
  INTEGER, INTENT(IN) :: KLON, KLEV
  REAL(8), INTENT(IN) :: PT(KLON, KLEV), PQ(KLON, KLEV)
  LOGICAL, INTENT(IN) :: LDFLAG(KLON)
  REAL(8), INTENT(OUT) :: PTEND(KLON, KLEV, 2)
  INTEGER, PARAMETER :: NT = 1, NQ = 2
  REAL(KIND=JPHOOK) :: ZHOOK_HANDLE
  INTEGER :: JL, JK
  LOGICAL :: LLACT(KLON)
  IF (LHOOK) CALL DR_HOOK('SCHEME', 0, ZHOOK_HANDLE)
  IF (KLEV < 2) CALL ABOR1('SCHEME: KLEV < 2')
  LLACT(:) = LDFLAG(:)
  DO JK = 1, KLEV
    DO JL = 1, KLON
      IF (LLACT(JL) .AND. PT(JL, JK) > 0.5D0) THEN
        PTEND(JL, JK, NT) = PT(JL, JK) * PQ(JL, JK)
        PTEND(JL, JK, NQ) = -PQ(JL, JK) ** 2
      ELSE
        PTEND(JL, JK, NT) = 0.0D0
        PTEND(JL, JK, NQ) = SQRT(PT(JL, JK))
      END IF
    END DO
  END DO
  IF (LHOOK) CALL DR_HOOK('SCHEME', 1, ZHOOK_HANDLE)
END SUBROUTINE
"""


def test_ifs_idioms_dr_hook_abor1_logical_arrays_parameter_indices(backend):
    """``IF (LHOOK) CALL DR_HOOK(...)`` with a stub, an error branch decided when captured (no
    warning from the ABOR1 it never calls), LOGICAL array arguments, PARAMETER indices."""
    args = (4, 3, RNG.random((4, 3)), RNG.random((4, 3)), np.array([True, False, True, True]), np.zeros((4, 3, 2)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        prog, _ = check_source(IFS_IDIOMS, "scheme", args, backend)
    assert prog.module_inputs == ["yomhook.lhook"]


VECTOR_SUBSCRIPTS = """
subroutine gath(n, m, idx, x, a, y, b)
  integer, intent(in) :: n, m
  integer, intent(in) :: idx(m)
  real(8), intent(in) :: x(n), a(n, 3)
  real(8), intent(out) :: y(m)
  real(8), intent(inout) :: b(n, 3)
  real(8) :: t(m, 2)
  y = x(idx) * 2 + sum(a(idx, 2))
  t = a(idx, 1:3:2)
  y = y + t(:, 2)
  b(idx(1:2), 3) = [1d0, 2d0]
  b(idx, 1) = b(idx, 1) + x(idx) ** 2
end subroutine
"""


def test_vector_subscripts_read_and_assigned(backend):
    args = (6, 4, np.array([3, 1, 6, 2], dtype=np.int32), RNG.random(6), RNG.random((6, 3)), np.zeros(4),
            RNG.random((6, 3)))
    check_source(VECTOR_SUBSCRIPTS, "gath", args, backend)


# ---------------------------------------------------------------- conventions of the program object

STENCIL = """
subroutine smooth(n, m, a, u, v)
  integer, intent(in) :: n, m
  double precision, intent(in) :: a
  double precision, intent(inout) :: u(n, m)
  double precision, intent(out) :: v
  integer :: i, j
  do j = 1, m
    do i = 2, n - 1
      u(i, j) = u(i, j) + a * (u(i-1, j) - 2 * u(i, j) + u(i+1, j)) * j
    end do
  end do
  v = sum(u(:, 1) ** 2)
end subroutine
"""


def test_f2py_index_convention_any_memory_order_outputs_in_argument_order():
    prog = fortran(STENCIL, "smooth")
    assert prog.outputs == ["u", "v"]
    u = RNG.random((5, 3))
    want_u = u.copy()
    for j in range(3):
        for i in range(1, 4):
            want_u[i, j] += 0.3 * (want_u[i - 1, j] - 2 * want_u[i, j] + want_u[i + 1, j]) * (j + 1)
    for layout in (u, np.asfortranarray(u), u.T.copy().T[:, :]):
        before = layout.copy()
        got_u, got_v = prog(5, 3, 0.3, layout, backend="numpy")
        np.testing.assert_array_equal(layout, before)          # the caller's array is not modified
        np.testing.assert_allclose(got_u, want_u, rtol=1e-14)
        assert got_v == pytest.approx(np.sum(want_u[:, 0] ** 2), rel=1e-14)


def test_vjp_gives_every_float_argument_in_order_and_checks_cotangents():
    import flowgrad
    prog = fortran(STENCIL, "smooth")
    u = RNG.random((5, 3))
    (out_u, out_v), pullback = flowgrad.vjp(prog, 5, 3, 0.3, u, backend="numpy")
    ga, gu = pullback((np.ones_like(out_u), 1.0))
    assert isinstance(ga, float) and gu.shape == u.shape
    ga_u_only, _ = pullback((np.ones_like(out_u), None))       # None: a zero cotangent
    assert ga_u_only != ga
    with pytest.raises(flowgrad.InputError, match="one cotangent per output"):
        pullback(np.ones_like(out_u))
    with pytest.raises(flowgrad.InputError, match="has shape"):
        pullback((np.ones(3), 1.0))


def test_shape_integers_must_match_the_arrays():
    import flowgrad
    prog = fortran(STENCIL, "smooth")
    with pytest.raises(flowgrad.InputError, match="declared \\(5, 3\\) but has shape \\(4, 3\\)"):
        prog(5, 3, 0.3, RNG.random((4, 3)), backend="numpy")


RELAX = """
module params
  implicit none
  real(8) :: alpha = 0.5d0
  real(8) :: table(3)
  type settings
    real(8) :: gain = 2.0d0
    real(8) :: bias(0:2)
  end type
  type(settings) :: cfg
end module
subroutine relax(n, u)
  use params
  implicit none
  integer, intent(in) :: n
  real(8), intent(inout) :: u(n)
  integer :: i
  do i = 2, n - 1
    u(i) = u(i) + alpha * (u(i-1) - 2 * u(i) + u(i+1)) + table(mod(i, 3) + 1) * cfg%gain + cfg%bias(mod(i, 3))
  end do
end subroutine
"""


def test_module_variables_are_inputs(backend):
    import flowgrad
    prog = fortran(RELAX, "relax")
    assert prog.module_inputs == ["params.alpha", "params.table", "params.cfg"]
    u = RNG.random(6)
    with pytest.raises(flowgrad.InputError, match="params.table has no initial value"):
        prog(6, u, backend="numpy")
    with pytest.raises(flowgrad.InputError, match="does not read"):
        prog(6, u, modules={"params": {"beta": 1.0}}, backend="numpy")
    mods = {"params": {"table": [1.0, 2.0, 3.0], "alpha": 0.25, "cfg": {"bias": [0.1, 0.2, 0.3]}}}
    oracle = Gfortran(prog, RELAX)
    oracle.set_module("params", "alpha", 0.25)
    oracle.set_module("params", "table", np.array([1.0, 2.0, 3.0]))
    bound = prog.with_modules(mods)
    # gfortran: the derived-type variable's components, by hand
    want = u.copy()
    for i in range(1, 5):
        want[i] += 0.25 * (want[i - 1] - 2 * want[i] + want[i + 1]) + [1., 2., 3.][(i + 1) % 3] * 2.0 + \
            [0.1, 0.2, 0.3][(i + 1) % 3]
    np.testing.assert_allclose(bound(6, u, backend=backend), want, rtol=1e-14)
    np.testing.assert_allclose(prog(6, u, modules=mods, backend=backend), want, rtol=1e-14)


def test_alpha_from_modules_matches_gfortran():
    prog = fortran(RELAX.replace("* cfg%gain + cfg%bias(mod(i, 3))", ""), "relax")
    oracle = Gfortran(prog, RELAX.replace("* cfg%gain + cfg%bias(mod(i, 3))", ""))
    oracle.set_module("params", "alpha", 0.3)
    oracle.set_module("params", "table", np.array([1.0, -2.0, 0.5]))
    check_program(prog.with_modules({"params": {"alpha": 0.3, "table": np.array([1.0, -2.0, 0.5])}}), oracle,
                  (6, RNG.random(6)), "numpy")


PROFILE = """
module dims
  integer :: nlev = 4
end module
subroutine prof(n, x, s)
  use dims
  integer, intent(in) :: n
  real(8), intent(in) :: x(n)
  real(8), intent(out) :: s
  real(8) :: w(nlev)
  integer :: k
  do k = 1, nlev
    w(k) = x(mod(k, n) + 1) * k
  end do
  s = sum(w ** 2)
end subroutine
"""


def test_a_module_integer_sizes_a_local_array_at_run_time(backend):
    prog = fortran(PROFILE, "prof")
    assert prog.module_inputs == ["dims.nlev"]
    oracle = Gfortran(prog, PROFILE)
    x = RNG.random(5)
    check_program(prog, oracle, (5, x, 0.0), backend)
    oracle.set_module("dims", "nlev", np.int32(7))
    try:
        check_program(prog.with_modules({"dims": {"nlev": 7}}), oracle, (5, x, 0.0), backend)
    finally:
        oracle.set_module("dims", "nlev", np.int32(4))


# ---------------------------------------------------------------- called from NumPy and PyTorch code

def test_a_numpy_loss_calls_the_program(backend):
    import flowgrad
    prog = fortran(STENCIL, "smooth")

    def loss(u, a):
        w, v = prog(u.shape[0], u.shape[1], a, u)
        return np.sum(w * w) + 0.5 * v

    def reference(u, a):
        w, v = prog(5, 3, a, u, backend="numpy")
        return np.sum(w * w) + 0.5 * v
    u = RNG.random((5, 3))
    gu, ga = flowgrad.grad(loss, wrt=(0, 1), backend=backend)(u, 0.3)
    d, h = RNG.standard_normal(u.shape), 1e-6
    assert np.sum(gu * d) == pytest.approx((reference(u + h * d, 0.3) - reference(u - h * d, 0.3)) / (2 * h),
                                           rel=1e-6)
    assert ga == pytest.approx((reference(u, 0.3 + h) - reference(u, 0.3 - h)) / (2 * h), rel=1e-6)
    assert flowgrad.jit(loss, backend=backend)(u, 0.3) == pytest.approx(reference(u, 0.3), rel=1e-13)


@pytest.mark.ml
@pytest.mark.skipif(not have_module("torch"), reason="needs PyTorch")
def test_a_pytorch_training_step_calls_the_program(backend):
    import torch
    import flowgrad
    import flowgrad.torch
    prog = fortran(STENCIL, "smooth")

    def simulate(u, a):
        w, v = prog(5, 3, a, u)
        return w

    sim = flowgrad.torch.function(simulate, backend=backend)
    net = torch.nn.Linear(3, 3, dtype=torch.float64)
    x = torch.tensor(RNG.random((5, 3)))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = (sim(net(x), 0.3) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    # the same gradient as PyTorch's autograd of the stencil written in PyTorch
    u = net(x)
    w = u.clone()
    for j in range(3):
        for i in range(1, 4):
            w[i, j] = w[i, j] + 0.3 * (w[i - 1, j] - 2 * w[i, j] + w[i + 1, j]) * (j + 1)
    ref = torch.autograd.grad((w ** 2).mean(), net.weight)[0]
    got = torch.autograd.grad((sim(net(x), 0.3) ** 2).mean(), net.weight)[0]
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.ml
@pytest.mark.skipif(not have_module("torch"), reason="needs PyTorch")
def test_torch_function_of_a_one_output_program():
    import torch
    import flowgrad
    import flowgrad.torch
    prog = fortran(ENERGY, "energy")
    f = flowgrad.torch.function(prog, backend="numpy")
    x = torch.tensor(RNG.random(5), requires_grad=True)
    e = f(5, x, False)
    e.backward()
    ref = ((x[1:] - x[:-1]) ** 2).sum()
    torch.testing.assert_close(e, ref.detach())
    torch.testing.assert_close(x.grad, torch.autograd.grad(ref, x)[0])
    with pytest.raises(flowgrad.InputError, match="several outputs"):
        flowgrad.torch.function(fortran(STENCIL, "smooth"))


# ---------------------------------------------------------------- errors and warnings


@pytest.mark.parametrize("body, construct", [
    ("      goto 10\n10    continue", "GOTO"),
    ("      read(*, *) x", "READ statement"),
    ("      p => x", "pointer assignment"),
])
def test_refused_statements_name_file_line_and_construct(body, construct, tmp_path):
    import flowgrad
    path = tmp_path / "bad.f90"
    path.write_text(f"subroutine bad(x)\n      real, target :: x\n      real, pointer :: p\n{body}\n"
                    "      x = x + 1\nend subroutine\n")
    prog = flowgrad.from_fortran(str(path), "bad")
    with pytest.raises(flowgrad.UnsupportedError, match=f"bad.f90:4: unsupported {construct}"):
        prog(np.float32(1.0), backend="numpy")


@pytest.mark.parametrize("decl, construct", [("common /blk/ y", "COMMON block"),
                                             ("equivalence (x, y)", "EQUIVALENCE")])
def test_refused_declarations(decl, construct, tmp_path):
    import flowgrad
    path = tmp_path / "bad.f90"
    path.write_text(f"subroutine bad(x)\n  real :: x, y\n  {decl}\n  x = x + y\nend subroutine\n")
    with pytest.raises(flowgrad.UnsupportedError, match=f"bad.f90:3: unsupported {construct}"):
        flowgrad.from_fortran(str(path), "bad")(np.float32(1.0), backend="numpy")


def test_write_and_print_are_ignored_with_a_warning(tmp_path):
    path = tmp_path / "talk.f90"
    path.write_text("subroutine talk(x)\n  real(8) :: x\n  print *, 'x is', x\n  x = 2 * x\n"
                    "  write(*, '(f8.3)') x\nend subroutine\n")
    prog = fortran(str(path), "talk")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert prog(1.5, backend="numpy") == 3.0
    messages = [str(w.message) for w in caught]
    assert any("talk.f90:3: PRINT statement ignored" in m for m in messages)
    assert any("talk.f90:5: WRITE statement ignored" in m for m in messages)


def test_unknown_entry_undeclared_names_and_missing_procedures():
    import flowgrad
    with pytest.raises(flowgrad.InputError, match="no subroutine or function named 'nope'.*smooth"):
        fortran(STENCIL, "nope")
    prog = fortran("subroutine s(x)\n  implicit none\n  real(8) :: x\n  x = y\nend subroutine\n", "s")
    with pytest.raises(flowgrad.UnsupportedError, match=":4: unsupported undeclared name y"):
        prog(1.0, backend="numpy")
    prog = fortran("subroutine s(x)\n  real(8) :: x\n  call elsewhere(x)\nend subroutine\n", "s")
    with pytest.raises(flowgrad.UnsupportedError, match="unknown subroutine elsewhere"):
        prog(1.0, backend="numpy")


def test_errors_in_included_files_name_the_included_file(tmp_path):
    import flowgrad
    (tmp_path / "body.h").write_text("x = x + 1\ngoto 10\n10 continue\n")
    (tmp_path / "cpp.F90").write_text("subroutine s(x)\n  real(8), intent(inout) :: x\n#include \"body.h\"\n"
                                      "end subroutine\n")
    (tmp_path / "inc.f90").write_text("subroutine s(x)\n  real(8), intent(inout) :: x\n  include 'body.h'\n"
                                      "end subroutine\n")
    for name in ("cpp.F90", "inc.f90"):
        prog = flowgrad.from_fortran(str(tmp_path / name), "s", include_dirs=[tmp_path])
        with pytest.raises(flowgrad.UnsupportedError, match="body.h:2: unsupported GOTO"):
            prog(1.0, backend="numpy")


def test_syntax_errors_name_the_file():
    import flowgrad
    with pytest.raises(flowgrad.UnsupportedError, match="<fortran source>"):
        flowgrad.from_fortran("subroutine s(x)\n  real :: x\n  x = = 2\nend subroutine\n", "s")


def test_vjp_with_respect_to_module_variables():
    import flowgrad
    src = RELAX.replace("* cfg%gain + cfg%bias(mod(i, 3))", "")
    prog = fortran(src, "relax").with_modules({"params": {"table": np.array([1.0, -2.0, 0.5]), "alpha": 0.3}})
    u = RNG.random(6)
    out, pullback = flowgrad.vjp(prog, 6, u, wrt=("params.alpha", "u", "params.table"), backend="numpy")
    g_alpha, g_u, g_table = pullback(np.ones(6))
    h = 1e-6

    def total(alpha, table):
        return np.sum(fortran(src, "relax")(6, u, modules={"params": {"alpha": alpha, "table": table}},
                                            backend="numpy"))
    t = np.array([1.0, -2.0, 0.5])
    assert g_alpha == pytest.approx((total(0.3 + h, t) - total(0.3 - h, t)) / (2 * h), rel=1e-6)
    e = np.array([0.0, 1.0, 0.0])
    assert g_table[1] == pytest.approx((total(0.3, t + h * e) - total(0.3, t - h * e)) / (2 * h), rel=1e-6)
    assert g_u.shape == (6,)
    with pytest.raises(flowgrad.InputError, match="neither an argument"):
        flowgrad.vjp(prog, 6, u, wrt="params.nope")


FIXED_F = """C     fixed form through the preprocessor
      SUBROUTINE SCAL(N, X)
      INTEGER N
      DOUBLE PRECISION X(N)
#ifdef TWICE
      DO 10 I = 1, N
         X(I) = X(I) * FACTOR
   10 CONTINUE
#endif
      X(1) = X(1) + 1.0D0
      END
"""


def test_preprocessed_fixed_form_with_gfortran_or_cpp(tmp_path, monkeypatch):
    import shutil
    import flowgrad
    import flowgrad.frontends.fortran.source as source
    path = tmp_path / "fixed.F"
    path.write_text(FIXED_F)
    defines = {"TWICE": None, "FACTOR": "2.0D0"}
    np.testing.assert_array_equal(flowgrad.from_fortran(str(path), "scal", defines=defines)(3, np.ones(3),
                                                                                            backend="numpy"), [3, 2, 2])
    np.testing.assert_array_equal(flowgrad.from_fortran(str(path), "scal")(3, np.ones(3), backend="numpy"), [2, 1, 1])
    which = shutil.which
    if which("cpp") is not None:
        monkeypatch.setattr(source.shutil, "which", lambda n: None if n == "gfortran" else which(n))
        np.testing.assert_array_equal(flowgrad.from_fortran(str(path), "scal", defines=defines)(
            3, np.ones(3), backend="numpy"), [3, 2, 2])
    monkeypatch.setattr(source.shutil, "which", lambda n: None)
    with pytest.raises(flowgrad.FlowgradError, match="needs gfortran or cpp"):
        flowgrad.from_fortran(str(path), "scal")


def test_arrays_of_derived_types_are_refused():
    import flowgrad
    src = ("subroutine s(x)\n  real(8), intent(inout) :: x\n  type pt\n    real(8) :: v\n  end type\n"
           "  type(pt) :: arr(3)\n  arr%v = x\n  x = arr(1)%v\nend subroutine\n")
    with pytest.raises(flowgrad.UnsupportedError, match="array of derived type"):
        fortran(src, "s")(1.0, backend="numpy")
