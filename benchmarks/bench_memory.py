"""Peak memory of one training step of each example (examples/<name>/train.py), tpu vs PyTorch CPU.

Issue 3 target: the peak device memory of a training step (torch.tpu.max_memory_allocated) is at most
1.2x PyTorch CPU's peak for the same step.

What is measured. Each example's own `train()` runs 2 steps; a hook on common.LossLog (called after
`opt.step()` and `loss.item()` of every step) marks the step boundaries, so the measured step is step 2,
which starts with the model, its gradients-to-be and the optimizer state already allocated, and
includes everything a step does: batch to device, forward (optionally bf16 autocast), backward,
gradient clipping, optimizer step.

- tpu: `torch.tpu.synchronize(); torch.tpu.reset_peak_memory_stats()` at the start of the step,
  `torch.tpu.max_memory_allocated()` after its end (allocator blocks, rounded to the allocator's size
  classes: 64 B up to 256 B, 512 B under 1 MiB, 1/8 of the power of two above).
- CPU: PyTorch has no CPU peak counter, so `StorageTracker` below counts it: the baseline is the
  bytes of every distinct storage of the CPU tensors alive at the start of the step (found with
  gc.get_objects(): parameters, gradients, optimizer state, whatever the loop still holds); during
  the step (less the CPU tensors that the tpu run also holds on the host at that point, matched by
  shape and dtype: the dataset tensors some examples keep on the CPU); during the step a TorchDispatchMode sees every op (forward, autograd backward, optimizer) and, for each
  output whose storage is new, adds storage.nbytes() and registers weakref.finalize on the output
  tensor to subtract them when the last tracked tensor on that storage dies. The peak of that count
  is CPU's peak of live tensor bytes. It does not see scratch buffers CPU kernels allocate
  internally (none outlive their op), so it is a lower bound of the CPU allocator's peak, which
  makes the ratio conservative. `--validate` checks it on toy programs with a known peak
  (including activations saved for backward whose Python tensors are gone).
- The same tracker also runs on the tpu step ("tpu tensors"): live tensor bytes without the
  allocator's rounding, which separates rounding from genuinely extra live tensors.
- Executor scratch (`torch.tpu.memory_stats()["scratch_bytes.all.peak"]`): device memory the host
  executor takes outside the allocator for values inside one executable's run (a fused graph's or a
  lowering's intermediates) and the GEMM/convolution packing and im2col workspaces. It is not in max_memory_allocated, as CPU kernels' internal buffers are
  not in the CPU count; it is printed beside it, with the ratio of (allocator peak + scratch peak) /
  CPU peak, an upper bound of the two together. "cached" is what the executor's block cache keeps
  between runs at the step's end (reused by the next run, not in use).

Usage: python benchmarks/bench_memory.py [--tiny] [--only mingpt,llama] [--amp] [--validate]
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import sys
import warnings
import weakref

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("bench_common", os.path.join(HERE, "common.py"))
_bench_common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bench_common)
machine = _bench_common.machine
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))

NAMES = ["mingpt", "llama", "qwen", "resnet", "unet", "dlrm"]
MiB = 1024.0 * 1024.0


class StorageTracker(TorchDispatchMode):
    """Counts live tensor-storage bytes on one device type (see the module docstring)."""

    def __init__(self, device_type: str = "cpu", diag: bool = False) -> None:
        super().__init__()
        self.device_type = device_type
        self.diag = diag  # keep what produced each live storage and the live set at the peak
        self.what: dict[int, tuple] = {}  # storage data_ptr -> (op, dtype, shape) (diag only)
        self.at_peak: list[tuple] = []
        self.func = None
        self.live: dict[int, list[int]] = {}  # storage data_ptr -> [nbytes, tracked tensors]
        self.base = 0
        self.cur = 0
        self.peak = 0

    def set_baseline(self, exclude: list[tuple] | None = None) -> None:
        """Bytes of the distinct storages of every live tensor on the device type (gc scan), less
        one storage per (shape, dtype, nbytes) entry of `exclude` (host data the tpu run keeps on
        the CPU too, such as a dataset tensor)."""
        seen: dict[int, int] = {}
        sig: dict[int, tuple] = {}
        with warnings.catch_warnings():  # isinstance() on some module objects warns about deprecations
            warnings.simplefilter("ignore")
            objs = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
        for o in objs:
            try:
                if o.device.type == self.device_type and not o.is_meta:
                    s = o.untyped_storage()
                    seen[s.data_ptr()] = s.nbytes()
                    sig[s.data_ptr()] = (tuple(o.shape), o.dtype, s.nbytes())
            except Exception:  # tensors without storage (subclasses, fakes)
                continue
        seen.pop(0, None)
        self.host_sigs = [sig[k] for k in seen]
        for e in exclude or []:
            for k in list(seen):
                if sig[k] == e:
                    del seen[k]
                    break
        self.base = sum(seen.values())
        self.cur = self.peak = self.base
        self.known = set(seen)  # storages counted in the baseline are never counted again

    def _release(self, key: int) -> None:
        e = self.live.get(key)
        if e is None:
            return
        e[1] -= 1
        if e[1] == 0:
            self.cur -= e[0]
            del self.live[key]

    def _track(self, t: torch.Tensor) -> None:
        if t.device.type != self.device_type:
            return
        s = t.untyped_storage()
        key = s.data_ptr()
        if key == 0 or key in self.known:
            return
        e = self.live.get(key)
        if e is None:
            e = self.live[key] = [s.nbytes(), 0]
            self.cur += e[0]
            if self.diag:
                self.what[key] = (str(self.func), str(t.dtype).replace("torch.", ""), tuple(t.shape))
                if self.cur > self.peak:
                    self.at_peak = [(v[0],) + self.what[k] for k, v in self.live.items()]
            self.peak = max(self.peak, self.cur)
        e[1] += 1
        weakref.finalize(t, self._release, key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.func = func
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._track(t)
        return out


def _import_examples_common():
    sys.modules.pop("common", None)  # run_all.py may have imported benchmarks/common.py as `common`
    import common as examples_common  # examples/common.py (first on sys.path)
    return examples_common


def measure_step(ex, name: str, device: str, amp: bool, tiny: bool, track: bool,
                 exclude: list[tuple] | None = None, diag: bool = False) -> dict:
    """Peak bytes of step 2 of example `name` on `device` (see the module docstring). On tpu,
    res["host"] lists the CPU tensors alive at the step start (excluded from CPU's baseline)."""
    train = ex.import_example(name).train
    res: dict[str, float] = {}
    state: dict[str, object] = {"step": 0, "tracker": None}
    orig = ex.LossLog.__call__

    def hook(self, step, loss):
        orig(self, step, loss)
        state["step"] += 1
        if state["step"] == 1:  # start of step 2: model + optimizer state exist
            gc.collect()
            if device.startswith("tpu"):
                torch.tpu.synchronize()
                res["base_alloc"] = torch.tpu.memory_allocated()
                host = StorageTracker("cpu")
                host.set_baseline()
                res["host"] = host.host_sigs
                torch.tpu.reset_peak_memory_stats()
                res["scratch_cached_start"] = torch.tpu.memory_stats()["scratch_bytes.cached"]
            if track:
                tr = StorageTracker(torch.device(device).type, diag)
                tr.set_baseline(exclude)
                tr.__enter__()
                state["tracker"] = tr
        elif state["step"] == 2:
            tr = state["tracker"]
            if tr is not None:
                tr.__exit__(None, None, None)
                res["base_tensors"], res["peak_tensors"] = tr.base, tr.peak
                res["at_peak"] = tr.at_peak
            if device.startswith("tpu"):
                torch.tpu.synchronize()
                res["peak_alloc"] = torch.tpu.max_memory_allocated()
                st = torch.tpu.memory_stats()
                res["peak_scratch"] = st["scratch_bytes.all.peak"]
                res["scratch_cached"] = st["scratch_bytes.cached"]

    ex.LossLog.__call__ = hook
    try:
        train(device=device, steps=2, amp=amp, tiny=tiny, log=None)
    finally:
        ex.LossLog.__call__ = orig
    return res


def validate() -> None:
    """The tracker on toy programs whose peak is known."""
    n = 1 << 20  # 4 MiB of f32
    for dev in ["cpu"] + (["tpu"] if hasattr(torch, "tpu") and torch.tpu.is_available() else []):
        a = torch.ones(n, device=dev)
        gc.collect()
        tr = StorageTracker(torch.device(dev).type)
        tr.set_baseline()
        with tr:
            b = a * 2
            c = b + 1
            del b
            d = c.sum()
            del c, d
        assert tr.base >= 4 * n and tr.peak - tr.base == 8 * n, (tr.base, tr.peak)  # b and c live together
        # activations saved for backward (their Python tensors deleted) still count; the peak is at
        # the start of backward: x, w (baseline) + h = x @ w, e = exp(h) (both saved) + grad buffers
        x = torch.ones(256, 1024, device=dev, requires_grad=True)  # 1 MiB
        w = (torch.ones(1024, 1024, device=dev) / 1024).requires_grad_()  # 4 MiB
        gc.collect()
        tr = StorageTracker(torch.device(dev).type)
        tr.set_baseline()
        with tr:
            h = x @ w  # 1 MiB; mm saves x and w, not h
            e = h.exp()  # 1 MiB, saved
            fwd_peak = tr.peak - tr.base  # h and e
            del h
            gc.collect()
            live_fwd = tr.cur - tr.base  # e
            loss = e.sum()
            del e
            gc.collect()
            saved = tr.cur - tr.base
            loss.backward()
        print(f"validate {dev}: forward peak {fwd_peak / MiB:.2f} MiB above baseline (expected 2: h, e); "
              f"after del h {live_fwd / MiB:.2f} (expected 1: e); after del e {saved / MiB:.4f} (expected 1: e saved "
              f"by autograd, + the loss scalar); step peak {(tr.peak - tr.base) / MiB:.2f}")
        assert fwd_peak == 2 * MiB and live_fwd == 1 * MiB, (fwd_peak, live_fwd)
        assert MiB <= saved <= MiB + 512, "activations saved by autograd must stay counted"
    print("validate: ok")


def print_diag(tpu: list[tuple], cpu: list[tuple]) -> None:
    """MiB live at each device's peak (storages created during the step), by (op, dtype)."""
    groups: dict[tuple, list[float]] = {}
    for k, rows in enumerate((tpu, cpu)):
        for nbytes, func, dt, _shape in rows:
            groups.setdefault((func.split(".default")[0], dt), [0.0, 0.0])[k] += nbytes / MiB
    print(f"    {'op':40s} {'dtype':9s} {'tpu MiB':>8s} {'cpu MiB':>8s}")
    for (func, dt), (a, b) in sorted(groups.items(), key=lambda kv: -abs(kv[1][0] - kv[1][1]))[:25]:
        print(f"    {func:40s} {dt:9s} {a:8.2f} {b:8.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--amp", action="store_true", help="also measure bf16 autocast")
    ap.add_argument("--only", default="")
    ap.add_argument("--validate", action="store_true")
    ap.add_argument("--diag", action="store_true",
                    help="print the step's live tensors at the peak, grouped by (op, dtype), tpu vs CPU")
    args = ap.parse_args()
    validate()
    if args.validate:
        return
    ex = _import_examples_common()
    print("machine:", machine())
    names = [n for n in NAMES if not args.only or n in args.only.split(",")]
    for name in names:
        for amp in ((False, True) if args.amp else (False,)):
            tag = "bf16" if amp else "f32 "
            try:
                tpu = measure_step(ex, name, "tpu", amp, args.tiny, track=True, diag=args.diag)
                cpu = measure_step(ex, name, "cpu", amp, args.tiny, track=True, exclude=tpu["host"], diag=args.diag)
            except Exception as e:  # an op not lowered yet: say which
                print(f"{name:7s} {tag}: not measured ({type(e).__name__}: {str(e).splitlines()[0][:120]})")
                continue
            ratio = tpu["peak_alloc"] / cpu["peak_tensors"]
            ratio_s = (tpu["peak_alloc"] + tpu["peak_scratch"]) / cpu["peak_tensors"]
            print(f"{name:7s} {tag}: cpu peak {cpu['peak_tensors'] / MiB:8.2f} MiB (state {cpu['base_tensors'] / MiB:7.2f})"
                  f" | tpu max_memory_allocated {tpu['peak_alloc'] / MiB:8.2f} MiB (state {tpu['base_alloc'] / MiB:7.2f})"
                  f" | tpu tensors {tpu['peak_tensors'] / MiB:8.2f} MiB | ratio {ratio:5.2f}x"
                  f" {'ok' if ratio <= 1.2 else 'ABOVE 1.2x'}"
                  f" | scratch peak {tpu['peak_scratch'] / MiB:6.2f} MiB (cached {tpu['scratch_cached'] / MiB:6.2f})"
                  f" | (alloc + scratch) / cpu {ratio_s:5.2f}x")
            if args.diag:
                print_diag(tpu["at_peak"], cpu["at_peak"])


if __name__ == "__main__":
    main()
