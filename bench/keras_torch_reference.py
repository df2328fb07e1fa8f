"""The PyTorch side of bench/keras_vs_torch.sh: builds the model of a Keras config (the file
lockstep-trainer --model trains) in PyTorch, layer for layer with the same shapes, trains it
with SGD (momentum 0.9, lr 0.01) and prints steady samples/s after the warm-up steps.

The translation (Keras 2 functional configs; the layers the benchmark's models use):
  - 4-D activations are in PyTorch's channels_last memory format (NHWC in memory, as lockstep
    computes; PyTorch's fastest CPU layout for convolutions: 1.26x its default NCHW on
    ResNet-20 and 1.42x on cnn_attention, one thread, 2026-11-29); --nchw keeps the default.
    Reshape and Flatten go through NHWC so they keep Keras's element order.
  - padding "same" is Keras's: when the total padding is odd it goes at the end, done with an
    explicit ZeroPad2d (PyTorch's padding= is symmetric); otherwise the convolution pads.
  - MultiHeadAttention projects to num_heads x key_dim like Keras (its own module:
    nn.MultiheadAttention ties the head size to the model width).
  - Bidirectional(LSTM) is nn.LSTM(bidirectional=True); PyTorch's LSTM has two bias vectors
    where Keras has one (4 x units more parameters per direction, nothing more to compute).
  - Layers with trainable=false get no gradients, and their BatchNormalization runs on the
    moving statistics, as Keras 2.x does; Dropout is active in training either way.
  - The loss is what lockstep-trainer takes: cross-entropy on the logits (a softmax output
    folds into it) and binary cross-entropy for one sigmoid unit.
Data: `examples` random examples of the input shape (integer ids in [0, input_dim) for an
Embedding input) and random class labels, made before the clock starts; each step gathers a
shuffled batch. malloc's thresholds are fixed first (torch_peer.py). Prints two figures:
samples/s by the wall clock, and per second of the process's CPU time.

Usage: /usr/bin/python3 keras_torch_reference.py CONFIG.json THREADS STEPS [WARMUP [EXAMPLES]]
       [--nchw] (WARMUP default 20, EXAMPLES default 2048); --params prints the parameter count
       only.
"""
import json
import math
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

import torch_peer

CL = torch.channels_last if "--nchw" not in sys.argv else torch.contiguous_format


def act_fn(name):
    return {"linear": None, "relu": F.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh,
            "swish": F.silu, "silu": F.silu, "softmax": lambda x: F.softmax(x, -1),
            "gelu": F.gelu}[name]


def same_pads(size, k, s, d):
    out = (size + s - 1) // s
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2


class Conv(nn.Module):
    """Conv2D and DepthwiseConv2D with Keras's padding and activation."""

    def __init__(self, cfg, in_shape, depthwise):
        super().__init__()
        h, w, cin = in_shape
        k, s, d = cfg["kernel_size"], cfg["strides"], cfg.get("dilation_rate", [1, 1])
        cout = cin * cfg.get("depth_multiplier", 1) if depthwise else cfg["filters"]
        pad = [0, 0]
        self.pad = None
        if cfg["padding"] == "same":
            ph, pw = same_pads(h, k[0], s[0], d[0]), same_pads(w, k[1], s[1], d[1])
            if ph[0] == ph[1] and pw[0] == pw[1]:
                pad = [ph[0], pw[0]]
            else:
                self.pad = nn.ZeroPad2d((pw[0], pw[1], ph[0], ph[1]))
        self.conv = nn.Conv2d(cin, cout, tuple(k), tuple(s), tuple(pad), tuple(d),
                              groups=cin if depthwise else cfg.get("groups", 1),
                              bias=cfg["use_bias"])
        self.act = act_fn(cfg["activation"])

    def forward(self, x):
        if self.pad is not None:
            x = self.pad(x)
        x = self.conv(x)
        return self.act(x) if self.act else x


class Dense(nn.Module):
    def __init__(self, cfg, in_shape):
        super().__init__()
        self.linear = nn.Linear(in_shape[-1], cfg["units"], bias=cfg["use_bias"])
        self.act = act_fn(cfg["activation"])

    def forward(self, x):
        x = self.linear(x)
        return self.act(x) if self.act else x


class Lambda(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, *xs):
        return self.f(*xs)


class BatchNorm(nn.Module):
    def __init__(self, cfg, in_shape, frozen):
        super().__init__()
        c = in_shape[-1]
        self.rank = len(in_shape)
        self.frozen = frozen
        bn = nn.BatchNorm2d if self.rank == 3 else nn.BatchNorm1d
        self.bn = bn(c, eps=cfg["epsilon"], momentum=1 - cfg["momentum"],
                     affine=cfg["center"] or cfg["scale"])

    def forward(self, x):
        if self.frozen:
            self.bn.eval()
        if self.rank == 2:  # [N, T, C]: BatchNorm1d normalises axis 1
            return self.bn(x.transpose(1, 2)).transpose(1, 2)
        return self.bn(x)


class Dropout(nn.Module):
    def __init__(self, cfg, in_shape):
        super().__init__()
        self.rate = cfg["rate"]
        noise = cfg.get("noise_shape")
        # A per-example mask ([None, 1, 1, 1], stochastic depth) or the usual elementwise one.
        self.per_example = noise is not None and all(n == 1 for n in noise[1:])

    def forward(self, x):
        if not self.training or self.rate == 0:
            return x
        if self.per_example:
            keep = (torch.rand((x.shape[0],) + (1,) * (x.dim() - 1)) >= self.rate).to(x.dtype)
            return x * keep / (1 - self.rate)
        return F.dropout(x, self.rate, True)


class MultiHeadAttention(nn.Module):
    """Keras's MultiHeadAttention over axis 1: per-head projections of key_dim/value_dim."""

    def __init__(self, cfg, q_shape, v_shape):
        super().__init__()
        h, kd = cfg["num_heads"], cfg["key_dim"]
        vd = cfg.get("value_dim") or kd
        d = q_shape[-1]
        self.h, self.kd, self.vd = h, kd, vd
        self.q = nn.Linear(d, h * kd, bias=cfg["use_bias"])
        self.k = nn.Linear(v_shape[-1], h * kd, bias=cfg["use_bias"])
        self.v = nn.Linear(v_shape[-1], h * vd, bias=cfg["use_bias"])
        self.o = nn.Linear(h * vd, cfg.get("output_shape") or d, bias=cfg["use_bias"])
        self.dropout = cfg.get("dropout", 0.0)

    def forward(self, query, value, key=None):
        key = value if key is None else key
        n, tq, tv = query.shape[0], query.shape[1], value.shape[1]
        q = self.q(query).view(n, tq, self.h, self.kd).transpose(1, 2)
        k = self.k(key).view(n, tv, self.h, self.kd).transpose(1, 2)
        v = self.v(value).view(n, tv, self.h, self.vd).transpose(1, 2)
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.kd), -1)
        if self.training and self.dropout > 0:
            p = F.dropout(p, self.dropout, True)
        return self.o((p @ v).transpose(1, 2).reshape(n, tq, self.h * self.vd))


class BiLSTM(nn.Module):
    def __init__(self, cfg, in_shape):
        super().__init__()
        inner = cfg["layer"]["config"]
        assert cfg["layer"]["class_name"] == "LSTM" and cfg.get("merge_mode", "concat") == "concat"
        assert inner["activation"] == "tanh" and inner["recurrent_activation"] == "sigmoid"
        self.seq = inner["return_sequences"]
        self.lstm = nn.LSTM(in_shape[-1], inner["units"], batch_first=True, bidirectional=True)

    def forward(self, x):
        y, (h, _) = self.lstm(x)
        return y if self.seq else torch.cat([h[0], h[1]], -1)


def to_keras_layout(x):
    return x.permute(0, 2, 3, 1) if x.dim() == 4 else x


def from_keras_layout(x):
    return x.permute(0, 3, 1, 2).contiguous(memory_format=CL) if x.dim() == 4 else x


def per_channel(v, rank):
    """A scalar or per-channel list broadcast over channels (axis 1 of NCHW, else last)."""
    t = torch.tensor(v, dtype=torch.float32)
    return t.view(-1, 1, 1) if rank == 3 and t.dim() == 1 else t


class KerasModel(nn.Module):
    def __init__(self, doc):
        super().__init__()
        cfg = doc["config"]
        self.steps = []  # (name, module, input names, kwarg names)
        self.layers = nn.ModuleDict()
        shapes = {}
        self.ids_input = None
        for layer in cfg["layers"]:
            cls, c, name = layer["class_name"], layer["config"], layer["name"]
            if cls == "InputLayer":
                shapes[name] = list(c["batch_input_shape"][1:])
                self.input_name, self.input_shape = name, shapes[name]
                continue
            node = layer["inbound_nodes"][0]
            ins = [i[0] for i in node]
            kw = {k: v[0] for k, v in node[0][3].items()} if node[0][3] else {}
            s = shapes[ins[0]]
            frozen = not c.get("trainable", True)
            out = s
            if cls in ("Conv2D", "DepthwiseConv2D"):
                m = Conv(c, s, cls == "DepthwiseConv2D")
                with torch.no_grad():
                    out = list(m(torch.zeros(1, s[2], s[0], s[1])).shape[2:]) + \
                        [m.conv.out_channels]
            elif cls == "Dense":
                m = Dense(c, s)
                out = s[:-1] + [c["units"]]
            elif cls == "BatchNormalization":
                m = BatchNorm(c, s, frozen)
            elif cls == "LayerNormalization":
                m = nn.LayerNorm(s[-1], eps=c["epsilon"])
            elif cls == "Activation":
                m = Lambda(act_fn(c["activation"]))
            elif cls == "Add":
                m = Lambda(lambda *xs: sum(xs[1:], xs[0]))
            elif cls == "Multiply":
                m = Lambda(lambda a, b: a * b)
            elif cls == "GlobalAveragePooling2D":
                m = Lambda(lambda x: x.mean((2, 3)))
                out = [s[-1]]
            elif cls == "GlobalAveragePooling1D":
                m = Lambda(lambda x: x.mean(1))
                out = [s[-1]]
            elif cls in ("MaxPooling2D", "AveragePooling2D"):
                assert c["padding"] == "valid"
                pool = nn.MaxPool2d if cls == "MaxPooling2D" else nn.AvgPool2d
                m = pool(tuple(c["pool_size"]), tuple(c["strides"]))
                out = [(s[a] - c["pool_size"][a]) // c["strides"][a] + 1 for a in (0, 1)] + [s[2]]
            elif cls == "Reshape":
                target = list(c["target_shape"])
                m = Lambda(lambda x, t=target: from_keras_layout(
                    to_keras_layout(x).reshape([x.shape[0]] + t)))
                out = target
            elif cls == "Flatten":
                m = Lambda(lambda x: to_keras_layout(x).reshape(x.shape[0], -1))
                out = [math.prod(s)]
            elif cls == "Dropout":
                m = Dropout(c, s)
            elif cls == "Rescaling":
                m = Lambda(lambda x, sc=per_channel(c["scale"], len(s)),
                           of=per_channel(c.get("offset", 0.0), len(s)): x * sc + of)
            elif cls == "Normalization":
                assert c.get("mean") is None and not c.get("invert")  # not adapted: 0 and 1
                ch = s[-1]
                mean, std = per_channel([0.0] * ch, len(s)), per_channel([1.0] * ch, len(s))
                m = Lambda(lambda x, mu=mean, sd=std: (x - mu) / sd)
            elif cls == "ZeroPadding2D":
                (t, b), (lp, r) = c["padding"]
                m = nn.ZeroPad2d((lp, r, t, b))
                out = [s[0] + t + b, s[1] + lp + r, s[2]]
            elif cls == "MultiHeadAttention":
                m = MultiHeadAttention(c, s, shapes[kw.get("value", ins[0])])
            elif cls == "Embedding":
                m = nn.Embedding(c["input_dim"], c["output_dim"])
                out = s + [c["output_dim"]]
                self.ids_input = (name, c["input_dim"])
            elif cls == "Bidirectional":
                m = BiLSTM(c, s)
                u = 2 * c["layer"]["config"]["units"]
                out = s[:-1] + [u] if m.seq else [u]
            else:
                raise ValueError(f"layer {name}: {cls} is not translated")
            if frozen:
                for p in m.parameters():
                    p.requires_grad_(False)
            self.layers[name] = m
            self.steps.append((name, m, ins, kw))
            shapes[name] = out
        self.output_name = cfg["output_layers"][0][0]
        self.output_shape = shapes[self.output_name]
        last = self.steps[-1][1]
        self.loss = "xent"
        last_act = cfg["layers"][-1]["config"].get("activation")
        if isinstance(last, Dense) and last_act in ("softmax", "sigmoid"):
            self.loss = "bce" if last_act == "sigmoid" else "xent"
            last.act = None  # folded into the loss

    def forward(self, x):
        values = {self.input_name: x}
        for name, m, ins, kw in self.steps:
            args = [values[i] for i in ins]
            if isinstance(m, MultiHeadAttention):
                args = [args[0], values[kw.get("value", ins[0])]]
            values[name] = m(*args)
        return values[self.output_name]

    def classes(self):
        return 2 if self.loss == "bce" else self.output_shape[-1]


def main():
    if sys.argv[1] == "--params":
        m = KerasModel(json.load(open(sys.argv[2])))
        print(sum(p.numel() for p in m.parameters()),
              sum(p.numel() for p in m.parameters() if p.requires_grad))
        return
    args = [a for a in sys.argv[1:] if a != "--nchw"]
    path, threads, steps = args[0], int(args[1]), int(args[2])
    warmup = int(args[3]) if len(args) > 3 else 20
    examples = int(args[4]) if len(args) > 4 else 2048
    torch_peer.tune_malloc()
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = KerasModel(json.load(open(path)))
    batch = 64
    if model.ids_input is not None:
        xs = torch.randint(0, model.ids_input[1], [examples] + model.input_shape)
    else:
        s = model.input_shape
        xs = torch.randn([examples, s[-1]] + s[:-1] if len(s) == 3 else [examples] + s)
        if xs.dim() == 4:
            xs = xs.contiguous(memory_format=CL)
            model = model.to(memory_format=CL)
    ys = torch.randint(0, model.classes(), (examples,))
    source = torch_peer.shuffled_batches(xs, ys, batch)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    model.train()
    start = cpu_start = None
    for step in range(steps):
        if step == warmup:
            start, cpu_start = time.perf_counter(), time.process_time()
        x, y = next(source)
        opt.zero_grad(set_to_none=True)
        out = model(x)
        if model.loss == "bce":
            loss = F.binary_cross_entropy_with_logits(out.squeeze(-1), y.float())
        else:
            loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    print(f"{(steps - warmup) * batch / elapsed:.1f} {(steps - warmup) * batch / cpu:.1f}")


if __name__ == "__main__":
    main()
