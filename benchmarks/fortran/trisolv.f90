! Forward substitution L x = b (PolyBench trisolv)
subroutine trisolv(n, l, x, b)
  implicit none
  integer, intent(in) :: n
  double precision, intent(in) :: l(n, n), b(n)
  double precision, intent(out) :: x(n)
  integer :: i, j
  do i = 1, n
    x(i) = b(i)
    do j = 1, i - 1
      x(i) = x(i) - l(i, j) * x(j)
    end do
    x(i) = x(i) / l(i, i)
  end do
end subroutine trisolv
