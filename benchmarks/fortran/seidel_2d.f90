! Gauss-Seidel sweeps in place on a 2-D grid (PolyBench seidel-2d)
subroutine seidel_2d(tsteps, n, a)
  implicit none
  integer, intent(in) :: tsteps, n
  double precision, intent(inout) :: a(n, n)
  integer :: t, i, j
  do t = 1, tsteps
    do j = 2, n - 1
      do i = 2, n - 1
        a(i, j) = (a(i - 1, j - 1) + a(i - 1, j) + a(i - 1, j + 1) &
                   + a(i, j - 1) + a(i, j) + a(i, j + 1) &
                   + a(i + 1, j - 1) + a(i + 1, j) + a(i + 1, j + 1)) / 9.0d0
      end do
    end do
  end do
end subroutine seidel_2d
