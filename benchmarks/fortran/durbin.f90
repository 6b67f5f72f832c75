! Levinson-Durbin recursion for a Toeplitz system (PolyBench durbin)
subroutine durbin(n, r, y)
  implicit none
  integer, intent(in) :: n
  double precision, intent(in) :: r(n)
  double precision, intent(out) :: y(n)
  double precision :: z(n), alpha, beta, s
  integer :: i, k
  y(1) = -r(1)
  beta = 1.0d0
  alpha = -r(1)
  do k = 2, n
    beta = (1 - alpha * alpha) * beta
    s = 0.0d0
    do i = 1, k - 1
      s = s + r(k - i) * y(i)
    end do
    alpha = -(r(k) + s) / beta
    do i = 1, k - 1
      z(i) = y(i) + alpha * y(k - i)
    end do
    y(1:k-1) = z(1:k-1)
    y(k) = alpha
  end do
end subroutine durbin
