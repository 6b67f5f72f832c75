! 2-D finite-difference time-domain (Yee) update of ex, ey, hz (PolyBench fdtd-2d)
subroutine fdtd_2d(tmax, nx, ny, ex, ey, hz, fict)
  implicit none
  integer, intent(in) :: tmax, nx, ny
  double precision, intent(inout) :: ex(nx, ny), ey(nx, ny), hz(nx, ny)
  double precision, intent(in) :: fict(tmax)
  integer :: t, i, j
  do t = 1, tmax
    ey(1, :) = fict(t)
    do j = 1, ny
      do i = 2, nx
        ey(i, j) = ey(i, j) - 0.5d0 * (hz(i, j) - hz(i - 1, j))
      end do
    end do
    do j = 2, ny
      do i = 1, nx
        ex(i, j) = ex(i, j) - 0.5d0 * (hz(i, j) - hz(i, j - 1))
      end do
    end do
    do j = 1, ny - 1
      do i = 1, nx - 1
        hz(i, j) = hz(i, j) - 0.7d0 * (ex(i, j + 1) - ex(i, j) + ey(i + 1, j) - ey(i, j))
      end do
    end do
  end do
end subroutine fdtd_2d
