! Covariance matrix of the columns of a data matrix (PolyBench covariance)
subroutine covariance(m, n, float_n, data, cov, mean)
  implicit none
  integer, intent(in) :: m, n
  double precision, intent(in) :: float_n
  double precision, intent(inout) :: data(n, m)
  double precision, intent(out) :: cov(m, m), mean(m)
  integer :: i, j, k
  do j = 1, m
    mean(j) = 0.0d0
    do i = 1, n
      mean(j) = mean(j) + data(i, j)
    end do
    mean(j) = mean(j) / float_n
  end do
  do j = 1, m
    data(:, j) = data(:, j) - mean(j)
  end do
  do i = 1, m
    do j = i, m
      cov(i, j) = 0.0d0
      do k = 1, n
        cov(i, j) = cov(i, j) + data(k, i) * data(k, j)
      end do
      cov(i, j) = cov(i, j) / (float_n - 1.0d0)
      cov(j, i) = cov(i, j)
    end do
  end do
end subroutine covariance
