"""index_select / embedding rows against PyTorch CPU for every row width the host kernel's fixed-size moves take
(8, 16, 32, 64, 128 bytes) and odd ones, in each dtype, with repeated, edge and strided ids (kernels.c
tpu_host_k_index_select's contiguous-rows path), bit for bit."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_tpu  # noqa: F401

pytestmark = pytest.mark.skipif(not torch.tpu.is_available(), reason="no tpu device")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.float64])
@pytest.mark.parametrize("width_bytes", [8, 16, 32, 64, 128, 24, 200])
def test_index_select_rows(dtype, width_bytes):
    g = torch.Generator().manual_seed(width_bytes)
    es = torch.empty((), dtype=dtype).element_size()
    d = max(1, width_bytes // es)
    n = 37
    w = (torch.randn(n, d, generator=g) * 100).to(dtype)
    ids = torch.randint(0, n, (131,), generator=g)
    ids[:3] = torch.tensor([0, n - 1, 0])
    for idx in (ids, ids[::2]):  # contiguous and strided ids
        got = w.to("tpu").index_select(0, idx.to("tpu")).cpu()
        assert torch.equal(got, w.index_select(0, idx))
    if dtype.is_floating_point:
        got = F.embedding(ids.to("tpu"), w.to("tpu")).cpu()
        assert torch.equal(got, F.embedding(ids, w))
