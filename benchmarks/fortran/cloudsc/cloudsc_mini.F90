SUBROUTINE CLOUDSC_MINI(KIDIA, KFDIA, KLON, KLEV, PTSPHY, PAP, PAPH, PT, PQ, PL, &
                      & PTENT, PTENQ, PTENL, PFPLSL, PFHPSL)
!     A small column cloud scheme in the style of the IFS's CLOUDSC: for each column, levels are
!     visited from the top down; each level takes the precipitation falling from above, adjusts
!     humidity to saturation (condensation or evaporation of cloud), converts cloud water to
!     rain above a threshold, lets rain evaporate in sub-saturated air or freeze below RTT, and
!     passes the flux on to the level below.
USE PARKIND1, ONLY : JPIM, JPRB
USE YOMCST,   ONLY : RG, RCPD, RETV, RTT, RLVTT, RLSTT, RLMLT
USE YOETHF,   ONLY : R2ES, R3LES, R3IES, R4LES, R4IES, RTWAT, RTICE
USE YOECLDP,  ONLY : YRECLDP
IMPLICIT NONE
INTEGER(KIND=JPIM), INTENT(IN) :: KIDIA, KFDIA, KLON, KLEV
REAL(KIND=JPRB), INTENT(IN) :: PTSPHY
REAL(KIND=JPRB), INTENT(IN) :: PAP(KLON, KLEV), PAPH(KLON, KLEV + 1)
REAL(KIND=JPRB), INTENT(IN) :: PT(KLON, KLEV), PQ(KLON, KLEV), PL(KLON, KLEV)
REAL(KIND=JPRB), INTENT(OUT) :: PTENT(KLON, KLEV), PTENQ(KLON, KLEV), PTENL(KLON, KLEV)
REAL(KIND=JPRB), INTENT(OUT) :: PFPLSL(KLON, KLEV + 1), PFHPSL(KLON, KLEV + 1)

REAL(KIND=JPRB) :: ZT(KLON), ZQ(KLON), ZL(KLON), ZRAIN(KLON), ZSNOW(KLON)
REAL(KIND=JPRB) :: ZQSAT, ZCOND, ZDP, ZGDP, ZRH, ZEVAP, ZAUTO, ZFREEZE, ZMELT, ZBETA, ZCOR
REAL(KIND=JPRB) :: ZQTMP, ZFAC, ZRHCRIT
INTEGER(KIND=JPIM) :: JK, JL, IBETA, JSUB
REAL(KIND=JPRB), PARAMETER :: ZEPS = 1.0E-12_JPRB

#include "fcttre.func"

PTENT(:, :) = 0.0_JPRB
PTENQ(:, :) = 0.0_JPRB
PTENL(:, :) = 0.0_JPRB
PFPLSL(:, :) = 0.0_JPRB
PFHPSL(:, :) = 0.0_JPRB
ZRAIN(:) = 0.0_JPRB
ZSNOW(:) = 0.0_JPRB

DO JK = 1, KLEV
  DO JL = KIDIA, KFDIA
    ZT(JL) = PT(JL, JK)
    ZQ(JL) = PQ(JL, JK)
    ZL(JL) = PL(JL, JK)
    ZDP = PAPH(JL, JK + 1) - PAPH(JL, JK)
    ZGDP = RG / ZDP

    !  saturation adjustment, in NSUB Newton steps
    DO JSUB = 1, YRECLDP%NSUB
      ZQSAT = FOEEWM(ZT(JL)) / PAP(JL, JK)
      ZQSAT = MIN(0.5_JPRB, ZQSAT)
      ZCOR = 1.0_JPRB / (1.0_JPRB - RETV * ZQSAT)
      ZQSAT = ZQSAT * ZCOR
      ZCOND = (ZQ(JL) - ZQSAT) / (1.0_JPRB + ZQSAT * ZCOR * FOEDEM(ZT(JL)))
      IF (ZCOND > 0.0_JPRB) THEN
        ! supersaturated: condense
        ZL(JL) = ZL(JL) + ZCOND
        ZQ(JL) = ZQ(JL) - ZCOND
        ZT(JL) = ZT(JL) + FOELDCPM(ZT(JL)) * ZCOND
      ELSE IF (ZL(JL) > ZEPS) THEN
        ! sub-saturated with cloud: evaporate cloud water, at most what there is
        ZCOND = MAX(ZCOND, -ZL(JL))
        ZL(JL) = ZL(JL) + ZCOND
        ZQ(JL) = ZQ(JL) - ZCOND
        ZT(JL) = ZT(JL) + FOELDCPM(ZT(JL)) * ZCOND
      END IF
    END DO

    !  autoconversion of cloud water into rain above a critical content
    IF (ZL(JL) > YRECLDP%RLCRIT) THEN
      ZAUTO = YRECLDP%RKCONV * PTSPHY * (ZL(JL) - YRECLDP%RLCRIT)
      ZAUTO = MIN(ZAUTO, ZL(JL))
      ZL(JL) = ZL(JL) - ZAUTO
      IF (ZT(JL) > RTT) THEN
        ZRAIN(JL) = ZRAIN(JL) + ZAUTO / ZGDP / PTSPHY
      ELSE
        ZSNOW(JL) = ZSNOW(JL) + ZAUTO / ZGDP / PTSPHY
        ZT(JL) = ZT(JL) + RLMLT / RCPD * ZAUTO
      END IF
    END IF

    !  evaporation of precipitation in sub-saturated air, scaled by a tabulated beta
    ZQSAT = FOEEWM(ZT(JL)) / PAP(JL, JK)
    ZQSAT = MIN(0.5_JPRB, ZQSAT) / (1.0_JPRB - RETV * MIN(0.5_JPRB, ZQSAT))
    ZRH = ZQ(JL) / ZQSAT
    ZRHCRIT = YRECLDP%RAMID
    IF (ZRH < ZRHCRIT .AND. ZRAIN(JL) + ZSNOW(JL) > ZEPS) THEN
      IBETA = MIN(100, MAX(0, INT(ZRH * 100.0_JPRB)))
      ZBETA = YRECLDP%RBETA(IBETA)
      ZEVAP = YRECLDP%REVAP * ZBETA * (ZRHCRIT - ZRH) * SQRT(ZRAIN(JL) + ZSNOW(JL)) * PTSPHY
      ZQTMP = (ZQSAT - ZQ(JL)) / (1.0_JPRB + FOEDEM(ZT(JL)))
      ZEVAP = MIN(ZEVAP, MAX(ZQTMP, 0.0_JPRB), (ZRAIN(JL) + ZSNOW(JL)) * ZGDP * PTSPHY)
      ZFAC = ZRAIN(JL) / MAX(ZRAIN(JL) + ZSNOW(JL), ZEPS)
      ZRAIN(JL) = ZRAIN(JL) - ZFAC * ZEVAP / ZGDP / PTSPHY
      ZSNOW(JL) = ZSNOW(JL) - (1.0_JPRB - ZFAC) * ZEVAP / ZGDP / PTSPHY
      ZQ(JL) = ZQ(JL) + ZEVAP
      ZT(JL) = ZT(JL) - (ZFAC * RLVTT + (1.0_JPRB - ZFAC) * RLSTT) / RCPD * ZEVAP
    END IF

    !  freezing of rain below the freezing point, melting of snow above it
    IF (ZT(JL) < RTT - 2.0_JPRB .AND. ZRAIN(JL) > 0.0_JPRB) THEN
      ZFREEZE = ZRAIN(JL) * MIN(1.0_JPRB, YRECLDP%RICEFALL * (RTT - ZT(JL)) / 10.0_JPRB)
      ZRAIN(JL) = ZRAIN(JL) - ZFREEZE
      ZSNOW(JL) = ZSNOW(JL) + ZFREEZE
      ZT(JL) = ZT(JL) + RLMLT / RCPD * ZFREEZE * ZGDP * PTSPHY
    ELSE IF (ZT(JL) > RTT + 1.0_JPRB .AND. ZSNOW(JL) > 0.0_JPRB) THEN
      ZMELT = ZSNOW(JL) * MIN(1.0_JPRB, (ZT(JL) - RTT) / 5.0_JPRB)
      ZSNOW(JL) = ZSNOW(JL) - ZMELT
      ZRAIN(JL) = ZRAIN(JL) + ZMELT
      ZT(JL) = ZT(JL) - RLMLT / RCPD * ZMELT * ZGDP * PTSPHY
    END IF

    !  tendencies and the fluxes passed to the level below
    PTENT(JL, JK) = (ZT(JL) - PT(JL, JK)) / PTSPHY
    PTENQ(JL, JK) = (ZQ(JL) - PQ(JL, JK)) / PTSPHY
    PTENL(JL, JK) = (ZL(JL) - PL(JL, JK)) / PTSPHY
    PFPLSL(JL, JK + 1) = ZRAIN(JL) + ZSNOW(JL)
    PFHPSL(JL, JK + 1) = -RLVTT * ZRAIN(JL) - RLSTT * ZSNOW(JL)
  END DO
END DO
END SUBROUTINE CLOUDSC_MINI
