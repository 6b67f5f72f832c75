! C := alpha * A * B + beta * C (PolyBench gemm)
subroutine gemm(ni, nj, nk, alpha, beta, c, a, b)
  implicit none
  integer, intent(in) :: ni, nj, nk
  double precision, intent(in) :: alpha, beta
  double precision, intent(inout) :: c(ni, nj)
  double precision, intent(in) :: a(ni, nk), b(nk, nj)
  integer :: i, j, k
  do j = 1, nj
    do i = 1, ni
      c(i, j) = c(i, j) * beta
    end do
    do k = 1, nk
      do i = 1, ni
        c(i, j) = c(i, j) + alpha * a(i, k) * b(k, j)
      end do
    end do
  end do
end subroutine gemm
