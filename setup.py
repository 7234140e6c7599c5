"""setup.py - the disco Python package for pip (issue 35, part 4).

    python3 -m venv --system-site-packages V
    V/bin/pip install --no-build-isolation .

builds offline with Debian's setuptools and wheel (tools/deps.sh installs
them) and installs a working package: the extension (disco._core), with
libdisco.so.3 and the C worker program (bin/disco-worker) beside it in the
package, found through the extension's rpath ($ORIGIN) and disco's own
lookup (disco.worker_program(): bin/disco-worker beside the libdisco.so in
use), and the Python worker program disco-py-worker.

The C library is built by the project's Makefile (`make build/libdisco.so
build/bin/disco-worker`, in this tree's build/): its flags, its optional
parts (CUDA, Open MPI) and its dependency checks stay in one place. The
extension is compiled here by setuptools for the Python that runs pip and
linked against that libdisco.so. The package holds libdisco.so.3 itself, so
it needs no `make install`; what it links beyond libc (hwloc, jansson,
libsodium, Open MPI where built with it) comes from the system, which is
why a wheel for other machines needs auditwheel (docs/python.md).
"""

import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("DISCO_BUILD", "build")  # the Makefile's BUILD


def version():
    with open(os.path.join(ROOT, "python", "disco", "__init__.py"), encoding="utf-8") as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


class BuildWithLibdisco(build_ext):
    """Builds libdisco.so and disco-worker with make first, then the
    extension against them; puts both into the package."""

    def run(self):
        jobs = os.environ.get("DISCO_MAKE_JOBS", str(min(os.cpu_count() or 1, 8)))
        subprocess.check_call(["make", f"-j{jobs}", f"BUILD={BUILD}",
                               f"{BUILD}/libdisco.so", f"{BUILD}/bin/disco-worker"], cwd=ROOT)
        super().run()
        pkg = os.path.join(self.build_lib, "disco")
        if self.inplace:  # setup.py develop / pip -e: beside the sources
            pkg = os.path.join(ROOT, "python", "disco")
        os.makedirs(os.path.join(pkg, "bin"), exist_ok=True)
        # A libdisco of an older soname left in the build tree by an earlier
        # build would be installed too, and an extension linked against it
        # would load it (tests/install_test.sh checks there is none).
        for f in os.listdir(pkg):
            if f.startswith("libdisco.so.") and f != "libdisco.so.3":
                os.remove(os.path.join(pkg, f))
        # the soname the extension asks for (readelf -d: NEEDED libdisco.so.3)
        shutil.copy2(os.path.join(ROOT, BUILD, "libdisco.so"), os.path.join(pkg, "libdisco.so.3"))
        shutil.copy2(os.path.join(ROOT, BUILD, "bin", "disco-worker"),
                     os.path.join(pkg, "bin", "disco-worker"))

    def get_outputs(self):
        pkg = os.path.join(self.build_lib, "disco")
        return super().get_outputs() + [os.path.join(pkg, "libdisco.so.3"),
                                        os.path.join(pkg, "bin", "disco-worker")]


core = Extension(
    "disco._core",
    sources=sorted(os.path.join("python", "disco", f)
                   for f in os.listdir(os.path.join(ROOT, "python", "disco"))
                   if f.startswith("_") and f.endswith(".c")),
    # libdisco.so too: a new one (another soname, say) relinks the extension
    depends=[os.path.join("python", "disco", "_core.h"), os.path.join(BUILD, "libdisco.so")],
    include_dirs=[".", "include"],
    extra_compile_args=["-std=c11", "-D_GNU_SOURCE", "-fvisibility=hidden", "-Wall", "-Wextra"],
    library_dirs=[BUILD],
    extra_link_args=["-l:libdisco.so", "-Wl,-rpath,$ORIGIN", "-ldl"],
)

setup(
    name="disco",
    version=version(),
    description="SPMD sessions over forked worker processes (TVM Disco's Python session)",
    license="Apache-2.0",
    python_requires=">=3.9",
    package_dir={"": "python"},
    packages=["disco"],
    package_data={"disco": ["disco-py-worker"]},
    ext_modules=[core],
    cmdclass={"build_ext": BuildWithLibdisco},
    options={"build": {"build_base": os.path.join(BUILD, "pip")},
             "egg_info": {"egg_base": os.path.join(BUILD, "pip")}},
    zip_safe=False,
)
