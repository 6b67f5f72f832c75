! C := alpha A A^T + beta C on the lower triangle (PolyBench syrk)
subroutine syrk(n, m, alpha, beta, c, a)
  implicit none
  integer, intent(in) :: n, m
  double precision, intent(in) :: alpha, beta, a(n, m)
  double precision, intent(inout) :: c(n, n)
  integer :: i, j, k
  do i = 1, n
    do j = 1, i
      c(i, j) = c(i, j) * beta
    end do
    do k = 1, m
      do j = 1, i
        c(i, j) = c(i, j) + alpha * a(i, k) * a(j, k)
      end do
    end do
  end do
end subroutine syrk
