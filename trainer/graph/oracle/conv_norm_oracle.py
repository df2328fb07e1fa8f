#!/usr/bin/python3
"""PyTorch oracle for the convolution, pooling and normalization layers' tests.

Usage: conv_norm_oracle.py CASE   (CASE "list" prints the case names)

For one case it draws an input, the layer's weights in Keras's layouts and a random output
gradient, computes with PyTorch (float64) what Keras computes, and prints JSON:
  layer      the Keras layer object ({"class_name", "config"}) the C++ test builds
  keras3     which Keras wrote it
  training   the call's training flag
  x, dout    the input and dL/d(output)
  weights    {name: tensor} in Keras's layouts, loaded before the call
  y, dx      the output and dL/dx for L = sum(y * dout)
  dweights   {name: dL/dweight} for the trainable weights, in Keras's layouts
  after      {name: tensor} the non-trainable weights after the call (moving statistics)
Tensors are {"shape": [...], "data": [...]}. Exits 77 when torch cannot be imported.

Where Keras and PyTorch differ, and what this script does about it:
- Layout: Keras is channels-last (NHWC) with kernels [kh, kw, in, out]; PyTorch is NCHW with
  weights [out, in, kh, kw]. The input is permuted in and the output back; the Keras-layout
  weight tensors are the autograd leaves and are permuted inside the graph, so their
  gradients come out in Keras's layout.
- "same" padding: Keras (TensorFlow) pads total = max((ceil(in/s) - 1) * s + (k - 1) * d + 1
  - in, 0) with total // 2 before and the rest after (one more at the end when odd); PyTorch
  pads both sides alike. The script pads explicitly with F.pad and convolves unpadded.
  "causal" (Conv1D) pads (k - 1) * d before only.
- Max pooling with "same" pads with -inf (padding never wins); average pooling with "same"
  divides by the number of real inputs in each window (TensorFlow), not by the window size,
  and PyTorch's count_include_pad=False only knows symmetric padding: the script sums over a
  zero-padded input and divides by a pooled count of ones.
- Conv2DTranspose: Keras's output length is deconv_output_length (same: in * s; valid:
  in * s + max(k - s, 0); with output_padding: (in - 1) * s + k - 2 * pad + output_padding,
  pad = k // 2 for same) and TensorFlow places the result with the padding of the forward
  convolution of that length (before = max((in - 1) * s + k - out, 0) // 2 for same). The
  script runs PyTorch's unpadded transposed convolution ((in - 1) * s + k long) and crops or
  zero-extends it to that window. Kernels: Keras [kh, kw, filters, in], PyTorch [in, filters,
  kh, kw].
- DepthwiseConv2D: Keras [kh, kw, in, multiplier] with output channel c * multiplier + m is
  PyTorch's grouped convolution (groups = in) with weight [in * multiplier, 1, kh, kw].
- BatchNormalization: Keras's momentum is the weight of the old moving value
  (moving * momentum + batch * (1 - momentum)); PyTorch's momentum is the weight of the new
  one. Keras updates the moving variance with the biased batch variance (the same one it
  normalises with); PyTorch updates running_var with the unbiased one. The script normalises
  with F.batch_norm (biased variance, as both do) and computes the moving statistics itself.
  A frozen Keras layer (trainable=False) runs in inference mode even in training.
- Bilinear UpSampling2D: tf.image.resize's half-pixel centres equal PyTorch's
  align_corners=False (both clamp source positions below 0 to 0).
"""

import json
import sys

try:
    import torch
    import torch.nn.functional as F
except Exception as e:  # pylint: disable=broad-except
    print("import torch failed: %s" % e)
    sys.exit(77)

torch.set_default_dtype(torch.float64)


def T(t):
    t = t.detach().to(torch.float64).contiguous()
    return {"shape": list(t.shape), "data": [float(v) for v in t.reshape(-1).tolist()]}


def rand(shape, lo=-1.0, hi=1.0):
    return torch.rand(*shape) * (hi - lo) + lo


def same_pads(size, k, s, d=1):
    out = (size + s - 1) // s
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


def pad_spatial(x_cf, pads, value=0.0):
    """x channels-first [N, C, *spatial]; pads per spatial axis (before, after)."""
    flat = []
    for before, after in reversed(pads):
        flat += [before, after]
    return F.pad(x_cf, flat, mode="constant", value=value)


def to_cf(x):  # channels-last -> channels-first
    return x.permute(0, x.dim() - 1, *range(1, x.dim() - 1))


def to_cl(x):  # channels-first -> channels-last
    return x.permute(0, *range(2, x.dim()), 1)


def conv_kernel_to_torch(k):  # [k..., in, out] -> [out, in, k...]
    r = k.dim() - 2
    return k.permute(r + 1, r, *range(r))


def initializer(name):
    return {"class_name": name, "config": {}}


def conv_config(cls, name, filters, kernel, strides, padding, dilation, activation, use_bias):
    return {
        "class_name": cls,
        "config": {
            "name": name, "trainable": True, "dtype": "float32", "filters": filters,
            "kernel_size": kernel, "strides": strides, "padding": padding,
            "data_format": "channels_last", "dilation_rate": dilation, "groups": 1,
            "activation": activation, "use_bias": use_bias,
            "kernel_initializer": {"class_name": "GlorotUniform", "config": {"seed": None}},
            "bias_initializer": initializer("Zeros"), "kernel_regularizer": None,
            "bias_regularizer": None, "activity_regularizer": None, "kernel_constraint": None,
            "bias_constraint": None,
        },
    }


ACT = {"linear": lambda v: v, "tanh": torch.tanh, "sigmoid": torch.sigmoid}


def conv_case(rank, x_shape, filters, kernel, strides, padding, dilation, activation):
    cls = "Conv%dD" % rank
    x = rand(x_shape)
    cin = x_shape[-1]
    kernel_w = rand(list(kernel) + [cin, filters], -0.5, 0.5).requires_grad_()
    bias = rand([filters], -0.5, 0.5).requires_grad_()
    xr = x.clone().requires_grad_()
    xc = to_cf(xr)
    spatial = x_shape[1:-1]
    if padding == "same":
        pads = [same_pads(spatial[i], kernel[i], strides[i], dilation[i]) for i in range(rank)]
    elif padding == "causal":
        pads = [((kernel[0] - 1) * dilation[0], 0)]
    else:
        pads = [(0, 0)] * rank
    xc = pad_spatial(xc, pads)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[rank]
    y = conv(xc, conv_kernel_to_torch(kernel_w), bias, stride=strides, dilation=dilation)
    y = ACT[activation](to_cl(y))
    layer = conv_config(cls, "conv", filters, kernel, strides, padding, dilation, activation,
                        True)
    return finish(layer, xr, y, {"kernel": kernel_w, "bias": bias})


def depthwise_case():
    x_shape, kernel, strides, mult = [2, 8, 7, 3], [3, 3], [2, 2], 2
    x = rand(x_shape)
    cin = x_shape[-1]
    dw = rand(kernel + [cin, mult], -0.5, 0.5).requires_grad_()
    bias = rand([cin * mult], -0.5, 0.5).requires_grad_()
    xr = x.clone().requires_grad_()
    pads = [same_pads(x_shape[1 + i], kernel[i], strides[i]) for i in range(2)]
    xc = pad_spatial(to_cf(xr), pads)
    w = dw.permute(2, 3, 0, 1).reshape(cin * mult, 1, *kernel)
    y = to_cl(F.conv2d(xc, w, bias, stride=strides, groups=cin))
    layer = {
        "class_name": "DepthwiseConv2D",
        "config": {
            "name": "dw", "trainable": True, "dtype": "float32", "depth_multiplier": mult,
            "kernel_size": kernel, "strides": strides, "padding": "same",
            "data_format": "channels_last", "dilation_rate": [1, 1], "activation": "linear",
            "use_bias": True, "depthwise_initializer": initializer("GlorotUniform"),
            "bias_initializer": initializer("Zeros"), "depthwise_regularizer": None,
            "bias_regularizer": None, "activity_regularizer": None,
            "depthwise_constraint": None, "bias_constraint": None,
        },
    }
    return finish(layer, xr, y, {"depthwise_kernel": dw, "bias": bias}, keras3=True)


def separable_case():
    x_shape, kernel, filters, mult = [2, 6, 7, 3], [3, 2], 4, 2
    x = rand(x_shape)
    cin = x_shape[-1]
    dw = rand(kernel + [cin, mult], -0.5, 0.5).requires_grad_()
    pw = rand([1, 1, cin * mult, filters], -0.5, 0.5).requires_grad_()
    bias = rand([filters], -0.5, 0.5).requires_grad_()
    xr = x.clone().requires_grad_()
    pads = [same_pads(x_shape[1 + i], kernel[i], 1) for i in range(2)]
    xc = pad_spatial(to_cf(xr), pads)
    mid = F.conv2d(xc, dw.permute(2, 3, 0, 1).reshape(cin * mult, 1, *kernel), groups=cin)
    y = to_cl(F.conv2d(mid, conv_kernel_to_torch(pw), bias))
    layer = {
        "class_name": "SeparableConv2D",
        "config": {
            "name": "sep", "trainable": True, "filters": filters, "kernel_size": kernel,
            "strides": [1, 1], "padding": "same", "data_format": "channels_last",
            "dilation_rate": [1, 1], "groups": 1, "activation": "linear", "use_bias": True,
            "bias_initializer": initializer("Zeros"), "bias_regularizer": None,
            "activity_regularizer": None, "bias_constraint": None, "depth_multiplier": mult,
            "depthwise_initializer": initializer("GlorotUniform"),
            "pointwise_initializer": initializer("GlorotUniform"),
            "depthwise_regularizer": None, "pointwise_regularizer": None,
            "depthwise_constraint": None, "pointwise_constraint": None,
        },
    }
    return finish(layer, xr, y, {"depthwise_kernel": dw, "pointwise_kernel": pw, "bias": bias})


def transpose_case(padding, output_padding):
    x_shape, kernel, strides, filters = [2, 4, 5, 3], [3, 3], [2, 2], 4
    x = rand(x_shape)
    cin = x_shape[-1]
    kw = rand(kernel + [filters, cin], -0.5, 0.5).requires_grad_()
    bias = rand([filters], -0.5, 0.5).requires_grad_()
    xr = x.clone().requires_grad_()
    full = F.conv_transpose2d(to_cf(xr), kw.permute(3, 2, 0, 1), None, stride=strides)
    for i in range(2):
        li, k, s = x_shape[1 + i], kernel[i], strides[i]
        if output_padding is None:
            lo = li * s if padding == "same" else li * s + max(k - s, 0)
        else:
            pad = k // 2 if padding == "same" else 0
            lo = (li - 1) * s + k - 2 * pad + output_padding[i]
        before = max((li - 1) * s + k - lo, 0) // 2 if padding == "same" else 0
        have = full.shape[2 + i]
        # Keep [before, before + lo) of the full result, zero-extended past its end.
        full = full.narrow(2 + i, before, min(lo, have - before))
        if full.shape[2 + i] < lo:
            pads = [(0, 0), (0, 0)]
            pads[i] = (0, lo - full.shape[2 + i])
            full = pad_spatial(full, pads)
    y = to_cl(full + bias.reshape(1, filters, 1, 1))
    layer = conv_config("Conv2DTranspose", "deconv", filters, kernel, strides, padding, [1, 1],
                        "linear", True)
    layer["config"]["output_padding"] = output_padding
    return finish(layer, xr, y, {"kernel": kw, "bias": bias})


def pool_case(mode):
    x_shape, pool, strides = [2, 7, 6, 3], [3, 3], [2, 2]
    x = rand(x_shape)
    xr = x.clone().requires_grad_()
    pads = [same_pads(x_shape[1 + i], pool[i], strides[i]) for i in range(2)]
    xc = to_cf(xr)
    if mode == "max":
        y = F.max_pool2d(pad_spatial(xc, pads, float("-inf")), pool, strides)
        cls = "MaxPooling2D"
    else:
        sums = F.avg_pool2d(pad_spatial(xc, pads), pool, strides, divisor_override=1)
        ones = pad_spatial(torch.ones(1, 1, *x_shape[1:3]), pads)
        counts = F.avg_pool2d(ones, pool, strides, divisor_override=1)
        y = sums / counts
        cls = "AveragePooling2D"
    layer = {
        "class_name": cls,
        "config": {"name": "pool", "trainable": True, "dtype": "float32", "pool_size": pool,
                   "padding": "same", "strides": strides, "data_format": "channels_last"},
    }
    return finish(layer, xr, to_cl(y), {})


def upsampling_bilinear_case():
    x_shape = [2, 3, 4, 2]
    xr = rand(x_shape).requires_grad_()
    y = F.interpolate(to_cf(xr), scale_factor=(2, 3), mode="bilinear", align_corners=False)
    layer = {
        "class_name": "UpSampling2D",
        "config": {"name": "up", "trainable": True, "dtype": "float32", "size": [2, 3],
                   "data_format": "channels_last", "interpolation": "bilinear"},
    }
    return finish(layer, xr, to_cl(y), {})


def batchnorm_case(training, frozen=False):
    x_shape, momentum, eps = [3, 4, 5, 6], 0.9, 1e-3
    c = x_shape[-1]
    x = rand(x_shape, -2.0, 3.0)
    gamma = rand([c], 0.5, 1.5).requires_grad_()
    beta = rand([c], -0.5, 0.5).requires_grad_()
    mm = rand([c], -0.5, 0.5)
    mv = rand([c], 0.5, 1.5)
    xr = x.clone().requires_grad_()
    xc = to_cf(xr)
    batch = training and not frozen
    y = F.batch_norm(xc, mm.clone(), mv.clone(), gamma, beta, training=batch, eps=eps)
    after = {"moving_mean": mm, "moving_variance": mv}
    if batch:
        dims = [0] + list(range(2, xc.dim()))
        mean = xc.detach().mean(dim=dims)
        var = xc.detach().var(dim=dims, unbiased=False)
        after = {"moving_mean": mm * momentum + mean * (1 - momentum),
                 "moving_variance": mv * momentum + var * (1 - momentum)}
    layer = {
        "class_name": "BatchNormalization",
        "config": {
            "name": "bn", "trainable": not frozen, "dtype": "float32", "axis": 3,
            "momentum": momentum, "epsilon": eps, "center": True, "scale": True,
            "beta_initializer": initializer("Zeros"), "gamma_initializer": initializer("Ones"),
            "moving_mean_initializer": initializer("Zeros"),
            "moving_variance_initializer": initializer("Ones"), "beta_regularizer": None,
            "gamma_regularizer": None, "beta_constraint": None, "gamma_constraint": None,
            "synchronized": False,
        },
    }
    weights = {"gamma": gamma, "beta": beta, "moving_mean": mm, "moving_variance": mv}
    return finish(layer, xr, to_cl(y), weights, keras3=True, training=training, after=after,
                  trainable=not frozen)


def layernorm_case(axes):
    x_shape, eps = [2, 3, 4, 5], 1e-3
    x = rand(x_shape, -2.0, 2.0)
    group = [x_shape[a] for a in axes]
    gamma = rand(group, 0.5, 1.5).requires_grad_()
    beta = rand(group, -0.5, 0.5).requires_grad_()
    xr = x.clone().requires_grad_()
    y = F.layer_norm(xr, group, gamma, beta, eps)
    layer = {
        "class_name": "LayerNormalization",
        "config": {
            "name": "ln", "trainable": True, "dtype": "float32", "axis": axes, "epsilon": eps,
            "center": True, "scale": True, "beta_initializer": initializer("Zeros"),
            "gamma_initializer": initializer("Ones"), "beta_regularizer": None,
            "gamma_regularizer": None, "beta_constraint": None, "gamma_constraint": None,
        },
    }
    return finish(layer, xr, y, {"gamma": gamma, "beta": beta})


def finish(layer, x, y, weights, keras3=False, training=True, after=None, trainable=True):
    dout = rand(list(y.shape))
    leaves = [x] + [w for w in weights.values() if w.requires_grad]
    grads = torch.autograd.grad((y * dout).sum(), leaves)
    dweights = {}
    i = 1
    for name, w in weights.items():
        if w.requires_grad:
            if trainable:
                dweights[name] = T(grads[i])
            i += 1
    return {
        "layer": layer, "keras3": keras3, "training": training, "x": T(x), "dout": T(dout),
        "weights": {k: T(v) for k, v in weights.items()}, "y": T(y), "dx": T(grads[0]),
        "dweights": dweights, "after": {k: T(v) for k, v in (after or {}).items()},
    }


CASES = {
    "conv2d_stride2_same": lambda: conv_case(2, [2, 7, 8, 3], 4, [3, 3], [2, 2], "same",
                                             [1, 1], "tanh"),
    "conv2d_dilation2_valid": lambda: conv_case(2, [2, 9, 8, 3], 5, [3, 2], [1, 1], "valid",
                                                [2, 2], "linear"),
    "conv1d_causal": lambda: conv_case(1, [2, 10, 3], 5, [3], [1], "causal", [2], "linear"),
    "conv3d_same": lambda: conv_case(3, [2, 5, 4, 6, 2], 3, [2, 3, 3], [2, 1, 2], "same",
                                     [1, 1, 1], "sigmoid"),
    "depthwise": depthwise_case,
    "separable": separable_case,
    "conv2d_transpose": lambda: transpose_case("same", None),
    "conv2d_transpose_valid_output_padding": lambda: transpose_case("valid", [1, 1]),
    "maxpool2d_same": lambda: pool_case("max"),
    "avgpool2d_same": lambda: pool_case("avg"),
    "upsampling2d_bilinear": upsampling_bilinear_case,
    "batchnorm_training": lambda: batchnorm_case(True),
    "batchnorm_inference": lambda: batchnorm_case(False),
    "batchnorm_frozen": lambda: batchnorm_case(True, frozen=True),
    "layernorm": lambda: layernorm_case([3]),
    "layernorm_two_axes": lambda: layernorm_case([2, 3]),
}


def main():
    if len(sys.argv) != 2 or (sys.argv[1] not in CASES and sys.argv[1] != "list"):
        print("usage: conv_norm_oracle.py {list|%s}" % "|".join(CASES))
        sys.exit(2)
    if sys.argv[1] == "list":
        print(json.dumps(sorted(CASES)))
        return
    torch.manual_seed(sorted(CASES).index(sys.argv[1]) + 1)
    print(json.dumps(CASES[sys.argv[1]]()))


if __name__ == "__main__":
    main()
