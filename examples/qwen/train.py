"""Trains a tiny Qwen-2 style decoder: the Llama model with QKV bias, tied embeddings and a larger RoPE base.

    python examples/qwen/train.py --device tpu [--steps N] [--amp] [--tiny] [--untied]
    python examples/qwen/train.py --device cpu            # same data, same initial weights

Qwen-2 and Llama agree on everything else (RMSNorm, rotary embeddings, SwiGLU, grouped-query attention through
F.scaled_dot_product_attention, KV-cache decoding), so this script imports the model and the training loop from
examples/llama/train.py and only changes the configuration.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import common  # noqa: E402  (examples/common.py)

llama = common.import_example("llama")

# Qwen-2's differences from Llama: biases on q/k/v, tied input/output embeddings (the small Qwen-2 models tie
# them), RoPE base 1e6, RMSNorm eps 1e-6.
QWEN = dict(qkv_bias=True, tie_embeddings=True, rope_theta=1_000_000.0, norm_eps=1e-6)
CONFIG = dataclasses.replace(llama.Config(), **QWEN)
TINY = dataclasses.replace(llama.TINY, **QWEN)


def train(device="cpu", steps=None, amp=False, tiny=False, seed=0, overfit=False, log=print, untied=False,
          **kw) -> list[float]:
    cfg = TINY if tiny else CONFIG
    if untied:
        cfg = dataclasses.replace(cfg, tie_embeddings=False)
    return llama.train_lm(cfg, device, steps, amp, seed, overfit, log=log, name="qwen", **kw)


def main(argv: list[str] | None = None) -> int:
    def extra(p):
        p.add_argument("--untied", action="store_true", help="separate input and output embeddings")
    return common.run_main(train, __doc__, argv, extra)


if __name__ == "__main__":
    sys.exit(main())
