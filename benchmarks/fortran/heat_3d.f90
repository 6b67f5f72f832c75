! Explicit heat equation on a 3-D grid, two arrays (PolyBench heat-3d)
subroutine heat_3d(tsteps, n, a, b)
  implicit none
  integer, intent(in) :: tsteps, n
  double precision, intent(inout) :: a(n, n, n), b(n, n, n)
  integer :: t, i, j, k
  do t = 1, tsteps
    do k = 2, n - 1
      do j = 2, n - 1
        do i = 2, n - 1
          b(i, j, k) = 0.125d0 * (a(i + 1, j, k) - 2.0d0 * a(i, j, k) + a(i - 1, j, k)) &
                     + 0.125d0 * (a(i, j + 1, k) - 2.0d0 * a(i, j, k) + a(i, j - 1, k)) &
                     + 0.125d0 * (a(i, j, k + 1) - 2.0d0 * a(i, j, k) + a(i, j, k - 1)) + a(i, j, k)
        end do
      end do
    end do
    do k = 2, n - 1
      do j = 2, n - 1
        do i = 2, n - 1
          a(i, j, k) = 0.125d0 * (b(i + 1, j, k) - 2.0d0 * b(i, j, k) + b(i - 1, j, k)) &
                     + 0.125d0 * (b(i, j + 1, k) - 2.0d0 * b(i, j, k) + b(i, j - 1, k)) &
                     + 0.125d0 * (b(i, j, k + 1) - 2.0d0 * b(i, j, k) + b(i, j, k - 1)) + b(i, j, k)
        end do
      end do
    end do
  end do
end subroutine heat_3d
