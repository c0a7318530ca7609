"""Steady-state training-step time: torch.compile(backend="tpu") vs eager tpu, and vs torch.compile(backend=
"inductor") on PyTorch CPU, same process, same models (tests/compile_models.py: the example models in their
reduced configurations, with a larger batch).

A step is zero_grad + forward + loss + backward + optimizer step (AdamW; SGD with momentum for ResNet); in the
compiled variants both the model and `opt.step` go through torch.compile (compiled tpu: AdamW(capturable=True),
so its step counts live on the device and the optimizer graph can be captured). Times are medians after warm-up (the
compiles happen in the warm-up). Prints ms per step and the ratios (higher = compiled tpu faster); issue 4's
targets: compiled/eager tpu >= 1.5x on GPT/Llama, >= 1.2x on ResNet/UNet; compiled tpu / inductor CPU >= 1.0x.

The default mode's tpu speedup columns come from `--pairs P` (default 5) alternating rounds of `--repeat` synchronized
steps, the eager and compiled steps that measure() built and warmed (eager round, compiled round, ...; medians of the
rounds' ratios, their spread and each pair's core mode printed after the row: "modes NNF: near 2 1.61x, far 1 1.20x",
N near / F far / M mixed, see benchmarks/common.py; TORCH_TPU_BENCH_MODE=near|far keeps one mode's pairs), so a
slow spell of the shared machine hits both modes alike; the single-run medians of each mode (before session 9 the
speedup was their ratio: 0.59-1.17x for the same build minutes apart under load) are still printed as the ms
columns. `--pairs 0` restores the single-run ratio.

Also printed: the same ratio in process CPU time per step (all threads; less sensitive to other jobs on the machine
than wall time), that CPU time split into host threads (Python + autograd) and the device's worker threads, and the
tpu peak memory of one steady-state step, eager vs compiled (issue 4: compiled <= eager).

`--rounds R` (tpu only): builds eager and compiled once per model and runs R alternating rounds (eager round,
compiled round, ...) of `--repeat` synchronized steps each, so a slow spell of a shared machine hits both modes alike;
prints each mode's median step time and per-thread CPU per step (host, device) over the rounds, the median of the
rounds' compiled/eager ratios and their spread. Use it (with TORCH_TPU_NUM_THREADS / torch.set_num_threads via
`--threads`) on a noisy machine.

Usage: python benchmarks/bench_compile.py [--only mingpt,llama] [--no-inductor] [--repeat N] [--whole-step]
       [--no-reinplace] [--with-loss] [--rounds R] [--threads T] [--autograd-caller-thread]
"""
from __future__ import annotations

import argparse
import copy
import functools
import importlib.util
import os
import shutil
import sys
import threading
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("bench_common", os.path.join(HERE, "common.py"))
_bench_common = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bench_common)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
sys.modules.pop("common", None)  # run_all.py may have imported benchmarks/common.py as `common`
import compile_models  # noqa: E402  (tests/compile_models.py)

import torch_tpu  # noqa: E402
from torch_tpu import _compile  # noqa: E402

# --autograd-caller-thread: backward() runs on the calling thread, as it always does for CPU tensors (PyTorch's
# engine otherwise hands a tpu backward to its device thread pt_autograd_0 and back: two thread wake-ups per step)
CALLER_THREAD_BACKWARD = False

# name: build() overrides (bigger batches than the tests use)
CONFIGS = {
    "mingpt": dict(batch=16, seq=16),
    "llama": dict(batch=16, seq=8),
    "qwen": dict(batch=16, seq=8),
    "resnet": dict(batch=16, size=16),
    "unet": dict(batch=8, size=16),
    "dlrm": dict(batch=128),
}


def make_step(name: str, device: str, backend: str | None, whole_step: bool = False, reinplace: bool = True,
              with_loss: bool = False):
    model, inputs, loss_fn = compile_models.build(name, **CONFIGS[name])
    model = model.to(device)
    x = compile_models.to(inputs, device)
    if name == "resnet":
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        # compiled: capturable=True keeps AdamW's step counts on the device, so the optimizer graph has no CPU
        # inputs and can be captured (as CUDA graphs need); eager keeps PyTorch's default (CPU step counts)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=backend == "tpu")
    if backend == "tpu" and not reinplace:
        backend = functools.partial(_compile.tpu_backend, options={"reinplace": False})
    if (whole_step or with_loss) and backend:
        with torch.no_grad():  # moves the loss's targets to the device now, not inside the compiled function
            loss_fn(model(*x))
    if whole_step and backend:
        # one function for zero_grad + forward + loss + backward + optimizer step: Dynamo breaks the graph at
        # backward() (forward+loss, then the optimizer step as the resumed frame; AOTAutograd's backward graph runs
        # from the autograd engine as in the per-module variant)
        def train_step() -> None:
            opt.zero_grad(set_to_none=True)
            loss_fn(model(*x)).backward()
            opt.step()

        return torch.compile(train_step, backend=backend)
    opt_step = torch.compile(opt.step, backend=backend) if backend else opt.step
    if with_loss:  # the loss inside the compiled forward: its forward and backward join the captured graphs

        def forward_loss(*inputs):
            return loss_fn(model(*inputs))

        fwd_loss = torch.compile(forward_loss, backend=backend) if backend else forward_loss
    else:
        fwd = torch.compile(model, backend=backend) if backend else model

        def fwd_loss(*inputs):
            return loss_fn(fwd(*inputs))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        if CALLER_THREAD_BACKWARD:
            with torch.autograd.set_multithreading_enabled(False):
                fwd_loss(*x).backward()
        else:
            fwd_loss(*x).backward()
        opt_step()

    return step


def _thread_cpu() -> dict[int, tuple[str, int]]:
    """Per-thread CPU nanoseconds of this process (Linux /proc; empty elsewhere): {tid: (name, ns)}."""
    out: dict[int, tuple[str, int]] = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
            with open(f"/proc/self/task/{tid}/comm") as f:
                out[int(tid)] = (f.read().strip(), ns)
        except (OSError, ValueError, IndexError):
            continue
    return out


def _split_cpu(before: dict, after: dict, steps: int) -> tuple[float, float]:
    """(host, device) CPU seconds per step: host = the Python thread + PyTorch's autograd threads (where a
    backward's Python runs), device = the runtime's queue workers and pool (threads named tpu-*)."""
    main = threading.get_native_id()
    host = device = 0.0
    for tid, (tname, ns) in after.items():
        spent = (ns - before.get(tid, (tname, 0))[1]) / 1e9 / steps
        if tid == main or "autograd" in tname:
            host += spent
        elif tname.startswith("tpu"):
            device += spent
    return host, device


def measure(name: str, device: str, backend: str | None, repeat: int, **kw) -> dict:
    """seconds: median seconds per step; cpu: process CPU seconds per step (all threads; less sensitive to other
    jobs on the machine than wall time); first: seconds of the first step (compiles, caches); recompiled: Dynamo
    graphs compiled after the first two steps (recompiles inside the measured region, which should be 0); peak:
    tpu bytes allocated at the peak of one steady-state step (torch.tpu.max_memory_allocated), less what was
    allocated before this mode's model was built (the other mode's model, kept alive for --pairs); host / dev: CPU
    seconds per step of the host threads / the device's worker threads (see _split_cpu; tpu only)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    base = torch.tpu.memory_allocated() if device == "tpu" else 0
    step = make_step(name, device, backend, **kw)
    t0 = time.perf_counter()
    step()
    _bench_common.sync(device)
    first = time.perf_counter() - t0
    step()  # optimizers create their state in the first step: the second one may compile again
    graphs = counters["stats"]["unique_graphs"]
    seconds = _bench_common.bench(step, device, warmup=3, repeat=repeat)
    recompiled = counters["stats"]["unique_graphs"] - graphs
    _bench_common.sync(device)
    c0, t0 = time.process_time(), _thread_cpu()
    for _ in range(repeat):
        step()
    _bench_common.sync(device)
    cpu, (host, dev) = (time.process_time() - c0) / repeat, _split_cpu(t0, _thread_cpu(), repeat)
    peak = float("nan")
    if device == "tpu":
        torch.tpu.reset_peak_memory_stats()
        step()
        torch.tpu.synchronize()
        peak = torch.tpu.max_memory_allocated() - base
    return dict(seconds=seconds, cpu=cpu, host=host, dev=dev, first=first, recompiled=recompiled, peak=peak, step=step)


def _round(step, repeat: int) -> tuple[float, float, float]:
    """One round: `repeat` synchronized steps; (median step seconds, host CPU s/step, device CPU s/step)."""
    import statistics

    samples = []
    t0 = _thread_cpu()
    for _ in range(repeat):
        s0 = time.perf_counter()
        step()
        torch.tpu.synchronize()
        samples.append(time.perf_counter() - s0)
    host, dev = _split_cpu(t0, _thread_cpu(), repeat)
    return statistics.median(samples), host, dev


def paired_rounds(steps: dict, pairs: int, repeat: int) -> dict:
    """The default mode's speedup: `pairs` alternating rounds (eager, compiled, ...) of `repeat` synchronized steps of
    the two already-warm tpu steps; medians (and spreads) of the rounds' wall and CPU-time ratios."""
    import statistics

    res, core = _mode_rounds(steps, pairs, repeat)
    ratios = [e[0] / c[0] for e, c in zip(res["eager"], res["compiled"])]
    cpu_ratios = [(e[1] + e[2]) / (c[1] + c[2]) for e, c in zip(res["eager"], res["compiled"])]
    text = _bench_common.mode_text(ratios, core)
    ratios, cpu_ratios = _bench_common.select_rounds(ratios, core), _bench_common.select_rounds(cpu_ratios, core)
    if not ratios:  # TORCH_TPU_BENCH_MODE=near|far and no round in that mode
        ratios = cpu_ratios = [float("nan")]
    return dict(speedup=statistics.median(ratios), lo=min(ratios), hi=max(ratios),
                cpu_speedup=statistics.median(cpu_ratios), cpu_lo=min(cpu_ratios), cpu_hi=max(cpu_ratios), modes=text)


def _mode_rounds(steps: dict, rounds: int, repeat: int) -> tuple[dict, list[str]]:
    """`rounds` alternating rounds (eager, compiled) of `repeat` synchronized steps, each pair tagged with the core
    mode around it (after waiting for TORCH_TPU_BENCH_MODE; benchmarks/common.py's ModeMonitor): each mode's _round
    results and the pairs' modes."""
    res: dict[str, list[tuple[float, float, float]]] = {"eager": [], "compiled": []}
    core = []
    for _ in range(rounds):
        with _bench_common.ModeMonitor(_bench_common.wait_for_mode()) as mon:
            for mode in ("eager", "compiled"):
                res[mode].append(_round(steps[mode], repeat))
        core.append(mon.mode)
    return res, core


def alternate_rounds(name: str, rounds: int, repeat: int, reinplace: bool = True, **kw) -> None:
    """Eager and compiled tpu built once, then `rounds` alternating rounds (see the module docstring)."""
    import statistics

    torch._dynamo.reset()
    steps = {"eager": make_step(name, "tpu", None), "compiled": make_step(name, "tpu", "tpu", reinplace=reinplace, **kw)}
    for step in steps.values():  # compiles, optimizer state, warm caches
        for _ in range(5):
            step()
    torch.tpu.synchronize()
    res, core = _mode_rounds(steps, rounds, repeat)
    ratios = [e[0] / c[0] for e, c in zip(res["eager"], res["compiled"])]
    cpu_ratios = [(e[1] + e[2]) / (c[1] + c[2]) for e, c in zip(res["eager"], res["compiled"])]
    text = _bench_common.mode_text(ratios, core)
    keep = _bench_common.select_rounds(list(range(rounds)), core)
    if not keep:
        print(f"{name:8} no round in {_bench_common.wanted_mode()} mode ({text})", flush=True)
        return
    ratios, cpu_ratios = [ratios[i] for i in keep], [cpu_ratios[i] for i in keep]
    res = {m: [r[i] for i in keep] for m, r in res.items()}

    def med(mode: str, i: int) -> float:
        return statistics.median(r[i] for r in res[mode]) * 1e3

    print(f"{name:8} eager {med('eager', 0):7.2f}ms compiled {med('compiled', 0):7.2f}ms  speedup "
          f"{statistics.median(ratios):.2f}x (rounds {min(ratios):.2f}-{max(ratios):.2f})  cpu-time speedup "
          f"{statistics.median(cpu_ratios):.2f}x (rounds {min(cpu_ratios):.2f}-{max(cpu_ratios):.2f})  CPU ms/step "
          f"host+device eager {med('eager', 1):.2f}+{med('eager', 2):.2f}, compiled {med('compiled', 1):.2f}+"
          f"{med('compiled', 2):.2f}  ({rounds} rounds x {repeat} steps; {text})", flush=True)


def _inductor_in_child(name: str, args: argparse.Namespace) -> dict:
    """measure(name, "cpu", "inductor") in a child process: inductor's generated code aborted the whole benchmark
    (glibc "corrupted size vs. prev_size" on the reduced ResNet with torch 2.13.0+cpu on this AVX2 machine, also
    without torch_tpu imported), so a crash there is reported and the other models still run."""
    import json
    import subprocess

    cmd = [sys.executable, os.path.abspath(__file__), "--inductor-child", name, "--repeat", str(args.repeat)]
    cmd += ["--whole-step"] if args.whole_step else []
    cmd += ["--with-loss"] if args.with_loss else []
    cmd += ["--autograd-caller-thread"] if args.autograd_caller_thread else []
    proc = subprocess.run(cmd, capture_output=True, text=True)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("INDUCTOR "):
            return json.loads(line[len("INDUCTOR "):])
    why = f"exit status {proc.returncode}" if proc.returncode >= 0 else f"signal {-proc.returncode}"
    tail = (proc.stderr.strip().splitlines() or [""])[-1][:200]
    print(f"  inductor failed on {name}: {why} ({tail})", flush=True)
    return dict(seconds=float("nan"), first=float("nan"), recompiled=0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--whole-step", action="store_true", help="compile one train-step function instead of the "
                    "model and opt.step separately (both backends)")
    ap.add_argument("--no-reinplace", action="store_true", help="compiled tpu without re-inplacing input updates")
    ap.add_argument("--with-loss", action="store_true", help="compile the model and the loss as one function (both "
                    "backends; default: the model alone, the loss runs eagerly)")
    ap.add_argument("--rounds", type=int, default=0, help="tpu eager vs compiled only: this many alternating "
                    "rounds of --repeat steps each; medians and the rounds' spread")
    ap.add_argument("--pairs", type=int, default=5, help="default mode: the tpu speedup columns from this many "
                    "alternating eager/compiled rounds of --repeat steps (medians; 0: the ratio of the single-run medians)")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (set TORCH_TPU_NUM_THREADS too)")
    ap.add_argument("--autograd-caller-thread", action="store_true", help="run backward() with "
                    "torch.autograd.set_multithreading_enabled(False) (all modes): no hand-off to the device thread")
    ap.add_argument("--inductor-child", default="", help=argparse.SUPPRESS)  # see _inductor_in_child
    args = ap.parse_args()
    global CALLER_THREAD_BACKWARD
    CALLER_THREAD_BACKWARD = args.autograd_caller_thread
    if args.inductor_child:
        import json

        r = measure(args.inductor_child, "cpu", "inductor", args.repeat, whole_step=args.whole_step,
                    with_loss=args.with_loss)
        print("INDUCTOR " + json.dumps({k: r[k] for k in ("seconds", "first", "recompiled")}), flush=True)
        return
    names = [n for n in CONFIGS if not args.only or n in args.only.split(",")]
    if args.threads:
        torch.set_num_threads(args.threads)
    print("machine:", _bench_common.machine(), f"tpu pool threads {torch.tpu.get_device_properties().num_threads}")
    if args.rounds:
        for name in names:
            alternate_rounds(name, args.rounds, args.repeat, reinplace=not args.no_reinplace, whole_step=args.whole_step,
                             with_loss=args.with_loss)
        return
    inductor = not args.no_inductor and shutil.which(os.environ.get("CXX", "g++")) is not None
    if not args.no_inductor and not inductor:
        print("inductor skipped: no C++ compiler (g++) on PATH")
    kw = dict(whole_step=args.whole_step, with_loss=args.with_loss)
    print(f"{'model':8} {'eager tpu':>10} {'compiled tpu':>13} {'speedup':>8} {'cpu-time speedup':>17} "
          f"{'inductor cpu':>13} {'tpu/inductor':>13} {'peak MiB eager/compiled':>24}  first-step s "
          "(eager / compiled / inductor)  capture")
    for name in names:
        eager = measure(name, "tpu", None, args.repeat)
        torch_tpu.reset_metrics()
        compiled = measure(name, "tpu", "tpu", args.repeat, reinplace=not args.no_reinplace, **kw)
        m = torch_tpu.metrics()
        speed = eager["seconds"] / compiled["seconds"]
        cpu_speed = eager["cpu"] / compiled["cpu"]
        spread = "single run"
        if args.pairs > 0:  # before the CPU run below resets Dynamo: the compiled step is still warm
            pr = paired_rounds({"eager": eager["step"], "compiled": compiled["step"]}, args.pairs, args.repeat)
            speed, cpu_speed = pr["speedup"], pr["cpu_speedup"]
            spread = (f"{args.pairs} paired rounds: speedup {pr['lo']:.2f}-{pr['hi']:.2f}, cpu-time "
                      f"{pr['cpu_lo']:.2f}-{pr['cpu_hi']:.2f}; {pr['modes']}")
        eager.pop("step"), compiled.pop("step")
        capture = (f"replays {m['compile_replays']}/{m['compile_calls']} calls"
                   + (f", not captured: {sorted(m['compile_capture_failures'])}" if m["compile_capture_failures"]
                      else ""))
        cpu_eager = measure(name, "cpu", None, args.repeat)
        ind = dict(seconds=float("nan"), first=float("nan"), recompiled=0)
        if inductor:
            ind = _inductor_in_child(name, args)
        mib = 1 << 20
        print(f"{name:8} {eager['seconds'] * 1e3:9.2f}ms {compiled['seconds'] * 1e3:12.2f}ms "
              f"{speed:7.2f}x {cpu_speed:16.2f}x "
              f"{ind['seconds'] * 1e3:12.2f}ms {ind['seconds'] / compiled['seconds']:12.2f}x "
              f"{eager['peak'] / mib:10.2f} / {compiled['peak'] / mib:.2f} ({compiled['peak'] / eager['peak']:.2f}x)  "
              f"{eager['first']:.1f} / {compiled['first']:.1f} / {ind['first']:.1f}  {capture}; CPU ms/step host+device "
              f"eager {eager['host'] * 1e3:.2f}+{eager['dev'] * 1e3:.2f}, compiled {compiled['host'] * 1e3:.2f}+"
              f"{compiled['dev'] * 1e3:.2f}; graphs compiled while "
              f"timed: tpu {compiled['recompiled']}, inductor {ind['recompiled']}; eager cpu "
              f"{cpu_eager['seconds'] * 1e3:.2f}ms; ({spread})",
              flush=True)


if __name__ == "__main__":
    main()
