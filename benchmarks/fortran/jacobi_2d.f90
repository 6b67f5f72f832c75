! Jacobi sweeps on a 2-D grid, written with array sections (PolyBench jacobi-2d)
subroutine jacobi_2d(tsteps, n, a, b)
  implicit none
  integer, intent(in) :: tsteps, n
  double precision, intent(inout) :: a(n, n), b(n, n)
  integer :: t
  do t = 1, tsteps
    b(2:n-1, 2:n-1) = 0.2d0 * (a(2:n-1, 2:n-1) + a(1:n-2, 2:n-1) + a(3:n, 2:n-1) &
                               + a(2:n-1, 1:n-2) + a(2:n-1, 3:n))
    a(2:n-1, 2:n-1) = 0.2d0 * (b(2:n-1, 2:n-1) + b(1:n-2, 2:n-1) + b(3:n, 2:n-1) &
                               + b(2:n-1, 1:n-2) + b(2:n-1, 3:n))
  end do
end subroutine jacobi_2d
