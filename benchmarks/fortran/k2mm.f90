! D := alpha * A * B * C + beta * D (PolyBench 2mm), the product A * B in a work array
subroutine k2mm(ni, nj, nk, nl, alpha, beta, a, b, c, d)
  implicit none
  integer, intent(in) :: ni, nj, nk, nl
  double precision, intent(in) :: alpha, beta
  double precision, intent(in) :: a(ni, nk), b(nk, nj), c(nj, nl)
  double precision, intent(inout) :: d(ni, nl)
  double precision :: tmp(ni, nj)
  integer :: i, j, k
  do j = 1, nj
    do i = 1, ni
      tmp(i, j) = 0.0d0
      do k = 1, nk
        tmp(i, j) = tmp(i, j) + alpha * a(i, k) * b(k, j)
      end do
    end do
  end do
  do j = 1, nl
    do i = 1, ni
      d(i, j) = d(i, j) * beta
      do k = 1, nj
        d(i, j) = d(i, j) + tmp(i, k) * c(k, j)
      end do
    end do
  end do
end subroutine k2mm
