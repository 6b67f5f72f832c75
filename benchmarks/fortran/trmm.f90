! B := alpha A^T B with A unit lower triangular (PolyBench trmm)
subroutine trmm(m, n, alpha, a, b)
  implicit none
  integer, intent(in) :: m, n
  double precision, intent(in) :: alpha, a(m, m)
  double precision, intent(inout) :: b(m, n)
  integer :: i, j, k
  do i = 1, m
    do j = 1, n
      do k = i + 1, m
        b(i, j) = b(i, j) + a(k, i) * b(k, j)
      end do
      b(i, j) = alpha * b(i, j)
    end do
  end do
end subroutine trmm
