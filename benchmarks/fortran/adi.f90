! Alternating-direction implicit sweeps: tridiagonal solves along columns, then rows (PolyBench adi)
subroutine adi(tsteps, n, u)
  implicit none
  integer, intent(in) :: tsteps, n
  double precision, intent(inout) :: u(n, n)
  double precision :: v(n, n), p(n, n), q(n, n)
  double precision :: dx, dy, dt, b1, b2, mul1, mul2, a, b, c, d, e, f
  integer :: t, i, j
  dx = 1.0d0 / n
  dy = 1.0d0 / n
  dt = 1.0d0 / tsteps
  b1 = 2.0d0
  b2 = 1.0d0
  mul1 = b1 * dt / (dx * dx)
  mul2 = b2 * dt / (dy * dy)
  a = -mul1 / 2.0d0
  b = 1.0d0 + mul1
  c = a
  d = -mul2 / 2.0d0
  e = 1.0d0 + mul2
  f = d
  v = 0.0d0
  p = 0.0d0
  q = 0.0d0
  do t = 1, tsteps
    do i = 2, n - 1
      v(1, i) = 1.0d0
      p(i, 1) = 0.0d0
      q(i, 1) = v(1, i)
      do j = 2, n - 1
        p(i, j) = -c / (a * p(i, j - 1) + b)
        q(i, j) = (-d * u(j, i - 1) + (1.0d0 + 2.0d0 * d) * u(j, i) - f * u(j, i + 1) &
                   - a * q(i, j - 1)) / (a * p(i, j - 1) + b)
      end do
      v(n, i) = 1.0d0
      do j = n - 1, 2, -1
        v(j, i) = p(i, j) * v(j + 1, i) + q(i, j)
      end do
    end do
    do i = 2, n - 1
      u(i, 1) = 1.0d0
      p(i, 1) = 0.0d0
      q(i, 1) = u(i, 1)
      do j = 2, n - 1
        p(i, j) = -f / (d * p(i, j - 1) + e)
        q(i, j) = (-a * v(i - 1, j) + (1.0d0 + 2.0d0 * a) * v(i, j) - c * v(i + 1, j) &
                   - d * q(i, j - 1)) / (d * p(i, j - 1) + e)
      end do
      u(i, n) = 1.0d0
      do j = n - 1, 2, -1
        u(i, j) = p(i, j) * u(i, j + 1) + q(i, j)
      end do
    end do
  end do
end subroutine adi
