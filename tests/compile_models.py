"""The example models (examples/<name>/train.py) in reduced configurations, for tests/test_compile.py and
benchmarks/bench_compile.py: build(name) -> (model on the CPU in train mode, inputs on the CPU, loss(output))."""
from __future__ import annotations
import dataclasses
import sys
from pathlib import Path
import torch
import torch.nn.functional as F
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
import common  # noqa: E402  (examples/common.py)

EXAMPLES = ["mingpt", "llama", "qwen", "resnet", "unet", "dlrm"]

def build(name: str, batch: int | None = None, seq: int | None = None, seed: int = 0, size: int | None = None):
    """Same seed -> same weights and data. batch / seq (GPT, Llama, Qwen) / size (ResNet, UNet images) override
    the reduced configuration's defaults."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    ex = common.import_example(name)
    if name == "mingpt":
        cfg = dataclasses.replace(ex.TINY, vocab=40)
        model = ex.GPT(cfg)
        T = seq or cfg.block
        data = torch.randint(0, cfg.vocab, (batch or 4, T + 1), generator=g)
        inputs = (data[:, :-1].contiguous(),)
        tgt = data[:, 1:].reshape(-1)
        loss = lambda out: F.cross_entropy(out.reshape(-1, cfg.vocab), tgt.to(out.device))
    elif name in ("llama", "qwen"):
        cfg = ex.TINY
        model = (ex.llama.Transformer if name == "qwen" else ex.Transformer)(cfg)
        T = seq or cfg.max_seq // 2
        data = torch.randint(0, cfg.vocab, (batch or 4, T + 1), generator=g)
        inputs = (data[:, :-1].contiguous(),)
        tgt = data[:, 1:].reshape(-1)
        loss = lambda out: F.cross_entropy(out.reshape(-1, cfg.vocab), tgt.to(out.device))
    elif name == "resnet":
        model = ex.ResNet18(4)
        x, y = ex.make_images(batch or 4, size or 16, g)
        inputs = (x,)
        loss = lambda out: F.cross_entropy(out, y.to(out.device))
    elif name == "unet":
        model = ex.UNet(ch=8, groups=4)
        x = ex.make_images(batch or 2, size or 16, g)
        t = torch.randint(0, 1000, (x.shape[0],), generator=g)
        noise = torch.randn(x.shape, generator=g)
        inputs = (x, t)
        loss = lambda out: F.mse_loss(out, noise.to(out.device))
    elif name == "dlrm":
        cfg = ex.TINY
        model = ex.DLRM(cfg)
        dense, bags, clicks = ex.make_batch(cfg, batch or 8, 0, seed)
        inputs = (dense, bags)
        loss = lambda out: F.binary_cross_entropy_with_logits(out, clicks.to(out.device))
    else:
        raise ValueError(f"unknown example {name!r}; one of {EXAMPLES}")
    model.train()
    return model, inputs, loss

def to(x, device):
    """x (a tensor or nested tuples/lists of them) on `device`."""
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(to(v, device) for v in x)
    return x
