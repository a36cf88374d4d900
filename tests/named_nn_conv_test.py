"""``hax.nn.Conv``/``ConvTranspose`` against ``jax.lax.conv_general_dilated`` and
``jax.lax.conv_transpose``, and ``max_pool``/``min_pool``/``mean_pool`` against
``jax.lax.reduce_window`` and loops, including the error paths."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcore.named as hax

B, T, H, W, C, Co = hax.make_axes(B=2, T=3, H=9, W=7, C=4, O=6)
KEY = jax.random.key(0)


def _close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def _x(axes, seed=1):
    return hax.random.normal(jax.random.key(seed), axes)


def _nchw(x, spatial=("H", "W")):
    """The input as (N, C, *spatial) with the batch axes B, T flattened (reference layout)."""
    batch = [a for a in ("B", "T") if a in x._names]
    raw = x.rearrange((*batch, "C", *spatial)).array
    return raw.reshape((-1, *raw.shape[len(batch) :])), batch


def _ref_conv(conv, x, spatial=("H", "W"), **kw):
    lhs, batch = _nchw(x, spatial)
    n = len(spatial)
    letters = "HWD"[:n]
    y = jax.lax.conv_general_dilated(
        lhs,
        conv.weight.array,
        dimension_numbers=("NC" + letters, "OI" + letters, "NC" + letters),
        **kw,
    )
    if conv.bias is not None:
        y = y + conv.bias.array.reshape((-1,) + (1,) * n)
    return y.reshape(tuple(x.axis_size(b) for b in batch) + y.shape[1:])


@pytest.mark.parametrize(
    "kernel,stride,padding,dilation,groups",
    [
        (3, 1, 0, 1, 1),
        ((3, 2), (2, 1), ((1, 0), 1), (1, 2), 2),
        (2, 2, "SAME", 1, 1),
        ((1, 3), 1, "VALID", (1, 3), 2),
    ],
)
def test_conv2d_matches_conv_general_dilated(kernel, stride, padding, dilation, groups):
    conv = hax.nn.Conv.init(
        (H, W),
        C,
        Co,
        kernel,
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        key=KEY,
    )
    ks = (kernel, kernel) if isinstance(kernel, int) else kernel
    assert conv.weight.axes == (Co, C.resize(C.size // groups), H.resize(ks[0]), W.resize(ks[1]))
    # batch axes anywhere, and more than one of them
    x = _x((H, B, C, W, T))
    y = conv(x)
    st = (stride, stride) if isinstance(stride, int) else stride
    dl = (dilation, dilation) if isinstance(dilation, int) else dilation
    pads = padding if isinstance(padding, str) else conv.padding
    ref = _ref_conv(
        conv, x, window_strides=st, padding=pads, rhs_dilation=dl, feature_group_count=groups
    )
    assert y._names == ("H", "B", "O", "W", "T")  # input order, In -> Out
    _close(y.rearrange(("B", "T", "O", "H", "W")).array, ref)
    if not isinstance(padding, str):
        (lo_h, hi_h), (lo_w, hi_w) = conv.padding
        assert y.axis_size("H") == (9 + lo_h + hi_h - dl[0] * (ks[0] - 1) - 1) // st[0] + 1
        assert y.axis_size("W") == (7 + lo_w + hi_w - dl[1] * (ks[1] - 1) - 1) // st[1] + 1


def test_conv1d_and_3d_without_bias_and_without_batch_axes():
    L = hax.Axis("L", 11)
    conv1 = hax.nn.Conv.init(L, C, Co, 3, stride=2, padding=1, use_bias=False, key=KEY)
    assert conv1.bias is None
    x = _x((C, L))
    y = conv1(x)
    assert y.axes == (Co, L.resize(6))
    ref = jax.lax.conv_general_dilated(
        x.array[None], conv1.weight.array, (2,), ((1, 1),), dimension_numbers=("NCH", "OIH", "NCH")
    )[0]
    _close(y.array, ref)
    D = hax.Axis("D", 5)
    conv3 = hax.nn.Conv.init((H, W, D), C, Co, (3, 3, 2), key=KEY)
    x3 = _x((B, H, W, D, C))
    y3 = conv3(x3)
    assert y3.axes == (B, H.resize(7), W.resize(5), D.resize(4), Co)
    ref3 = _ref_conv(conv3, x3, ("H", "W", "D"), window_strides=(1, 1, 1), padding="VALID")
    _close(y3.rearrange(("B", "O", "H", "W", "D")).array, ref3)


def test_conv_jits_and_differentiates_like_the_reference():
    conv = hax.nn.Conv.init((H, W), C, Co, 3, padding=1, key=KEY)
    x = _x((B, C, H, W))

    def loss(conv, x):
        return (conv(x).array ** 2).sum()

    def ref_loss(conv, x):
        return (_ref_conv(conv, x, window_strides=(1, 1), padding=((1, 1), (1, 1))) ** 2).sum()

    g = jax.jit(jax.grad(loss))(conv, x)
    r = jax.grad(ref_loss)(conv, x)
    assert g.weight.axes == conv.weight.axes
    _close(g.weight.array, r.weight.array, 1e-4)
    _close(g.bias.array, r.bias.array, 1e-4)


@pytest.mark.parametrize(
    "kernel,stride,padding,output_padding,dilation",
    [(3, 2, 1, 1, 1), ((2, 3), (1, 2), ((0, 1), 2), (0, 1), (2, 1)), (4, 3, 0, 2, 1)],
)
def test_conv_transpose_matches_lax_conv_transpose(
    kernel, stride, padding, output_padding, dilation
):
    ct = hax.nn.ConvTranspose.init(
        (H, W),
        C,
        Co,
        kernel,
        stride=stride,
        padding=padding,
        output_padding=output_padding,
        dilation=dilation,
        key=KEY,
    )
    x = _x((B, H, W, C))
    y = ct(x)
    ks = (kernel,) * 2 if isinstance(kernel, int) else kernel
    st = (stride,) * 2 if isinstance(stride, int) else stride
    dl = (dilation,) * 2 if isinstance(dilation, int) else dilation
    op = (output_padding,) * 2 if isinstance(output_padding, int) else output_padding
    pads = [
        (d * (k - 1) - lo, d * (k - 1) - hi + o)
        for k, (lo, hi), o, d in zip(ks, ct.padding, op, dl)
    ]
    lhs, _ = _nchw(x)
    ref = jax.lax.conv_transpose(
        lhs, ct.weight.array, st, pads, rhs_dilation=dl, dimension_numbers=("NCHW", "OIHW", "NCHW")
    )
    ref = ref + ct.bias.array[:, None, None]
    assert y._names == ("B", "H", "W", "O")
    _close(y.rearrange(("B", "O", "H", "W")).array, ref)
    for name, n, k, s, d, (lo, hi), o in zip(("H", "W"), (9, 7), ks, st, dl, ct.padding, op):
        assert y.axis_size(name) == (n - 1) * s - lo - hi + d * (k - 1) + o + 1


def test_grouped_conv_transpose_matches_conv_general_dilated():
    ct = hax.nn.ConvTranspose.init(W, C, Co, 3, stride=2, groups=2, key=KEY)
    x = _x((C, W))
    y = ct(x)
    ref = (
        jax.lax.conv_general_dilated(
            x.array[None],
            ct.weight.array,
            (1,),
            ((2, 2),),
            lhs_dilation=(2,),
            feature_group_count=2,
            dimension_numbers=("NCH", "OIH", "NCH"),
        )[0]
        + ct.bias.array[:, None]
    )
    assert y.axes == (Co, W.resize(15))
    _close(y.array, ref)


def test_conv_errors_name_the_axis():
    conv = hax.nn.Conv.init((H, W), C, Co, 3, key=KEY)
    with pytest.raises(ValueError, match=r"lacks the spatial axis 'W'"):
        conv(_x((B, H, C)))
    with pytest.raises(ValueError, match=r"lacks the input channel axis 'C'"):
        conv(_x((B, H, W)))
    with pytest.raises(ValueError, match=r"input channel axis 'C' has size 5, the layer expects 4"):
        conv(_x((H, W, C.resize(5))))
    with pytest.raises(ValueError, match=r"already has the output axis 'O'"):
        conv(_x((H, W, C, Co)))
    with pytest.raises(TypeError, match="needs a NamedArray input"):
        conv(jnp.ones((9, 7, 4)))
    with pytest.raises(ValueError, match="groups=3 must divide both In"):
        hax.nn.Conv.init((H, W), C, Co, 3, groups=3, key=KEY)
    with pytest.raises(
        ValueError, match=r"kernel_size must be an int or one int per spatial axis \('H', 'W'\)"
    ):
        hax.nn.Conv.init((H, W), C, Co, (3, 3, 3), key=KEY)
    with pytest.raises(ValueError, match="padding needs one entry per spatial axis"):
        hax.nn.Conv.init((H, W), C, Co, 3, padding=(1, 2, 3), key=KEY)
    with pytest.raises(ValueError, match="padding must be 'SAME'"):
        hax.nn.Conv.init((H, W), C, Co, 3, padding="FULL", key=KEY)
    with pytest.raises(ValueError, match="channel axis \\['C'\\] is also a spatial axis"):
        hax.nn.Conv.init((H, C), C, Co, 3, key=KEY)
    with pytest.raises(ValueError, match="Spatial needs at least one axis"):
        hax.nn.Conv.init((), C, Co, 3, key=KEY)
    with pytest.raises(ValueError, match="output_padding 2 on axis 'H' must be >= 0 and smaller"):
        hax.nn.ConvTranspose.init((H, W), C, Co, 3, stride=2, output_padding=(2, 0), key=KEY)
    with pytest.raises(ValueError, match="padding must be ints or"):
        hax.nn.ConvTranspose.init((H, W), C, Co, 3, padding="SAME", key=KEY)
    with pytest.raises(ValueError, match=r"lacks the spatial axis 'H'"):
        hax.nn.ConvTranspose.init((H, W), C, Co, 3, key=KEY)(_x((W, C)))


# ------------------------------------------------------------------------------ pooling


def _ref_pool(x, init, fn, window, strides, pads):
    return jax.lax.reduce_window(x, init, fn, window, strides, pads)


def test_max_min_mean_pool_match_reduce_window():
    x = _x((B, H, W, C))
    win = (H.resize(3), W.resize(2))
    dims, st = (1, 3, 2, 1), (1, 2, 2, 1)
    pads = ((0, 0),) * 4
    mx = hax.nn.max_pool(win, x, stride=2)
    assert mx.axes == (B, H.resize(4), W.resize(3), C)
    _close(mx.array, _ref_pool(x.array, -jnp.inf, jax.lax.max, dims, st, pads))
    mn = hax.nn.min_pool({"H": 3, "W": 2}, x, stride=(2, 2))
    _close(mn.array, _ref_pool(x.array, jnp.inf, jax.lax.min, dims, st, pads))
    me = hax.nn.mean_pool(win, x, stride=2)
    _close(me.array, _ref_pool(x.array, 0.0, jax.lax.add, dims, st, pads) / 6)
    # window axes in another order than the input's, stride per window axis
    x2 = _x((W, C, H))
    y2 = hax.nn.max_pool((H.resize(2), W.resize(3)), x2, stride=(1, 2))
    assert y2.axes == (W.resize(3), C, H.resize(8))
    _close(
        y2.array, _ref_pool(x2.array, -jnp.inf, jax.lax.max, (3, 1, 2), (2, 1, 1), ((0, 0),) * 3)
    )


def test_pool_padding_same_ceil_and_count_include_pad():
    x = _x((H, C))
    win = H.resize(4)
    # SAME: size ceil(9 / 2) = 5; the mean counts only real elements unless asked
    same = hax.nn.mean_pool(win, x, stride=2, padding="SAME")
    assert same.axes == (H.resize(5), C)
    pads = jax.lax.padtype_to_pads((9,), (4,), (2,), "SAME")
    tot = _ref_pool(x.array, 0.0, jax.lax.add, (4, 1), (2, 1), (pads[0], (0, 0)))
    cnt = _ref_pool(jnp.ones((9, 1)), 0.0, jax.lax.add, (4, 1), (2, 1), (pads[0], (0, 0)))
    _close(same.array, tot / cnt)
    incl = hax.nn.mean_pool(win, x, stride=2, padding="SAME", count_include_pad=True)
    _close(incl.array, tot / 4)
    # use_ceil keeps the last partial window: PyTorch's ceil_mode sizes
    for n, k, s, p in [(9, 4, 2, 0), (9, 3, 3, 1), (10, 2, 2, 0), (7, 3, 2, 1)]:
        xx = _x((H.resize(n), C))
        y = hax.nn.max_pool(H.resize(k), xx, stride=s, padding=p, use_ceil=True)
        assert y.axis_size("H") == -(-(n + 2 * p - k) // s) + 1
        m = hax.nn.mean_pool(H.resize(k), xx, stride=s, padding=p, use_ceil=True)
        assert m.axes == y.axes
        # each output is the mean over the real elements its window covers
        raw = np.asarray(xx.array)
        for i in range(y.axis_size("H")):
            lo, hi = max(i * s - p, 0), min(i * s - p + k, n)
            _close(m.array[i], raw[lo:hi].mean(0))
            _close(y.array[i], raw[lo:hi].max(0))
    # explicit (low, high) pairs
    y = hax.nn.min_pool(H.resize(2), x, padding=((1, 0),))
    assert y.axes == (H.resize(9), C)
    _close(y.array, _ref_pool(x.array, jnp.inf, jax.lax.min, (2, 1), (1, 1), ((1, 0), (0, 0))))


def test_max_pool_on_integers_and_generic_pool_with_hax_reductions():
    xi = hax.named(jnp.arange(-20, 16).reshape(9, 4), (H, C))
    y = hax.nn.max_pool(H.resize(3), xi, stride=3, padding=1)
    assert y.dtype == jnp.int32 or y.dtype == jnp.int64
    _close(y.array, jnp.stack([xi.array[0:2].max(0), xi.array[2:5].max(0), xi.array[5:8].max(0)]))
    s = hax.nn.pool.pool(H.resize(3), xi, 0, hax.sum, stride=3)
    _close(s.array, xi.array.reshape(3, 3, 4).sum(1))


def test_pool_gradients_match_the_reference():
    x = _x((B, H, C))

    def loss(x):
        return (
            hax.nn.max_pool(H.resize(2), x, stride=2).array.sum()
            + hax.nn.mean_pool(H.resize(3), x, padding=1).array.sum()
        )

    def ref(raw):
        a = _ref_pool(raw, -jnp.inf, jax.lax.max, (1, 2, 1), (1, 2, 1), ((0, 0),) * 3).sum()
        t = _ref_pool(raw, 0.0, jax.lax.add, (1, 3, 1), (1, 1, 1), ((0, 0), (1, 1), (0, 0)))
        c = _ref_pool(
            jnp.ones((1, 9, 1)), 0.0, jax.lax.add, (1, 3, 1), (1, 1, 1), ((0, 0), (1, 1), (0, 0))
        )
        return a + (t / c).sum()

    _close(jax.jit(jax.grad(loss))(x).array, jax.grad(ref)(x.array))


def test_pool_errors_name_the_axis():
    x = _x((B, H, C))
    with pytest.raises(
        ValueError, match=r"max_pool: input with axes \(B=2, H=9, C=4\) lacks the window axis 'W'"
    ):
        hax.nn.max_pool(W.resize(2), x)
    with pytest.raises(
        ValueError, match=r"stride must be a positive int or one per window axis \('H',\)"
    ):
        hax.nn.max_pool(H.resize(2), x, stride=(1, 2))
    with pytest.raises(ValueError, match="padding needs one entry per window axis"):
        hax.nn.mean_pool(H.resize(2), x, padding=((1, 1), (1, 1)))
    with pytest.raises(ValueError, match="padding must be 'SAME' or 'VALID'"):
        hax.nn.min_pool(H.resize(2), x, padding="FULL")
    with pytest.raises(ValueError, match="window 12 on axis 'H' is larger than the axis"):
        hax.nn.max_pool(H.resize(12), x)
    with pytest.raises(TypeError, match="Window entries must be Axis objects"):
        hax.nn.max_pool(("H",), x)
    with pytest.raises(TypeError, match="needs a NamedArray input"):
        hax.nn.pool.pool(H.resize(2), x.array, 0.0, jax.lax.add)
