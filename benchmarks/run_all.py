"""Runs every benchmark script in this folder (each prints its own ratios)."""
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
for name in ["bench_ops.py", "bench_gemm.py", "bench_mlp.py", "bench_conv.py", "bench_attention.py", "bench_examples.py", "bench_hf.py"]:
    path = os.path.join(HERE, name)
    if os.path.exists(path):
        print(f"== {name}")
        runpy.run_path(path, run_name="__main__")
