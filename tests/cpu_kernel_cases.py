"""Weights the native CPU kernel tests share: stored operands and their float64 values.

Not a test file: ``Weight`` (the kernel operands and the dense matrix they stand for),
random codes covering every value with signed scales, a double-quantized NF4 weight, and
``CASES``, the formats and block sizes (some not a multiple of any SIMD width) the
``cpu_kernels_*`` tests run.
"""

import dataclasses
import functools

import kernel_test_util
import numpy as np

from jaxcore import quant


@dataclasses.dataclass
class Weight:
    """A stored weight: the kernel operands and its float64 dense value."""

    fmt: str
    block_size: int
    qvalue: np.ndarray
    scale: np.ndarray

    @property
    def dense(self):
        return kernel_test_util.numpy_dense(self.fmt, self.qvalue, self.scale, self.block_size)

    def block_scales(self):  # the quantized-array protocol of jaxcore.kernels
        return self.scale


def random_weight(rng, fmt, k, n, block_size):
    if fmt == "int8":
        qvalue = rng.integers(-128, 128, (k, n)).astype(np.int8)
    else:
        qvalue = rng.integers(0, 256, (k // 2, n)).astype(np.uint8)
    scale = rng.uniform(-0.2, 0.2, (k // block_size, n)).astype(np.float32)
    return Weight(fmt, block_size, qvalue, scale)


# The widest N any test takes: one double-quantized weight per K is cut to each N.
DQ_WIDTH = 8300


@functools.cache
def _nf4_double_quant(k):
    """One double-quantized weight per K, DQ_WIDTH wide (quantizing is slow)."""
    w = np.random.default_rng(k).standard_normal((k, DQ_WIDTH)).astype(np.float32)
    q = quant.ArrayNF4.quantize(w, 64, double_quant=True)
    return np.asarray(q.qvalue), np.asarray(q.block_scales())


def nf4_double_quant(rng, k, n):
    del rng
    assert n <= DQ_WIDTH, n
    qvalue, scale = _nf4_double_quant(k)  # its scales expanded: what the kernel receives
    return Weight("nf4", 64, qvalue[:, :n], scale[:, :n])


# name -> (make(rng, k, n), the contracted sizes K to test it with)
CASES = {
    "int8-channel": (lambda rng, k, n: random_weight(rng, "int8", k, n, k), (64, 130, 192)),
    "int8-b32": (lambda rng, k, n: random_weight(rng, "int8", k, n, 32), (64, 128, 192)),
    "int8-b13": (lambda rng, k, n: random_weight(rng, "int8", k, n, 13), (130,)),
    "int4-b64": (lambda rng, k, n: random_weight(rng, "int4", k, n, 64), (64, 128, 192)),
    "int4-b26": (lambda rng, k, n: random_weight(rng, "int4", k, n, 26), (130,)),
    "nf4-b64": (lambda rng, k, n: random_weight(rng, "nf4", k, n, 64), (64, 128, 192)),
    "nf4-b10": (lambda rng, k, n: random_weight(rng, "nf4", k, n, 10), (130,)),
    "nf4-dq": (nf4_double_quant, (64, 128, 192)),
}
