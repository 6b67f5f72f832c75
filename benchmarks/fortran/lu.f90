! In-place LU factorisation without pivoting (PolyBench lu)
subroutine lu(n, a)
  implicit none
  integer, intent(in) :: n
  double precision, intent(inout) :: a(n, n)
  integer :: i, j, k
  do i = 1, n
    do j = 1, i - 1
      do k = 1, j - 1
        a(i, j) = a(i, j) - a(i, k) * a(k, j)
      end do
      a(i, j) = a(i, j) / a(j, j)
    end do
    do j = i, n
      do k = 1, i - 1
        a(i, j) = a(i, j) - a(i, k) * a(k, j)
      end do
    end do
  end do
end subroutine lu
