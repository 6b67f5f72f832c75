! Jacobi sweeps on a 1-D grid, two arrays swapped each step (PolyBench jacobi-1d)
subroutine jacobi_1d(tsteps, n, a, b)
  implicit none
  integer, intent(in) :: tsteps, n
  double precision, intent(inout) :: a(n), b(n)
  integer :: t, i
  do t = 1, tsteps
    do i = 2, n - 1
      b(i) = 0.33333d0 * (a(i - 1) + a(i) + a(i + 1))
    end do
    do i = 2, n - 1
      a(i) = 0.33333d0 * (b(i - 1) + b(i) + b(i + 1))
    end do
  end do
end subroutine jacobi_1d
