"""Writes the Keras model configs of bench/keras_vs_torch.sh in the Keras 2 functional format
that model.to_json() writes (Keras 2.15): `python3 bench/models/make_models.py`.

resnet20.json: the CIFAR ResNet-20 of He et al. on 32x32x3: a 3x3 convolution of 16 filters,
then three stages of three basic blocks (16, 32 and 64 filters; each block two 3x3
convolutions with batch normalization, ReLU after the first and after the residual Add); a
stage's first block strides by 2 (from the second stage on) and its shortcut is then a 1x1
projection with batch normalization. Global average pooling and a Dense of 10 logits. The
convolutions have no bias (batch normalization follows each) and pad "same".

cnn_attention.json: a smaller model in the style of the corpus's 019-cnn-transformer-mha.json
(an EfficientNet-B0 backbone at 224x224x3, 8.6M weights, under a Transformer encoder block),
whose training step takes over 10 s at batch 64 here: the same kinds of layers on 64x64x3
and all of them trainable. Rescaling; a stem 3x3 convolution of stride 2 (ZeroPadding2D and
"valid", as EfficientNet pads); five MBConv blocks (1x1 expansion, depthwise 3x3 or 5x5,
squeeze-and-excitation through GlobalAveragePooling2D, Reshape, two 1x1 convolutions and
Multiply, 1x1 projection, per-example Dropout and Add where the shapes allow) with
BatchNormalization and swish; a 1x1 top convolution to 128 channels; the 8x8 positions as 64
tokens through MultiHeadAttention (4 heads of 32), Add, LayerNormalization, a Dense 256-128
feed-forward, Add, LayerNormalization; GlobalAveragePooling1D, Dense 128 relu, Dropout 0.5,
Dense 8 softmax.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def init(name, **config):
    return {"module": "keras.initializers", "class_name": name, "config": config,
            "registered_name": None}


class Builder:
    def __init__(self, name):
        self.name = name
        self.layers = []
        self.counts = {}

    def _name(self, base):
        n = self.counts.get(base, 0)
        self.counts[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    def add(self, cls, inputs, config, base=None, kwargs=None):
        name = self._name(base or cls.lower())
        config = {"name": name, **({} if cls == "InputLayer" else {"trainable": True}),
                  "dtype": "float32", **config}
        inbound = [[[i, 0, 0, {}] for i in inputs]] if inputs else []
        if kwargs:
            inbound[0][0][3] = kwargs
        self.layers.append({"module": "keras.layers", "class_name": cls, "config": config,
                            "registered_name": None, "name": name, "inbound_nodes": inbound})
        return name

    def input(self, shape):
        return self.add("InputLayer", [], {"batch_input_shape": [None] + shape, "sparse": False,
                                           "ragged": False}, base="input_1")

    def conv(self, x, filters, kernel, strides=1, use_bias=False, activation="linear",
             padding="same"):
        return self.add("Conv2D", [x], {
            "filters": filters, "kernel_size": [kernel, kernel], "strides": [strides, strides],
            "padding": padding, "data_format": "channels_last", "dilation_rate": [1, 1],
            "groups": 1, "activation": activation, "use_bias": use_bias,
            "kernel_initializer": init("HeNormal", seed=None), "bias_initializer": init("Zeros"),
            "kernel_regularizer": None, "bias_regularizer": None, "activity_regularizer": None,
            "kernel_constraint": None, "bias_constraint": None}, base="conv2d")

    def depthwise(self, x, kernel, strides=1, padding="same"):
        return self.add("DepthwiseConv2D", [x], {
            "kernel_size": [kernel, kernel], "strides": [strides, strides], "padding": padding,
            "data_format": "channels_last", "dilation_rate": [1, 1], "groups": 1,
            "activation": "linear", "use_bias": False, "bias_initializer": init("Zeros"),
            "bias_regularizer": None, "activity_regularizer": None, "bias_constraint": None,
            "depth_multiplier": 1,
            "depthwise_initializer": init("VarianceScaling", scale=2.0, mode="fan_out",
                                          distribution="truncated_normal", seed=None),
            "depthwise_regularizer": None, "depthwise_constraint": None}, base="depthwise_conv2d")

    def zero_pad(self, x, pad):
        return self.add("ZeroPadding2D", [x], {"padding": pad, "data_format": "channels_last"},
                        base="zero_padding2d")

    def reshape(self, x, shape):
        return self.add("Reshape", [x], {"target_shape": shape}, base="reshape")

    def dropout(self, x, rate, noise_shape=None):
        return self.add("Dropout", [x], {"rate": rate, "noise_shape": noise_shape, "seed": None},
                        base="dropout")

    def layer_norm(self, x, axis):
        return self.add("LayerNormalization", [x], {
            "axis": axis, "epsilon": 0.001, "center": True, "scale": True,
            "beta_initializer": init("Zeros"), "gamma_initializer": init("Ones"),
            "beta_regularizer": None, "gamma_regularizer": None, "beta_constraint": None,
            "gamma_constraint": None}, base="layer_normalization")

    def bn(self, x, axis):
        return self.add("BatchNormalization", [x], {
            "axis": axis, "momentum": 0.99, "epsilon": 0.001, "center": True, "scale": True,
            "beta_initializer": init("Zeros"), "gamma_initializer": init("Ones"),
            "moving_mean_initializer": init("Zeros"), "moving_variance_initializer": init("Ones"),
            "beta_regularizer": None, "gamma_regularizer": None, "beta_constraint": None,
            "gamma_constraint": None}, base="batch_normalization")

    def act(self, x, activation):
        return self.add("Activation", [x], {"activation": activation}, base="activation")

    def dense(self, x, units, activation="linear"):
        return self.add("Dense", [x], {
            "units": units, "activation": activation, "use_bias": True,
            "kernel_initializer": init("GlorotUniform", seed=None),
            "bias_initializer": init("Zeros"), "kernel_regularizer": None,
            "bias_regularizer": None, "activity_regularizer": None, "kernel_constraint": None,
            "bias_constraint": None}, base="dense")

    def model(self, inp, out):
        return {"class_name": "Functional",
                "config": {"name": self.name, "trainable": True, "layers": self.layers,
                           "input_layers": [[inp, 0, 0]], "output_layers": [[out, 0, 0]]},
                "keras_version": "2.15.0", "backend": "tensorflow"}


def resnet20():
    b = Builder("resnet20")
    inp = b.input([32, 32, 3])
    x = b.act(b.bn(b.conv(inp, 16, 3), [3]), "relu")
    for stage, filters in enumerate([16, 32, 64]):
        for block in range(3):
            strides = 2 if stage > 0 and block == 0 else 1
            y = b.act(b.bn(b.conv(x, filters, 3, strides), [3]), "relu")
            y = b.bn(b.conv(y, filters, 3), [3])
            shortcut = x
            if strides != 1:
                shortcut = b.bn(b.conv(x, filters, 1, strides), [3])
            x = b.act(b.add("Add", [y, shortcut], {}, base="add"), "relu")
    x = b.add("GlobalAveragePooling2D", [x], {"data_format": "channels_last", "keepdims": False},
              base="global_average_pooling2d")
    return b.model(inp, b.dense(x, 10))


def cnn_attention():
    b = Builder("cnn_attention")
    inp = b.input([64, 64, 3])
    x = b.add("Rescaling", [inp], {"scale": 1 / 255, "offset": 0.0}, base="rescaling")
    x = b.conv(b.zero_pad(x, [[0, 1], [0, 1]]), 32, 3, 2, padding="valid")
    x = b.act(b.bn(x, [3]), "swish")
    channels = 32
    # (expansion, kernel, strides, output channels, squeeze channels, dropout)
    blocks = [(1, 3, 1, 16, 8, 0.0), (6, 3, 2, 24, 4, 0.0), (6, 3, 1, 24, 6, 0.025),
              (6, 5, 2, 40, 6, 0.0), (6, 5, 1, 40, 10, 0.05)]
    for expand, kernel, strides, out, squeeze, drop in blocks:
        inputs = x
        wide = channels * expand
        if expand != 1:
            x = b.act(b.bn(b.conv(x, wide, 1), [3]), "swish")
        if strides == 2:
            lo = (kernel - 1) // 2 - 1
            x = b.zero_pad(x, [[lo, lo + 1], [lo, lo + 1]])
        x = b.depthwise(x, kernel, strides, "valid" if strides == 2 else "same")
        x = b.act(b.bn(x, [3]), "swish")
        se = b.add("GlobalAveragePooling2D", [x], {"data_format": "channels_last",
                                                   "keepdims": False},
                   base="global_average_pooling2d")
        se = b.reshape(se, [1, 1, wide])
        se = b.conv(se, squeeze, 1, use_bias=True, activation="swish")
        se = b.conv(se, wide, 1, use_bias=True, activation="sigmoid")
        x = b.add("Multiply", [x, se], {}, base="multiply")
        x = b.bn(b.conv(x, out, 1), [3])
        if strides == 1 and channels == out:
            if drop > 0:
                x = b.dropout(x, drop, [None, 1, 1, 1])
            x = b.add("Add", [x, inputs], {}, base="add")
        channels = out
    x = b.act(b.bn(b.conv(x, 128, 1), [3]), "swish")
    tokens = b.reshape(x, [64, 128])
    att = b.add("MultiHeadAttention", [tokens], {
        "num_heads": 4, "key_dim": 32, "value_dim": 32, "dropout": 0.0, "use_bias": True,
        "output_shape": None, "attention_axes": [1],
        "kernel_initializer": init("GlorotUniform", seed=None), "bias_initializer": init("Zeros"),
        "kernel_regularizer": None, "bias_regularizer": None, "activity_regularizer": None,
        "kernel_constraint": None, "bias_constraint": None, "query_shape": [None, 64, 128],
        "key_shape": [None, 64, 128], "value_shape": [None, 64, 128]},
        base="multi_head_attention", kwargs={"value": [tokens, 0, 0]})
    x = b.layer_norm(b.add("Add", [tokens, att], {}, base="add"), [2])
    ff = b.dense(b.dense(x, 256, "relu"), 128)
    x = b.layer_norm(b.add("Add", [x, ff], {}, base="add"), [2])
    x = b.add("GlobalAveragePooling1D", [x], {"data_format": "channels_last", "keepdims": False},
              base="global_average_pooling1d")
    x = b.dropout(b.dense(x, 128, "relu"), 0.5)
    return b.model(inp, b.dense(x, 8, "softmax"))


def write(name, doc):
    with open(os.path.join(HERE, name), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    write("resnet20.json", resnet20())
    write("cnn_attention.json", cnn_attention())
