"""Conformance of the `tpu` device against PyTorch's OpInfo database (CPU is the reference).

For every entry of torch.testing._internal.common_methods_invocations.op_db that supports the chosen
dtype on the CPU, the runner takes the entry's sample inputs, runs the op's function variant on the CPU
and on `tpu` (inputs copied with .to("tpu"), kwargs kept, device= kwargs of factories set to "tpu"),
with the CPU fallback OFF, and compares the outputs with torch.testing.assert_close (the dtype's
default tolerances, widened by the entry's own toleranceOverride/precisionOverride decorators).

Entries whose outputs are defined only up to the signs of eigen/singular vectors (_SIGN_AMBIGUOUS: eigh, svd,
svd_lowrank, pca_lowrank) are compared through each sample's own output_process_fn_grad, OpInfo's
sign-invariant projection of the outputs (|U|, |Vh|, U @ Vh, the eigen/singular values), on both devices.

Each entry gets one status, from its first sample that does not match:
  pass         every sample matched (ops with random or uninitialized output: shape and dtype matched)
  fail         an output differs (reason: the first bad sample and the mismatch)
  unsupported  NotImplementedError (reason: the ATen op the device does not implement)
  error        any other exception on the device (reason: type and first line of the message)
  timeout      (--subprocess only) the entry ran longer than --timeout seconds
  crash        (--subprocess only) the worker process died while running the entry

Usage (from the repository root):
  .venv/bin/python tests/opinfo/run_opinfo.py --subprocess --limit-samples 4 --write-claimed
  .venv/bin/python tests/opinfo/run_opinfo.py --ops softmax --ops 'nn.functional.*' -v
  .venv/bin/python tests/opinfo/run_opinfo.py --dtype bfloat16 --subprocess

Outputs: docs/op_coverage.md (docs/op_coverage_<dtype>.md for other dtypes) and a JSON next to it;
with --write-claimed (float32 only) the passing entries go to tests/opinfo/claimed_ops.txt, which
tests/test_opinfo_claimed.py re-checks in `make test`.
"""
from __future__ import annotations

import argparse
import contextlib
import fnmatch
import itertools
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

os.environ.pop("TORCH_TPU_CPU_FALLBACK", None)

import torch  # noqa: E402  (torch_tpu autoloads through the torch.backends entry point)
import torch_tpu  # noqa: E402,F401

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CLAIMED_PATH = os.path.join(HERE, "claimed_ops.txt")

# Entries whose output is random or uninitialized memory: only shapes and dtypes are compared.
_RANDOM_NAME = re.compile(
    r"(rand|normal|bernoulli|dropout|multinomial|uniform|exponential|geometric|cauchy|log_normal|rrelu)"
)

# Outputs unique only up to the signs of eigen/singular vectors: compared through output_process_fn_grad.
_SIGN_AMBIGUOUS = {"linalg.eigh", "linalg.svd", "svd", "svd_lowrank", "pca_lowrank"}


def project(op: Any, sample: Any, out: Any) -> Any:
    if op.name not in _SIGN_AMBIGUOUS:
        return out
    return to_cpu(sample.output_process_fn_grad(tuple(out) if isinstance(out, list) else out))


_NOT_IMPL = re.compile(r"operator '([^']+)'|Could not run '([^']+)'|^(\w+) not implemented")


@dataclass
class Result:
    name: str
    variant: str
    status: str
    reason: str = ""
    samples: int = 0
    seconds: float = 0.0

    @property
    def key(self) -> str:
        return entry_key(self.name, self.variant)


def entry_key(name: str, variant: str) -> str:
    return f"{name} {variant}".strip()


def load_op_db() -> list[Any]:
    from torch.testing._internal.common_methods_invocations import op_db

    return list(op_db)


def dtype_of(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise SystemExit(f"unknown dtype {name!r}")
    return dt


def select(op_db: list[Any], dtype: torch.dtype, patterns: list[str]) -> list[int]:
    """Indices of the entries that support `dtype` on the CPU and match one of `patterns` (all if none)."""
    out = []
    for i, op in enumerate(op_db):
        if dtype not in op.supported_dtypes("cpu"):
            continue
        if patterns:
            key = entry_key(op.name, op.variant_test_name)
            if not any(fnmatch.fnmatchcase(op.name, p) or fnmatch.fnmatchcase(key, p) for p in patterns):
                continue
        out.append(i)
    return out


def tolerances(op: Any, dtype: torch.dtype) -> tuple[float, float] | None:
    """(rtol, atol) widened by the entry's toleranceOverride/precisionOverride decorators, or None."""
    from torch.testing._internal.common_device_type import precisionOverride, toleranceOverride

    base_rtol, base_atol = torch.testing._comparison.default_tolerances(dtype)
    rtol, atol, found = base_rtol, base_atol, False
    for info in op.decorators:
        decs = getattr(info, "decorators", [info])
        dtypes = getattr(info, "dtypes", None)
        if dtypes is not None and dtype not in dtypes:
            continue
        for dec in decs:
            if isinstance(dec, toleranceOverride) and dtype in dec.d:
                rtol, atol, found = max(rtol, dec.d[dtype].rtol), max(atol, dec.d[dtype].atol), True
            elif isinstance(dec, precisionOverride) and dtype in dec.d:
                atol, found = max(atol, dec.d[dtype]), True
    return (rtol, atol) if found else None


# Positional arguments (index into sample.args) that the op requires on the CPU.
_KEEP_ON_CPU = {"tensor_split": {0}}


def tensor_to_device(t: torch.Tensor, device: str) -> torch.Tensor:
    """Copies `t` keeping its layout: a view copies its whole storage and takes the same strided view."""
    t = t.detach()
    copy = (lambda x: x.clone()) if device == "cpu" else (lambda x: x.to(device))  # always a fresh copy
    if t.layout != torch.strided or t.numel() == 0:
        return copy(t)
    nbytes = t.untyped_storage().nbytes()
    if t.is_contiguous() and t.storage_offset() == 0 and nbytes == t.numel() * t.element_size():
        return copy(t)
    flat = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage())
    return copy(flat).as_strided(t.size(), t.stride(), t.storage_offset())


def to_device(obj: Any, device: str) -> Any:
    if isinstance(obj, torch.Tensor):
        return tensor_to_device(obj, device)
    if isinstance(obj, torch.device) or (isinstance(obj, str) and obj in ("cpu", "cpu:0")):
        return torch.device(device)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(to_device(x, device) for x in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_device(x, device) for x in obj)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    return obj


def to_cpu(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().to("cpu")
    if isinstance(obj, (list, tuple)):
        return [to_cpu(x) for x in obj]
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    return obj


def compare(actual: Any, expected: Any, tol: tuple[float, float] | None, shape_only: bool, path: str = "out") -> None:
    """Raises AssertionError naming the first differing output."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise AssertionError(f"{path}: expected a tensor, got {type(actual).__name__}")
        if actual.shape != expected.shape or actual.dtype != expected.dtype:
            raise AssertionError(
                f"{path}: expected {tuple(expected.shape)} {expected.dtype}, got {tuple(actual.shape)} {actual.dtype}"
            )
        if shape_only:
            return
        kw: dict[str, Any] = {"equal_nan": True, "check_device": False, "check_stride": False}
        if tol is not None and (expected.is_floating_point() or expected.is_complex()):
            kw["rtol"], kw["atol"] = tol
        try:
            torch.testing.assert_close(actual, expected, **kw)
        except AssertionError as e:
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            raise AssertionError(f"{path}: " + "; ".join(lines[:3])) from None
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise AssertionError(f"{path}: expected a sequence of {len(expected)}, got {type(actual).__name__}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            compare(a, e, tol, shape_only, f"{path}[{i}]")
        return
    if isinstance(expected, float) and isinstance(actual, (int, float)) and not shape_only:
        both_nan = math.isnan(actual) and math.isnan(expected)
        if not (both_nan or math.isclose(actual, expected, rel_tol=1e-5, abs_tol=1e-5)):
            raise AssertionError(f"{path}: expected {expected!r}, got {actual!r}")
        return
    if not shape_only and actual != expected:
        raise AssertionError(f"{path}: expected {expected!r}, got {actual!r}")


def to_f64(obj: Any) -> Any:
    """Floating tensors (nested) as float64 CPU copies; everything else unchanged."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().double() if obj.is_floating_point() else obj
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(to_f64(x) for x in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_f64(x) for x in obj)
    if isinstance(obj, dict):
        return {k: to_f64(v) for k, v in obj.items()}
    return obj


def max_err(a: Any, ref: Any) -> float | None:
    """Largest |a - ref| over the floating tensors of two nested outputs (None: nothing comparable)."""
    if isinstance(ref, torch.Tensor) and isinstance(a, torch.Tensor):
        if not ref.is_floating_point() or a.shape != ref.shape or a.numel() == 0:
            return None
        d = (a.double() - ref.double()).abs()
        d = d[~(a.double().isnan() & ref.double().isnan())]
        return float(d.max()) if d.numel() else 0.0
    if isinstance(ref, (list, tuple)) and isinstance(a, (list, tuple)) and len(a) == len(ref):
        errs = [e for e in (max_err(x, r) for x, r in zip(a, ref)) if e is not None]
        return max(errs) if errs else None
    return None


def f64_reference_note(op: Any, sample: Any, actual: Any, expected: Any) -> str:
    """For a float mismatch: how far CPU's and tpu's outputs are from the op run in float64 on the CPU,
    which tells a tpu error from an ill-conditioned sample or an inaccurate CPU kernel (no verdict changes)."""
    try:
        ref = project(op, sample, to_cpu(op(to_f64(sample.input), *to_f64(sample.args), **to_f64(sample.kwargs))))
    except Exception:  # noqa: BLE001  (the op has no float64 path on the CPU for this sample)
        return ""
    e_cpu, e_tpu = max_err(expected, ref), max_err(actual, ref)
    if e_cpu is None or e_tpu is None:
        return ""
    return f" [float64 CPU reference: max abs error cpu {e_cpu:.3g}, tpu {e_tpu:.3g}]"


def describe(sample: Any, index: int) -> str:
    try:
        text = sample.summary()
    except Exception:  # noqa: BLE001  (a description must never fail the run)
        text = repr(sample)
    text = re.sub(r"\s+", " ", text).replace("SampleInput(", "(").replace('device="cpu", ', "")
    return f"sample {index} {text[:220]}"


def first_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return msg[0][:300] if msg else ""


@contextlib.contextmanager
def other_fixed_seed() -> Any:
    """Entries wrapped in wrapper_set_seed reseed the RNG with 42 on every call: use another seed."""
    import torch.testing._internal.common_methods_invocations as cmi

    orig = cmi.wrapper_set_seed

    def reseeded(fn: Any, *args: Any, **kwargs: Any) -> Any:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(43)
            return fn(*args, **kwargs)

    cmi.wrapper_set_seed = reseeded
    try:
        yield
    finally:
        cmi.wrapper_set_seed = orig


class _Timeout(BaseException):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout()


def run_entry(op: Any, dtype: torch.dtype, limit: int | None, timeout: float) -> Result:
    res = Result(op.name, op.variant_test_name, "pass")
    t0 = time.perf_counter()
    shape_only = bool(op.has_nondeterministic_output or _RANDOM_NAME.search(op.name))
    tol = tolerances(op, dtype)
    use_alarm = timeout > 0 and hasattr(signal, "SIGALRM")
    if use_alarm:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
    fallbacks_before = torch_tpu.metrics()["fallback_ops"]
    shape_only_samples = 0
    try:
        torch.manual_seed(0)
        samples = op.sample_inputs("cpu", dtype, requires_grad=False)
        if limit:
            samples = itertools.islice(samples, limit)
        for i, sample in enumerate(samples):
            keep = _KEEP_ON_CPU.get(op.name, set())
            inp = to_device(sample.input, "tpu")  # copies made first: an op may write to its inputs
            args = tuple(a if j in keep else to_device(a, "tpu") for j, a in enumerate(sample.args))
            kwargs = to_device(sample.kwargs, "tpu")
            cpu_again = to_device((sample.input, sample.args, sample.kwargs), "cpu")
            try:
                torch.manual_seed(1)
                expected = project(op, sample, to_cpu(op(sample.input, *sample.args, **sample.kwargs)))
                random_sample = shape_only
                if not shape_only:  # a sample whose CPU output depends on the seed (dropout_p > 0, ...)
                    torch.manual_seed(2)
                    with other_fixed_seed():
                        again = project(op, sample, to_cpu(op(cpu_again[0], *cpu_again[1], **cpu_again[2])))
                    try:
                        compare(again, expected, None, False)
                    except AssertionError:
                        random_sample = True
            except Exception:  # noqa: BLE001  (the CPU rejects this sample: nothing to compare)
                continue
            res.samples += 1
            try:
                torch.manual_seed(1)
                actual = op(inp, *args, **kwargs)
                torch.tpu.synchronize()
                actual = project(op, sample, to_cpu(actual))
            except _Timeout:
                raise
            except NotImplementedError as e:
                m = _NOT_IMPL.search(str(e))
                res.status = "unsupported"
                res.reason = (m.group(1) or m.group(2) or f"aten::{m.group(3)}") if m else first_line(e)
                break
            except Exception as e:  # noqa: BLE001
                res.status, res.reason = "error", f"{type(e).__name__}: {first_line(e)} ({describe(sample, i)})"
                break
            try:
                compare(actual, expected, tol, random_sample)
            except AssertionError as e:
                note = "" if random_sample or dtype == torch.float64 else f64_reference_note(op, sample, actual, expected)
                res.status, res.reason = "fail", f"{describe(sample, i)}: {str(e)[:400]}{note}"
                break
            shape_only_samples += random_sample
        else:
            if res.samples == 0:
                res.status, res.reason = "skip", "no sample input runs on the CPU"
            elif shape_only_samples == res.samples:
                res.reason = "random or uninitialized output: shape and dtype compared"
            elif shape_only_samples:
                res.reason = f"{shape_only_samples} of {res.samples} samples random: shape and dtype compared"
    except _Timeout:
        res.status, res.reason = "timeout", f"ran longer than {timeout:g} s"
    except Exception as e:  # noqa: BLE001  (sample generation or the harness itself)
        res.status, res.reason = "error", f"harness: {type(e).__name__}: {first_line(e)}"
    finally:
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        try:
            torch.tpu.synchronize()
        except Exception:  # noqa: BLE001  (a deferred error must not leak into the next entry)
            pass
    if res.status == "pass" and torch_tpu.metrics()["fallback_ops"] > fallbacks_before:
        res.status, res.reason = "error", "an op fell back to the CPU"
    res.seconds = round(time.perf_counter() - t0, 3)
    return res


# ---- subprocess mode: chunks of entries in worker processes, a crash or hang costs one entry


def worker(indices: list[int], dtype: torch.dtype, limit: int | None, timeout: float, out_path: str) -> None:
    torch_tpu.set_cpu_fallback(False)
    op_db = load_op_db()
    with open(out_path, "a", buffering=1) as f:
        for i in indices:
            f.write(json.dumps({"start": i}) + "\n")
            r = run_entry(op_db[i], dtype, limit, timeout)
            f.write(json.dumps({"index": i, **asdict(r)}) + "\n")


def run_subprocess(op_db: list[Any], indices: list[int], args: argparse.Namespace) -> list[Result]:
    results: dict[int, Result] = {}
    pending = list(indices)
    chunk = max(1, args.chunk)
    failures = 0
    while pending:
        todo, pending = pending[:chunk], pending[chunk:]
        while todo:
            fd, path = tempfile.mkstemp(prefix="opinfo_", suffix=".jsonl")
            os.close(fd)
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", path, "--dtype", args.dtype,
                   "--indices", ",".join(map(str, todo)), "--timeout", str(args.timeout)]
            if args.limit_samples:
                cmd += ["--limit-samples", str(args.limit_samples)]
            env = dict(os.environ)
            env.pop("TORCH_TPU_CPU_FALLBACK", None)
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            last_progress, nlines, started = time.monotonic(), 0, None
            hard = args.timeout * 2 + 60  # the alarm cannot interrupt C code: the parent kills the worker
            while proc.poll() is None:
                time.sleep(0.5)
                with open(path) as f:
                    lines = f.read().splitlines()
                if len(lines) != nlines:
                    nlines, last_progress = len(lines), time.monotonic()
                if time.monotonic() - last_progress > hard:
                    proc.kill()
                    proc.wait()
                    break
            stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            done_here = []
            with open(path) as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    if "start" in rec:
                        started = rec["start"]
                    else:
                        i = rec.pop("index")
                        results[i] = Result(**rec)
                        done_here.append(i)
                        report(results[i], args.verbose)
                        started = None
            os.unlink(path)
            todo = [i for i in todo if i not in results]
            if started is not None and started not in results:
                op = op_db[started]
                rc = proc.returncode
                if rc is not None and rc < 0 and rc != -signal.SIGKILL:
                    status, reason = "crash", f"worker died with signal {-rc}"
                elif rc == -signal.SIGKILL:
                    status, reason = "timeout", f"no progress for {hard:g} s (killed)"
                else:
                    tail = [ln for ln in stderr.strip().splitlines() if ln.strip()]
                    status, reason = "crash", f"worker exited with {rc}: {tail[-1][:200] if tail else ''}"
                results[started] = Result(op.name, op.variant_test_name, status, reason)
                report(results[started], args.verbose)
                todo = [i for i in todo if i != started]
            elif todo and not done_here:
                tail = [ln for ln in stderr.strip().splitlines() if ln.strip()]
                failures += 1
                if failures > 3:  # e.g. the extension is being rebuilt: wait and retry a few times
                    raise SystemExit(f"worker failed before running any entry: {tail[-1] if tail else proc.returncode}")
                print(f"worker failed to start ({tail[-1][:160] if tail else proc.returncode}); retrying", flush=True)
                time.sleep(30)
            else:
                failures = 0
    return [results[i] for i in indices]


# ---- reports

_ORDER = {"pass": 0, "fail": 1, "unsupported": 2, "error": 3, "timeout": 4, "crash": 5, "skip": 6}


def report(r: Result, verbose: bool) -> None:
    if verbose or r.status != "pass":
        print(f"{r.status:12s} {r.key:45s} {r.seconds:7.2f}s {r.reason[:160]}", flush=True)


def md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def write_reports(results: list[Result], dtype_name: str, args: argparse.Namespace, elapsed: float) -> tuple[str, str]:
    suffix = "" if dtype_name == "float32" else f"_{dtype_name}"
    md_path = os.path.join(ROOT, "docs", f"op_coverage{suffix}.md")
    js_path = os.path.join(ROOT, "docs", f"op_coverage{suffix}.json")
    counts = {s: sum(r.status == s for r in results) for s in _ORDER}
    total = len(results) - counts["skip"]
    passed = counts["pass"]
    pct = 100.0 * passed / total if total else 0.0
    blocking: dict[str, int] = {}
    for r in results:
        if r.status == "unsupported":
            blocking[r.reason] = blocking.get(r.reason, 0) + 1
    top = sorted(blocking.items(), key=lambda kv: (-kv[1], kv[0]))[:30]
    filt = f", filters {args.ops}" if args.ops else ""
    lines = [
        f"# Op coverage against PyTorch's OpInfo database ({dtype_name})",
        "",
        "Generated by `tests/opinfo/run_opinfo.py` (do not edit by hand): every entry of "
        "`torch.testing._internal.common_methods_invocations.op_db` (torch "
        f"{torch.__version__}) that supports {dtype_name} on the CPU, its sample inputs run on `cpu` and on "
        "`tpu` with the CPU fallback off, outputs compared with `torch.testing.assert_close` "
        "(default tolerances, widened by the entry's own tolerance overrides).",
        f"Settings: {f'the first {args.limit_samples}' if args.limit_samples else 'all'} sample inputs per entry"
        f"{filt}; the run took {elapsed:.0f} s. Regenerate: `.venv/bin/python tests/opinfo/run_opinfo.py "
        f"--subprocess{'' if dtype_name == 'float32' else ' --dtype ' + dtype_name}"
        f"{' --write-claimed' if dtype_name == 'float32' else ''}`.",
        "",
        f"**{passed} / {total} OpInfo entries pass ({pct:.1f}%)** — "
        + ", ".join(f"{s}: {counts[s]}" for s in _ORDER if counts[s] and s != "skip")
        + (f" (not counted: {counts['skip']} entries whose samples do not run on the CPU)" if counts["skip"] else ""),
        "",
        "Status: `pass` every sample matched (random/uninitialized outputs: shape and dtype only); `fail` an "
        "output differs; `unsupported` the device lacks the ATen op named; `error` another exception; "
        "`timeout`/`crash` the entry hung or killed its worker; `skip` no sample runs on the CPU (CUDA-only entries).",
        "",
    ]
    if top:
        lines += ["## Unsupported ATen ops (or dtypes) by OpInfo entries blocked", "",
                  "| ATen op | entries |", "|---|---|"]
        lines += [f"| `{md_escape(op)}` | {n} |" for op, n in top]
        lines.append("")
    lines += ["## All entries", "", "| op | variant | status | reason |", "|---|---|---|---|"]
    for r in sorted(results, key=lambda r: (_ORDER.get(r.status, 9), r.name, r.variant)):
        lines.append(f"| `{md_escape(r.name)}` | {md_escape(r.variant)} | {r.status} | {md_escape(r.reason)} |")
    os.makedirs(os.path.dirname(md_path), exist_ok=True)
    with open(md_path, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(js_path, "w") as f:
        json.dump({"dtype": dtype_name, "torch": torch.__version__, "limit_samples": args.limit_samples,
                   "passed": passed, "total": total, "counts": counts,
                   "results": [asdict(r) for r in results]}, f, indent=1)
        f.write("\n")
    return md_path, js_path


def write_claimed(results: list[Result]) -> None:
    keys = sorted(r.key for r in results if r.status == "pass")
    with open(CLAIMED_PATH, "w") as f:
        f.write("# OpInfo entries (name [variant]) that pass on tpu in float32; written by\n")
        f.write("# tests/opinfo/run_opinfo.py --write-claimed and re-checked by tests/test_opinfo_claimed.py.\n")
        f.write("\n".join(keys) + "\n")


def read_claimed(path: str = CLAIMED_PATH) -> list[str]:
    with open(path) as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dtype", default="float32", help="float32 (default) or bfloat16, float16, float64, ...")
    p.add_argument("--ops", action="append", default=[],
                   help="fnmatch pattern on the OpInfo name or 'name variant' (repeatable)")
    p.add_argument("--limit-samples", type=int, default=0, help="at most N sample inputs per entry (0: all)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per entry (0: none)")
    p.add_argument("--subprocess", action="store_true", help="run chunks of entries in worker processes")
    p.add_argument("--chunk", type=int, default=80, help="entries per worker process (--subprocess)")
    p.add_argument("--write-claimed", action="store_true", help="write the passing entries to claimed_ops.txt")
    p.add_argument("--no-report", action="store_true", help="do not write docs/op_coverage*.md/json")
    p.add_argument("-v", "--verbose", action="store_true", help="print passing entries too")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--indices", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    dtype = dtype_of(args.dtype)
    limit = args.limit_samples or None

    if args.worker:
        worker([int(x) for x in args.indices.split(",") if x], dtype, limit, args.timeout, args.worker)
        return 0

    torch_tpu.set_cpu_fallback(False)
    t0 = time.perf_counter()
    op_db = load_op_db()
    indices = select(op_db, dtype, args.ops)
    if not indices:
        print("no OpInfo entry matches", file=sys.stderr)
        return 2
    print(f"{len(indices)} OpInfo entries support {args.dtype} on the CPU", flush=True)
    if args.subprocess:
        results = run_subprocess(op_db, indices, args)
    else:
        results = []
        for i in indices:
            results.append(run_entry(op_db[i], dtype, limit, args.timeout))
            report(results[-1], args.verbose)
    elapsed = time.perf_counter() - t0
    passed = sum(r.status == "pass" for r in results)
    total = max(1, sum(r.status != "skip" for r in results))
    print(f"{passed} / {total} pass ({100.0 * passed / total:.1f}%) in {elapsed:.0f} s")
    if not args.no_report:
        for path in write_reports(results, args.dtype, args, elapsed):
            print("wrote", os.path.relpath(path, ROOT))
    if args.write_claimed:
        if args.dtype != "float32" or args.ops:
            print("--write-claimed needs a full float32 run (no --ops, no --dtype)", file=sys.stderr)
            return 2
        write_claimed(results)
        print("wrote", os.path.relpath(CLAIMED_PATH, ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
