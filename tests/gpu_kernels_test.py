"""jaxcore_gpu: the Pallas/Triton quantized matmul, run in interpret mode on CPU.

Numbers are checked against an independent NumPy dequantize-then-matmul (float64) and
against ``jaxcore.kernels.reference_quantized_matmul``. Tolerances follow from the
compute dtype: with float32 activations the kernel's dots run at HIGHEST precision and
only the summation order differs (rtol ~1e-5 of the |x| @ |W| bound); with bfloat16 /
float16 activations the decoded weights (exact for int8/int4 integers, rounded for NF4
codes and for pre-scaled tiles) enter the dot in that dtype, so each product carries at
most one rounding of 2**-9 (bf16) / 2**-12 (f16) relative to |x| @ |W|.
The operands, references and the checks both plugins share are in kernel_test_util.py.
"""

import dataclasses

import jax
import jax.numpy as jnp
import kernel_test_util as ktu
import numpy as np
import pytest

import jaxcore
import jaxcore_gpu
from jaxcore import kernels, quant
from jaxcore.kernels.plugin_api import Problem
from jaxcore_gpu import _blocks, _dequant
from jaxcore_gpu import _matmul as gpu_matmul

_make, _check = ktu.make, ktu.check


# (fmt, M, K, N, block_size, activation dtype, overrides). Covers decode (M = 1, ragged
# M < 16), medium and large M tiles, ragged N, split-K (natural and forced), scale
# blocks larger and smaller than a K step, per-channel int8 and the three dtypes.
CASES = [
    ("int8", 1, 2048, 64, 2048, jnp.float32, {}),  # per-channel, natural split-K
    ("int8", 5, 256, 100, 64, jnp.bfloat16, {}),  # ragged M and N
    ("int8", 40, 128, 48, 32, jnp.float16, {}),  # medium tile, ragged N
    ("int4", 1, 512, 128, 64, jnp.bfloat16, {}),
    ("int4", 3, 256, 72, 16, jnp.float32, {}),  # 8-row packed groups: pre-scaled tiles
    ("int4", 140, 128, 64, 128, jnp.bfloat16, {}),  # large-M tile, ragged M
    ("nf4", 1, 1024, 96, 64, jnp.bfloat16, {"split_k": 4, "block_k": 128}),
    ("nf4", 16, 256, 40, 64, jnp.float32, {}),
    ("nf4", 9, 512, 64, 32, jnp.float16, {"block_k": 128, "block_n": 32}),
]


@pytest.mark.parametrize("fmt,m,k,n,block_size,dtype,overrides", CASES)
def test_interpret_matches_reference(fmt, m, k, n, block_size, dtype, overrides):
    ktu.check_interpret_matches_reference(jaxcore_gpu, fmt, m, k, n, block_size, dtype, overrides)


@pytest.mark.parametrize("scale_dtype", [jnp.float16, jnp.bfloat16])
@pytest.mark.parametrize(
    "fmt,m,k,n,block_size,overrides",
    [("int8", 1, 512, 64, 32, {}), ("int4", 3, 256, 72, 16, {}), ("nf4", 1, 1024, 96, 64, {})],
)
def test_16_bit_scales_are_loaded_as_stored(scale_dtype, fmt, m, k, n, block_size, overrides):
    """float16/bfloat16 scales (``jaxcore.quant``'s ``scale_dtype``) reach the kernel as
    stored, widened in registers: no float32 copy in the program, the same numbers."""
    x, qvalue, scale = _make(fmt, m, k, n, block_size, jnp.float32)
    scale = scale.astype(scale_dtype)
    run = jax.jit(
        lambda x, q, s: jaxcore_gpu.quantized_matmul(
            x, q, s, fmt=fmt, block_size=block_size, interpret=True
        )
    )
    with jaxcore_gpu.block_config(**overrides):
        out = run(x, qvalue, scale)
        operands = _pallas_operand_dtypes(jax.make_jaxpr(run)(x, qvalue, scale).jaxpr)
    _check(out, x, qvalue, scale.astype(jnp.float32), fmt, block_size, jnp.float32)
    assert operands[-1] == jnp.dtype(scale_dtype), operands


def _pallas_operand_dtypes(jaxpr) -> list:
    """The operand dtypes of the (one) pallas_call in ``jaxpr``, searched through nested
    jaxprs (jit, cond, ...)."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            return [v.aval.dtype for v in eqn.invars]
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    found = _pallas_operand_dtypes(inner)
                    if found:
                        return found
    return []


def test_out_dtype_and_impl_entry_point():
    ktu.check_entry_point_in_interpret_mode(jaxcore_gpu.IMPLS["rocm"], k=128, n=32)


def test_untileable_k_takes_the_xla_path():
    # K = 24: no power-of-two K step of >= 16 rows divides it.
    x, qvalue, scale = _make("int8", 3, 24, 20, 24, jnp.float32)
    problem = Problem(m=3, k=24, n=20, fmt="int8", block_size=24)
    assert _blocks.choose(problem) is None
    out = jaxcore_gpu.quantized_matmul(x, qvalue, scale, fmt="int8", block_size=24)
    _check(out, x, qvalue, scale, "int8", 24, jnp.float32)


def test_accepts_what_the_reference_accepts():
    ktu.check_accepts_reference_inputs(
        jaxcore_gpu.quantized_matmul, "int4", 3, 128, 32, 32, empty_out_dtype=jnp.bfloat16
    )


def test_explicit_config_argument():
    x, qvalue, scale = _make("int4", 4, 256, 64, 32, jnp.float32)
    config = jaxcore_gpu.BlockConfig(block_m=16, block_n=32, block_k=64, split_k=2)
    out = gpu_matmul.quantized_matmul(
        x, qvalue, scale, fmt="int4", block_size=32, interpret=True, config=config
    )
    _check(out, x, qvalue, scale, "int4", 32, jnp.float32)


# ---- block table -------------------------------------------------------------------


def test_table_regimes():
    decode = _blocks.choose(Problem(m=1, k=4096, n=4096, fmt="int8", block_size=4096))
    assert (decode.block_m, decode.block_n, decode.block_k, decode.num_stages) == (16, 128, 128, 4)
    # 32 column tiles x 32 K steps: split K 8 ways to reach the 256-program target, each
    # split still pipelining 4 steps.
    assert decode.split_k == 8
    wide = _blocks.choose(Problem(m=1, k=4096, n=65536, fmt="nf4", block_size=64))
    # 512 column tiles already fill the GPU; each step spans 4 NF4 blocks of 64 rows.
    assert wide.split_k == 1 and wide.block_k == 256
    large = _blocks.choose(Problem(m=512, k=4096, n=4096, fmt="int4", block_size=128))
    assert (large.block_m, large.block_n, large.split_k, large.num_warps) == (128, 128, 1, 8)
    medium = _blocks.choose(Problem(m=20, k=512, n=20, fmt="int8", block_size=512))
    assert (medium.block_m, medium.block_n) == (32, 32)  # clamped to the problem


def test_rocm_tiles_fit_lds():
    problem = Problem(m=1, k=4096, n=4096, fmt="nf4", block_size=64)
    cuda, rocm = _blocks.choose(problem, "cuda"), _blocks.choose(problem, "rocm")
    assert (cuda.num_stages, rocm.num_stages) == (4, 2)
    assert dataclasses.replace(rocm, num_stages=4) == cuda
    with pytest.raises(ValueError, match="unknown GPU platform 'tpu'"):
        _blocks.choose(problem, "tpu")


def test_override_and_its_scope():
    problem = Problem(m=1, k=1024, n=256, fmt="int8", block_size=1024)
    with jaxcore_gpu.block_config(block_n=64, split_k=2, num_stages=2):
        config = _blocks.choose(problem)
        with jaxcore_gpu.block_config(block_k=128):
            inner = _blocks.choose(problem)
    assert (config.block_n, config.split_k, config.num_stages) == (64, 2, 2)
    assert (inner.block_n, inner.block_k) == (64, 128)
    assert _blocks.choose(problem) == dataclasses.replace(
        config, block_n=128, split_k=_blocks.choose(problem).split_k, num_stages=4
    )


@pytest.mark.parametrize(
    "fields,match",
    [
        ({"block_m": 8}, "block_m=8 must be a power of two >= 16"),
        ({"block_n": 96}, "block_n=96 must be a power of two"),
        ({"block_k": 96}, "block_k=96 is not a legal K step for int8"),
        ({"block_k": 2048}, "block_k=2048 is not a legal K step"),
        ({"split_k": 3}, "split_k=3 must be >= 1 and divide"),
        ({"num_warps": 0}, "num_warps=0"),
    ],
)
def test_invalid_override_raises(fields, match):
    problem = Problem(m=1, k=1024, n=256, fmt="int8", block_size=1024)
    with jaxcore_gpu.block_config(**fields), pytest.raises(ValueError, match=match):
        _blocks.choose(problem)


def test_unknown_override_field():
    with (
        pytest.raises(TypeError, match=r"unknown BlockConfig field\(s\) \['tile'\]"),
        jaxcore_gpu.block_config(tile=4),
    ):
        pass


# ---- argument checks ---------------------------------------------------------------


@pytest.mark.parametrize(
    "mutate,error,match",
    [
        (lambda a: dict(a, fmt="int2"), ValueError, "unknown quantized format 'int2'"),
        (lambda a: dict(a, x=a["x"][0]), ValueError, r"x must be 2-D \(M, K\)"),
        (lambda a: dict(a, x=a["x"].astype(jnp.int32)), TypeError, "floating dtype"),
        (
            lambda a: dict(a, block_size=24),
            ValueError,
            "block_size 24 must be positive and divide K=64",
        ),
        (
            lambda a: dict(a, qvalue=a["qvalue"].astype(jnp.int8)),
            TypeError,
            "int4 qvalue must be uint8",
        ),
        (
            lambda a: dict(a, qvalue=a["qvalue"][:16]),
            ValueError,
            r"must have shape \(32, 16\), got \(16, 16\)",
        ),
        (
            lambda a: dict(a, scale=a["scale"][:1]),
            ValueError,
            r"scale must have shape .* = \(2, 16\)",
        ),
        (
            lambda a: dict(a, scale=a["scale"].astype(jnp.int32)),
            TypeError,
            "scale must have a floating dtype",
        ),
        (lambda a: dict(a, scale=a["scale"][0]), ValueError, "qvalue and scale must be 2-D"),
    ],
)
def test_argument_errors(mutate, error, match):
    ktu.check_argument_error(jaxcore_gpu.quantized_matmul, "int4", mutate, error, match)


def test_odd_block_size_for_packed_format():
    x, qvalue, scale = _make("nf4", 1, 6, 16, 6, jnp.float32)
    with pytest.raises(ValueError, match="nf4 needs an even block_size, got 3"):
        jaxcore_gpu.quantized_matmul(
            x, qvalue, jnp.zeros((2, 16), jnp.float32), fmt="nf4", block_size=3
        )


def test_invalid_explicit_config():
    x, qvalue, scale = _make("int8", 1, 64, 16, 64, jnp.float32)
    with pytest.raises(ValueError, match="block_m=4"):
        gpu_matmul.quantized_matmul(
            x, qvalue, scale, fmt="int8", block_size=64, config=jaxcore_gpu.BlockConfig(4, 16, 16)
        )


# ---- in-kernel decoding ------------------------------------------------------------


def test_codebook_lookup_every_index():
    idx = jnp.arange(16, dtype=jnp.int32).reshape(4, 4)
    code = np.asarray(kernels.NF4_CODE, np.float32)
    got = _dequant.codebook_lookup(idx, tuple(code), jnp.float32)
    np.testing.assert_array_equal(np.asarray(got), code.reshape(4, 4))
    with pytest.raises(ValueError, match="16-entry codebook, got 3"):
        _dequant.codebook_lookup(idx, (0.0, 1.0, 2.0), jnp.float32)


def test_nibbles_low_is_even_row():
    packed = jnp.asarray([[0x21, 0xF0]], jnp.uint8)
    lo, hi = _dequant.nibbles(packed)
    np.testing.assert_array_equal(np.asarray(lo), [[1, 0]])
    np.testing.assert_array_equal(np.asarray(hi), [[2, 15]])


# ---- plugin entry points and dispatch ----------------------------------------------


def test_plugin_metadata_and_initialize():
    assert jaxcore_gpu.__version__ == jaxcore.__version__
    assert jaxcore_gpu.PLATFORMS == ("cuda", "rocm")
    assert jaxcore_gpu.DIST_NAME is None
    jaxcore_gpu.initialize(platforms=("rocm",))
    assert kernels.registered_kernels("quantized_matmul")["rocm"] is jaxcore_gpu.IMPLS["rocm"]
    with pytest.raises(ValueError, match=r"serves platforms \('cuda', 'rocm'\), not \['tpu'\]"):
        jaxcore_gpu.initialize(platforms=("tpu",))


def _quantized(fmt, k, n):
    w = jax.random.normal(jax.random.key(7), (k, n), jnp.float32)
    if fmt == "int8":
        return quant.ArrayInt8.quantize(w)
    if fmt == "int4":
        return quant.ArrayInt4.quantize(w, 32)
    return quant.ArrayNF4.quantize(w, 64, double_quant=(fmt == "nf4-dq"))


def test_registered_impl_binds_a_platform_primitive():
    ktu.check_binds_platform_primitive(jaxcore_gpu.IMPLS["cuda"], "jaxcore_gpu_quantized_matmul")


@pytest.mark.parametrize(
    "fmt,flag", [("int8", "cuda"), ("int4", "rocm"), ("nf4-dq", "1"), ("nf4", "0")]
)
def test_platform_dependent_dispatch_on_cpu(monkeypatch, fmt, flag):
    """jaxcore.quant arrays through the registry: the reference on CPU, or a forced
    interpret-mode run of the plugin kernel, both equal to x @ q.materialize()."""
    calls = []
    real = gpu_matmul._pallas_matmul

    def spy(*args):
        calls.append(args[-1])  # the `interpret` argument
        return real(*args)

    monkeypatch.setattr(gpu_matmul, "_pallas_matmul", spy)
    monkeypatch.setenv(kernels.INTERPRET_ENV_VAR, flag)
    q = _quantized(fmt, 256, 64)
    x = jax.random.normal(jax.random.key(8), (2, 3, 256), jnp.float32)
    ktu.check_dispatch_matches_dense(x, q, out_shape=(2, 3, 64))
    # Every registered branch is traced; only a forced flag makes one run interpreted.
    assert (True in calls) == (flag != "0")


def test_bad_override_fails_when_traced_on_any_platform():
    ktu.check_bad_override_fails_when_traced(
        jaxcore_gpu, jaxcore_gpu.IMPLS["cuda"], 64, {"block_k": 96}, match="block_k=96"
    )
