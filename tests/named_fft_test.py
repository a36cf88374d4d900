"""The named FFT family against ``jnp.fft`` on the same positional data."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.named as hax

X, Y, T = hax.make_axes(X=4, Y=6, time=8)
_rng = np.random.default_rng(1)


def _image(dtype=np.float32):
    raw = _rng.normal(size=(4, 6)).astype(dtype)
    return raw, hax.NamedArray(jnp.asarray(raw), (X, Y))


def _close(named, want, axes):
    assert named.axes == tuple(axes)
    np.testing.assert_allclose(np.asarray(named.array), np.asarray(want), rtol=1e-4, atol=1e-4)


def test_axis_forms_of_fft():
    raw, img = _image()
    _close(hax.fft(img), jnp.fft.fft(raw, axis=-1), (X, Y))
    _close(hax.fft(img, axis="X"), jnp.fft.fft(raw, axis=0), (X, Y))
    _close(
        hax.fft(img, axis=hax.Axis("Y", 10)), jnp.fft.fft(raw, n=10, axis=1), (X, hax.Axis("Y", 10))
    )
    _close(hax.fft(img, axis=("X", "Y")), jnp.fft.fftn(raw, axes=(0, 1)), (X, Y))
    _close(hax.fft(img, axis=("Y", X)), jnp.fft.fftn(raw, axes=(1, 0)), (X, Y))
    _close(
        hax.fft(img, axis={"X": None, "Y": hax.Axis("Y", 10)}),
        jnp.fft.fftn(raw, s=(4, 10), axes=(0, 1)),
        (X, hax.Axis("Y", 10)),
    )
    _close(hax.fft(img, axis={"Y": 3}), jnp.fft.fftn(raw, s=(3,), axes=(1,)), (X, hax.Axis("Y", 3)))
    _close(hax.fft(img, axis={"Y": None}), jnp.fft.fft(raw, axis=1), (X, Y))
    _close(hax.fft(img, axis="Y", norm="ortho"), jnp.fft.fft(raw, axis=1, norm="ortho"), (X, Y))


def test_inverse_and_real_transforms():
    raw, img = _image()
    spec = hax.fft(img, axis=("X", "Y"))
    _close(hax.ifft(spec, axis=("X", "Y")), raw.astype(np.complex64), (X, Y))
    _close(hax.ifft(spec, axis="Y"), jnp.fft.ifft(jnp.fft.fftn(raw), axis=1), (X, Y))
    half = hax.rfft(img, axis="Y")
    _close(half, jnp.fft.rfft(raw, axis=1), (X, hax.Axis("Y", 4)))
    _close(
        hax.irfft(half, axis="Y"),
        jnp.fft.irfft(jnp.fft.rfft(raw, axis=1), axis=1),
        (X, hax.Axis("Y", 6)),
    )
    _close(
        hax.irfft(half, axis=hax.Axis("Y", 7)),
        jnp.fft.irfft(jnp.fft.rfft(raw, axis=1), n=7, axis=1),
        (X, hax.Axis("Y", 7)),
    )
    both = hax.rfft(img, axis=("X", "Y"))
    _close(both, jnp.fft.rfftn(raw, axes=(0, 1)), (X, hax.Axis("Y", 4)))
    _close(hax.irfft(both, axis=("X", "Y")), raw, (X, Y))
    _close(
        hax.irfft(both, axis={"X": 8, "Y": None}),
        jnp.fft.irfftn(jnp.fft.rfftn(raw), s=(8, 6), axes=(0, 1)),
        (hax.Axis("X", 8), Y),
    )
    _close(
        hax.hfft(half, axis="Y"),
        jnp.fft.hfft(jnp.fft.rfft(raw, axis=1), axis=1),
        (X, hax.Axis("Y", 6)),
    )
    _close(hax.ihfft(img, axis="X"), jnp.fft.ihfft(raw, axis=0), (hax.Axis("X", 3), Y))


def test_shifts_and_frequencies():
    raw, img = _image()
    _close(hax.fftshift(img), jnp.fft.fftshift(raw), (X, Y))
    _close(hax.fftshift(img, axes="Y"), jnp.fft.fftshift(raw, axes=(1,)), (X, Y))
    _close(hax.ifftshift(img, axes=("Y", X)), jnp.fft.ifftshift(raw, axes=(1, 0)), (X, Y))
    _close(hax.fftfreq(T, d=0.5), jnp.fft.fftfreq(8, 0.5), (T,))
    _close(hax.rfftfreq(T), jnp.fft.rfftfreq(8), (hax.Axis("time", 5),))


def test_jit_grad_vmap():
    raw, img = _image()
    _close(
        jax.jit(lambda a: hax.rfft(a, axis="X"))(img),
        jnp.fft.rfft(raw, axis=0),
        (hax.Axis("X", 3), Y),
    )

    def loss(a):
        return jnp.sum(jnp.abs(hax.fft(a, axis="Y").array) ** 2)

    g = jax.grad(loss)(img)
    want = jax.grad(lambda r: jnp.sum(jnp.abs(jnp.fft.fft(r, axis=1)) ** 2))(jnp.asarray(raw))
    _close(g, want, (X, Y))
    stacked = np.stack([raw, raw * 2])
    out = jax.vmap(lambda r: hax.fft(hax.NamedArray(r, (X, Y)), axis="X").array)(
        jnp.asarray(stacked)
    )
    np.testing.assert_allclose(np.asarray(out), np.fft.fft(stacked, axis=1), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "call, exc, message",
    [
        (lambda a: hax.fft(a, axis="Z"), ValueError, "fft: axis 'Z' is not in the array"),
        (lambda a: hax.fft(a, axis=("X", "X")), ValueError, "fft: axis 'X' is selected twice"),
        (lambda a: hax.fft(a, axis=()), ValueError, "fft: axis selects no axes"),
        (lambda a: hax.fft(a, axis=3), TypeError, "fft: axis must be None"),
        (lambda a: hax.fft(a, axis={"Y": 0}), ValueError, "must be positive"),
        (lambda a: hax.fft(a, axis={"Y": 2.5}), TypeError, "must be an int, an Axis or None"),
        (lambda a: hax.fft(a, axis={"Y": hax.Axis("Q", 3)}), ValueError, "which has another name"),
        (lambda a: hax.fft(a, axis=(1,)), TypeError, "axes are given as Axis or names"),
        (lambda a: hax.hfft(a, axis=("X", "Y")), ValueError, "hfft transforms one axis only"),
        (
            lambda a: hax.ihfft(a, axis={"X": None, "Y": None}),
            ValueError,
            "ihfft transforms one axis only",
        ),
        (lambda a: hax.fft(np.ones(3)), TypeError, "fft expects a NamedArray"),
        (
            lambda a: hax.fft(hax.NamedArray(jnp.float32(1), ())),
            ValueError,
            "the array is a scalar",
        ),
        (lambda a: hax.fftshift(np.ones(3)), TypeError, "fftshift expects a NamedArray"),
        (lambda a: hax.fftfreq("time"), TypeError, "fftfreq needs an Axis"),
        (lambda a: hax.rfftfreq("time"), TypeError, "rfftfreq needs an Axis"),
    ],
)
def test_errors(call, exc, message):
    _, img = _image()
    with pytest.raises(exc, match=re.escape(message)):
        call(img)
