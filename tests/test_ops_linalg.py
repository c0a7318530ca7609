"""Dense linear algebra on tpu (lower/linalg.c -> custom targets CHOLESKY, LU, LU_SOLVE, TRI_SOLVE in
drivers/host/linalg.c) vs PyTorch CPU on random well-conditioned matrices: odd and batched sizes,
non-contiguous inputs, f32 and f64.

The host kernels compute in double, so float32 results are compared with CPU's float64 result rounded
to float32 (default float32 tolerances); float64 results with CPU float64 (default tolerances).
Errors (non-positive-definite, singular) behave as on CPU: the same info codes and LinAlgError
messages from the non-_ex functions.
"""
from __future__ import annotations

import pytest
import torch

DEV = "tpu"
DTYPES = [torch.float32, torch.float64]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _well(shape, dtype, seed=0, noncontig=False) -> torch.Tensor:
    """Random matrices with a dominant diagonal (well conditioned)."""
    n = shape[-1]
    a = torch.randn(shape, generator=_gen(seed), dtype=torch.float64)
    a = a + n * torch.eye(n, dtype=torch.float64)
    a = a.to(dtype)
    return a.mT.contiguous().mT if noncontig else a


def _spd(shape, dtype, seed=0) -> torch.Tensor:
    m = torch.randn(shape, generator=_gen(seed), dtype=torch.float64)
    a = m @ m.mT + shape[-1] * torch.eye(shape[-1], dtype=torch.float64)
    return a.to(dtype)


def _check(fn, *args, **kw):
    """fn on tpu vs fn on CPU (float32: CPU in float64, rounded)."""
    got = fn(*[a.to(DEV) if isinstance(a, torch.Tensor) else a for a in args], **kw)
    exp = fn(*[a.double() if isinstance(a, torch.Tensor) and a.dtype == torch.float32 else a for a in args], **kw)
    got = got if isinstance(got, (tuple, list)) else (got,)
    exp = exp if isinstance(exp, (tuple, list)) else (exp,)
    for g, e, a in zip(got, exp, got):
        e = e.to(g.dtype) if e.dtype.is_floating_point else e
        torch.testing.assert_close(g.cpu(), e)
    return got


SHAPES = [(1, 1), (5, 5), (3, 17, 17), (2, 3, 4, 4)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(dtype, shape, upper):
    a = _spd(shape, dtype)
    _check(torch.linalg.cholesky, a, upper=upper)
    _check(torch.linalg.cholesky_ex, a, upper=upper)
    _check(torch.cholesky, a, upper)
    # only the selected triangle is read
    noisy = a.clone()
    mask = torch.ones(shape[-1], shape[-1], dtype=torch.bool).triu(1)
    noisy[..., (mask.T if upper else mask)] = 7.0
    torch.testing.assert_close(torch.linalg.cholesky(noisy.to(DEV), upper=upper).cpu(),
                               torch.linalg.cholesky(a.double(), upper=upper).to(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_cholesky_not_positive_definite(dtype):
    a = torch.stack([_spd((4, 4), dtype), torch.tensor([[1.0, 2, 0, 0], [2, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]],
                                                        dtype=dtype)])
    got_l, got_info = torch.linalg.cholesky_ex(a.to(DEV))
    exp_l, exp_info = torch.linalg.cholesky_ex(a)
    assert torch.equal(got_info.cpu(), exp_info) and exp_info.tolist() == [0, 2]
    torch.testing.assert_close(got_l.cpu()[0], exp_l[0].to(dtype), rtol=1e-5, atol=1e-5)
    with pytest.raises(torch.linalg.LinAlgError, match=r"linalg.cholesky: \(Batch element 1\): The factorization "
                       r"could not be completed because the input is not positive-definite \(the leading minor of "
                       r"order 2 is not positive-definite\)"):
        torch.linalg.cholesky(a.to(DEV))
    # torch.cholesky checks inside the op: raised by the run, at the next sync
    with pytest.raises(RuntimeError, match=r"cholesky: \(Batch element 1\): The factorization could not be completed"):
        torch.cholesky(a.to(DEV)).cpu()
    torch.tpu.synchronize()
    assert torch.ones(2, device=DEV).sum().item() == 2.0  # the device stays usable


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 4), (6, 3), (3, 6), (2, 5, 5), (2, 1, 7, 7)])
def test_lu_factor(dtype, shape):
    a = torch.randn(shape, generator=_gen(1), dtype=dtype)
    lu, piv, info = _check(torch.linalg.lu_factor_ex, a)
    lu2, piv2 = _check(torch.linalg.lu_factor, a)
    assert piv.dtype == torch.int32 and info.dtype == torch.int32
    # the LU comes back in LAPACK's column-major layout, as on CPU
    assert lu.stride() == torch.linalg.lu_factor(a)[0].stride()


def test_lu_factor_singular():
    a = torch.zeros(2, 3, 3)
    a[1] = torch.eye(3)
    lu, piv, info = torch.linalg.lu_factor_ex(a.to(DEV))
    elu, epiv, einfo = torch.linalg.lu_factor_ex(a)
    assert torch.equal(piv.cpu(), epiv) and torch.equal(info.cpu(), einfo) and einfo.tolist() == [1, 0]
    assert torch.equal(lu.cpu(), elu)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("adjoint", [False, True])
def test_lu_solve(dtype, left, adjoint):
    a = _well((2, 6, 6), dtype, seed=2)
    lu, piv = torch.linalg.lu_factor(a.double())
    b = torch.randn((3, 1, 6, 4) if left else (3, 1, 4, 6), generator=_gen(3), dtype=dtype)
    got = torch.linalg.lu_solve(lu.to(dtype).to(DEV), piv.to(DEV), b.to(DEV), left=left, adjoint=adjoint)
    exp = torch.linalg.lu_solve(lu, piv, b.double(), left=left, adjoint=adjoint)
    torch.testing.assert_close(got.cpu(), exp.to(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("a_shape,b_shape,left", [
    ((5, 5), (5,), True), ((5, 5), (5, 3), True), ((2, 5, 5), (5, 2), True), ((2, 5, 5), (2, 5), True),
    ((3, 1, 4, 4), (2, 4, 1), True), ((4, 4), (3, 4), False), ((2, 4, 4), (2, 3, 4), False), ((0, 3, 3), (3, 2), True),
])
def test_solve(dtype, a_shape, b_shape, left):
    a = _well(a_shape, dtype, seed=4, noncontig=True)
    b = torch.randn(b_shape, generator=_gen(5), dtype=dtype)
    _check(torch.linalg.solve, a, b, left=left)
    _check(torch.linalg.solve_ex, a, b, left=left)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (6, 6), (3, 9, 9), (0, 4, 4), (2, 0, 0)])
def test_inv_det_slogdet(dtype, shape):
    a = _well(shape, dtype, seed=6, noncontig=True)
    if a.numel():
        a[..., 0, :] *= -1  # negative determinants too
    _check(torch.linalg.inv, a)
    _check(torch.linalg.inv_ex, a)
    _check(torch.linalg.det, a)
    _check(torch.linalg.slogdet, a)
    _check(torch.logdet, a.abs() + torch.eye(shape[-1], dtype=dtype) * shape[-1])


def test_singular():
    a = torch.tensor([[1.0, 2.0], [2.0, 4.0]], dtype=torch.float64)
    assert torch.linalg.det(a.to(DEV)).item() == 0.0
    s, l = torch.linalg.slogdet(a.to(DEV))
    assert s.item() == 0.0 and l.item() == float("-inf")
    with pytest.raises(torch.linalg.LinAlgError, match="linalg.inv: The diagonal element 2 is zero, the inversion "
                       "could not be completed because the input matrix is singular."):
        torch.linalg.inv(a.to(DEV))
    with pytest.raises(torch.linalg.LinAlgError, match="torch.linalg.solve: The solver failed because the input "
                       "matrix is singular."):
        torch.linalg.solve(a.to(DEV), torch.ones(2, dtype=torch.float64, device=DEV))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular(dtype, upper, left, unit):
    a = _well((2, 1, 7, 7), dtype, seed=7, noncontig=True)
    b = torch.randn((3, 7, 4) if left else (3, 4, 7), generator=_gen(8), dtype=dtype)
    _check(torch.linalg.solve_triangular, a, b, upper=upper, left=left, unitriangular=unit)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("transpose", [False, True])
def test_triangular_solve(dtype, upper, transpose):
    a = _well((3, 5, 5), dtype, seed=9)
    b = torch.randn((3, 5, 2), generator=_gen(10), dtype=dtype)
    _check(torch.triangular_solve, b, a, upper=upper, transpose=transpose)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_inverse(dtype, upper):
    f = torch.linalg.cholesky(_spd((2, 6, 6), torch.float64, seed=11), upper=upper).to(dtype)
    b = torch.randn((2, 6, 3), generator=_gen(12), dtype=dtype)
    _check(torch.cholesky_solve, b, f, upper)
    _check(torch.cholesky_inverse, f[0], upper)


@pytest.mark.parametrize("noncontig", [False, True])
@pytest.mark.parametrize("fn", ["cholesky", "solve", "inv", "det", "slogdet", "solve_triangular"])
def test_backward_matches_cpu(fn, noncontig):
    """det/slogdet: PyTorch factors A^T when A is contiguous and its backward relies on it."""
    a0 = _spd((2, 5, 5), torch.float64, seed=13) if fn == "cholesky" else _well((2, 5, 5), torch.float64, seed=13,
                                                                                 noncontig=noncontig)
    b0 = torch.randn((2, 5, 3), generator=_gen(14), dtype=torch.float64)
    f = {
        "cholesky": lambda a, b: torch.linalg.cholesky(a).sum(),
        "solve": lambda a, b: (torch.linalg.solve(a, b) * b).sum(),
        "inv": lambda a, b: torch.linalg.inv(a).sum(),
        "det": lambda a, b: torch.linalg.det(a).sum(),
        "slogdet": lambda a, b: torch.linalg.slogdet(a)[1].sum(),
        "solve_triangular": lambda a, b: torch.linalg.solve_triangular(a, b, upper=True).sum(),
    }[fn]
    grads = []
    for dev in ("cpu", DEV):
        a = a0.clone(memory_format=torch.preserve_format).to(dev).requires_grad_()
        assert a.is_contiguous() != noncontig or fn == "cholesky"
        b = b0.clone().to(dev).requires_grad_()
        f(a, b).backward()
        grads.append((a.grad.cpu(), b.grad.cpu() if b.grad is not None else None))
    torch.testing.assert_close(grads[1][0], grads[0][0])
    if grads[0][1] is not None:
        torch.testing.assert_close(grads[1][1], grads[0][1])


def test_unsupported_dtype_and_check_errors():
    with pytest.raises(NotImplementedError):
        torch.linalg.lu_factor_ex(torch.eye(3, device=DEV), check_errors=True)


# ---------------------------------------------------------------- QR, eigh, SVD (drivers/host/linalg2.c)
# QR follows LAPACK's Householder sign convention, so Q and R are compared directly. Eigenvectors and
# singular vectors are unique only up to sign: compare eigen/singular values directly and the vectors
# through invariants (reconstruction, orthonormality, |entries|, sign-invariant products).

DECOMP_SHAPES = [(1, 1), (5, 3), (3, 5), (6, 6), (2, 7, 4), (2, 3, 4, 9)]


def _rand(shape, dtype, seed=0, noncontig=False):
    a = torch.randn(shape, generator=_gen(seed), dtype=torch.float64).to(dtype)
    return a.mT.contiguous().mT if noncontig else a


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", DECOMP_SHAPES)
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
@pytest.mark.parametrize("noncontig", [False, True])
def test_qr(dtype, shape, mode, noncontig):
    a = _rand(shape, dtype, seed=21, noncontig=noncontig)
    q, r = _check(torch.linalg.qr, a, mode=mode)
    if mode != "r":
        torch.testing.assert_close((q.double() @ r.double()).cpu(), a.double(), rtol=1e-5, atol=1e-5)
    if mode == "reduced":
        _check(torch.qr, a)


def test_qr_rank_deficient_and_empty():
    a = torch.randn(6, 4, generator=_gen(3), dtype=torch.float64)
    a[:, 1] = 0  # a column already reduced: no reflection (LAPACK's tau = 0)
    _check(torch.linalg.qr, a)
    _check(torch.linalg.qr, a.mT.contiguous(), mode="complete")
    for shape in [(0, 3), (3, 0), (2, 0, 0)]:
        _check(torch.linalg.qr, torch.zeros(shape), mode="complete")
        _check(torch.linalg.qr, torch.zeros(shape))


def _sym(shape, dtype, seed=0):
    a = torch.randn(shape, generator=_gen(seed), dtype=torch.float64)
    return (a + a.mT).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (7, 7), (3, 5, 5), (2, 2, 16, 16)])
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh(dtype, shape, uplo):
    a = _sym(shape, dtype, seed=31)
    # only the UPLO triangle is read: noise in the other one must not matter
    noisy = a.clone()
    mask = torch.ones(shape[-1], shape[-1], dtype=torch.bool).triu(1)
    noisy[..., (mask if uplo == "L" else mask.T)] = 5.0
    w, v = torch.linalg.eigh(noisy.to(DEV), UPLO=uplo)
    w0, v0 = torch.linalg.eigh(a.double())
    torch.testing.assert_close(w.cpu(), w0.to(dtype))
    torch.testing.assert_close(torch.linalg.eigvalsh(noisy.to(DEV), UPLO=uplo).cpu(), w0.to(dtype))
    v = v.cpu().double()
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else {}
    torch.testing.assert_close(v @ torch.diag_embed(w.cpu().double()) @ v.mT, a.double(), **tol)
    torch.testing.assert_close(v.mT @ v, torch.eye(shape[-1], dtype=torch.float64).expand_as(v), **tol)
    torch.testing.assert_close(v.abs(), v0.abs().to(torch.float64), **tol)  # distinct eigenvalues


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", DECOMP_SHAPES + [(0, 3), (3, 0), (2, 0, 4)])
@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("noncontig", [False, True])
def test_svd(dtype, shape, full, noncontig):
    a = _rand(shape, dtype, seed=41, noncontig=noncontig)
    u, s, vh = torch.linalg.svd(a.to(DEV), full_matrices=full)
    u0, s0, vh0 = torch.linalg.svd(a.double(), full_matrices=full)
    assert u.shape == u0.shape and s.shape == s0.shape and vh.shape == vh0.shape
    assert u.dtype == s.dtype == vh.dtype == dtype
    torch.testing.assert_close(s.cpu(), s0.to(dtype))
    torch.testing.assert_close(torch.linalg.svdvals(a.to(DEV)).cpu(), s0.to(dtype))
    u, s, vh = u.cpu().double(), s.cpu().double(), vh.cpu().double()
    k = s.shape[-1]
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else {}
    torch.testing.assert_close((u[..., :k] * s.unsqueeze(-2)) @ vh[..., :k, :], a.double(), **tol)
    eye = lambda n: torch.eye(n, dtype=torch.float64)  # noqa: E731
    torch.testing.assert_close(u.mT @ u, eye(u.shape[-1]).expand(*u.shape[:-2], -1, -1), **tol)
    torch.testing.assert_close(vh @ vh.mT, eye(vh.shape[-2]).expand(*vh.shape[:-2], -1, -1), **tol)
    torch.testing.assert_close(u[..., :k].abs(), u0[..., :k].abs(), **tol)
    torch.testing.assert_close(vh[..., :k, :].abs(), vh0[..., :k, :].abs(), **tol)


def test_svd_rank_deficient():
    """Zero singular values: their singular vectors are completed to an orthonormal basis."""
    a = torch.randn(6, 2, generator=_gen(5), dtype=torch.float64) @ torch.randn(2, 5, generator=_gen(6),
                                                                                 dtype=torch.float64)
    for x in (a, a.mT, torch.zeros(4, 3)):
        for full in (False, True):
            u, s, vh = (t.cpu() for t in torch.linalg.svd(x.to(DEV), full_matrices=full))
            torch.testing.assert_close(s, torch.linalg.svdvals(x))
            torch.testing.assert_close(u.mT @ u, torch.eye(u.shape[-1], dtype=x.dtype))
            torch.testing.assert_close(vh @ vh.mT, torch.eye(vh.shape[-2], dtype=x.dtype))
            k = s.shape[-1]
            torch.testing.assert_close((u[:, :k] * s) @ vh[:k], x)


def test_decomp_bad_input():
    """Non-finite input: SVD / eigh fail like LAPACK does (PyTorch's message, raised at the next sync);
    QR propagates NaN. Non-square eigh and unsupported dtypes fail before running."""
    a = torch.randn(2, 4, 4, generator=_gen(8))
    a[1, 2, 1] = float("nan")
    with pytest.raises(RuntimeError, match=r"linalg.svd: \(Batch element 1\): The algorithm failed to converge because "
                       r"the input matrix contained non-finite values"):
        torch.linalg.svd(a.to(DEV))[1].cpu()
    with pytest.raises(RuntimeError, match=r"linalg.eigh: \(Batch element 1\): The algorithm failed to converge"):
        torch.linalg.eigh(a.to(DEV))[0].cpu()
    with pytest.raises(RuntimeError, match="linalg.eigh"):  # eigvalsh goes through the same kernel
        torch.linalg.eigvalsh(a.to(DEV)).cpu()
    assert torch.linalg.qr(a.to(DEV))[1].cpu()[1].isnan().any()
    with pytest.raises(RuntimeError, match="must be batches of square matrices"):
        torch.linalg.eigh(torch.randn(3, 4, device=DEV))
    with pytest.raises(RuntimeError, match="driver="):
        torch.linalg.svd(torch.randn(3, 4, device=DEV), driver="gesvd")
    with pytest.raises((RuntimeError, NotImplementedError)):
        torch.linalg.qr(torch.randn(3, 3, dtype=torch.float16, device=DEV))
    # the device stays usable
    torch.testing.assert_close(torch.linalg.svdvals(torch.eye(3, device=DEV)).cpu(), torch.ones(3))


@pytest.mark.parametrize("fn", ["qr", "qr_wide", "eigh", "eigvalsh", "svd", "svd_wide", "svdvals", "pinv", "matrix_norm"])
def test_decomp_backward_matches_cpu(fn):
    """PyTorch's backward formulas over our outputs; losses are invariant to the vectors' signs."""
    shape = (2, 5, 3) if fn in ("qr", "svd", "pinv") else (2, 3, 5) if fn.endswith("_wide") else (2, 4, 4)
    a0 = torch.randn(shape, generator=_gen(17), dtype=torch.float64)
    if fn in ("eigh", "eigvalsh"):
        a0 = a0 + a0.mT
    c = torch.randn(shape[-1], generator=_gen(18), dtype=torch.float64)

    def loss(a):
        if fn.startswith("qr"):
            q, r = torch.linalg.qr(a)
            return (q * q.sum(-1, keepdim=True)).sum() + (r * r).sum() + r.sum()
        if fn == "eigh":
            w, v = torch.linalg.eigh(a)
            return (w * c.to(a.device)).sum() + ((v * c.to(a.device)) @ v.mT).pow(2).sum()
        if fn == "eigvalsh":
            return (torch.linalg.eigvalsh(a) * c.to(a.device)).sum()
        if fn.startswith("svd") and fn != "svdvals":
            u, s, vh = torch.linalg.svd(a, full_matrices=False)
            return s.sum() + (u @ vh).pow(3).sum() + (u * u).sum(-2).mul(s).sum()
        if fn == "svdvals":
            return torch.linalg.svdvals(a).pow(2).sum()
        if fn == "pinv":
            return torch.linalg.pinv(a).sum()
        return torch.linalg.matrix_norm(a, ord="nuc").sum() + torch.linalg.matrix_norm(a, ord=2).sum()

    grads = []
    for dev in ("cpu", DEV):
        a = a0.clone().to(dev).requires_grad_()
        loss(a).backward()
        grads.append(a.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0])
