"""A PyTorch network that parameterises a NumPy simulation, trained end to end.

The network maps each grid point x of a rod to a thermal diffusivity kappa(x). The
simulator is ordinary NumPy: explicit heat-equation time stepping with an in-place update in
a loop. ``flowgrad.torch.function`` turns it into a PyTorch operation, so the mismatch
between the simulated and the observed final temperature trains the network with a PyTorch
optimiser: ``loss.backward()`` runs flowgrad's reverse program of the simulator and then
PyTorch's backward pass of the network. No adjoint is written by hand and the simulator is
not rewritten in PyTorch.

Run it: ``python examples/hybrid_torch_sim.py``.
"""
from __future__ import annotations

import numpy as np
import torch

import flowgrad
import flowgrad.torch


def simulate(kappa, u0, steps):
    """Explicit heat equation u_t = (kappa u_x)_x-ish on a rod with fixed ends, in place."""
    u = u0.copy()
    for t in range(steps):
        lap = u[2:] - 2.0 * u[1:-1] + u[:-2]
        u[1:-1] += 0.2 * kappa[1:-1] * lap
    return u


class Diffusivity(torch.nn.Module):
    """x -> kappa(x) in (0.05, 1.0): the unknown material property, as a small MLP."""

    def __init__(self, width=32):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(1, width), torch.nn.Tanh(), torch.nn.Linear(width, width),
                                       torch.nn.Tanh(), torch.nn.Linear(width, 1))

    def forward(self, x):
        return 0.05 + 0.95 * torch.sigmoid(self.net(x[:, None]))[:, 0]


def main(n=64, steps=200, train_steps=60, lr=0.02, backend=None, seed=0, verbose=True):
    """Fit the diffusivity network to an observed final temperature; returns the losses."""
    torch.manual_seed(seed)
    x = np.linspace(0.0, 1.0, n)
    u0 = np.sin(np.pi * x) + 0.5 * np.exp(-((x - 0.3) / 0.05) ** 2)
    true_kappa = 0.3 + 0.5 * np.exp(-((x - 0.6) / 0.15) ** 2)
    observed = torch.from_numpy(simulate(true_kappa, u0, steps))

    sim = flowgrad.torch.function(simulate, backend=backend)
    model = Diffusivity().double()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    grid = torch.from_numpy(x)
    losses = []
    for step in range(train_steps):
        opt.zero_grad()
        u_final = sim(model(grid), u0, steps)          # NumPy simulation, differentiated by flowgrad
        loss = torch.mean((u_final - observed) ** 2)
        loss.backward()                                 # flowgrad's adjoint, then PyTorch's backward
        opt.step()
        losses.append(loss.item())
        if verbose and (step % 10 == 0 or step == train_steps - 1):
            print(f"step {step:3d}  loss {loss.item():.3e}")
    return losses


if __name__ == "__main__":
    losses = main()
    print(f"loss {losses[0]:.3e} -> {losses[-1]:.3e}")
