"""Step groups (TORCH_TPU_EXEC_GROUPS): the host executor runs independent steps of a compiled graph side by side,
one step per pool thread. Only which thread runs a kernel changes, so a compiled training step must give the same
bits with groups on and off. The step scheduler (TORCH_TPU_EXEC_SCHED, drivers/host/exec_sched.c) reorders the
steps so that more of them are consecutive and independent: every op still computes from the same operands, so the
same bits with it on and off too. Each side runs in its own process (the switches are read once) with two pool
threads. (Bits across thread counts are not compared here: some kernels size their blocks by the pool's thread
count.)"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Builds one example model (bench_compile's configuration), runs compiled training steps (forward + loss + backward
# + optimizer step, each torch.compile(backend="tpu")), prints a sha256 of the loss values, the parameters, the
# gradients and the optimizer state.
CHILD = r"""
import hashlib, sys
import torch, torch_tpu
sys.path.insert(0, {tests!r})
import compile_models
name, steps = {name!r}, {steps}
model, inputs, loss_fn = compile_models.build(name, **{cfg!r})
model = model.to("tpu")
x = compile_models.to(inputs, "tpu")
if name == "resnet":
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
else:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=True)
fwd = torch.compile(model, backend="tpu")
opt_step = torch.compile(opt.step, backend="tpu")
h = hashlib.sha256()
for _ in range(steps):
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(fwd(*x))
    loss.backward()
    opt_step()
    h.update(loss.detach().cpu().numpy().tobytes())
for p in model.parameters():
    h.update(p.detach().cpu().numpy().tobytes())
    h.update(p.grad.detach().cpu().numpy().tobytes())
for st in opt.state.values():
    for k in sorted(st):
        if torch.is_tensor(st[k]):
            h.update(st[k].detach().cpu().numpy().tobytes())
print("DIGEST", h.hexdigest(), torch_tpu.metrics()["group_steps"])
"""

CONFIGS = {
    "unet": dict(batch=8, size=16),
    "resnet": dict(batch=16, size=16),
    "mingpt": dict(batch=16, seq=16),
}


def _digest(name: str, groups: str, threads: str, steps: int = 3, sched: str = "1") -> tuple[str, int]:
    """(sha256 of the run's results, steps run in step groups). No disk cache: it keeps the order an executable
    was planned in, so a child would load the other child's order."""
    env = dict(os.environ, TORCH_TPU_EXEC_GROUPS=groups, TORCH_TPU_NUM_THREADS=threads, TORCH_TPU_EXEC_SCHED=sched,
               TORCH_TPU_CACHE_DIR="0")
    code = CHILD.format(tests=str(ROOT / "tests"), name=name, steps=steps, cfg=CONFIGS[name])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("DIGEST ")]
    assert lines, done.stdout[-2000:]
    _, digest, group_steps = lines[-1].split()
    return digest, int(group_steps)


@pytest.mark.parametrize("name", ["unet", "resnet", "mingpt"])
def test_compiled_step_same_bits_with_and_without_groups(name):
    on, grouped = _digest(name, "1", "2")
    off, grouped_off = _digest(name, "0", "2")
    assert grouped > 0 and grouped_off == 0, (grouped, grouped_off)  # the "on" run did run step groups
    assert on == off


@pytest.mark.parametrize("name", ["unet", "resnet", "mingpt"])
def test_compiled_step_same_bits_with_and_without_scheduler(name):
    on, grouped = _digest(name, "1", "2", sched="1")
    off, grouped_off = _digest(name, "1", "2", sched="0")
    # the scheduled backward graphs run more of their steps in groups (a scheduler that stops reordering fails this)
    assert grouped > grouped_off > 0, (grouped, grouped_off)
    assert on == off
