! Modified Gram-Schmidt QR: A = Q R, Q overwriting A's columns (PolyBench gramschmidt)
subroutine gramschmidt(m, n, a, r, q)
  implicit none
  integer, intent(in) :: m, n
  double precision, intent(inout) :: a(m, n)
  double precision, intent(out) :: r(n, n), q(m, n)
  double precision :: nrm
  integer :: i, j, k
  r = 0.0d0
  do k = 1, n
    nrm = 0.0d0
    do i = 1, m
      nrm = nrm + a(i, k) * a(i, k)
    end do
    r(k, k) = sqrt(nrm)
    do i = 1, m
      q(i, k) = a(i, k) / r(k, k)
    end do
    do j = k + 1, n
      r(k, j) = dot_product(q(:, k), a(:, j))
      a(:, j) = a(:, j) - q(:, k) * r(k, j)
    end do
  end do
end subroutine gramschmidt
