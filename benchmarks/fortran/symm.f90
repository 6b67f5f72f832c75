! C := alpha A B + beta C with A symmetric, stored in its lower triangle (PolyBench symm)
subroutine symm(m, n, alpha, beta, c, a, b)
  implicit none
  integer, intent(in) :: m, n
  double precision, intent(in) :: alpha, beta, a(m, m), b(m, n)
  double precision, intent(inout) :: c(m, n)
  double precision :: temp2
  integer :: i, j, k
  do i = 1, m
    do j = 1, n
      temp2 = 0.0d0
      do k = 1, i - 1
        c(k, j) = c(k, j) + alpha * b(i, j) * a(i, k)
        temp2 = temp2 + b(k, j) * a(i, k)
      end do
      c(i, j) = beta * c(i, j) + alpha * b(i, j) * a(i, i) + alpha * temp2
    end do
  end do
end subroutine symm
