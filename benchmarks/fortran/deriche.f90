! Deriche recursive edge-detection filter: causal and anticausal passes along both axes (PolyBench deriche)
subroutine deriche(w, h, alpha, imgin, imgout)
  implicit none
  integer, intent(in) :: w, h
  double precision, intent(in) :: alpha, imgin(w, h)
  double precision, intent(out) :: imgout(w, h)
  double precision :: y1(w, h), y2(w, h)
  double precision :: k, a1, a2, a3, a4, a5, a6, a7, a8, b1, b2, c1, c2
  double precision :: xm1, tm1, ym1, ym2, xp1, xp2, tp1, tp2, yp1, yp2
  integer :: i, j
  k = (1.0d0 - exp(-alpha)) * (1.0d0 - exp(-alpha)) / (1.0d0 + 2.0d0 * alpha * exp(-alpha) - exp(2.0d0 * alpha))
  a1 = k
  a5 = k
  a2 = k * exp(-alpha) * (alpha - 1.0d0)
  a6 = a2
  a3 = k * exp(-alpha) * (alpha + 1.0d0)
  a7 = a3
  a4 = -k * exp(-2.0d0 * alpha)
  a8 = a4
  b1 = 2.0d0 ** (-alpha)
  b2 = -exp(-2.0d0 * alpha)
  c1 = 1.0d0
  c2 = 1.0d0
  do i = 1, w
    ym1 = 0.0d0
    ym2 = 0.0d0
    xm1 = 0.0d0
    do j = 1, h
      y1(i, j) = a1 * imgin(i, j) + a2 * xm1 + b1 * ym1 + b2 * ym2
      xm1 = imgin(i, j)
      ym2 = ym1
      ym1 = y1(i, j)
    end do
  end do
  do i = 1, w
    yp1 = 0.0d0
    yp2 = 0.0d0
    xp1 = 0.0d0
    xp2 = 0.0d0
    do j = h, 1, -1
      y2(i, j) = a3 * xp1 + a4 * xp2 + b1 * yp1 + b2 * yp2
      xp2 = xp1
      xp1 = imgin(i, j)
      yp2 = yp1
      yp1 = y2(i, j)
    end do
  end do
  imgout = c1 * (y1 + y2)
  do j = 1, h
    tm1 = 0.0d0
    ym1 = 0.0d0
    ym2 = 0.0d0
    do i = 1, w
      y1(i, j) = a5 * imgout(i, j) + a6 * tm1 + b1 * ym1 + b2 * ym2
      tm1 = imgout(i, j)
      ym2 = ym1
      ym1 = y1(i, j)
    end do
  end do
  do j = 1, h
    tp1 = 0.0d0
    tp2 = 0.0d0
    yp1 = 0.0d0
    yp2 = 0.0d0
    do i = w, 1, -1
      y2(i, j) = a7 * tp1 + a8 * tp2 + b1 * yp1 + b2 * yp2
      tp2 = tp1
      tp1 = imgout(i, j)
      yp2 = yp1
      yp1 = y2(i, j)
    end do
  end do
  imgout = c2 * (y1 + y2)
end subroutine deriche
