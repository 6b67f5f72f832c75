"""Fortran as scientists write it, beyond the front door's own tests: a Thomas solver, a Burgers
driver with internal procedures, a saturation adjustment by Newton iteration, slope limiters chosen
by SELECT CASE, WHERE with lower bounds other than 1, reductions along DIM, FORTRAN 77 with implicit
typing and labelled loops, a parameter set in a derived type, single precision, in-place updates.
Each is checked against gfortran (forward) and central differences of the gfortran routine
(gradient) on both backends. test_fortran_regressions.py pins the defects such routines found."""
import numpy as np
import pytest

from fortran_oracle import Gfortran, check_source, needs_fortran

pytestmark = needs_fortran

RNG = np.random.default_rng(7)

THOMAS = """
! Thomas algorithm for a tridiagonal system: forward elimination, then a backward sweep
subroutine tridiag_solve(n, a, b, c, d, x)
  implicit none
  integer, intent(in) :: n
  real(8), intent(in) :: a(n), b(n), c(n), d(n)
  real(8), intent(out) :: x(n)
  real(8) :: cp(n), dp(n), m
  integer :: i
  cp(1) = c(1) / b(1)
  dp(1) = d(1) / b(1)
  do i = 2, n
    m = b(i) - a(i) * cp(i-1)
    cp(i) = c(i) / m
    dp(i) = (d(i) - a(i) * dp(i-1)) / m
  end do
  x(n) = dp(n)
  do i = n - 1, 1, -1
    x(i) = dp(i) - cp(i) * x(i+1)
  end do
end subroutine tridiag_solve
"""

BURGERS = """
module burgers_mod
  implicit none
  integer, parameter :: dp = kind(1.0d0)
contains
  subroutine rusanov_flux(n, u, f)
    integer, intent(in) :: n
    real(dp), intent(in) :: u(0:n+1)
    real(dp), intent(out) :: f(0:n)
    integer :: i
    real(dp) :: ul, ur, smax
    do i = 0, n
      ul = u(i)
      ur = u(i+1)
      smax = max(abs(ul), abs(ur))
      f(i) = 0.5_dp * (flux(ul) + flux(ur)) - 0.5_dp * smax * (ur - ul)
    end do
  contains
    pure real(dp) function flux(v)
      real(dp), intent(in) :: v
      flux = 0.5_dp * v * v
    end function flux
  end subroutine rusanov_flux

  subroutine burgers_run(n, nsteps, dt, dx, nu, u, mass)
    integer, intent(in) :: n, nsteps
    real(dp), intent(in) :: dt, dx, nu
    real(dp), intent(inout) :: u(0:n+1)
    real(dp), intent(out) :: mass
    real(dp) :: f(0:n)
    integer :: step
    do step = 1, nsteps
      call apply_bc()
      call rusanov_flux(n, u, f)
      u(1:n) = u(1:n) - dt / dx * (f(1:n) - f(0:n-1)) &
             + nu * dt / dx**2 * (u(2:n+1) - 2.0_dp * u(1:n) + u(0:n-1))
    end do
    call apply_bc()
    mass = sum(u(1:n)) * dx
  contains
    subroutine apply_bc()
      u(0) = u(n)
      u(n+1) = u(1)
    end subroutine apply_bc
  end subroutine burgers_run
end module burgers_mod
"""

SATURATION = """
! saturation adjustment per level: Newton iteration on the temperature until the step is tiny
subroutine satadj(nlev, t, q, p, qc, niter)
  implicit none
  integer, intent(in) :: nlev
  real(8), intent(inout) :: t(nlev), q(nlev)
  real(8), intent(in) :: p(nlev)
  real(8), intent(out) :: qc(nlev)
  integer, intent(out) :: niter(nlev)
  real(8), parameter :: lv = 2.5d6, cp = 1004.0d0, rv = 461.5d0, eps = 0.622d0
  real(8), parameter :: es0 = 611.2d0, t0 = 273.15d0
  real(8) :: es, qs, dqs, tt, f, df, resid
  integer :: k, it
  do k = 1, nlev
    qc(k) = 0.0d0
    niter(k) = 0
    tt = t(k)
    es = es0 * exp(lv / rv * (1.0d0 / t0 - 1.0d0 / tt))
    qs = eps * es / p(k)
    if (q(k) <= qs) cycle
    it = 0
    do while (it < 50)
      it = it + 1
      es = es0 * exp(lv / rv * (1.0d0 / t0 - 1.0d0 / tt))
      qs = eps * es / p(k)
      dqs = qs * lv / (rv * tt * tt)
      f = tt - t(k) - lv / cp * (q(k) - qs)
      df = 1.0d0 + lv / cp * dqs
      resid = f / df
      tt = tt - resid
      if (abs(resid) < 1.0d-10) exit
    end do
    niter(k) = it
    qc(k) = q(k) - eps * es0 * exp(lv / rv * (1.0d0 / t0 - 1.0d0 / tt)) / p(k)
    q(k) = q(k) - qc(k)
    t(k) = tt
  end do
end subroutine satadj
"""

LIMITERS = """
subroutine limited_slopes(n, iopt, u, s)
  implicit none
  integer, intent(in) :: n, iopt
  double precision, intent(in) :: u(n)
  double precision, intent(out) :: s(n)
  double precision :: a, b
  integer :: i
  s(1) = 0d0
  s(n) = 0d0
  do i = 2, n - 1
    a = u(i) - u(i-1)
    b = u(i+1) - u(i)
    select case (iopt)
    case (0)
      s(i) = 0.5d0 * (a + b)
    case (1)
      if (a * b > 0d0) then
        s(i) = sign(min(abs(a), abs(b)), a)
      else
        s(i) = 0d0
      end if
    case (2:3)
      if (a * b > 0d0) then
        s(i) = sign(max(min(2*abs(a), abs(b)), min(abs(a), 2*abs(b))), a)
      else
        s(i) = 0d0
      end if
    case default
      s(i) = b
    end select
  end do
end subroutine limited_slopes
"""

CLIP_UPDATE = """
subroutine clip_update(is, ie, js, je, h, dh, hmin, hnew, nclip)
  implicit none
  integer, intent(in) :: is, ie, js, je
  real(8), intent(in) :: h(is-1:ie+1, js:je), dh(is:ie, js:je), hmin
  real(8), intent(out) :: hnew(is:ie, js:je)
  integer, intent(out) :: nclip
  real(8) :: tmp(is:ie, js:je)
  tmp = h(is:ie, :) + dh
  where (tmp > hmin)
    hnew = tmp
  elsewhere (tmp > 0.5d0 * hmin)
    hnew = hmin + 0.5d0 * (tmp - 0.5d0 * hmin)**2 / hmin
  elsewhere
    hnew = 0.75d0 * hmin + 0.0d0 * tmp
  end where
  hnew(is, :) = 0.5d0 * (hnew(is, :) + h(is-1, :))
  hnew(ie, js:je:2) = hnew(ie, js:je:2) + 0.25d0 * h(ie+1, js:je:2)
  nclip = count(tmp <= hmin)
end subroutine clip_update
"""

COLUMN_STATS = """
subroutine col_stats(nx, ny, a, cmax, rmin, tot, imax, jmin, spread, where_max)
  implicit none
  integer, intent(in) :: nx, ny
  real(8), intent(in) :: a(nx, ny)
  real(8), intent(out) :: cmax(ny), rmin(nx), tot, spread
  integer, intent(out) :: imax(ny), jmin(nx), where_max(2)
  cmax = maxval(a, dim=1)
  rmin = minval(a, dim=2)
  imax = maxloc(a, dim=1)
  jmin = minloc(a(:, 2:ny), dim=2) + 1
  tot = sum(sum(a, dim=2) * rmin)
  where_max = maxloc(a)
  spread = a(where_max(1), where_max(2)) - minval(a) + product(cmax(1:2))
  where_max(1) = where_max(1) + 10 * minloc(rmin, dim=1)
end subroutine col_stats
"""

SMOOTH_F77 = """
C     THREE-POINT SMOOTHER, FORTRAN 77: IMPLICIT TYPING, LABELLED DO LOOPS
      SUBROUTINE SMOOTH3(N, NPASS, W, X, Y)
      DIMENSION X(N), Y(N)
      DOUBLE PRECISION X, Y, W, TMP
      DIMENSION TMP(1000)
      DO 10 I = 1, N
        Y(I) = X(I)
   10 CONTINUE
      DO 30 K = 1, NPASS
        DO 20 I = 2, N - 1
          TMP(I) = W * Y(I-1) + (1.0D0 - 2.0D0 * W) * Y(I) + W * Y(I+1)
   20   CONTINUE
        DO 25 I = 2, N - 1
   25   Y(I) = TMP(I)
   30 CONTINUE
      SUM = 0.0
      DO 40 J = 1, N
        IF (Y(J) .GT. 0.5D0) Y(J) = Y(J) - 0.1D0 * (Y(J) - 0.5D0)**2
   40 CONTINUE
      RETURN
      END
"""

COLMAX_F77 = """
C     COLUMN MAXIMA: ASSUMED SIZE, LOCALS NAMED LIKE INTRINSICS, SHARED LOOP TERMINALS
      SUBROUTINE COLMAX(LDA, N, M, A, B, AMX)
      DIMENSION A(LDA,*), B(LDA, M), AMX(M)
      DOUBLE PRECISION A, B, AMX, MAX, SUM
      DO 10 J = 1, M
      DO 10 I = 1, N
   10 B(I,J) = A(I,J) * DBLE(I) +
     +         A(I,J)**2
      DO 30 J = 1, M
        MAX = -1.0D30
        SUM = 0.0D0
        DO 20 I = 1, N
          SUM = SUM + B(I,J)
   20   IF (B(I,J) .GT. MAX) MAX = B(I,J)
        AMX(J) = MAX + 0.5D0 * SUM
   30 CONTINUE
      END
"""

PARAMETER_SET = """
module physparams
  implicit none
  integer, parameter :: jprb = selected_real_kind(13, 300)
  type tparams
    real(kind=jprb) :: alpha = 0.3_jprb
    real(kind=jprb) :: beta
    real(kind=jprb) :: coeffs(3)
  end type tparams
  type(tparams), parameter :: defaults = tparams(0.25_jprb, 1.5_jprb, [1.0_jprb, 0.5_jprb, 0.25_jprb])
end module physparams

subroutine relax(n, x, y)
  use physparams, only: jprb, p => defaults
  implicit none
  integer, intent(in) :: n
  real(kind=jprb), intent(in) :: x(n)
  real(kind=jprb), intent(out) :: y(n)
  integer :: i
  do i = 1, n
    y(i) = p%alpha * x(i) + p%beta * (p%coeffs(1) + p%coeffs(2) * x(i) + p%coeffs(3) * x(i)**2)
  end do
end subroutine relax
"""

LOGISTIC_SINGLE = """
subroutine growth(n, dt, r, k, x)
  implicit none
  integer, intent(in) :: n
  real, intent(in) :: dt, r, k
  real, intent(inout) :: x(n)
  integer :: i, it
  real :: f
  do it = 1, 10
    do i = 1, n
      f = r * x(i) * (1.0 - x(i) / k)
      x(i) = x(i) + dt * f + 0.1 * dt * sin(x(i))
    end do
  end do
end subroutine growth
"""

SOR_INPLACE = """
subroutine relax_inplace(n, m, omega, b, u)
  implicit none
  integer, intent(in) :: n, m
  real(8), intent(in) :: omega, b(n)
  real(8), intent(inout) :: u(n)
  integer :: it, i
  do it = 1, m
    do i = 2, n - 1
      u(i) = (1d0 - omega) * u(i) + omega * 0.5d0 * (u(i-1) + u(i+1) + b(i))
    end do
    u(1) = u(1) * 0.99d0 + 0.01d0 * u(2)
    u(n) = u(n) * 0.99d0 + 0.01d0 * u(n-1)
  end do
end subroutine relax_inplace
"""

PRECIP_COLUMN = """
module column_consts
  implicit none
  integer, parameter :: jprb = selected_real_kind(13, 300)
  real(kind=jprb), parameter :: rg = 9.80665_jprb, rcpd = 1004.709_jprb
  real(kind=jprb), parameter :: rtt = 273.16_jprb, rlvtt = 2.5008e6_jprb, rlstt = 2.8345e6_jprb
end module column_consts

! precipitation falling through a column from the top down, carrying its flux level to level
subroutine precip_column(klev, dt, pap, paph, t, q, qc, flux, tend_t)
  use column_consts
  implicit none
  integer, intent(in) :: klev
  real(kind=jprb), intent(in) :: dt
  real(kind=jprb), intent(in) :: pap(klev), paph(klev+1)
  real(kind=jprb), intent(in) :: t(klev)
  real(kind=jprb), intent(inout) :: q(klev), qc(klev)
  real(kind=jprb), intent(out) :: flux(klev+1), tend_t(klev)
  real(kind=jprb) :: dp, auto, evap, zl, fin
  integer :: jk
  flux(1) = 0.0_jprb
  do jk = 1, klev
    dp = paph(jk+1) - paph(jk)
    fin = flux(jk) * rg * dt / dp
    if (qc(jk) > 1.0e-4_jprb) then
      auto = 1.0e-3_jprb * (qc(jk) - 1.0e-4_jprb) * dt
    else
      auto = 0.0_jprb
    end if
    if (t(jk) > rtt) then
      zl = rlvtt
      evap = min(0.1_jprb * fin * max(0.0_jprb, 1.0e-2_jprb - q(jk)) * 100.0_jprb, fin)
    else if (t(jk) > rtt - 20.0_jprb) then
      zl = rlstt + (rlvtt - rlstt) * (t(jk) - rtt + 20.0_jprb) / 20.0_jprb
      evap = 0.5_jprb * min(fin, 1.0e-5_jprb)
    else
      zl = rlstt
      evap = 0.0_jprb
    end if
    qc(jk) = qc(jk) - auto
    q(jk) = q(jk) + evap
    flux(jk+1) = (fin + auto - evap) * dp / (rg * dt)
    tend_t(jk) = -zl / rcpd * evap / dt
  end do
end subroutine precip_column
"""

LORENZ_RK4 = """
subroutine integrate(n, dt, k, y0, y)
  implicit none
  integer, intent(in) :: n
  real(8), intent(in) :: dt, k, y0(3)
  real(8), intent(out) :: y(3)
  real(8) :: k1(3), k2(3), k3(3), k4(3)
  integer :: step
  y = y0
  do step = 1, n
    k1 = rhs(y)
    k2 = rhs(y + 0.5d0 * dt * k1)
    k3 = rhs(y + 0.5d0 * dt * k2)
    k4 = rhs(y + dt * k3)
    y = y + dt / 6d0 * (k1 + 2d0 * k2 + 2d0 * k3 + k4)
  end do
contains
  function rhs(u) result(du)
    real(8), intent(in) :: u(3)
    real(8) :: du(3)
    du(1) = 10d0 * (u(2) - u(1))
    du(2) = u(1) * (k - u(3)) - u(2)
    du(3) = u(1) * u(2) - 8d0 / 3d0 * u(3)
  end function
end subroutine integrate
"""


SMOOTH_AND_CLASSIFY = """
module af
  implicit none
  integer, parameter :: dp = kind(1d0)
contains
  function smooth(x) result(y)
    real(dp), intent(in) :: x(:)
    real(dp) :: y(size(x))
    integer :: i, n
    n = size(x)
    y = x
    do i = 2, n - 1
      y(i) = 0.25_dp * x(i-1) + 0.5_dp * x(i) + 0.25_dp * x(i+1)
    end do
  end function
  pure logical function wet(h)
    real(dp), intent(in) :: h
    wet = h > 0.3_dp
  end function
end module
subroutine drv(n, h, out)
  use af
  integer, intent(in) :: n
  real(dp), intent(in) :: h(n)
  real(dp), intent(out) :: out(n)
  real(dp) :: s(n)
  s = smooth(smooth(h))
  where (s > 0.5_dp)
    where (h > 0.7_dp)
      out = s * h
    elsewhere
      out = s
    end where
  elsewhere
    out = -s
  end where
  if (wet(out(1))) out(1) = out(1) * 2
end subroutine
"""

FIRST_ABOVE = """
subroutine first_above(n, x, t, k, s, j2)
  integer, intent(in) :: n
  real(8), intent(in) :: x(n), t
  integer, intent(out) :: k, j2
  real(8), intent(out) :: s
  integer :: i, j
  do i = 1, n
    if (x(i) > t) exit
  end do
  k = i
  s = 0
  do j = n, 1, -1
    s = s + x(j)
    if (s > t) then
      exit
    end if
    do i = 1, 3
      if (i == 2) cycle
      s = s + 0.01d0 * i * x(j)
    end do
  end do
  j2 = j * 10 + i
  if (k <= n) s = s + x(k)
end subroutine
"""


KESSLER = """
! A Kessler-type warm-rain scheme for one column, in the style of the classic routine; its
! literals are default (single precision) REAL whatever the working kind
subroutine kessler_column(nz, dt, rho, pii, dz, t, qv, qc, qr, rainnc)
  implicit none
  integer, parameter :: wp = WORKING_KIND
  integer, intent(in) :: nz
  real(wp), intent(in) :: dt
  real(wp), dimension(nz), intent(in) :: rho, pii, dz
  real(wp), dimension(nz), intent(inout) :: t, qv, qc, qr
  real(wp), intent(inout) :: rainnc
  real(wp), parameter :: c1 = .001, c2 = .001, c3 = 2.2, c4 = .875, xlv = 2.5e6, cp = 1004.5
  real(wp), parameter :: ep2 = 0.6217504, svp1 = 0.6112, svp2 = 17.67, svp3 = 29.65, svpt0 = 273.15
  real(wp) :: prod(nz), vt(nz), prodk(nz), vtden(nz), rdzk(nz), rhok(nz), factor(nz), rdzw(nz)
  real(wp) :: qrprod, ern, gam, rcgs, rcgsi, dtfall, product, es, qvs, pressure, temp
  integer :: k, nfall, n, nfall_new
  real(wp) :: crmax, vtmax, f5, ppt, rdz, max_cr_sedimentation
  max_cr_sedimentation = 0.75
  f5 = svp2 * (svpt0 - svp3) * xlv / cp
  ! sedimentation of rain: number of small steps from the largest Courant number
  crmax = 0.
  do k = 1, nz
    rdzk(k) = 1. / dz(k)
    prodk(k) = qr(k)
    rhok(k) = rho(k)
    qrprod = qr(k) * 0.001 * rhok(k)
    vtden(k) = sqrt(rhok(1) / rhok(k))
    vt(k) = 36.34 * (qrprod ** 0.1364) * vtden(k)
    crmax = max(vt(k) * dt * rdzk(k), crmax)
  end do
  nfall = max(1, nint(0.5 + crmax / max_cr_sedimentation))
  dtfall = dt / real(nfall, wp)
  do n = 1, nfall
    do k = 1, nz - 1
      factor(k) = dtfall * rdzk(k) / rhok(k)
    end do
    factor(nz) = dtfall * rdzk(nz)
    ppt = rhok(1) * prodk(1) * vt(1) * dtfall / 1000.
    rainnc = rainnc + ppt * 1000.
    do k = 1, nz - 1
      prodk(k) = prodk(k) - factor(k) * (rhok(k) * prodk(k) * vt(k) - rhok(k+1) * prodk(k+1) * vt(k+1))
    end do
    k = nz
    prodk(k) = prodk(k) - factor(k) * prodk(k) * vt(k)
  end do
  qr = prodk
  ! autoconversion, accretion, evaporation, saturation adjustment
  do k = 1, nz
    factor(k) = 1. / (1. + c3 * dt * max(0., qr(k)) ** c4)
    qrprod = qc(k) * (1. - factor(k)) + factor(k) * c1 * dt * max(qc(k) - c2, 0.)
    rcgs = 0.001 * rho(k)
    qc(k) = max(qc(k) - qrprod, 0.)
    qr(k) = qr(k) + qrprod
    temp = pii(k) * t(k)
    pressure = 1.e5 * pii(k) ** (1004. / 287.)
    gam = 2.5e6 / (1004. * pii(k))
    es = 1000. * svp1 * exp(svp2 * (temp - svpt0) / (temp - svp3))
    qvs = ep2 * es / (pressure - es)
    prod(k) = (qv(k) - qvs) / (1. + pressure / (pressure - es) * qvs * f5 / (temp - svp3) ** 2)
    ern = min(dt * (((1.6 + 124.9 * (rcgs * qr(k)) ** .2046) * (rcgs * qr(k)) ** .525) &
              / (2.55e8 / (pressure * qvs) + 5.4e5)) * (dim(qvs, qv(k)) / (rcgs * qvs)), &
              max(-prod(k) - qc(k), 0.), qr(k))
    product = max(prod(k), -qc(k))
    t(k) = t(k) + gam * (product - ern)
    qv(k) = max(qv(k) - product + ern, 0.)
    qc(k) = qc(k) + product
    qr(k) = qr(k) - ern
  end do
end subroutine kessler_column
"""


def _z(*shape, dtype=np.float64):
    return np.zeros(shape, dtype)


# (id, source, entry, arguments, check_program options); INTENT(OUT) arguments are passed too,
# for the gfortran build
ROUTINES = [
    ("thomas", THOMAS, "tridiag_solve", lambda: (8, RNG.random(8), 4 + RNG.random(8), RNG.random(8),
                                                 RNG.random(8), _z(8)), {}),
    ("burgers", BURGERS, "burgers_run", lambda: (16, 5, 0.01, 0.1, 0.05, np.sin(np.linspace(0, 6, 18)) + 1.2,
                                                 0.0), {}),
    ("saturation", SATURATION, "satadj", lambda: (6, 280 + 10 * RNG.random(6),
                                                  np.array([0.02, 0.001, 0.03, 0.015, 0.005, 0.025]),
                                                  9e4 + 1e4 * RNG.random(6), _z(6), _z(6, dtype=np.int32)), {}),
    ("limiter-minmod", LIMITERS, "limited_slopes", lambda: (8, 1, RNG.random(8), _z(8)), {}),
    ("limiter-mc", LIMITERS, "limited_slopes", lambda: (8, 3, RNG.random(8), _z(8)), {}),
    ("where-bounds", CLIP_UPDATE, "clip_update", lambda: (2, 6, -1, 3, RNG.random((7, 5)),
                                                          RNG.random((5, 5)) - 0.5, 0.6, _z(5, 5), 0), {}),
    ("reductions-dim", COLUMN_STATS, "col_stats", lambda: (4, 5, RNG.random((4, 5)), _z(5), _z(4), 0.0,
                                                           _z(5, dtype=np.int32), _z(4, dtype=np.int32), 0.0,
                                                           _z(2, dtype=np.int32)), {}),
    ("f77-smooth", SMOOTH_F77, "smooth3", lambda: (8, 3, 0.2, RNG.random(8), _z(8)), {}),
    ("f77-colmax", COLMAX_F77, "colmax", lambda: (5, 4, 3, RNG.random((5, 3)), _z(5, 3), _z(3)), {}),
    ("parameter-set", PARAMETER_SET, "relax", lambda: (8, RNG.random(8), _z(8)), {}),
    # central differences of a single-precision routine are good to about 1e-3 at best
    ("single", LOGISTIC_SINGLE, "growth", lambda: (8, np.float32(0.1), np.float32(0.8), np.float32(2.0),
                                                   RNG.random(8).astype(np.float32)),
     dict(rtol=1e-6, atol=1e-7, fd_step=1e-2, grad_rtol=2e-2)),
    ("inout-sor", SOR_INPLACE, "relax_inplace", lambda: (8, 4, 1.3, RNG.random(8), RNG.random(8)), {}),
    ("precip-column", PRECIP_COLUMN, "precip_column",
     lambda: (6, 600.0, np.linspace(2e4, 9e4, 6), np.linspace(1.5e4, 9.5e4, 7),
              np.array([240., 255., 262., 270., 278., 290.]), 1e-2 * RNG.random(6), 1e-3 * RNG.random(6),
              _z(7), _z(6)), {}),
    ("rk4-internal-function", LORENZ_RK4, "integrate", lambda: (20, 0.01, 28.0, np.ones(3), _z(3)), {}),
    ("array-function-nested-where", SMOOTH_AND_CLASSIFY, "drv", lambda: (7, RNG.random(7), _z(7)), {}),
    # the loop variables' values after EXIT, and after a loop that ran to its end
    ("index-after-exit", FIRST_ABOVE, "first_above", lambda: (6, RNG.random(6), 0.8, 0, 0.0, 0), {}),
    ("index-after-no-exit", FIRST_ABOVE, "first_above", lambda: (6, RNG.random(6), 5.0, 0, 0.0, 0), {}),
]


@pytest.mark.parametrize("name, src, entry, args, options", ROUTINES, ids=[r[0] for r in ROUTINES])
def test_routine_against_gfortran(name, src, entry, args, options, backend):
    check_source(src, entry, args(), backend, **options)


def test_single_precision_is_computed_in_single_precision():
    """gfortran's float32 results, bit for bit (no operation widened to double)."""
    import flowgrad
    prog = flowgrad.from_fortran(LOGISTIC_SINGLE, "growth")
    args = (50, np.float32(0.1), np.float32(0.8), np.float32(2.0), RNG.random(50).astype(np.float32))
    got = prog(*args, backend="numpy")
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, Gfortran(prog, LOGISTIC_SINGLE)(*args))


ADVECTION_DIFFUSION = """
module grid_mod
  implicit none
  integer, parameter :: rk = selected_real_kind(15, 307)
  type grid_t
    integer :: nx, ny
    real(rk) :: dx, dy
  end type grid_t
contains
  elemental real(rk) function vanleer(r) result(phi)
    real(rk), intent(in) :: r
    phi = (r + abs(r)) / (1.0_rk + abs(r))
  end function vanleer

  subroutine halo(q)
    real(rk), intent(inout) :: q(0:, 0:)
    integer :: nx, ny
    nx = ubound(q, 1) - 1
    ny = ubound(q, 2) - 1
    q(0, :) = q(nx, :)
    q(nx+1, :) = q(1, :)
    q(:, 0) = q(:, ny)
    q(:, ny+1) = q(:, 1)
  end subroutine halo

  subroutine tendency(g, u, v, kappa, q, dq)
    type(grid_t), intent(in) :: g
    real(rk), intent(in) :: u, v, kappa
    real(rk), intent(in) :: q(0:g%nx+1, 0:g%ny+1)
    real(rk), intent(out) :: dq(g%nx, g%ny)
    real(rk) :: fx(0:g%nx, g%ny), fy(g%nx, 0:g%ny), rr, eps
    integer :: i, j
    eps = 1.0e-12_rk
    do j = 1, g%ny
      do i = 0, g%nx
        if (u >= 0.0_rk) then
          if (i >= 1) then
            rr = (q(i, j) - q(i-1, j)) / (q(i+1, j) - q(i, j) + sign(eps, q(i+1, j) - q(i, j)))
          else
            rr = 0.0_rk
          end if
          fx(i, j) = u * (q(i, j) + 0.5_rk * vanleer(rr) * (q(i+1, j) - q(i, j)))
        else
          fx(i, j) = u * q(i+1, j)
        end if
      end do
    end do
    do j = 0, g%ny
      fy(:, j) = v * merge(q(1:g%nx, j), q(1:g%nx, j+1), v >= 0.0_rk)
    end do
    dq = -(fx(1:g%nx, :) - fx(0:g%nx-1, :)) / g%dx - (fy(:, 1:g%ny) - fy(:, 0:g%ny-1)) / g%dy &
         + kappa * ((q(2:g%nx+1, 1:g%ny) - 2 * q(1:g%nx, 1:g%ny) + q(0:g%nx-1, 1:g%ny)) / g%dx**2 &
                  + (q(1:g%nx, 2:g%ny+1) - 2 * q(1:g%nx, 1:g%ny) + q(1:g%nx, 0:g%ny-1)) / g%dy**2)
  end subroutine tendency
end module grid_mod

subroutine run_model(nx, ny, nsteps, dt, u, v, kappa, q0, q, maxq, nrun)
  use grid_mod
  implicit none
  integer, intent(in) :: nx, ny, nsteps
  real(rk), intent(in) :: dt, u, v, kappa
  real(rk), intent(in) :: q0(nx, ny)
  real(rk), intent(out) :: q(nx, ny), maxq
  integer, intent(out) :: nrun
  type(grid_t) :: g
  real(rk), allocatable :: qh(:, :), k1(:, :), k2(:, :)
  integer :: step
  g%nx = nx; g%ny = ny
  g%dx = 1.0_rk / nx; g%dy = 1.0_rk / ny
  allocate(qh(0:nx+1, 0:ny+1), k1(nx, ny), k2(nx, ny))
  qh = 0.0_rk
  qh(1:nx, 1:ny) = q0
  nrun = 0
  do step = 1, nsteps
    if (abs(u) * dt / g%dx > 1.0_rk) exit
    call halo(qh)
    call tendency(g, u, v, kappa, qh, k1)
    qh(1:nx, 1:ny) = qh(1:nx, 1:ny) + dt * k1
    call halo(qh)
    call tendency(g, u, v, kappa, qh, k2)
    qh(1:nx, 1:ny) = qh(1:nx, 1:ny) + 0.5_rk * dt * (k2 - k1)
    nrun = nrun + 1
  end do
  q = qh(1:nx, 1:ny)
  maxq = maxval(q)
  deallocate(qh, k1, k2)
end subroutine run_model
"""


def test_an_advection_diffusion_model_with_a_grid_type_halos_and_a_limiter():
    """A small model as a scientist lays it out: a grid type whose components size the dummies,
    a halo exchange on assumed-shape arrays with lower bounds 0, an elemental flux limiter,
    allocatable work arrays, a time loop that may stop early. (The native backend's compile of
    it takes about 40 s: it runs on the NumPy backend here.)"""
    check_source(ADVECTION_DIFFUSION, "run_model", (6, 5, 4, 0.01, 0.7, -0.4, 0.01, RNG.random((6, 5)), _z(6, 5),
                                                    0.0, 0), "numpy")


def _kessler_column(dtype):
    t = np.float32 if dtype == np.float32 else float
    return (8, t(20.0), np.linspace(1.2, 0.6, 8).astype(dtype), np.linspace(1.0, 0.85, 8).astype(dtype),
            np.full(8, 500, dtype), np.linspace(300, 290, 8).astype(dtype), np.linspace(0.015, 0.006, 8).astype(dtype),
            (1e-3 * RNG.random(8)).astype(dtype), (1e-3 * RNG.random(8)).astype(dtype), t(0))


def test_a_kessler_warm_rain_scheme_in_double_and_single_precision(backend):
    """Sedimentation in substeps set by the largest Courant number, autoconversion, accretion,
    evaporation and a saturation adjustment, built with the working kind as a define."""
    check_source(KESSLER, "kessler_column", _kessler_column(np.float64), backend, defines={"WORKING_KIND": 8})
    # single precision: forward only (central differences in float32 are too coarse); the native
    # backend may reassociate sums, a few units in the last place
    check_source(KESSLER, "kessler_column", _kessler_column(np.float32), backend, defines={"WORKING_KIND": 4},
                 rtol=2e-5, atol=1e-9, grad=False)
