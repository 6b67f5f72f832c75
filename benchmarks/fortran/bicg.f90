! s := A^T r, q := A p (PolyBench bicg, the BiCG sub-kernel)
subroutine bicg(m, n, a, s, q, p, r)
  implicit none
  integer, intent(in) :: m, n
  double precision, intent(in) :: a(n, m), p(m), r(n)
  double precision, intent(out) :: s(m), q(n)
  integer :: i, j
  s(:) = 0.0d0
  do i = 1, n
    q(i) = 0.0d0
    do j = 1, m
      s(j) = s(j) + r(i) * a(i, j)
      q(i) = q(i) + a(i, j) * p(j)
    end do
  end do
end subroutine bicg
