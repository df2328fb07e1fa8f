#!/usr/bin/python3
"""PyTorch oracle for the trainer's model shapes: a regression MLP, a convolutional autoencoder,
a U-Net and a two-input, two-output model (examples/models/{regression,autoencoder,unet,
two_tower}.json), each rebuilt here with PyTorch from the same weights.

Usage: shapes_oracle.py CASE.json
CASE.json holds {"model": name, "weights": {"layer/weight": tensor}, "inputs": [tensor...],
"targets": [tensor...]} with tensors as {"shape": [...], "data": [...]}, in Keras's layouts
(channels last; Dense kernels [in, out]; Conv2D kernels [kh, kw, in, out]; Conv2DTranspose
kernels [kh, kw, out, in]). Prints {"losses": [per output], "loss": weighted total,
"grads": {"layer/weight": tensor}} computed in float64, the loss reduced as Keras reduces it:
each output's loss is the mean over every element (cross-entropies over the class axis first),
the total sums them with the model's loss weights. Exits 77 when torch cannot be imported.
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
EPS = 1e-7


def tensor(t):
    return torch.tensor(t["data"], dtype=torch.float64).reshape(t["shape"])


def out(t):
    return {"shape": list(t.shape), "data": t.detach().reshape(-1).tolist()}


def main():
    case = json.load(open(sys.argv[1]))
    w = {k: tensor(v).requires_grad_(True) for k, v in case["weights"].items()}
    xs = [tensor(t) for t in case["inputs"]]
    ys = [tensor(t) for t in case["targets"]]

    def dense(name, x, act=None):
        y = x @ w[name + "/kernel"] + w[name + "/bias"]
        return act(y) if act else y

    def nchw(x):
        return x.permute(0, 3, 1, 2)

    def nhwc(x):
        return x.permute(0, 2, 3, 1)

    def conv(name, x, act=None, same=True):  # x NCHW; Keras kernel [kh, kw, in, out]
        k = w[name + "/kernel"]
        pad = k.shape[0] // 2 if same else 0
        y = F.conv2d(x, k.permute(3, 2, 0, 1).contiguous(), w[name + "/bias"], padding=pad)
        return act(y) if act else y

    def conv_transpose(name, x, stride, act=None):  # Keras kernel [kh, kw, out, in]
        k = w[name + "/kernel"]
        y = F.conv_transpose2d(x, k.permute(3, 2, 0, 1).contiguous(), w[name + "/bias"], stride=stride)
        return act(y) if act else y

    def sparse_xent(p, ids, axis):  # p: probabilities, ids: class ids; mean over every row
        p = p / p.sum(dim=axis, keepdim=True)
        p = p.clamp(EPS, 1 - EPS)
        picked = torch.gather(p, axis, ids.long().unsqueeze(axis)).squeeze(axis)
        return -torch.log(picked).mean()

    def bce(p, y):
        p = p.clamp(EPS, 1 - EPS)
        return -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()

    name = case["model"]
    losses, weights = [], []
    if name == "regression":
        h = dense("dense", xs[0], torch.relu)
        h = dense("dense_1", h, torch.relu)
        losses = [((dense("price", h) - ys[0]) ** 2).mean()]
        weights = [1.0]
    elif name == "autoencoder":
        x = nchw(xs[0])
        h = F.max_pool2d(conv("encode", x, torch.relu), 2)
        h = F.interpolate(conv("code", h, torch.relu), scale_factor=2, mode="nearest")
        losses = [bce(nhwc(conv("decode", h, torch.sigmoid)), ys[0])]
        weights = [1.0]
    elif name == "unet":
        x = nchw(xs[0])
        down = conv("down", x, torch.relu)
        bottom = conv("bottom", F.max_pool2d(down, 2), torch.relu)
        up = conv_transpose("up", bottom, 2, torch.relu)
        merged = conv("merge", torch.cat([up, down], dim=1), torch.relu)
        mask = torch.softmax(conv("mask", merged), dim=1)
        losses = [sparse_xent(nhwc(mask), ys[0], axis=3)]
        weights = [1.0]
    elif name == "two_tower":
        image = nhwc(conv("image_conv", nchw(xs[0]), torch.relu, same=False))
        flat = image.reshape(image.shape[0], -1)  # Flatten in Keras's (channels-last) order
        meta = dense("meta_dense", xs[1], torch.relu)
        shared = dense("shared", torch.cat([flat, meta], dim=1), torch.relu)
        label = dense("label", shared, lambda v: torch.softmax(v, dim=1))
        score = dense("score", shared)
        losses = [sparse_xent(label, ys[0], axis=1), ((score - ys[1]) ** 2).mean()]
        weights = [1.0, 0.5]
    else:
        raise SystemExit("unknown model " + name)
    total = sum(wt * l for wt, l in zip(weights, losses))
    total.backward()
    print(json.dumps({"losses": [l.item() for l in losses], "loss": total.item(),
                      "grads": {k: out(v.grad) for k, v in w.items()}}))


main()
