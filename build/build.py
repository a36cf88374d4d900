#!/usr/bin/env python3
"""Builds jaxcore's wheels with Bazel and runs its test suite (work in progress)."""

# Toolchain versions. The Dockerfiles' ARG defaults and .bazelrc must use the same numbers
# (tests/docker_config_test.py checks).
PYTHON_VERSION = "3.11"
BAZEL_VERSION = "4.2.3"
DEFAULT_CUDA_MAJOR_VERSION = 12
CUDA_VERSIONS = {12: "12.8.1", 13: "13.0.0"}
CUDNN_VERSION = "9.8.0"
ROCM_VERSION = "6.4.1"
