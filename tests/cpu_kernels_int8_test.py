"""jaxcore_cpu's int8 activations (``precision="int8"``) on every instruction set.

Checked: closeness to ``x @ dequantize(W)`` in float64 (and that the int8 path really ran);
agreement across instruction sets; the activation quantization itself against a NumPy
emulation (a scale per 32 values, per 64 for int4 and NF4 in blocks of a multiple of 64, at
every M); NaN rows for non-finite activations; the float32 fallback for blocks that are not
a multiple of 32, and above M = 64 on the portable kernels.
"""

import jax.numpy as jnp
import kernel_test_util
import numpy as np
import pytest
from cpu_kernel_cases import CASES, random_weight

import jaxcore_cpu

kernel_test_util.require_native_cpu_kernels()

ISAS = jaxcore_cpu.available_isas()
assert_int8_close = kernel_test_util.assert_int8_close


as64 = kernel_test_util.as64


@pytest.mark.parametrize("case", ["int8-channel", "int8-b32", "int4-b64", "nf4-b64", "nf4-dq"])
def test_int8_precision_is_close_and_not_float32(case):
    make, _ = CASES[case]
    rng = np.random.default_rng(23)
    # M = 16 and 5 with N = 1800: whole-row tasks over several column blocks (AVX-512).
    sizes = [((1, 130), 192), ((5, 1800), 128), ((16, 1800), 256), ((17, 33), 192)]
    for (m, n), k in sizes + [((33, 2100), 64)]:
        w = make(rng, k, n)
        x = jnp.asarray(rng.standard_normal((m, k)), jnp.float32)
        exact = jaxcore_cpu.quantized_matmul(
            x, w.qvalue, w.scale, fmt=w.fmt, block_size=w.block_size
        )
        outs = {}
        for isa in ISAS:
            with jaxcore_cpu.set_isa(isa):
                outs[isa] = jaxcore_cpu.quantized_matmul(
                    x, w.qvalue, w.scale, fmt=w.fmt, block_size=w.block_size, precision="int8"
                )
            assert_int8_close(outs[isa], x, w.dense, f"{case} {isa} m={m} k={k} n={n}")
        # Integer sums are exact: instruction sets agree to float32 rounding.
        first = as64(outs[ISAS[0]])
        for isa in ISAS[1:]:
            np.testing.assert_allclose(
                as64(outs[isa]), first, rtol=1e-5, atol=1e-5 * np.abs(first).max()
            )
        # ... and the int8 path really ran: it is not the exact result.
        assert np.abs(as64(exact) - first).max() > 1e-6 * np.abs(first).max(), case


# NF4's code book on the int8 grid (round(127 * code)): the int8 path's NF4 weights, over 127.
NF4_INT8 = np.array([-127, -88, -67, -50, -36, -23, -12, 0, 10, 20, 31, 43, 56, 71, 92, 127])


def int8_precision_emulated(x, w, span):
    """NumPy's ``precision="int8"`` product: each activation row quantized to int8 with one
    scale per ``span`` x 32 values along K (d = max|x| / 127, codes round-half-even of
    x * (127 / max|x|), both in float32), integer sums per 32, scaled in float64."""
    x32 = np.asarray(x, np.float32)
    m, k = x32.shape
    units = x32.reshape(m, k // (32 * span), 32 * span)
    amax = np.abs(units).max(axis=2, keepdims=True)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    codes = np.rint(units * inv).astype(np.int64).reshape(m, k)
    d = np.repeat(d.reshape(m, -1).astype(np.float64), 32 * span, axis=1)  # per K
    q = np.asarray(w.qvalue)
    if w.fmt == "int8":
        ints, unit = q.astype(np.int64), 1.0
    else:
        idx = np.empty((2 * q.shape[0], q.shape[1]), np.int64)
        idx[0::2], idx[1::2] = q & 0xF, q >> 4
        ints, unit = (idx - 8, 1.0) if w.fmt == "int4" else (NF4_INT8[idx], 1.0 / 127)
    wk = ints * np.repeat(np.asarray(w.scale, np.float64), w.block_size, axis=0) * unit
    return (codes * d) @ wk, (np.abs(codes) * d) @ np.abs(wk)


@pytest.mark.parametrize(
    "fmt, block_size, span",
    [
        ("int8", 32, 1),
        ("int8", 256, 1),
        ("int4", 32, 1),
        ("int4", 64, 2),
        ("nf4", 64, 2),
        ("nf4", 128, 2),
    ],
)
def test_int8_precision_matches_its_numpy_emulation(fmt, block_size, span):
    """The activation quantization is the documented one on every instruction set: a scale
    per 32 values, or per 64 for the 4-bit formats in blocks of a multiple of 64 (where the
    AVX-512 kernel sums a pair of groups in int32), whatever M is."""
    rng = np.random.default_rng(41)
    k, n = 256, 200
    w = random_weight(rng, fmt, k, n, block_size)
    case = f"{fmt} in blocks of {block_size}"
    # Outliers in some groups, so a scale per 64 and one per 32 give different codes.
    x = rng.standard_normal((16, k)).astype(np.float32)
    x[:, 40] *= 30.0
    x[3, 130:140] *= 50.0
    want, bound = int8_precision_emulated(x, w, span)
    other, _ = int8_precision_emulated(x, w, 3 - span)
    # The emulation tells the two spans apart (by far more than float32 rounding).
    assert np.abs(other - want).max() > 1e-3 * np.abs(want).max(), case
    for isa in ISAS:
        with jaxcore_cpu.set_isa(isa):
            for m in (1, 5, 16):
                got = jaxcore_cpu.quantized_matmul(
                    jnp.asarray(x[:m]),
                    w.qvalue,
                    w.scale,
                    fmt=w.fmt,
                    block_size=w.block_size,
                    precision="int8",
                )
                err = np.abs(as64(got) - want[:m])
                assert (err <= 1e-5 * bound[:m] + 1e-30).all(), (
                    case,
                    isa,
                    m,
                    float(np.max(err / (bound[:m] + 1e-30))),
                )


@pytest.mark.parametrize("case", ["int8-channel", "int4-b64", "nf4-b64"])
@pytest.mark.parametrize("m", [3, 9])
def test_int8_precision_non_finite_activations_give_nan_rows(case, m):
    """No int8 code stands for NaN or infinity: such a row comes out NaN, the others as before."""
    make, _ = CASES[case]
    rng = np.random.default_rng(31)
    w = make(rng, 256, 130)
    x = rng.standard_normal((m, 256)).astype(np.float32)
    bad = x.copy()
    bad[1, 40] = np.nan
    bad[2, 255] = -np.inf
    for isa in ISAS:
        with jaxcore_cpu.set_isa(isa):
            outs = [
                np.asarray(
                    jaxcore_cpu.quantized_matmul(
                        jnp.asarray(a),
                        w.qvalue,
                        w.scale,
                        fmt=w.fmt,
                        block_size=w.block_size,
                        precision="int8",
                    )
                )
                for a in (x, bad)
            ]
        assert np.isnan(outs[1][1:3]).all(), (case, isa)
        keep = [i for i in range(m) if i not in (1, 2)]
        np.testing.assert_array_equal(outs[1][keep], outs[0][keep], err_msg=f"{case} {isa}")


def test_int8_precision_falls_back_to_float32_where_blocks_do_not_fit():
    rng = np.random.default_rng(29)
    for case in ("int8-b13", "int4-b26", "nf4-b10"):
        w = CASES[case][0](rng, 130, 33)
        x = jnp.asarray(rng.standard_normal((3, 130)), jnp.float32)
        got = [
            jaxcore_cpu.quantized_matmul(
                x, w.qvalue, w.scale, fmt=w.fmt, block_size=w.block_size, precision=p
            )
            for p in ("float32", "int8")
        ]
        np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(got[1]))


@pytest.mark.parametrize("case", ["int8-channel", "int4-b64", "nf4-b64"])
def test_int8_precision_above_m64_only_with_simd(case):
    # The portable kernels take int8 activations up to M = 64 and run float32 beyond; the
    # AVX2, AVX-VNNI and AVX-512 VNNI kernels take every M.
    rng = np.random.default_rng(37)
    w = CASES[case][0](rng, 128, 70)
    x = jnp.asarray(rng.standard_normal((70, 128)), jnp.float32)
    for isa in ISAS:
        with jaxcore_cpu.set_isa(isa):
            exact = jaxcore_cpu.quantized_matmul(
                x, w.qvalue, w.scale, fmt=w.fmt, block_size=w.block_size
            )
            got = jaxcore_cpu.quantized_matmul(
                x, w.qvalue, w.scale, fmt=w.fmt, block_size=w.block_size, precision="int8"
            )
        if isa != "portable":
            assert_int8_close(got, x, w.dense, f"{case} {isa} m=70")
            assert np.abs(as64(exact) - as64(got)).max() > 0, case  # the int8 path ran
        else:
            np.testing.assert_array_equal(np.asarray(got), np.asarray(exact), err_msg=isa)
