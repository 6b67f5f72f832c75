! C := alpha (A B^T + B A^T) + beta C on the lower triangle (PolyBench syr2k)
subroutine syr2k(n, m, alpha, beta, c, a, b)
  implicit none
  integer, intent(in) :: n, m
  double precision, intent(in) :: alpha, beta, a(n, m), b(n, m)
  double precision, intent(inout) :: c(n, n)
  integer :: i, j, k
  do i = 1, n
    do j = 1, i
      c(i, j) = c(i, j) * beta
    end do
    do k = 1, m
      do j = 1, i
        c(i, j) = c(i, j) + a(j, k) * alpha * b(i, k) + b(j, k) * alpha * a(i, k)
      end do
    end do
  end do
end subroutine syr2k
