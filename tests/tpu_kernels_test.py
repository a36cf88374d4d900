"""jaxcore_tpu: the Pallas/Mosaic TPU quantized matmul, run on CPU with
``pltpu.InterpretParams`` (TPU interpret mode: VMEM scratch, grid order and DMA as on a TPU).

Numbers are checked against an independent NumPy dequantize-then-matmul (float64) and
against ``jaxcore.kernels.reference_quantized_matmul``. Tolerances follow from the compute
dtype: the kernel decodes and scales tiles in float32, then feeds the MXU in the activation
dtype, so with float32 activations (HIGHEST precision) only summation order differs
(rtol ~1e-6 of |x| @ |W|), and with bfloat16 / float16 activations each scaled weight
carries one rounding of at most 2**-9 / 2**-12 relative to |x| @ |W|.
The operands, references and the checks both plugins share are in kernel_test_util.py.
"""

import jax
import jax.numpy as jnp
import kernel_test_util as ktu
import numpy as np
import pytest

import jaxcore
import jaxcore_tpu
from jaxcore import kernels, quant
from jaxcore.kernels.plugin_api import Problem
from jaxcore_tpu import _blocks, _dequant
from jaxcore_tpu import _matmul as tpu_matmul

# (fmt, M, K, N, block_size, activation dtype, overrides). Covers M = 1, ragged M and N
# blocks, several K steps with the VMEM accumulator, one scale row per step, 8 scale
# blocks per step (blocked scales), tiny scale blocks (MXU scale expansion) and K that is
# not a multiple of 128 (one whole-K step).
CASES = [
    ("int8", 1, 1024, 96, 1024, jnp.float32, {"block_k": 256}),  # per-channel, 4 K steps
    ("int8", 20, 512, 200, 64, jnp.bfloat16, {"block_m": 16, "block_n": 128}),  # ragged M, N
    ("int8", 3, 24, 20, 24, jnp.float32, {}),  # whole-K step
    ("int4", 1, 1024, 128, 32, jnp.bfloat16, {"block_k": 512}),  # 16 blocks/step, blocked
    (
        "int4",
        5,
        512,
        200,
        4,
        jnp.float32,
        {"block_k": 256, "block_n": 128},
    ),  # 2-row groups: MXU expansion; ragged N
    ("nf4", 1, 2048, 64, 64, jnp.bfloat16, {"block_k": 1024}),  # 2 K steps x 16 blocks
    ("nf4", 7, 512, 136, 512, jnp.float16, {"block_k": 256, "block_n": 128}),  # 1 scale row
]


@pytest.mark.parametrize("fmt,m,k,n,block_size,dtype,overrides", CASES)
def test_interpret_matches_reference(fmt, m, k, n, block_size, dtype, overrides):
    ktu.check_interpret_matches_reference(jaxcore_tpu, fmt, m, k, n, block_size, dtype, overrides)


def test_accepts_what_the_reference_accepts():
    ktu.check_accepts_reference_inputs(jaxcore_tpu.quantized_matmul, "nf4", 3, 256, 128, 64)


def test_out_dtype_and_impl_entry_point():
    ktu.check_entry_point_in_interpret_mode(jaxcore_tpu.quantized_matmul_impl, k=256, n=128)


# ---- block table -------------------------------------------------------------------


def test_table_regimes():
    decode = _blocks.choose(Problem(m=1, k=4096, n=4096, fmt="int8", block_size=4096))
    assert decode == jaxcore_tpu.BlockConfig(block_m=1, block_n=512, block_k=1024)
    nf4 = _blocks.choose(Problem(m=8, k=4096, n=11008, fmt="nf4", block_size=64))
    assert nf4 == jaxcore_tpu.BlockConfig(block_m=8, block_n=512, block_k=1024)
    large = _blocks.choose(Problem(m=1000, k=4096, n=4096, fmt="int4", block_size=128))
    assert large == jaxcore_tpu.BlockConfig(block_m=256, block_n=512, block_k=1024)
    # K = 640 int8 in 64-row blocks: the largest legal step <= 512 covering a multiple of
    # 8 scale blocks and dividing K is K itself (640 = 10 blocks), the only choice.
    odd = _blocks.choose(Problem(m=4, k=640, n=256, fmt="int8", block_size=64))
    assert odd.block_k == 640


def test_override_scope():
    problem = Problem(m=1, k=4096, n=4096, fmt="int8", block_size=4096)
    with jaxcore_tpu.block_config(block_n=256, block_k=512):
        assert _blocks.choose(problem) == jaxcore_tpu.BlockConfig(1, 256, 512)
    assert _blocks.choose(problem).block_n == 512


@pytest.mark.parametrize(
    "fields,match",
    [
        ({"block_m": 24}, "block_m=24 must be a multiple of 16 or cover all M=64"),
        ({"block_n": 200}, "block_n=200 must be a multiple of 128 or cover all N=1024"),
        ({"block_k": 384}, "must divide the 2048 qvalue rows"),
        ({"block_k": 64}, "must be a multiple of 128 activation columns"),
        ({"block_k": 256}, "must cover a multiple of 8 scale blocks"),
        ({"block_k": 3}, "must be even"),
    ],
)
def test_invalid_override_raises(fields, match):
    problem = Problem(m=64, k=4096, n=1024, fmt="nf4", block_size=64)
    with jaxcore_tpu.block_config(**fields), pytest.raises(ValueError, match=match):
        _blocks.choose(problem)


def test_scale_block_misalignment_is_named():
    # 96-row int8 blocks: a 128-row step neither divides nor is a multiple of a block.
    problem = Problem(m=1, k=768, n=128, fmt="int8", block_size=96)
    with pytest.raises(ValueError, match="divide or be a multiple of the scale block"):
        _blocks.validate(jaxcore_tpu.BlockConfig(1, 128, 128), problem)
    # ... and a step of 32 rows is under the 128-lane minimum.
    with pytest.raises(ValueError, match="multiple of 128 activation columns"):
        _blocks.validate(jaxcore_tpu.BlockConfig(1, 128, 32), problem)
    with (
        pytest.raises(TypeError, match=r"unknown BlockConfig field\(s\) \['split_k'\]"),
        jaxcore_tpu.block_config(split_k=2),
    ):
        pass


# ---- argument checks ---------------------------------------------------------------


@pytest.mark.parametrize(
    "mutate,error,match",
    [
        (lambda a: dict(a, fmt="fp8"), ValueError, "unknown quantized format 'fp8'"),
        (lambda a: dict(a, x=a["x"].astype(jnp.int8)), TypeError, "floating dtype"),
        (
            lambda a: dict(a, qvalue=a["qvalue"].astype(jnp.uint8)),
            TypeError,
            "int8 qvalue must be int8",
        ),
        (lambda a: dict(a, qvalue=a["qvalue"][:8]), ValueError, r"must have shape \(64, 16\)"),
        (lambda a: dict(a, block_size=0), ValueError, "block_size 0 must be positive"),
        (lambda a: dict(a, scale=a["scale"].T), ValueError, r"= \(2, 16\), got \(16, 2\)"),
        (
            lambda a: dict(a, scale=a["scale"].astype(jnp.int8)),
            TypeError,
            "scale must have a floating dtype",
        ),
        (
            lambda a: dict(a, x=a["x"][None]),
            ValueError,
            r"x must be 2-D \(M, K\), got shape \(1, 2, 64\)",
        ),
    ],
)
def test_argument_errors(mutate, error, match):
    ktu.check_argument_error(jaxcore_tpu.quantized_matmul, "int8", mutate, error, match)


def test_invalid_explicit_config():
    x, qvalue, scale = ktu.make("int8", 1, 256, 128, 256, jnp.float32)
    with pytest.raises(ValueError, match="block_n=100"):
        tpu_matmul.quantized_matmul(
            x,
            qvalue,
            scale,
            fmt="int8",
            block_size=256,
            config=jaxcore_tpu.BlockConfig(1, 100, 256),
        )


# ---- in-kernel decoding ------------------------------------------------------------


def test_codebook_lookup_and_scale_expansion():
    idx = jnp.arange(16, dtype=jnp.int32).reshape(2, 8)
    code = np.asarray(kernels.NF4_CODE, np.float32)
    np.testing.assert_array_equal(
        np.asarray(_dequant.codebook_lookup(idx, tuple(code))), code.reshape(2, 8)
    )
    with pytest.raises(ValueError, match="16-entry codebook, got 2"):
        _dequant.codebook_lookup(idx, (0.0, 1.0))
    s = jnp.asarray(np.random.default_rng(1).uniform(size=(4, 128)), jnp.float32)
    for group in (8, 2, 3):  # broadcast path, MXU path (exact: one non-zero term)
        got = np.asarray(_dequant.expand_scales(s, group, 4 * group))
        np.testing.assert_array_equal(got, np.repeat(np.asarray(s), group, axis=0))


# ---- plugin entry points and dispatch ----------------------------------------------


def test_plugin_metadata_and_initialize():
    assert jaxcore_tpu.__version__ == jaxcore.__version__
    assert jaxcore_tpu.PLATFORMS == ("tpu",)
    jaxcore_tpu.initialize()
    assert (
        kernels.registered_kernels("quantized_matmul")["tpu"] is jaxcore_tpu.quantized_matmul_impl
    )
    with pytest.raises(ValueError, match=r"serves platforms \('tpu',\), not \['cuda'\]"):
        jaxcore_tpu.initialize(platforms=("cuda",))


def test_registered_impl_binds_a_platform_primitive():
    ktu.check_binds_platform_primitive(
        jaxcore_tpu.quantized_matmul_impl, "jaxcore_tpu_quantized_matmul"
    )


@pytest.fixture
def tpu_only_accelerator():
    """Leaves tpu the only registered accelerator kernel; restores registration order."""
    name = "quantized_matmul"
    saved = kernels.registered_kernels(name)
    for platform in saved:
        if platform in ("cuda", "rocm"):
            kernels.unregister_kernel(name, platform)
    yield
    for platform in kernels.registered_kernels(name):
        kernels.unregister_kernel(name, platform)
    for platform, impl in saved.items():
        kernels.register_kernel(name, platform, impl)


@pytest.mark.parametrize("flag", ["tpu", "1", ""])
def test_platform_dependent_dispatch_on_cpu(monkeypatch, tpu_only_accelerator, flag):
    """A double-quantized NF4 jaxcore.quant array through the registry: the reference on
    CPU, or a forced interpret-mode run of the TPU kernel; both equal x @ q.materialize()."""
    modes = []
    real = jaxcore_tpu.quantized_matmul

    def spy(*args, interpret, **kwargs):
        modes.append(interpret)
        return real(*args, interpret=interpret, **kwargs)

    # The registered impl calls the kernel through the package namespace.
    monkeypatch.setattr(jaxcore_tpu, "quantized_matmul", spy)
    monkeypatch.setenv(kernels.INTERPRET_ENV_VAR, flag)
    w = jax.random.normal(jax.random.key(3), (512, 128), jnp.float32)
    q = quant.ArrayNF4.quantize(w, 64, double_quant=True)
    # A row count per flag: JAX caches traces by shape, and the flag is read at trace time.
    x = jax.random.normal(jax.random.key(4), (2 + len(flag), 512), jnp.float32)
    ktu.check_dispatch_matches_dense(x, q)
    # The tpu branch is always traced; only a forced flag also runs it interpreted on CPU.
    assert (True in modes) == (flag != "")


def test_bad_override_fails_when_traced_on_any_platform():
    ktu.check_bad_override_fails_when_traced(
        jaxcore_tpu,
        jaxcore_tpu.quantized_matmul_impl,
        128,
        {"block_n": 100},
        match="block_n=100",
    )
