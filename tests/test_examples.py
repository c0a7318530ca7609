"""The example training scripts (examples/<name>/train.py) on tpu vs cpu.

For each example, in-process and in its tiny configuration:
- 5 f32 training steps on cpu and on tpu from the same seed: the losses agree within 1e-3 relative and no op
  falls back to the CPU;
- a few steps under torch.autocast("tpu", dtype=torch.bfloat16) on one fixed batch: the loss decreases;
- the command line (`main`) runs a couple of steps and reports no fallback.
An example whose ops are not all lowered yet is skipped, naming the missing ops.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import torch_tpu

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import common  # noqa: E402  (examples/common.py)

# The lowerings each example needs beyond the elementwise/reduce/matmul/index core (exact op names as the glue
# passes them to tpu_op_run); an example is skipped while any of them is missing.
NEEDS: dict[str, list[str]] = {
    "mingpt": ["aten::native_layer_norm", "aten::native_layer_norm_backward", "aten::embedding_dense_backward",
               "aten::gelu.out", "aten::tril.out"],
    "llama": ["aten::embedding_dense_backward", "aten::silu.out", "aten::rsqrt.out", "aten::where.self",
              "aten::tril.out"],
    "qwen": ["aten::embedding_dense_backward", "aten::silu.out", "aten::rsqrt.out", "aten::where.self",
             "aten::tril.out"],
    "resnet": ["aten::convolution_overrideable", "aten::convolution_backward_overrideable",
               "aten::native_batch_norm", "aten::native_batch_norm_backward",
               "aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward"],
    "unet": ["aten::convolution_overrideable", "aten::convolution_backward_overrideable",
             "aten::native_group_norm", "aten::native_group_norm_backward",
             "aten::upsample_nearest2d", "aten::upsample_nearest2d_backward",
             "aten::upsample_bilinear2d", "aten::upsample_bilinear2d_backward"],
    "dlrm": ["aten::_embedding_bag", "aten::_embedding_bag_backward", "aten::tril_indices"],
}

# Per-example arguments for the tests: small, and well-conditioned enough that 5 f32 steps stay within 1e-3
# (ResNet's ReLU/max-pool routing makes a high learning rate amplify rounding differences step by step).
MATCH_KW: dict[str, dict] = {
    "mingpt": {}, "llama": {}, "qwen": {}, "resnet": {"lr": 0.01, "batch": 16}, "unet": {}, "dlrm": {},
}
AMP_KW: dict[str, dict] = {
    "mingpt": {"steps": 8}, "llama": {"steps": 8}, "qwen": {"steps": 8}, "resnet": {"steps": 6, "lr": 0.02},
    "unet": {"steps": 6}, "dlrm": {"steps": 8},
}
EXAMPLES = list(NEEDS)


def _gate(name: str):
    if not torch.tpu.is_available():
        return pytest.mark.skip(reason="no tpu device")
    missing = [op for op in NEEDS[name] if not torch_tpu._C._op_supported(op)]
    return pytest.mark.skipif(bool(missing), reason=f"{name} needs {', '.join(missing)} (not lowered yet)")


def _params(*names: str):
    return [pytest.param(n, marks=[pytest.mark.slow, _gate(n)], id=n) for n in names]


def _fallbacks() -> int:
    return torch_tpu.metrics()["fallback_ops"]


@pytest.mark.parametrize("name", _params(*EXAMPLES))
def test_example_matches_cpu(name: str) -> None:
    example = common.import_example(name)
    kw = dict(steps=5, tiny=True, seed=0, log=None, **MATCH_KW[name])
    cpu = example.train("cpu", **kw)
    before = _fallbacks()
    tpu = example.train("tpu", **kw)
    assert _fallbacks() == before, torch_tpu.metrics()["fallback_counts"]
    assert len(cpu) == len(tpu) == 5
    torch.testing.assert_close(torch.tensor(tpu), torch.tensor(cpu), rtol=1e-3, atol=0)


@pytest.mark.parametrize("name", _params(*EXAMPLES))
def test_example_amp_loss_decreases(name: str) -> None:
    example = common.import_example(name)
    before = _fallbacks()
    losses = example.train("tpu", tiny=True, seed=0, log=None, amp=True, overfit=True, **AMP_KW[name])
    assert _fallbacks() == before, torch_tpu.metrics()["fallback_counts"]
    assert all(torch.isfinite(torch.tensor(losses))), losses
    assert losses[-1] < losses[0], losses


@pytest.mark.parametrize("name", _params("mingpt", "llama", "dlrm"))
def test_example_command_line(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    example = common.import_example(name)
    assert example.main(["--device", "tpu", "--tiny", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "step    2 | loss" in out and "cpu fallbacks 0" in out, out


@pytest.mark.parametrize("name", _params("resnet"))
def test_resnet_channels_last_on_tpu(name: str) -> None:
    example = common.import_example(name)
    kw = dict(steps=2, tiny=True, seed=0, log=None, lr=0.01, batch=4, size=8, channels_last=True)
    torch.testing.assert_close(torch.tensor(example.train("tpu", **kw)), torch.tensor(example.train("cpu", **kw)),
                               rtol=1e-3, atol=0)


def test_mingpt_corpus_is_local() -> None:
    example = common.import_example("mingpt")
    text = example.load_corpus(5000)
    assert len(text) == 5000 and "torch_tpu" in text
