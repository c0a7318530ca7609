"""Training-step time of tiny Hugging Face transformers models on PyTorch CPU vs tpu, same process.

The models are tests/test_hf_models.py's (random weights from tiny configs, dropout off); one step =
forward + backward + AdamW step + loss.item(), on one fixed batch. Per side: the median of `--steps` steps
after 2 warm-up steps (first-step compiles drop out), wall time and process CPU time (all threads of the
process: with one thread per side, the CPU time is the work each side does). Sides alternate for `--rounds`
rounds (cpu, tpu, cpu, ...), so a slow spell of a shared machine hits both alike; printed: each side's median
step, and the median round's speed ratio cpu/tpu (higher is better) with the rounds' spread.
Usage: TORCH_TPU_NUM_THREADS=1 python benchmarks/bench_hf.py [--only llama,bert] [--rounds 3] [--amp]
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
from common import settle  # noqa: E402  (benchmarks/common.py)

DEFAULT = ["gpt2", "llama", "qwen2", "mixtral", "bert", "t5", "vit"]


def step_times(model0, batch, device: str, steps: int, amp: bool) -> tuple[float, float]:
    """Median wall and process-CPU seconds per training step after 2 warm-up steps."""
    model = copy.deepcopy(model0).to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    b = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
    walls, cpus = [], []
    settle()
    for i in range(steps + 2):
        w0, c0 = time.perf_counter(), time.process_time()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
            loss = model(**b).loss
        loss.backward()
        opt.step()
        loss.item()
        if i >= 2:
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--amp", action="store_true", help="bf16 autocast on both sides (the CPU's bf16 is slow)")
    args = ap.parse_args()
    try:
        import test_hf_models as hf  # tests/test_hf_models.py: the model zoo (skips itself without transformers)
    except BaseException as e:  # pytest.skip raises a BaseException subclass
        print(f"bench_hf: skipped ({type(e).__name__}: {e})")
        return
    if os.environ.get("TORCH_TPU_NUM_THREADS"):  # the same thread count on both sides
        torch.set_num_threads(int(os.environ["TORCH_TPU_NUM_THREADS"]))
    import importlib.util  # benchmarks/common.py by path: run_all.py may have `common` = examples/common.py loaded
    spec = importlib.util.spec_from_file_location("bench_common", os.path.join(HERE, "common.py"))
    bench_common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench_common)
    machine = bench_common.machine
    print("machine:", machine(), f"| torch threads {torch.get_num_threads()}",
          f"| TORCH_TPU_NUM_THREADS={os.environ.get('TORCH_TPU_NUM_THREADS', '(cores)')}")
    names = args.only.split(",") if args.only else DEFAULT
    print(f"{'model':12s} {'params':>8s} {'cpu ms':>8s} {'tpu ms':>8s} {'cpu/tpu wall':>22s} {'cpu/tpu cpu-time':>18s}")
    for name in names:
        model, batch = hf._make(name)
        nparam = sum(p.numel() for p in model.parameters())
        cw, tw, cc, tc = [], [], [], []
        for _ in range(args.rounds):
            w, c = step_times(model, batch, "cpu", args.steps, args.amp)
            cw.append(w); cc.append(c)
            w, c = step_times(model, batch, "tpu", args.steps, args.amp)
            tw.append(w); tc.append(c)
        rw = [c / t for c, t in zip(cw, tw)]
        rc = [c / t for c, t in zip(cc, tc)]
        spread = f"({min(rw):.2f}-{max(rw):.2f})" if len(rw) > 1 else ""
        print(f"{name:12s} {nparam:8d} {1e3 * statistics.median(cw):8.2f} {1e3 * statistics.median(tw):8.2f} "
              f"{statistics.median(rw):8.2f}x {spread:>13s} {statistics.median(rc):17.2f}x", flush=True)


if __name__ == "__main__":
    main()
