"""The build steps of the `kvtier` package that pyproject.toml cannot state (setuptools).

build_py adds, beside the package's sources:
  - kvtier/v1/: the gRPC stubs of proto/kvtier/v1/*.proto (*_pb2.py, *_pb2.pyi and
    service_pb2_grpc.py), made by protoc (>= 3.20) with grpc_python_plugin (Debian:
    protobuf-compiler, protobuf-compiler-grpc), else by grpc_tools.protoc. The protos come from
    $KVTIER_PROTO_ROOT, else the source tree's proto/. KVTIER_STUBS=skip builds without them;
    otherwise a missing generator fails the build.
  - kvtier/_lib/: libkvtier, per $KVTIER_BUNDLE:
      auto (default)  libkvtier.so.0 from $KVTIER_LIBRARY, else from the source tree's
                      build*/lib/, when there is one (none found: the package finds the library
                      at run time, docs/CLIENT.md);
      all             the same, and every shared library it needs except the C and C++ runtimes
                      and the CUDA driver, for machines without them (e.g. the GPU machine);
      none            nothing.
    Copies are stripped of debug sections when `strip` exists (KVTIER_STRIP=0 keeps them).
A wheel that holds a library is tagged py3-none-<platform>; one without stays py3-none-any.
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import warnings

from setuptools import setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel  # setuptools >= 70.1
except ImportError:
    try:
        from wheel.bdist_wheel import bdist_wheel
    except ImportError:  # building no wheel (setup.py build_py)
        bdist_wheel = None

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
# Never bundled: the C library, the C++ runtime (the process has its own) and the CUDA driver.
SYSTEM_LIBRARIES = re.compile(r"^(linux-vdso|libc|libm|libpthread|libdl|librt|ld-linux[-\w]*|"
                              r"libstdc\+\+|libgcc_s|libcuda|libnvidia-ml)\.so")


def bundle_mode():
    mode = os.environ.get("KVTIER_BUNDLE", "auto")
    if mode not in ("auto", "all", "none"):
        sys.exit(f"setup.py: KVTIER_BUNDLE={mode!r}: expected auto, all or none")
    return mode


def find_library():
    """The libkvtier.so to bundle, or None."""
    if bundle_mode() == "none":
        return None
    env = os.environ.get("KVTIER_LIBRARY")
    if env:
        if not os.path.isfile(env):
            sys.exit(f"setup.py: KVTIER_LIBRARY={env!r} is not a file")
        return env
    for candidate in sorted(glob.glob(os.path.join(REPO, "build*", "lib", "libkvtier.so"))):
        return candidate
    return None


def strip(path):
    if os.environ.get("KVTIER_STRIP", "1") != "0" and shutil.which("strip"):
        subprocess.run(["strip", "--strip-debug", path], check=False)


def dependencies(library):
    """(DT_NEEDED name, path) of every library `library` needs, as ldd resolves them."""
    out = subprocess.run(["ldd", library], check=True, capture_output=True, text=True).stdout
    deps = []
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (/\S+)", line)
        if m and not SYSTEM_LIBRARIES.match(m.group(1)):
            deps.append((m.group(1), m.group(2)))
        elif "not found" in line:
            sys.exit(f"setup.py: {library} needs a library ldd cannot find: {line.strip()}")
    return deps


def bundle_library(out_dir):
    library = find_library()
    if library is None:
        if bundle_mode() != "none":
            warnings.warn("setup.py: no libkvtier.so found (set KVTIER_LIBRARY): the package "
                          "will look for the library at run time")
        return
    os.makedirs(out_dir, exist_ok=True)
    target = os.path.join(out_dir, "libkvtier.so.0")
    shutil.copyfile(os.path.realpath(library), target)
    strip(target)
    if bundle_mode() == "all":
        for name, path in dependencies(library):
            copy = os.path.join(out_dir, name)
            shutil.copyfile(os.path.realpath(path), copy)
            strip(copy)


def protoc_version(protoc):
    try:
        out = subprocess.run([protoc, "--version"], check=True, capture_output=True,
                             text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    m = re.search(r"(\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def generate_stubs(out_dir):
    if os.environ.get("KVTIER_STUBS") == "skip":
        return
    root = os.environ.get("KVTIER_PROTO_ROOT") or os.path.join(REPO, "proto")
    protos = sorted(glob.glob(os.path.join(root, "kvtier", "v1", "*.proto")))
    if not protos:
        if glob.glob(os.path.join(out_dir, "*_pb2.py")):
            return  # built from a tree that carries them
        sys.exit(f"setup.py: no kvtier/v1/*.proto under {root} (set KVTIER_PROTO_ROOT, or "
                 "KVTIER_STUBS=skip to build without the gRPC stubs)")
    # protoc writes kvtier/v1/<name>_pb2.py under its --python_out: the build's package root.
    package_root = os.path.dirname(os.path.dirname(out_dir))
    outs = [f"--python_out={package_root}", f"--pyi_out={package_root}",
            f"--grpc_python_out={package_root}"]
    protoc, plugin = shutil.which("protoc"), shutil.which("grpc_python_plugin")
    version = protoc_version(protoc) if protoc else None
    if protoc and plugin and version and version >= (3, 20):
        cmd = [protoc, f"--plugin=protoc-gen-grpc_python={plugin}", f"-I{root}"]
    else:
        try:
            import grpc_tools  # noqa: F401
        except ImportError:
            sys.exit("setup.py: generating the kvtier.v1 stubs needs protoc >= 3.20 and "
                     "grpc_python_plugin (Debian: protobuf-compiler protobuf-compiler-grpc) or "
                     "grpc_tools (pip install grpcio-tools); KVTIER_STUBS=skip builds without "
                     "them")
        well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        cmd = [sys.executable, "-m", "grpc_tools.protoc", f"-I{root}", f"-I{well_known}"]
        outs = [o for o in outs if not o.startswith("--pyi_out")]
    # Only service.proto has services; the others get no *_pb2_grpc.py.
    messages = [p for p in protos if os.path.basename(p) != "service.proto"]
    service = [p for p in protos if os.path.basename(p) == "service.proto"]
    subprocess.run(cmd + outs[:-1] + messages, check=True)
    subprocess.run(cmd + outs + service, check=True)


class BuildPy(build_py):
    def run(self):
        super().run()
        package = os.path.join(self.build_lib, "kvtier")
        generate_stubs(os.path.join(package, "v1"))
        bundle_library(os.path.join(package, "_lib"))


commands = {"build_py": BuildPy}

if bdist_wheel is not None:
    class BdistWheel(bdist_wheel):
        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = find_library() is None

        def get_tag(self):
            python, abi, platform = super().get_tag()
            if not self.root_is_pure:
                return "py3", "none", platform  # no extension module: any CPython 3
            return python, abi, platform

    commands["bdist_wheel"] = BdistWheel

setup(cmdclass=commands)
