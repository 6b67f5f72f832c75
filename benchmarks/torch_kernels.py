"""PyTorch twins of corpus kernels, for the autograd comparison in ``benchmarks.run``.

Each function has the signature of the corpus ``kernel`` it translates and takes float64
tensors where the kernel takes float arrays or float scalars (integer arrays arrive as int64
tensors, integer scalars as Python ints). They are written as a PyTorch user would write
them to get ``loss.backward()`` to work: the loops stay Python loops, leaf inputs are cloned
once before an in-place update, and a value that autograd saved is never overwritten in place
(that raises "modified by an inplace operation"), so such updates become out-of-place
(``x = x - ...``) or go through lists of rows. Row loops iterate over the tensor
(``for row in A``, which is ``A.unbind(0)``) instead of indexing ``A[i, :]``: the backward of
each index op materialises a zero gradient the size of all of ``A``, which turns a row loop
quadratic (atax's backward took 15 s that way), and PyTorch users learn to avoid it.
``python -m benchmarks.run --check`` verifies every twin's value against the NumPy kernel and
its gradient against flowgrad's.
"""
import math

import torch


def heat_1d_explicit(u, kappa, n_steps):
    n = u.shape[0]
    dx = 1.0 / (n - 1)
    dt = 0.4 * dx * dx
    r = kappa * dt / (dx * dx)
    u = u.clone()
    for t in range(n_steps):
        u[1:-1] += r * (u[:-2] - 2.0 * u[1:-1] + u[2:])
        u[0] = u[1]
        u[-1] = 0.0
    return torch.sum(u * u) / n + u[n // 2]


def burgers_1d(u, nu, n_steps):
    n = u.shape[0]
    dx = 2.0 * math.pi / n
    dt = 0.2 * dx
    for t in range(n_steps):
        f = 0.5 * u * u
        u = (u - (0.5 * dt / dx) * (torch.roll(f, -1) - torch.roll(f, 1))
             + nu * (torch.roll(u, -1) - 2.0 * u + torch.roll(u, 1)))
    return torch.sum(u * u) / n + torch.sum(u[: n // 2]) / n


def jacobi_2d(A, B, tsteps):
    n = A.shape[0]
    A, B = A.clone(), B.clone()
    for t in range(tsteps):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] + A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] + B[:-2, 1:-1])
    return torch.sum(A * A) / (n * n)


def heat_3d(A, B, tsteps):
    n = A.shape[0]
    A, B = A.clone(), B.clone()

    def step(src):
        c = src[1:-1, 1:-1, 1:-1]
        return (0.125 * (src[2:, 1:-1, 1:-1] - 2.0 * c + src[:-2, 1:-1, 1:-1])
                + 0.125 * (src[1:-1, 2:, 1:-1] - 2.0 * c + src[1:-1, :-2, 1:-1])
                + 0.125 * (src[1:-1, 1:-1, 2:] - 2.0 * c + src[1:-1, 1:-1, :-2])
                + c)

    for t in range(tsteps):
        B[1:-1, 1:-1, 1:-1] = step(A)
        A[1:-1, 1:-1, 1:-1] = step(B)
    return torch.sum(A * A) / (n * n * n)


def fdtd_2d(ex, ey, hz, fict):
    ex, ey, hz = ex.clone(), ey.clone(), hz.clone()
    for t in range(fict.shape[0]):
        ey[0, :] = fict[t]
        ey[1:, :] -= 0.5 * (hz[1:, :] - hz[:-1, :])
        ex[:, 1:] -= 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :-1] -= 0.7 * (ex[:-1, 1:] - ex[:-1, :-1] + ey[1:, :-1] - ey[:-1, :-1])
    nx, ny = hz.shape
    return (torch.sum(hz * hz) + torch.sum(ex * ex) + torch.sum(ey * ey)) / (nx * ny)


def hdiff(in_field, coeff):
    I, J, K = coeff.shape
    out = torch.zeros((I, J, K), dtype=in_field.dtype)
    for k in range(K):
        f = in_field[:, :, k]
        lap = 4.0 * f[1:I + 3, 1:J + 3] - (f[2:I + 4, 1:J + 3] + f[0:I + 2, 1:J + 3]
                                            + f[1:I + 3, 2:J + 4] + f[1:I + 3, 0:J + 2])
        res = lap[1:, 1:J + 1] - lap[:-1, 1:J + 1]
        flx = torch.where(res * (f[2:I + 3, 2:J + 2] - f[1:I + 2, 2:J + 2]) > 0.0, 0.0, res)
        res = lap[1:I + 1, 1:] - lap[1:I + 1, :-1]
        fly = torch.where(res * (f[2:I + 2, 2:J + 3] - f[2:I + 2, 1:J + 2]) > 0.0, 0.0, res)
        out[:, :, k] = f[2:I + 2, 2:J + 2] - coeff[:, :, k] * (flx[1:, :] - flx[:-1, :] + fly[:, 1:] - fly[:, :-1])
    return torch.sum(out * out) / (I * J * K)


def gemm(alpha, beta, C, A, B):
    B_rows = B.unbind(0)
    rows = []
    for c_i, a_i in zip(C, A):
        c_i = c_i * beta
        for a_ik, b_k in zip(a_i, B_rows):
            c_i = c_i + alpha * a_ik * b_k
        rows.append(c_i)
    C = torch.stack(rows)
    return torch.sum(C * C) / (C.shape[0] * C.shape[1])


def atax(A, x):
    m, n = A.shape
    y = torch.zeros(n, dtype=A.dtype)
    for a_i in A:
        t = a_i @ x                     # the NumPy kernel keeps these in tmp[i]
        y += a_i * t
    return torch.sum(y * y) / n


def gemver(alpha, beta, A, u1, v1, u2, v2, w, x, y, z):
    n = A.shape[0]
    rows = []                           # the rows of A after the rank-2 update
    for a_i, u1_i, u2_i in zip(A, u1, u2):
        rows.append(a_i + (u1_i * v1 + u2_i * v2))
    x = x.clone()
    for a_i, y_i in zip(rows, y):
        x += beta * a_i * y_i
    x += z
    w = torch.stack([w_i + alpha * (a_i @ x) for w_i, a_i in zip(w, rows)])
    return torch.sum(w * w) / n + torch.sum(x * x) / n


def k3mm(A, B, C, D):
    ni = A.shape[0]
    nl = D.shape[1]
    E = torch.stack([a_i @ B for a_i in A])
    F = torch.stack([c_i @ D for c_i in C])
    G = torch.stack([e_i @ F for e_i in E])
    return torch.sum(G * G) / (ni * nl)


def cholesky(A):
    # In place on A (as the NumPy kernel does) autograd refuses: each dot product saves rows of A
    # that later iterations overwrite. So the factor is built as a list of rows.
    L = []                                       # L[j]: row j of the factor, length j + 1
    for i, a_i in enumerate(A):
        row = []
        for j in range(i):
            s = a_i[j]
            if j:
                s = s - torch.stack(row) @ L[j][:j]
            row.append(s / L[j][j])
        d = a_i[i]
        if i:
            done = torch.stack(row)
            d = d - done @ done
        row.append(torch.sqrt(d))
        L.append(torch.stack(row))
    return torch.sum(torch.cat(L))


def trisolv(L, b):
    x = []                                       # x[i] is written once, so a list of scalars
    for i, (l_i, b_i) in enumerate(zip(L, b)):
        s = b_i
        for j in range(i):
            s = s - l_i[j] * x[j]
        x.append(s / l_i[i])
    x = torch.stack(x)
    return torch.sum(x * x) + torch.sum(x)


def cg_solver(A, b, max_iter):
    tol = 1e-9
    A = 0.5 * (A + A.T)
    x = torch.zeros_like(b)
    r = b - A @ x
    p = r.clone()
    rs = r @ r
    bnorm = torch.linalg.norm(b)
    it = 0
    while torch.sqrt(rs) > tol * bnorm:
        if it >= max_iter:
            break
        Ap = A @ p
        alpha = rs / (p @ Ap)
        x = x + alpha * p
        r = r - alpha * Ap
        rs_new = r @ r
        p = r + (rs_new / rs) * p
        rs = rs_new
        it += 1
    return x @ b + torch.sum(x * x)


def mlp(x, w1, b1, w2, b2, w3, b3, target):
    h = torch.relu(x @ w1 + b1)
    h = torch.relu(h @ w2 + b2)
    out = torch.softmax(h @ w3 + b3, dim=1)
    return -torch.sum(target * torch.log(out)) / x.shape[0]


def softmax(x, w):
    mx = torch.amax(x, dim=-1, keepdim=True)
    e = torch.exp(x - mx)
    out = e / torch.sum(e, dim=-1, keepdim=True)
    return torch.sum(out * w)


def logsumexp(X, w):
    rows = []
    for x_i in X:
        mx = torch.max(x_i)
        rows.append(mx + torch.log(torch.sum(torch.exp(x_i - mx))))
    rows = torch.stack(rows)
    cmax = torch.amax(X, dim=0, keepdim=True)
    cols = cmax + torch.log(torch.sum(torch.exp(X - cmax), dim=0, keepdim=True))
    return torch.sum(rows * w) + torch.mean(cols)


def layernorm(x, gamma, beta, W, target):
    def layer_norm(x, eps=1e-5):
        mean = torch.mean(x, dim=-1, keepdim=True)
        var = torch.mean((x - mean) ** 2, dim=-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + eps) * gamma + beta

    h = layer_norm(x)
    h = torch.tanh(h @ W)
    h = layer_norm(h + x)
    return torch.sum(h * target) / x.shape[0]


def conv2d_bias(x, w, bias):
    N, H, W, C = x.shape
    K = w.shape[0]
    F = w.shape[3]
    Ho = H - K + 1
    Wo = W - K + 1
    wm = w.reshape(K * K * C, F)
    pixels = []                         # out[:, i, j, :] for (i, j) in row-major order
    for i in range(Ho):
        for j in range(Wo):
            pixels.append(x[:, i:i + K, j:j + K, :].reshape(N, K * K * C) @ wm)
    out = torch.stack(pixels, dim=1).reshape(N, Ho, Wo, F) + bias
    return torch.sum(torch.tanh(out)) / (N * Ho * Wo * F)


def _conv_valid(x, w, b):
    K = w.shape[0]
    Ho = x.shape[1] - K + 1
    Wo = x.shape[2] - K + 1
    out = torch.zeros((x.shape[0], Ho, Wo, w.shape[3]), dtype=x.dtype)
    for i in range(K):
        for j in range(K):
            out += x[:, i:i + Ho, j:j + Wo, :] @ w[i, j]
    return out + b


def _maxpool2(x):
    a = torch.maximum(x[:, 0::2, 0::2, :], x[:, 1::2, 0::2, :])
    b = torch.maximum(x[:, 0::2, 1::2, :], x[:, 1::2, 1::2, :])
    return torch.maximum(a, b)


def lenet(x, cw1, cb1, cw2, cb2, fw1, fb1, fw2, fb2, fw3, fb3, target):
    N = x.shape[0]
    h = _maxpool2(torch.relu(_conv_valid(x, cw1, cb1)))
    h = _maxpool2(torch.relu(_conv_valid(h, cw2, cb2)))
    h = h.reshape(N, -1)
    h = torch.relu(h @ fw1 + fb1)
    h = torch.relu(h @ fw2 + fb2)
    d = h @ fw3 + fb3 - target
    return torch.sum(d * d) / N


def resnet_block(x, w1, g1, b1, w2, g2, b2):
    def conv3x3_same(x, w):
        N, H, W, C = x.shape
        xp = torch.zeros((N, H + 2, W + 2, C), dtype=x.dtype)
        xp[:, 1:-1, 1:-1, :] = x
        out = torch.zeros((N, H, W, w.shape[3]), dtype=x.dtype)
        for i in range(3):
            for j in range(3):
                out += torch.einsum("nhwc,cf->nhwf", xp[:, i:i + H, j:j + W, :], w[i, j])
        return out

    def batchnorm(x, gamma, beta):
        flat = x.reshape(-1, x.shape[3])
        mean = torch.mean(flat, dim=0)
        var = torch.mean((flat - mean) ** 2, dim=0)
        return gamma * (x - mean) / torch.sqrt(var + 1e-5) + beta

    h = torch.relu(batchnorm(conv3x3_same(x, w1), g1, b1))
    h = batchnorm(conv3x3_same(h, w2), g2, b2)
    out = torch.relu(h + x)
    return torch.mean(out * out)


def attention(x, Wq, Wk, Wv, Wo, n_heads):
    T, D = x.shape
    hd = D // n_heads
    mask = torch.triu(torch.ones((T, T), dtype=x.dtype), 1) * -1e9
    out = torch.zeros((T, D), dtype=x.dtype)
    for h in range(n_heads):
        lo = h * hd
        hi = lo + hd
        q = x @ Wq[:, lo:hi]
        k = x @ Wk[:, lo:hi]
        v = x @ Wv[:, lo:hi]
        s = q @ k.T / math.sqrt(hd) + mask
        out[:, lo:hi] = torch.softmax(s, dim=-1) @ v
    y = out @ Wo
    return torch.sum(y * y) / T


def rnn(xs, h0, W, b, Wy):
    T = xs.shape[0]
    h = h0
    loss = 0.0
    for t in range(T):
        h = torch.tanh(torch.cat((xs[t], h), dim=1) @ W + b)
        y = h @ Wy
        loss = loss + torch.sum(y * y)
    return loss / T


def gnn_scatter(x, W, src, dst, anchors, n_layers):
    n = x.shape[0]
    deg = torch.zeros(n, dtype=x.dtype).index_add_(0, dst, torch.ones(dst.shape[0], dtype=x.dtype))
    for layer in range(n_layers):
        msg = x[src] @ W[layer]
        agg = torch.zeros_like(x).index_add(0, dst, msg)
        x = torch.tanh(agg / (deg[:, None] + 1.0) + x)
        x = x.index_add(0, anchors, 0.1 * x[anchors])     # x[anchors] += ...: anchors are unique
    return torch.sum(x * x) / n


def linalg_cholesky(X, y, lengthscale, noise):
    n = X.shape[0]
    sq = torch.sum(X * X, dim=1)
    d2 = sq[:, None] + sq[None, :] - 2.0 * (X @ X.T)
    K = torch.exp(-0.5 * d2 / (lengthscale * lengthscale)) + (noise * noise + 1e-3) * torch.eye(n, dtype=X.dtype)
    L = torch.linalg.cholesky(K)
    alpha = torch.linalg.solve_triangular(L, y[:, None], upper=False)[:, 0]
    return 0.5 * torch.sum(alpha * alpha) + torch.sum(torch.log(torch.diagonal(L)))


def masked_histogram(x, w, centres, width):
    bins = []
    for c in centres:
        d = (x - c) / width
        bins.append(torch.sum(torch.where(torch.abs(d) < 2.0, w * torch.exp(-d * d), 0.0)))
    hist = torch.stack(bins)
    target = torch.linspace(0.0, 1.0, centres.shape[0], dtype=x.dtype)
    return torch.sum((hist / torch.sum(hist) - target) ** 2)


TORCH_KERNELS = {
    fn.__name__: fn for fn in (
        # stencils and PDE time-stepping
        heat_1d_explicit, burgers_1d, jacobi_2d, heat_3d, fdtd_2d, hdiff,
        # linear algebra (row loops, triangular loops, an iterative solver)
        gemm, atax, gemver, k3mm, cholesky, trisolv, cg_solver, linalg_cholesky,
        # a masked reduction per bin
        masked_histogram,
        # machine learning
        mlp, softmax, logsumexp, layernorm, conv2d_bias, lenet, resnet_block, attention, rnn, gnn_scatter,
    )
}
