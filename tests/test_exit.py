"""A process that ends right after a backward on tpu exits cleanly (torch_tpu/__init__.py _drain_autograd_at_exit).

Without the exit-time drain, the autograd engine's tpu thread often released the last backward's Python objects while
the interpreter was finalizing; the thread then had to take the GIL, Python ended it with a forced unwind through a
noexcept destructor, and the process aborted with "terminate called without an active exception" (exit code -6;
about 1 run in 4 on the 2-core machine, with the scripts below)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

# backward() and autograd.grad() as a script's last statements: the engine's device thread drops the GraphTask
# (torch's stashed contextvars context, the returned gradients) just after the caller is woken
SCRIPTS = {
    "backward": """
        import torch
        w = torch.randn(301, 37, device="tpu", requires_grad=True)
        ids = torch.randint(0, 301, (100,)).to("tpu")
        torch.nn.functional.embedding_bag(ids, w, torch.arange(0, 100, 5).to("tpu")).sum().backward()
    """,
    "grad": """
        import torch
        x = torch.randn(64, 64, device="tpu", requires_grad=True)
        (g,) = torch.autograd.grad((x @ x).tanh().sum(), x)
    """,
}


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith("TORCH_TPU_") and k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}


def test_exit_right_after_backward_is_clean() -> None:
    # 8 runs of each, two at a time: the old failure rate (~1 in 4 per run) would show with near certainty
    procs = []
    for name, code in SCRIPTS.items():
        for _ in range(8):
            procs.append((name, subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=_env(),
                                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
            if len(procs) % 2 == 0:
                for _, p in procs[-2:]:
                    p.wait(timeout=300)
    for name, p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and "terminate called" not in err, f"{name}: exit {p.returncode}\n{err}"


def test_drain_runs_only_after_a_backward() -> None:
    code = """
        import torch, torch_tpu
        print(torch_tpu._C._drain_autograd_threads())  # no autograd thread has started: nothing to do
        x = torch.ones(3, device="tpu", requires_grad=True)
        (x * 2).sum().backward()
        print(torch_tpu._C._drain_autograd_threads(), x.grad.cpu().tolist())
    """
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=_env(), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n")[:2] == ["False", "True [2.0, 2.0, 2.0]"]
