"""Ops that Hugging Face models needed and the device lacked (tests/test_hf_models.py found them),
on the tpu device vs PyTorch CPU: histc (Mixtral / Qwen2-MoE expert counts; lower/index.c), isin
(generate()'s special-token checks; lower/misc.c) and the fused weight norm _weight_norm_interface
+ backward (wav2vec2's positional conv; lower/nn.c). Random inputs, odd sizes, non-contiguous views,
bf16; exact results where the CPU's arithmetic is reproduced step by step. Also the small ops of ordinary
training scripts that were missing (prelu, glu, hardshrink with their backward; linalg.cross, channel_shuffle,
angle of real tensors, F.unfold / F.fold (im2col / col2im), embedding_renorm_ (nn.Embedding(max_norm=...)))."""
from __future__ import annotations

import re

import pytest
import torch

import torch_tpu

DEV = "tpu"


def same(actual, expected):
    assert actual.device.type == DEV, actual.device
    a = actual.cpu()
    assert a.dtype == expected.dtype and a.shape == expected.shape, (a.dtype, a.shape, expected.dtype, expected.shape)
    torch.testing.assert_close(a, expected, rtol=0, atol=0, equal_nan=True)  # bitwise (NaN matches NaN)


# ---------------------------------------------------------------- histc

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("args", [(10,), (7, -2.0, 2.0), (13, 0, 0), (4, 0.5, 0.5), (100, -1.0, 3.0), (1,), (3, -0.7, 0.9)])
def test_histc_matches_cpu_bits(dtype, args):
    torch.manual_seed(0)
    x = (torch.randn(37, 5) * 3).to(dtype)
    same(torch.histc(x.to(DEV), *args), torch.histc(x, *args))


@pytest.mark.parametrize("dtype", FLOATS)
def test_histc_views_edges_and_out(dtype):
    torch.manual_seed(1)
    x = (torch.randn(9, 14) * 2).to(dtype)
    xt = x.to(DEV)
    same(torch.histc(xt[:, ::3], 9), torch.histc(x[:, ::3], 9))  # strided view
    same(torch.histc(xt.t(), 6, -1, 1), torch.histc(x.t(), 6, -1, 1))  # transposed
    # values on the bin edges, both ends of the range (the last bin is closed), outside it, NaN
    e = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0, -0.1, 1.1, float("nan"), 1.0, 0.0], dtype=dtype)
    same(torch.histc(e.to(DEV), 4, 0, 1), torch.histc(e, 4, 0, 1))
    same(torch.histc(torch.full((5,), 2.0, dtype=dtype).to(DEV), 3), torch.histc(torch.full((5,), 2.0, dtype=dtype), 3))
    same(torch.histc(torch.empty(0, dtype=dtype).to(DEV), 5), torch.histc(torch.empty(0, dtype=dtype), 5))
    out = torch.empty(7, dtype=dtype, device=DEV)
    r = torch.histc(xt, 7, -3, 3, out=out)
    assert r is out
    same(out, torch.histc(x, 7, -3, 3))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_histc_integers_count_like_cuda(dtype):
    # CPU has no integral histc; the device counts as PyTorch's CUDA kernel (what HF's MoE layers pass
    # on accelerators): bin = (x - min) * bins / (max - min), the same bins as the float histogram here
    torch.manual_seed(2)
    x = torch.randint(0, 8, (53,)).to(dtype)
    same(torch.histc(x.to(DEV), bins=8, min=0, max=7), torch.histc(x.double(), 8, 0, 7).to(dtype))
    same(torch.histc(x.to(DEV), bins=5), torch.histc(x.double(), 5).to(dtype))  # range from the data
    same(torch.histc(x.to(DEV)[::2], bins=3, min=2, max=6), torch.histc(x[::2].double(), 3, 2, 6).to(dtype))


def test_histc_low_precision_counts_round_once():
    # bf16 / f16 counts add up in f32 and round once; PyTorch's CPU adds 1s in bf16 / f16 per thread,
    # so its bins stop at 256 / 2048 per thread (a thread-count-dependent answer)
    for dtype, n in ((torch.bfloat16, 1000), (torch.float16, 3000)):
        x = torch.cat([torch.zeros(n), torch.full((5,), 0.9)]).to(dtype)
        same(torch.histc(x.to(DEV), 3, -1, 1), torch.histc(x.float(), 3, -1, 1).to(dtype))


def test_histc_errors():
    x = torch.ones(3, device=DEV)
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch.histc(x, 3, 2, 1)
    with pytest.raises(RuntimeError, match="not finite"):
        torch.histc(x, 3, 0, float("inf"))


NON_FINITE = ([1.0, float("inf")], [-float("inf"), 2.0], [float("inf")], [1.0, float("nan"), 3.0], [float("nan")],
              [-float("inf"), float("inf")], [0.5] * 37 + [float("nan")] + [0.25] * 20)


def _cpu_error(x, *args):
    with pytest.raises(RuntimeError) as e:
        torch.histc(x, *args)
    return str(e.value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_histc_non_finite_data_range_raises_at_sync(dtype):
    # min == max takes the range from the data; PyTorch raises when it is not finite. The device checks the
    # extrema when the graph runs (HISTC_EDGES): PyTorch's message at the next sync, and the device stays usable.
    # The sign PyTorch prints for a NaN extremum ("-nan" from its vectorized min) is not reproduced.
    for vals in NON_FINITE:
        for lo_hi in ((), (0, 0), (2.5, 2.5)):
            x = torch.tensor(vals, dtype=dtype)
            want = _cpu_error(x, 7, *lo_hi).replace("-nan", "nan")
            with pytest.raises(RuntimeError) as got:
                torch.histc(x.to(DEV), 7, *lo_hi).cpu()
            assert want in str(got.value).replace("-nan", "nan"), (str(got.value), want)
            ok = torch.tensor([1.0, 2.0, 2.5], dtype=dtype)
            same(torch.histc(ok.to(DEV), 7, *lo_hi), torch.histc(ok, 7, *lo_hi))
    with pytest.raises(RuntimeError, match=r"range of \[1, inf\] is not finite"):  # a strided view
        torch.histc(torch.tensor([[1.0, 5.0], [float("inf"), 7.0]], dtype=dtype).to(DEV)[:, 0], 3).cpu()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_histc_equal_extrema_widened_as_cpu(dtype):
    # all elements equal: PyTorch widens [v, v] to min(next value below, v - 1) .. max(next above, v + 1) in
    # f32 / f64 (v -+ 1 is lost beyond 2^24 / 2^53), v -+ 1 otherwise, and raises when the range stays empty
    vals = [3.0, -0.0, 1e-40, 2.0**24, 2.0**24 + 2, 1e16, -1e30, 3e38] + ([1e300] if dtype == torch.float64 else [])
    for v in vals:
        x = torch.full((5,), v, dtype=torch.float64).to(dtype)
        for args in ((4,), (7, 0, 0), (3, 1.5, 1.5)):
            try:
                want = torch.histc(x, *args)
            except RuntimeError as e:
                with pytest.raises(RuntimeError, match=re.escape(str(e))):
                    torch.histc(x.to(DEV), *args).cpu()
                continue
            same(torch.histc(x.to(DEV), *args), want)
    e = torch.empty(0, dtype=dtype)  # given equal bounds with no data: widened while lowering
    for lo in (0.0, 1e30, 2.0**24 + 2):
        try:
            want = torch.histc(e, 3, lo, lo)
        except RuntimeError as err:
            with pytest.raises(RuntimeError, match=re.escape(str(err))):
                torch.histc(e.to(DEV), 3, lo, lo)
            continue
        same(torch.histc(e.to(DEV), 3, lo, lo), want)


def test_histc_non_finite_data_range_launch_blocking_and_fused():
    import subprocess, sys, textwrap
    code = textwrap.dedent("""
        import torch
        x = torch.tensor([1.0, float("inf"), 2.0]).to("tpu")
        try:
            h = torch.histc(x, 5)
            print("returned")
            h.cpu()
        except RuntimeError as e:
            print("raised:", e)
        print(torch.histc(torch.tensor([0.0, 1.0]).to("tpu"), 2).cpu().tolist())
    """)
    for env, first in (({"TORCH_TPU_LAUNCH_BLOCKING": "1"}, "raised"), ({"TORCH_TPU_FUSED_EAGER": "1"}, "returned")):
        e = {k: v for k, v in __import__("os").environ.items() if k != "TORCH_TPU_CPU_FALLBACK"}
        e.update(env)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, timeout=300)
        lines = r.stdout.splitlines()
        assert r.returncode == 0 and lines and lines[0].startswith(first), (env, r.stdout, r.stderr)
        assert any("torch.histc: range of [1, inf] is not finite" in ln for ln in lines), (env, r.stdout)
        assert lines[-1] == "[1.0, 1.0]", (env, r.stdout)


# ---------------------------------------------------------------- isin

@pytest.mark.parametrize("invert", [False, True])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32, torch.bfloat16])
def test_isin_tensor_tensor(dtype, invert):
    torch.manual_seed(3)
    a = torch.randint(0, 12, (7, 5)).to(dtype)
    b = torch.randint(0, 12, (6,)).to(dtype)
    same(torch.isin(a.to(DEV), b.to(DEV), invert=invert), torch.isin(a, b, invert=invert))
    same(torch.isin(a.to(DEV).t(), b.to(DEV)[::2], invert=invert), torch.isin(a.t(), b[::2], invert=invert))
    bb = torch.randint(0, 12, (2, 3)).to(dtype)  # test elements of any shape
    same(torch.isin(a.to(DEV), bb.to(DEV), invert=invert), torch.isin(a, bb, invert=invert))


def test_isin_scalars_promotion_nan_empty_out():
    a = torch.randint(0, 5, (4, 3))
    same(torch.isin(a.to(DEV), 3), torch.isin(a, 3))
    same(torch.isin(a.to(DEV), 3, invert=True), torch.isin(a, 3, invert=True))
    b = torch.tensor([4, 9, 2])
    same(torch.isin(2, b.to(DEV)), torch.isin(2, b))
    same(torch.isin(a.to(DEV), b.double().to(DEV)), torch.isin(a, b.double()))  # compared as f64
    same(torch.isin(a.to(DEV), torch.tensor([2.5, 3.0]).to(DEV)), torch.isin(a, torch.tensor([2.5, 3.0])))
    f = torch.tensor([1.0, float("nan"), -0.0, 2.5, float("inf")])
    g = torch.tensor([float("nan"), 0.0, 2.5, float("inf")])
    same(torch.isin(f.to(DEV), g.to(DEV)), torch.isin(f, g))
    for inv in (False, True):
        same(torch.isin(a.to(DEV), torch.empty(0, dtype=torch.long, device=DEV), invert=inv),
             torch.isin(a, torch.empty(0, dtype=torch.long), invert=inv))
        same(torch.isin(torch.empty(0, 3, dtype=torch.long, device=DEV), b.to(DEV), invert=inv),
             torch.isin(torch.empty(0, 3, dtype=torch.long), b, invert=inv))
    out = torch.empty(4, 3, dtype=torch.bool, device=DEV)
    assert torch.isin(a.to(DEV), b.to(DEV), out=out) is out
    same(out, torch.isin(a, b))


# sizes on both sides of lower/misc.c's ISIN_PAIRS (65536 pairs): every pair compared below, sorted test
# elements and a binary search above
@pytest.mark.parametrize("n,m", [(255, 256), (257, 256), (300, 1000), (1, 70000), (70000, 2), (3, 40000)])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float32, torch.bfloat16])
def test_isin_sizes_duplicates(dtype, n, m):
    torch.manual_seed(n + m)
    hi = 50 if dtype in (torch.uint8, torch.bfloat16) else 3 * m  # many duplicates, many misses
    a = torch.randint(0, hi, (n,)).to(dtype)
    b = torch.randint(0, hi, (m,)).to(dtype)
    au, bu = a.unique(), b.unique()  # assume_unique only where true (else PyTorch's answer is undefined)
    au, bu = au[torch.randperm(au.numel())], bu[torch.randperm(bu.numel())]
    for inv in (False, True):
        same(torch.isin(a.to(DEV), b.to(DEV), invert=inv), torch.isin(a, b, invert=inv))
        same(torch.isin(au.to(DEV), bu.to(DEV), invert=inv, assume_unique=True),
             torch.isin(au, bu, invert=inv, assume_unique=True))
    same(torch.isin(a.to(DEV)[::2], b.to(DEV)[1::3]), torch.isin(a[::2], b[1::3]))  # strided views
    same(torch.isin(a.to(DEV), b.to(DEV).max()), torch.isin(a, b.max()))  # Tensor_Scalar
    same(torch.isin(a.to(DEV), a.to(DEV)), torch.isin(a, a))  # every element found, incl. the largest
    for v in (0, int(a[0]), hi + 5):
        same(torch.isin(v, b.to(DEV)), torch.isin(v, b))  # Scalar_Tensor
        same(torch.isin(v, b.to(DEV), invert=True), torch.isin(v, b, invert=True))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("n,m", [(60, 90), (700, 500)])
def test_isin_nan_signed_zero_inf(dtype, n, m):
    torch.manual_seed(7)
    x = torch.randint(-20, 20, (n,)).to(dtype) / 4
    x[::7], x[1::11], x[2::13], x[3::17], x[4::19] = float("nan"), 0.0, -0.0, float("inf"), float("-inf")
    y = torch.randint(-20, 20, (m,)).to(dtype) / 4
    y[::5], y[1::9], y[2] = float("nan"), -0.0, float("-inf")
    for inv in (False, True):
        same(torch.isin(x.to(DEV), y.to(DEV), invert=inv), torch.isin(x, y, invert=inv))
        same(torch.isin(y.to(DEV), x.to(DEV), invert=inv), torch.isin(y, x, invert=inv))
        nan = torch.full((m,), float("nan"), dtype=dtype)  # NaN is in nothing, not even all-NaN
        same(torch.isin(x.to(DEV), nan.to(DEV), invert=inv), torch.isin(x, nan, invert=inv))
    same(torch.isin(x.to(DEV).view(-1, 10), y.to(DEV).view(10, -1).t()), torch.isin(x.view(-1, 10), y.view(10, -1).t()))


# ---------------------------------------------------------------- fused weight norm

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("shape,dim", [((6, 3, 5), 0), ((6, 3, 5), 2), ((7, 13), 0), ((7, 13), 1), ((1,), 0)])
def test_weight_norm_forward_backward(dtype, shape, dim):
    torch.manual_seed(4)
    v = torch.randn(*shape, dtype=dtype)
    gshape = [1] * len(shape)
    gshape[dim] = shape[dim]
    g = torch.randn(*gshape, dtype=dtype)
    w, n = torch._weight_norm_interface(v, g, dim)
    wt, nt = torch._weight_norm_interface(v.to(DEV), g.to(DEV), dim)
    tol = dict(atol=1e-2, rtol=1e-2) if dtype == torch.bfloat16 else {}
    assert nt.dtype == n.dtype and nt.shape == n.shape  # f32 norms for bf16, shaped like g
    torch.testing.assert_close(wt.cpu(), w, **tol)
    torch.testing.assert_close(nt.cpu(), n, **tol)
    gw = torch.randn_like(w)
    gv, gg = torch.ops.aten._weight_norm_interface_backward(gw, v, g, n, dim)
    gvt, ggt = torch.ops.aten._weight_norm_interface_backward(gw.to(DEV), v.to(DEV), g.to(DEV), nt, dim)
    torch.testing.assert_close(gvt.cpu(), gv, **tol)
    torch.testing.assert_close(ggt.cpu(), gg, **tol)


def test_weight_norm_parametrization_matches_cpu():
    # nn.utils.parametrizations.weight_norm on a grouped conv1d over dim 2 (wav2vec2's positional conv),
    # through autograd, fed a non-contiguous input
    torch.manual_seed(5)
    ref = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 6, 5, padding=2, groups=2), name="weight", dim=2)
    x = torch.randn(3, 11, 4).transpose(1, 2)
    res = {}
    for dev in ("cpu", DEV):
        m = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 6, 5, padding=2, groups=2), name="weight", dim=2)
        m.load_state_dict(ref.state_dict())
        m = m.to(dev)
        y = m(x.to(dev))
        (y * y).sum().backward()
        res[dev] = [y.detach().cpu()] + [p.grad.cpu() for p in m.parameters()]
    assert len(res[DEV]) == 4  # output, bias, original0 (g), original1 (v)
    for a, b in zip(res[DEV], res["cpu"]):
        torch.testing.assert_close(a, b)


def test_weight_norm_1d_norms_sized_by_meta_are_refused():
    # PyTorch's meta function sizes a 1-D v's norms [1] where the CPU kernel returns [n]; the device's
    # outputs are sized by the meta function, so it refuses (naming the op) rather than answer wrongly
    with pytest.raises(NotImplementedError, match="_weight_norm_interface"):
        torch._weight_norm_interface(torch.randn(9, device=DEV), torch.randn(9, device=DEV), 0)


def test_weight_norm_other_dims_decompose():
    # dims other than first/last go through PyTorch's composite (norm_except_dim), not the fused op
    v = torch.randn(4, 5, 6)
    g = torch.randn(1, 5, 1)
    torch.testing.assert_close(torch._weight_norm(v.to(DEV), g.to(DEV), 1).cpu(), torch._weight_norm(v, g, 1))



# ---------------------------------------------------------------- activations and small ops of training scripts
# (PReLU, GLU, Hardshrink layers, torch.cross, ShuffleNet's channel shuffle, angle of real tensors)

def _fwd_bwd(fn, *inputs, tol=None):
    """fn on cpu and tpu, forward and backward (random output gradient), compared"""
    tol = tol or {}
    outs, grads = {}, {}
    for dev in ("cpu", DEV):
        xs = [t.detach().to(dev).requires_grad_(t.is_floating_point()) for t in inputs]
        y = fn(*xs)
        gy = torch.randn(y.shape, generator=torch.Generator().manual_seed(12), dtype=y.dtype)
        y.backward(gy.to(dev))
        outs[dev] = y.detach().cpu()
        grads[dev] = [x.grad.cpu() for x in xs if x.requires_grad]
    torch.testing.assert_close(outs[DEV], outs["cpu"], **tol)
    for a, b in zip(grads[DEV], grads["cpu"]):
        torch.testing.assert_close(a, b, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prelu_glu_hardshrink_forward_backward(dtype):
    torch.manual_seed(6)
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else None
    x = torch.randn(3, 6, 5, 7, dtype=dtype).transpose(2, 3)  # non-contiguous
    w = torch.rand(6, dtype=dtype)
    _fwd_bwd(torch.nn.functional.prelu, x, w, tol=tol)
    _fwd_bwd(torch.nn.functional.prelu, x, torch.rand(1, dtype=dtype), tol=tol)
    _fwd_bwd(lambda t: torch.nn.functional.glu(t, dim=1), x, tol=tol)
    _fwd_bwd(lambda t: torch.nn.functional.glu(t, dim=-1), torch.randn(5, 9, 4, dtype=dtype), tol=tol)
    # hardshrink is a compare and a select: bit-exact in every dtype. PyTorch rounds lambd to x's dtype first
    # (bf16: 0.3 -> 0.30078125, which keeps +-0.30078125 inside the zeroed band). 45 elements: the NaN lies in
    # the CPU kernel's scalar tail (8- or 16-wide vectors), whose backward passes grad at NaN as ours does;
    # its vectorized f32 backward gives 0 there instead
    xs = torch.cat([torch.randn(36), torch.tensor([0.5, -0.5, 0.4999, 0.30078125, -0.30078125, 0.2998, 0.3,
                                                   float("nan"), float("inf")])]).to(dtype)
    for lambd in (0.5, 0.0, 1.3, 0.3):
        _fwd_bwd(lambda t, l=lambd: torch.nn.functional.hardshrink(t, l), xs, tol=dict(atol=0, rtol=0, equal_nan=True))
    # softshrink_backward rounds lambd to x's dtype as well (its forward does not); NaN excluded: PyTorch's
    # vectorized and scalar-tail softshrink_backward disagree there
    ys = xs[~xs.isnan()].detach()
    g = torch.full(ys.shape, 2.0, dtype=dtype)
    torch.testing.assert_close(torch.ops.aten.softshrink_backward(g.to(DEV), ys.to(DEV), 0.3).cpu(),
                               torch.ops.aten.softshrink_backward(g, ys, 0.3), atol=0, rtol=0)
    with pytest.raises(RuntimeError, match="Halving dimension must be even"):
        torch.nn.functional.glu(torch.randn(3, 5, device=DEV), dim=1)


def test_cross_channel_shuffle_angle():
    torch.manual_seed(7)
    a, b = torch.randn(4, 3, 5), torch.randn(1, 3, 5)
    _fwd_bwd(lambda p, q: torch.linalg.cross(p, q, dim=1), a, b)
    _fwd_bwd(lambda p, q: torch.cross(p, q, dim=-1), torch.randn(7, 3), torch.randn(7, 3))
    same(torch.linalg.cross(a.long().to(DEV), b.long().to(DEV), dim=1), torch.linalg.cross(a.long(), b.long(), dim=1))
    with pytest.raises(RuntimeError, match="must have length 3"):
        torch.linalg.cross(torch.randn(4, 2, device=DEV), torch.randn(4, 2, device=DEV))
    x = torch.randn(2, 12, 3, 5)
    same(torch.nn.functional.channel_shuffle(x.to(DEV), 3), torch.nn.functional.channel_shuffle(x, 3))
    same(torch.nn.ChannelShuffle(4)(x.to(DEV)[:, :, ::2]), torch.nn.ChannelShuffle(4)(x[:, :, ::2]))
    e = torch.tensor([-2.0, 0.0, -0.0, 3.0, float("nan"), float("-inf")])
    same(torch.angle(e.to(DEV)), torch.angle(e))
    same(torch.angle(torch.tensor([-3, 0, 4]).to(DEV)), torch.angle(torch.tensor([-3, 0, 4])))


@pytest.mark.parametrize("shape,k,d,p,s", [((2, 3, 7, 9), (3, 2), (1, 2), (1, 0), (2, 1)), ((3, 5, 6), 2, 1, 0, 1),
                                           ((1, 2, 10, 11), (3, 3), (2, 1), (2, 1), (3, 2)), ((2, 1, 4, 4), 4, 1, 0, 4),
                                           ((1, 1, 9, 9), (5, 5), 1, 2, 1)])
def test_unfold_fold_forward_backward(shape, k, d, p, s):
    # F.unfold = im2col, F.fold = col2im, each the other's backward; bitwise vs CPU
    torch.manual_seed(8)
    F = torch.nn.functional
    x = torch.randn(*shape)
    same(F.unfold(x.to(DEV), k, d, p, s), F.unfold(x, k, d, p, s))
    same(F.unfold(x.to(DEV).transpose(-1, -2), k, d, p, s), F.unfold(x.transpose(-1, -2), k, d, p, s))
    cols = F.unfold(x, k, d, p, s)
    same(F.fold(cols.to(DEV), shape[-2:], k, d, p, s), F.fold(cols, shape[-2:], k, d, p, s))
    _fwd_bwd(lambda t: F.unfold(t, k, d, p, s), x)
    _fwd_bwd(lambda t: F.fold(t, shape[-2:], k, d, p, s), cols)
    # bf16: the backward (col2im) adds up to kh kw values per pixel in f32 and rounds once; PyTorch's CPU adds
    # them in bf16, so compare both with the f32 computation on the same bf16 inputs
    xb = x.to(torch.bfloat16)
    gb = torch.randn(cols.shape).to(torch.bfloat16)
    xt = xb.to(DEV).requires_grad_()
    F.unfold(xt, k, d, p, s).backward(gb.to(DEV))
    ref = F.fold(gb.float(), shape[-2:], k, d, p, s)
    torch.testing.assert_close(xt.grad.cpu().float(), ref, atol=0, rtol=2 ** -8)  # one bf16 rounding


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf"), 3.0])
def test_embedding_renorm_and_max_norm_embedding(norm_type):
    torch.manual_seed(9)
    w = torch.randn(11, 5) * 2
    idx = torch.tensor([[1, 3, 3], [7, 0, 1]])
    a, b = w.clone(), w.to(DEV)
    torch.embedding_renorm_(a, idx, 1.5, norm_type)
    torch.embedding_renorm_(b, idx.to(DEV), 1.5, norm_type)
    torch.testing.assert_close(b.cpu(), a)
    assert torch.equal(b.cpu()[[2, 4, 5, 6, 8, 9, 10]], w[[2, 4, 5, 6, 8, 9, 10]])  # rows not named are untouched
    # odd sizes, random repeated ids (some rows below max_norm), a transposed (non-contiguous) table
    g = torch.Generator().manual_seed(17)
    w2 = torch.randn(7, 37, generator=g).t() * 0.9
    ids = torch.randint(0, 37, (23,), generator=g)
    a2, b2 = w2.clone(), w2.to(DEV)
    torch.embedding_renorm_(a2, ids, 1.5, norm_type)
    torch.embedding_renorm_(b2, ids.to(DEV), 1.5, norm_type)
    torch.testing.assert_close(b2.cpu(), a2)
    # nn.Embedding(max_norm=...) renorms the looked-up rows in place, then trains through them
    e = torch.nn.Embedding(11, 5, max_norm=1.0, norm_type=norm_type)
    et = torch.nn.Embedding(11, 5, max_norm=1.0, norm_type=norm_type)
    et.load_state_dict(e.state_dict())
    et = et.to(DEV)
    x = torch.tensor([[1, 2, 2], [5, 9, 0]])
    y, yt = e(x), et(x.to(DEV))
    (y * y).sum().backward()
    (yt * yt).sum().backward()
    torch.testing.assert_close(yt.cpu(), y)
    torch.testing.assert_close(et.weight.detach().cpu(), e.weight.detach())
    torch.testing.assert_close(et.weight.grad.cpu(), e.weight.grad)
