"""The plugin kernels lower for their real platforms, through the kernel registry.

``jax.export`` runs the real Triton (cuda, rocm) and Mosaic (tpu) lowerings on this
CPU-only machine (from jax 0.11 inside ``_jax_internals.lowering_target``, which names the
GPU lowered for). A jitted model-like function (two quantized layers, leading batch axes)
is exported for each platform and format; its StableHLO must contain the plugin's custom
call and the kernel's name, and nothing of the other backends. That proves the kernels are
registered for each platform and chosen by ``jax.lax.platform_dependent``, not assumed.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcore import _jax_internals, kernels, plugins, quant

_TRITON = "__gpu$xla.gpu.triton"
_MOSAIC = "tpu_custom_call"
_CUSTOM_CALL = {"cuda": _TRITON, "rocm": _TRITON, "tpu": _MOSAIC}


def _quantize(fmt, w, block_size, scale_dtype=None):
    if scale_dtype is not None:  # 16-bit scales; NF4 without double quantization
        cls = {"int8": quant.ArrayInt8, "int4": quant.ArrayInt4, "nf4": quant.ArrayNF4}[fmt]
        return cls.quantize(w, block_size=block_size, scale_dtype=scale_dtype)
    if fmt == "int8":
        return quant.ArrayInt8.quantize(w, block_size=block_size)
    if fmt == "int4":
        return quant.ArrayInt4.quantize(w, block_size)
    return quant.ArrayNF4.quantize(w, block_size, double_quant=True)


def _model(x, w1, w2):
    """A quantized MLP block: (B, T, D) -> (B, T, D)."""
    h = jax.nn.gelu(kernels.quantized_matmul(x, w1, preferred_element_type=jnp.float32))
    return kernels.quantized_matmul(h.astype(x.dtype), w2)


def _export(platform, fmt, tokens, scale_dtype=None):
    keys = jax.random.split(jax.random.key(0), 3)
    w1 = _quantize(fmt, jax.random.normal(keys[0], (256, 512)), 64, scale_dtype)
    w2 = _quantize(fmt, jax.random.normal(keys[1], (512, 256)), 128, scale_dtype)
    x = jax.ShapeDtypeStruct((2, tokens, 256), jnp.bfloat16)
    with _jax_internals.lowering_target(platform):
        exported = jax.export.export(
            jax.jit(_model),
            platforms=[platform],
            disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(_TRITON)],
        )(x, w1, w2)
    return exported, exported.mlir_module()


def test_plugins_serve_every_accelerator():
    assert set(plugins.info().platforms) >= {"cuda", "rocm", "tpu"}
    assert {"cpu", "cuda", "rocm", "tpu"} <= set(kernels.registered_kernels("quantized_matmul"))


@pytest.mark.parametrize("fmt", ["int8", "int4", "nf4"])
@pytest.mark.parametrize("platform", ["cuda", "rocm", "tpu"])
@pytest.mark.parametrize("tokens", [1, 64])  # decode (M = 2: split-K on GPU) and prefill
def test_export_contains_the_platform_kernel(platform, fmt, tokens):
    exported, text = _export(platform, fmt, tokens)
    assert exported.platforms == (platform,)
    assert exported.out_avals[0].shape == (2, tokens, 256)
    calls = re.findall(r"custom_call @([\w$.]+)", text)
    # One fused kernel per quantized layer; no other backend's kernel.
    assert calls.count(_CUSTOM_CALL[platform]) == 2, calls
    assert set(calls) == {_CUSTOM_CALL[platform]}
    assert f"jaxcore_quantized_matmul_{fmt}" in text


@pytest.mark.parametrize("scale_dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("platform", ["cuda", "rocm", "tpu"])
def test_16_bit_scales_lower(platform, scale_dtype):
    """The Triton kernel takes 16-bit scales as stored (no float32 copy before it); the TPU
    kernel reads float32, converted first."""
    exported, text = _export(platform, "int4", 1, scale_dtype)
    calls = re.findall(r"custom_call @([\w$.]+)", text)
    assert calls.count(_CUSTOM_CALL[platform]) == 2, calls
    short = {"float16": "f16", "bfloat16": "bf16"}[scale_dtype]
    converts = re.findall(rf"stablehlo.convert %\S+ : \(tensor<\d+x\d+x{short}>\)", text)
    assert len(converts) == (2 if platform == "tpu" else 0), converts


@pytest.mark.parametrize("platform,stages", [("cuda", 4), ("rocm", 2)])
def test_triton_launch_parameters_follow_the_block_table(platform, stages):
    _, text = _export(platform, "int8", 1)
    # Decode tiles: 16-row x 128-column programs with 4 warps (the jaxcore_gpu table);
    # the ROCm registration pipelines 2 stages to fit AMD's 64 KiB of LDS.
    assert re.findall(r"num_warps = (\d+) : i32", text) == ["4", "4"]
    assert re.findall(r"num_stages = (\d+) : i32", text) == [str(stages)] * 2
    grids = re.findall(r"grid_x = (\d+) : i32, grid_y = (\d+) : i32, grid_z = (\d+) : i32", text)
    # Layer 1: N = 512 -> 4 column tiles; layer 2: N = 256 -> 2 (grid order: M, N, split).
    assert sorted((int(gy) for _, gy, _ in grids)) == [2, 4]


def test_a_gpu_export_after_another_platforms_lowers_for_the_gpu():
    """The kernel's cached jaxpr is not reused across lowering targets: from jax 0.11 it
    records the abstract mesh, and one traced for tpu (no abstract GPU) broke a later cuda
    export of the same shapes."""
    for platform in ("tpu", "cpu", "cuda", "rocm", "tpu", "cuda"):
        _, text = _export(platform, "int8", 3)
        assert (_CUSTOM_CALL.get(platform, "custom_call") in text) == (platform != "cpu"), platform


def test_cpu_export_runs_the_reference():
    _, text = _export("cpu", "nf4", 4)
    assert _TRITON not in text and _MOSAIC not in text
    assert "jaxcore_quantized_matmul" not in text


def test_multi_platform_export_runs_on_cpu():
    """One artifact for cpu, cuda, rocm and tpu: each accelerator's kernel is lowered only
    for its own platform (the plugins bind it through per-platform lowering rules), and
    the artifact runs here with the reference's numbers."""
    keys = jax.random.split(jax.random.key(0), 3)
    w1 = _quantize("nf4", jax.random.normal(keys[0], (256, 512)), 64)
    w2 = _quantize("nf4", jax.random.normal(keys[1], (512, 256)), 64)
    x = jax.random.normal(keys[2], (2, 3, 256), jnp.float32)
    with _jax_internals.lowering_target("cuda"):
        exported = jax.export.export(
            jax.jit(_model),
            platforms=["cpu", "cuda", "rocm", "tpu"],
            disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(_TRITON)],
        )(x, w1, w2)
    calls = set(re.findall(r"custom_call @([\w$.]+)", exported.mlir_module()))
    assert calls == {_TRITON, _MOSAIC}
    # The artifact runs the portable reference on CPU; jit may run the native CPU plugin,
    # which sums in another order: float32 rounding over two layers (outputs up to ~300).
    np.testing.assert_allclose(
        np.asarray(exported.call(x, w1, w2)),
        np.asarray(jax.jit(_model)(x, w1, w2)),
        rtol=2e-5,
        atol=1e-3,
    )


def test_vmapped_model_exports_with_the_kernel():
    """vmap over activations folds the batch into the kernel's M (one call per layer)."""
    keys = jax.random.split(jax.random.key(0), 2)
    w1 = _quantize("int4", jax.random.normal(keys[0], (256, 512)), 64)
    w2 = _quantize("int4", jax.random.normal(keys[1], (512, 256)), 128)
    x = jax.ShapeDtypeStruct((5, 2, 8, 256), jnp.bfloat16)
    with _jax_internals.lowering_target("cuda"):
        exported = jax.export.export(
            jax.jit(jax.vmap(_model, in_axes=(0, None, None))),
            platforms=["cuda"],
            disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(_TRITON)],
        )(x, w1, w2)
    text = exported.mlir_module()
    assert re.findall(r"custom_call @([\w$.]+)", text) == [_TRITON, _TRITON]
    # M = 5 * 2 * 8 = 80 rows: the medium table's 64-row tiles give 2 row programs.
    grids = re.findall(r"grid_x = (\d+) : i32", text)
    assert grids == ["2", "2"]
