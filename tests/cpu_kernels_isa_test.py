"""jaxcore_cpu's instruction sets: which the CPU runs, pinning one, and which CPUs the
registry's implementations give the native kernels at which M (the rest go to jaxcore's
reference kernel, faster where only the portable kernels exist).

x86-64 and aarch64 each have their own ladder (``available_isas``); the serving policy is
checked on this machine's library with ``detected_isa`` patched to each kind of CPU. Needs
``libjaxcore_cpu_kernels.so`` as ``cpu_kernels_test.py`` does.
"""

import functools

import jax
import jax.numpy as jnp
import kernel_test_util
import numpy as np
import pytest

import jaxcore_cpu
from jaxcore import quant

kernel_test_util.require_native_cpu_kernels()

TARGET = "jaxcore_cpu_quantized_matmul"
ISAS = jaxcore_cpu.available_isas()
np_dequant = kernel_test_util.numpy_dense
assert_int8_close = kernel_test_util.assert_int8_close


# ----------------------------------------------------------------------------- instruction sets


def test_isa_controls():
    detected = jaxcore_cpu.detected_isa()
    assert detected in jaxcore_cpu.ISAS and ISAS[-1] == detected and ISAS[0] == "portable"
    assert jaxcore_cpu.isa() == detected
    with jaxcore_cpu.set_isa("portable") as setting:
        assert jaxcore_cpu.isa() == "portable"
        assert (setting.previous, setting.current) == (detected, "portable")
    assert jaxcore_cpu.isa() == detected
    with pytest.raises(
        ValueError,
        match=r"unknown instruction set 'sse9'; expected one of "
        r"\('portable', 'avx2', 'avxvnni', 'avx512', 'amx', 'dotprod'\)",
    ):
        jaxcore_cpu.set_isa("sse9")
    # Every other instruction set, the other architecture's included, is refused by name.
    for missing in [name for name in jaxcore_cpu.ISAS if name not in ISAS]:
        with pytest.raises(
            ValueError, match=f"this CPU cannot run the '{missing}' kernels .* up to '{detected}'"
        ):
            jaxcore_cpu.set_isa(missing)
    assert jaxcore_cpu.isa() == detected


# ------------------------------------------------- CPUs with only the portable kernels


def test_available_isas_follow_the_machines_ladder(monkeypatch):
    from jaxcore_cpu import _library

    for detected, ladder in [
        ("portable", ("portable",)),
        ("avx2", ("portable", "avx2")),
        ("avx512", ("portable", "avx2", "avxvnni", "avx512")),
        ("amx", ("portable", "avx2", "avxvnni", "avx512", "amx")),
        ("dotprod", ("portable", "dotprod")),
    ]:
        monkeypatch.setattr(_library, "detected_isa", lambda d=detected: d)
        assert jaxcore_cpu.available_isas() == ladder, detected


def test_dotprod_cpu_keeps_int8_precision_native_to_64_rows(monkeypatch):
    """aarch64 with sdot: the int8-activation kernels take M <= 64 (kInt8MaxM; the C++ planner
    runs larger M in float32 on the portable kernels); float32 precision is as portable."""
    from jaxcore_cpu import _library, _matmul

    monkeypatch.setattr(_library, "detected_isa", lambda: "dotprod")
    assert _matmul._native_serves(64, "int8") and not _matmul._native_serves(65, "int8")
    assert _matmul._native_serves(1, "float32") and not _matmul._native_serves(2, "float32")
    monkeypatch.setattr(_library, "detected_isa", lambda: "portable")
    assert _matmul._native_serves(1, "int8") and not _matmul._native_serves(2, "int8")


@pytest.mark.parametrize("precision", ["float32", "int8"])
def test_portable_only_cpu_gives_the_reference_kernel_all_but_one_row(monkeypatch, precision):
    """Where the CPU has no SIMD table (aarch64 without sdot), the registry's implementations
    leave M > 1 to the reference kernel (faster there) and keep M = 1; with sdot ("dotprod")
    int8 precision stays native to M = 64; the direct API stays native."""
    from jaxcore_cpu import _library, _matmul

    impl = _matmul.IMPLS_BY_PRECISION[precision]
    dq_impl = _matmul.DQ_IMPLS_BY_PRECISION[precision]
    rng = np.random.default_rng(31)
    w = quant.ArrayNF4.quantize(jnp.asarray(rng.standard_normal((128, 96)), jnp.float32), 64)
    wdq = quant.ArrayNF4.quantize(
        jnp.asarray(rng.standard_normal((128, 96)), jnp.float32), 64, double_quant=True
    )
    static = dict(fmt="nf4", block_size=64, out_dtype=np.dtype(np.float32))

    def lowered(fn, *args):
        return jax.jit(functools.partial(fn, **static)).lower(*args).as_text()

    # aarch64 with sdot ("dotprod") adds int8-activation kernels only: float32 stays as portable.
    dotprod_rows = (1, 2, 16) if precision == "int8" else (1,)
    cases = [
        ("portable", (1,)),
        ("dotprod", dotprod_rows),
        (jaxcore_cpu.detected_isa(), (1, 2, 16)),
    ]
    for detected, native_rows in cases:
        monkeypatch.setattr(_library, "detected_isa", lambda d=detected: d)
        for m in (1, 2, 16):
            x = jnp.asarray(rng.standard_normal((m, 128)), jnp.float32)
            plain = lowered(impl, x, w.qvalue, w.scale)
            dq = lowered(dq_impl, x, wdq.qvalue, wdq.scale, wdq.scale_group_scale, wdq.scale_offset)
            native = m in native_rows
            assert (TARGET in plain) == native, (detected, m)
            assert ("jaxcore_cpu_quantized_matmul_dq" in dq) == native, (detected, m)
            got = impl(x, w.qvalue, w.scale, **static)
            assert_int8_close(got, x, np_dequant("nf4", w.qvalue, w.scale, 64), (detected, m))
            got_dq = dq_impl(
                x, wdq.qvalue, wdq.scale, wdq.scale_group_scale, wdq.scale_offset, **static
            )
            np.testing.assert_allclose(
                np.asarray(got_dq),
                np.asarray(x @ wdq.materialize()),
                rtol=2e-2,
                atol=2e-2 * float(np.abs(np.asarray(x @ wdq.materialize())).max()),
            )
    monkeypatch.setattr(_library, "detected_isa", lambda: "portable")
    direct = jax.jit(
        lambda x: jaxcore_cpu.quantized_matmul(x, w.qvalue, w.scale, fmt="nf4", block_size=64)
    )
    assert TARGET in direct.lower(jnp.zeros((16, 128), jnp.float32)).as_text()
