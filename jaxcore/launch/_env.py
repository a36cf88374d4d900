"""The environment variables through which the launcher tells each process its place.

Kept apart from the launcher and from `initialize` so both read the same names, and so the
launcher never imports JAX.
"""

# Set by the launcher in every process it starts; `initialize` is a no-op without them.
PROCESS_ID = "JAXCORE_PROCESS_ID"
NUM_PROCESSES = "JAXCORE_NUM_PROCESSES"
COORDINATOR = "JAXCORE_COORDINATOR_ADDRESS"
DEVICES_PER_PROCESS = "JAXCORE_DEVICES_PER_PROCESS"

# JAX's own variables, set too so that a program calling `jax.distributed.initialize`
# itself binds the coordinator to the loopback address and uses CPU collectives.
JAX_COORDINATOR = "JAX_COORDINATOR_ADDRESS"
JAX_COORDINATOR_BIND = "JAX_COORDINATOR_BIND_ADDRESS"
JAX_CPU_COLLECTIVES = "JAX_CPU_COLLECTIVES_IMPLEMENTATION"
CPU_COLLECTIVES = "gloo"

# The XLA flag that splits the host CPU into several devices.
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
