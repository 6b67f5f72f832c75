! Correlation matrix of the columns of a data matrix (PolyBench correlation)
subroutine correlation(m, n, float_n, data, corr, mean, stddev)
  implicit none
  integer, intent(in) :: m, n
  double precision, intent(in) :: float_n
  double precision, intent(inout) :: data(n, m)
  double precision, intent(out) :: corr(m, m), mean(m), stddev(m)
  double precision, parameter :: eps = 0.1d0
  integer :: i, j, k
  do j = 1, m
    mean(j) = sum(data(:, j)) / float_n
  end do
  do j = 1, m
    stddev(j) = 0.0d0
    do i = 1, n
      stddev(j) = stddev(j) + (data(i, j) - mean(j)) ** 2
    end do
    stddev(j) = sqrt(stddev(j) / float_n)
    if (stddev(j) <= eps) stddev(j) = 1.0d0
  end do
  do j = 1, m
    do i = 1, n
      data(i, j) = (data(i, j) - mean(j)) / (sqrt(float_n) * stddev(j))
    end do
  end do
  do i = 1, m - 1
    corr(i, i) = 1.0d0
    do j = i + 1, m
      corr(i, j) = 0.0d0
      do k = 1, n
        corr(i, j) = corr(i, j) + data(k, i) * data(k, j)
      end do
      corr(j, i) = corr(i, j)
    end do
  end do
  corr(m, m) = 1.0d0
end subroutine correlation
