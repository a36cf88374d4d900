"""Platform tags of the native wheels (jaxcore-cpu), by CPU.

Read by jaxcore/tools/BUILD.bazel (the wheel's file name and WHEEL `Tag`) and by
build/build.py (which file to copy into dist/); it must be a plain dict literal.

manylinux_2_35: libjaxcore_cpu_kernels.so links libstdc++ and libgcc statically and needs
only libc.so.6 and ld-linux from glibc. Built with Debian bookworm's GCC 12.2 against glibc
2.36, the highest symbol version it needs is GLIBC_2.35 (`_dl_find_object`, from libgcc's
unwinder); `auditwheel show` agrees (manylinux_2_35_x86_64). The wheel builder
(build/wheel/build_wheel.py) re-checks every build: a library that needs a newer glibc, or
a shared library manylinux does not allow, fails the build with the tag it would need.
"""

NATIVE_PLATFORM_TAGS = {
    "x86_64": "manylinux_2_35_x86_64",
    "aarch64": "manylinux_2_35_aarch64",
}
