! Time-stepping driver: 1-D advection-diffusion, upwind fluxes with a minmod limiter, Heun's
! method (two stages per step), boundary conditions in their own subroutine.
module advdiff
  implicit none
  integer, parameter :: wp = kind(1.0d0)
contains
  subroutine boundary(n, u)
    integer, intent(in) :: n
    real(wp), intent(inout) :: u(0:n+1)
    u(0) = u(n)                   ! periodic
    u(n + 1) = u(1)
  end subroutine boundary

  real(wp) function minmod(a, b)
    real(wp), intent(in) :: a, b
    if (a * b <= 0.0_wp) then
      minmod = 0.0_wp
    else if (abs(a) < abs(b)) then
      minmod = a
    else
      minmod = b
    end if
  end function minmod

  subroutine rhs(n, u, dudt, c, nu, dx)
    integer, intent(in) :: n
    real(wp), intent(inout) :: u(0:n+1)
    real(wp), intent(out) :: dudt(n)
    real(wp), intent(in) :: c, nu, dx
    real(wp) :: flux(0:n), slope
    integer :: i
    call boundary(n, u)
    do i = 0, n
      if (c >= 0.0_wp) then
        if (i >= 1) then
          slope = minmod(u(i) - u(i - 1), u(i + 1) - u(i))
        else
          slope = 0.0_wp
        end if
        flux(i) = c * (u(i) + 0.5_wp * slope)
      else
        flux(i) = c * u(i + 1)
      end if
      flux(i) = flux(i) - nu * (u(i + 1) - u(i)) / dx
    end do
    dudt = -(flux(1:n) - flux(0:n-1)) / dx
  end subroutine rhs

  subroutine heun(n, u, dt, c, nu, dx)
    integer, intent(in) :: n
    real(wp), intent(inout) :: u(0:n+1)
    real(wp), intent(in) :: dt, c, nu, dx
    real(wp) :: k1(n), k2(n), us(0:n+1)
    call rhs(n, u, k1, c, nu, dx)
    us = u
    us(1:n) = u(1:n) + dt * k1
    call rhs(n, us, k2, c, nu, dx)
    u(1:n) = u(1:n) + 0.5_wp * dt * (k1 + k2)
  end subroutine heun
end module advdiff

subroutine advect(n, nsteps, dt, c, nu, u, energy)
  use advdiff
  implicit none
  integer, intent(in) :: n, nsteps
  real(wp), intent(in) :: dt, c, nu
  real(wp), intent(inout) :: u(0:n+1)
  real(wp), intent(out) :: energy
  real(wp) :: dx
  integer :: step
  dx = 1.0_wp / n
  energy = 0.0_wp
  do step = 1, nsteps
    call heun(n, u, dt, c, nu, dx)
    energy = energy + dt * sum(u(1:n) ** 2) * dx
  end do
  call boundary(n, u)
end subroutine advect
