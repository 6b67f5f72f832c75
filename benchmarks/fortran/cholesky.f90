! In-place Cholesky factorisation A = L L^T, L in the lower triangle (PolyBench cholesky)
subroutine cholesky(n, a)
  implicit none
  integer, intent(in) :: n
  double precision, intent(inout) :: a(n, n)
  integer :: i, j, k
  do i = 1, n
    do j = 1, i - 1
      do k = 1, j - 1
        a(i, j) = a(i, j) - a(i, k) * a(j, k)
      end do
      a(i, j) = a(i, j) / a(j, j)
    end do
    do k = 1, i - 1
      a(i, i) = a(i, i) - a(i, k) * a(i, k)
    end do
    a(i, i) = sqrt(a(i, i))
  end do
end subroutine cholesky
