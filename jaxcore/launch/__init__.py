"""jaxcore.launch: one program as N local processes on JAX's multi-process runtime.

Run::

    python3 -m jaxcore.launch --processes 2 --devices-per-process 2 -- python3 train.py

and, first thing in ``train.py``::

    import jaxcore.launch
    jaxcore.launch.initialize()   # a no-op when train.py runs on its own

The launcher starts N processes with the coordinator on a free loopback port, the process
id and count in the environment, D CPU devices each and gloo CPU collectives, so together
they form one global mesh of N * D devices (``jax.devices()``) while each process holds only
its own (``jax.local_devices()``). Output lines are prefixed ``[p<id>]``; the first process
to fail decides the exit code and the others are stopped.

This is for running and testing multi-process programs on one machine. On a cluster, call
``jax.distributed.initialize()`` instead: JAX finds the coordinator, process count and id
itself under SLURM, Open MPI, Kubernetes (JobSet) and on Cloud TPU.
"""

from jaxcore.launch._child import initialize, launched
from jaxcore.launch._launcher import TIMEOUT_EXIT_CODE, launch, main

__all__ = ["TIMEOUT_EXIT_CODE", "initialize", "launch", "launched", "main"]
