#!/usr/bin/env bash
# CI job: the native CPU kernels built for linux-aarch64 (Bazel's --config=aarch64, a cross
# GCC; only their portable sources) and their native test (//jaxcore_cpu:qmm_native_test) run
# under qemu-aarch64, then the aarch64 jaxcore-cpu wheel (whose builder checks the library's
# glibc needs against its platform tag). `build.py test` installs the cross compiler and
# qemu (g++-aarch64-linux-gnu, qemu-user) with apt-get where they are missing.
# Runnable by hand from any directory; see ci/envs/default.env for the settings.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source ci/envs/default.env
source ci/_common.sh
ci_native_aarch64_job
