! y := A^T (A x) (PolyBench atax)
subroutine atax(m, n, a, x, y)
  implicit none
  integer, intent(in) :: m, n
  double precision, intent(in) :: a(m, n), x(n)
  double precision, intent(out) :: y(n)
  double precision :: tmp(m)
  integer :: i, j
  y = 0.0d0
  do i = 1, m
    tmp(i) = 0.0d0
    do j = 1, n
      tmp(i) = tmp(i) + a(i, j) * x(j)
    end do
    do j = 1, n
      y(j) = y(j) + a(i, j) * tmp(i)
    end do
  end do
end subroutine atax
