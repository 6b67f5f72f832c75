C     Natural cubic spline through the knots (X(I), Y(I)), evaluated at
C     the points XS(J) (FORTRAN 77, fixed form, implicit typing).
      SUBROUTINE SPLEVL(N, X, Y, M, XS, YS)
      IMPLICIT DOUBLE PRECISION (A-H, O-Z)
      PARAMETER (NMAX = 64)
      DIMENSION X(N), Y(N), XS(M), YS(M), Y2(NMAX), U(NMAX)
      SLOPE(I1, I2) = (Y(I2) - Y(I1)) / (X(I2) - X(I1))
      Y2(1) = 0.D0
      U(1) = 0.D0
      DO 11 I = 2, N - 1
        SIG = (X(I) - X(I-1)) / (X(I+1) - X(I-1))
        P = SIG * Y2(I-1) + 2.D0
        Y2(I) = (SIG - 1.D0) / P
        U(I) = (6.D0 * (SLOPE(I, I+1) - SLOPE(I-1, I))
     &         / (X(I+1) - X(I-1)) - SIG * U(I-1)) / P
   11 CONTINUE
      Y2(N) = 0.D0
      DO 12 K = N - 1, 1, -1
        Y2(K) = Y2(K) * Y2(K+1) + U(K)
   12 CONTINUE
      DO 20 J = 1, M
        KLO = 1
        KHI = N
C       bisection for the interval holding XS(J)
        DO 15 ITER = 1, 30
          IF (KHI - KLO .GT. 1) THEN
            K = (KHI + KLO) / 2
            IF (X(K) .GT. XS(J)) THEN
              KHI = K
            ELSE
              KLO = K
            END IF
          END IF
   15   CONTINUE
        H = X(KHI) - X(KLO)
        A = (X(KHI) - XS(J)) / H
        B = (XS(J) - X(KLO)) / H
        YS(J) = A*Y(KLO) + B*Y(KHI)
     &        + ((A**3 - A)*Y2(KLO) + (B**3 - B)*Y2(KHI)) * (H*H) / 6.D0
   20 CONTINUE
      RETURN
      END
