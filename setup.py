"""Builds torch_tpu._C: the C++17 PrivateUse1 glue linked with libtpurt.a (built by `make lib`)."""
import glob
import os
import subprocess

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

ROOT = os.path.dirname(os.path.abspath(__file__))
LIB = os.path.join(ROOT, "build", "tpurt", "libtpurt.a")


class Build(BuildExtension):
    def run(self):
        # The C core has its own incremental Makefile rules (ccache-friendly).
        subprocess.check_call(["make", "-C", ROOT, "lib"])
        super().run()


# `make` runs `pip install -e .` with TORCH_TPU_SKIP_EXT=1 (metadata + entry point only)
# and builds the extension once with `setup.py build_ext --inplace` (incremental, ninja).
SKIP_EXT = os.environ.get("TORCH_TPU_SKIP_EXT") == "1"

setup(
    ext_modules=[] if SKIP_EXT else [
        CppExtension(
            "torch_tpu._C",
            sorted(glob.glob("csrc/glue/*.cpp")),
            include_dirs=[os.path.join(ROOT, "csrc/tpurt/include"), os.path.join(ROOT, "csrc/glue")],
            extra_compile_args={"cxx": ["-O2", "-std=c++17", "-g0"]},
            extra_objects=[LIB],
            # build_ext relinks only when a source or a `depends` entry is newer than the .so: without the
            # library (and the headers) here, a change to the C core alone left a stale extension.
            depends=[LIB] + sorted(glob.glob("csrc/glue/*.h")) + sorted(glob.glob("csrc/tpurt/include/*.h")),
            extra_link_args=["-lm", "-pthread"],
        )
    ],
    cmdclass={} if SKIP_EXT else {"build_ext": Build.with_options(use_ninja=True)},
)
