! LU factorisation, then forward and back substitution: A x = b (PolyBench ludcmp)
subroutine ludcmp(n, a, b, x, y)
  implicit none
  integer, intent(in) :: n
  double precision, intent(inout) :: a(n, n)
  double precision, intent(in) :: b(n)
  double precision, intent(out) :: x(n), y(n)
  double precision :: w
  integer :: i, j, k
  do i = 1, n
    do j = 1, i - 1
      w = a(i, j)
      do k = 1, j - 1
        w = w - a(i, k) * a(k, j)
      end do
      a(i, j) = w / a(j, j)
    end do
    do j = i, n
      w = a(i, j)
      do k = 1, i - 1
        w = w - a(i, k) * a(k, j)
      end do
      a(i, j) = w
    end do
  end do
  do i = 1, n
    w = b(i)
    do j = 1, i - 1
      w = w - a(i, j) * y(j)
    end do
    y(i) = w
  end do
  do i = n, 1, -1
    w = y(i)
    do j = i + 1, n
      w = w - a(i, j) * x(j)
    end do
    x(i) = w / a(i, i)
  end do
end subroutine ludcmp
