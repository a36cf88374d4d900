"""pytest set-up shared by every test file (under pytest and under Bazel)."""

import os

# Eight fake CPU devices for the multi-device tests; must happen before JAX starts.
if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
