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


setup(
    ext_modules=[
        CppExtension(
            "torch_tpu._C",
            sorted(glob.glob("csrc/glue/*.cpp")),
            include_dirs=[os.path.join(ROOT, "csrc/tpurt/include"), os.path.join(ROOT, "csrc/glue")],
            extra_compile_args={"cxx": ["-O2", "-std=c++17", "-g0"]},
            extra_objects=[LIB],
            extra_link_args=["-lm", "-pthread"],
        )
    ],
    cmdclass={"build_ext": Build.with_options(use_ninja=True)},
)
