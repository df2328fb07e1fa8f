"""An independent reader of the ONNX files the trainer writes.

  onnx_peer.py check FILE          the onnx checker (full) and strict shape inference; prints
                                   {"ops": [...], "opset": N, "inputs": [dims], "output_shapes": [dims]}
  onnx_peer.py run FILE INPUT.npy... checks FILE as `check` does, then evaluates it on the
                                   inputs (in the graph's input order):
                                   every node by its operator's definition in the ONNX spec,
                                   written here with PyTorch's functions; with ONNX Runtime
                                   present, by it too. Prints check's fields and "outputs":
                                   [{"shape", "values", "onnxruntime"?}] in the graph's order

Exit 77 when onnx, numpy or torch is missing (the caller skips).
"""
import json
import math
import sys

try:
    import numpy as np
    import onnx
    import torch
    import torch.nn.functional as F
    from onnx import numpy_helper, shape_inference
except ImportError as e:
    print("onnx, numpy or torch missing: %s" % e)
    sys.exit(77)


def dims(value_info):
    out = []
    for d in value_info.type.tensor_type.shape.dim:
        out.append(d.dim_value if d.HasField("dim_value") else d.dim_param or "?")
    return out


def check(path):
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    inferred = shape_inference.infer_shapes(m, check_type=True, strict_mode=True)
    return {"ops": sorted({n.op_type for n in m.graph.node}),
            "opset": m.opset_import[0].version,
            "inputs": [dims(i) for i in m.graph.input],
            "output_shapes": [dims(o) for o in inferred.graph.output]}


def attrs_of(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def s(v):
    return v.decode() if isinstance(v, bytes) else v


def spatial_pads(x, a, kernel, strides, dilations):
    """The ONNX pads [begin..., end...] of a windowed op over x [n, c, spatial...]."""
    r = len(kernel)
    if s(a.get("auto_pad", b"NOTSET")) == "SAME_UPPER":
        before, after = [], []
        for i in range(r):
            n = x.shape[2 + i]
            out = -(-n // strides[i])
            span = (kernel[i] - 1) * dilations[i] + 1
            total = max((out - 1) * strides[i] + span - n, 0)
            before.append(total // 2)
            after.append(total - total // 2)
        return before + after
    return list(a.get("pads", [0] * 2 * r))


def torch_pad(pads):
    """ONNX [b1..br, e1..er] as F.pad's (last axis first) pairs."""
    r = len(pads) // 2
    out = []
    for i in reversed(range(r)):
        out += [pads[i], pads[r + i]]
    return out


def activation(name, alpha, beta):
    name = s(name)
    if name == "Sigmoid":
        return torch.sigmoid
    if name == "Tanh":
        return torch.tanh
    if name == "Relu":
        return torch.relu
    if name == "HardSigmoid":
        return lambda x: torch.clamp(alpha * x + beta, 0, 1)
    if name == "Affine":
        return lambda x: alpha * x + beta
    if name == "Softsign":
        return lambda x: x / (1 + x.abs())
    if name == "Softplus":
        return F.softplus
    if name == "Elu":
        return lambda x: torch.where(x >= 0, x, alpha * (torch.exp(x) - 1))
    raise SystemExit("recurrent activation " + name)


def recurrent(op, a, x, W, R, B, h0, c0):
    """ONNX's RNN, GRU and LSTM, forward direction, layout 0: x [T, N, in]."""
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    names = a.get("activations", {"RNN": [b"Tanh"], "GRU": [b"Sigmoid", b"Tanh"],
                                  "LSTM": [b"Sigmoid", b"Tanh", b"Tanh"]}[op])
    alphas, betas = list(a.get("activation_alpha", [])), list(a.get("activation_beta", []))
    fs = []
    for n in names:
        uses = s(n) in ("HardSigmoid", "Affine", "Elu", "LeakyRelu")
        al = alphas.pop(0) if uses and alphas else None
        be = betas.pop(0) if s(n) in ("HardSigmoid", "Affine") and betas else None
        fs.append(activation(n, al, be))
    h = a["hidden_size"]
    W, R = W[0], R[0]
    Wb, Rb = (B[0][:gates * h], B[0][gates * h:]) if B is not None else (
        torch.zeros(gates * h), torch.zeros(gates * h))
    T, N = x.shape[0], x.shape[1]
    H = h0[0] if h0 is not None else torch.zeros(N, h)
    C = c0[0] if c0 is not None else torch.zeros(N, h)
    ys = []
    for t in range(T):
        xt = x[t]
        if op == "RNN":
            H = fs[0](xt @ W.T + H @ R.T + Wb + Rb)
        elif op == "LSTM":
            g = xt @ W.T + H @ R.T + Wb + Rb
            i, o, f, c = (g[:, k * h:(k + 1) * h] for k in range(4))
            i, o, f, c = fs[0](i), fs[0](o), fs[0](f), fs[1](c)
            C = f * C + i * c
            H = o * fs[2](C)
        else:
            gx = xt @ W.T + Wb
            z = fs[0](gx[:, :h] + H @ R[:h].T + Rb[:h])
            r = fs[0](gx[:, h:2 * h] + H @ R[h:2 * h].T + Rb[h:2 * h])
            if a.get("linear_before_reset", 0):
                n = fs[1](gx[:, 2 * h:] + r * (H @ R[2 * h:].T + Rb[2 * h:]))
            else:
                n = fs[1](gx[:, 2 * h:] + (r * H) @ R[2 * h:].T + Rb[2 * h:])
            H = (1 - z) * n + z * H
        ys.append(H)
    Y = torch.stack(ys).unsqueeze(1)  # [T, 1, N, h]
    out = [Y, H.unsqueeze(0)]
    if op == "LSTM":
        out.append(C.unsqueeze(0))
    return out


def evaluate(m, xs):
    env = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy())
           for i in m.graph.initializer}
    for vi, x in zip(m.graph.input, xs):
        env[vi.name] = torch.from_numpy(x)
    env[""] = None
    for node in m.graph.node:
        a = attrs_of(node)
        ins = [env[i] for i in node.input]
        op = node.op_type
        x0 = ins[0]
        if op == "Identity":
            out = [x0]
        elif op in ("Add", "Sub", "Mul", "Div", "MatMul"):
            f = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div,
                 "MatMul": torch.matmul}[op]
            out = [f(x0, ins[1])]
        elif op in ("Sum", "Mean", "Max", "Min"):
            t = torch.stack(torch.broadcast_tensors(*ins))
            out = [{"Sum": t.sum(0), "Mean": t.mean(0), "Max": t.max(0).values,
                    "Min": t.min(0).values}[op]]
        elif op == "Relu":
            out = [torch.relu(x0)]
        elif op == "Clip":
            out = [torch.clamp(x0, float(ins[1]), float(ins[2]))]
        elif op == "Sigmoid":
            out = [torch.sigmoid(x0)]
        elif op == "HardSigmoid":
            out = [torch.clamp(a.get("alpha", 0.2) * x0 + a.get("beta", 0.5), 0, 1)]
        elif op == "HardSwish":
            out = [x0 * torch.clamp(x0 / 6 + 0.5, 0, 1)]
        elif op == "Tanh":
            out = [torch.tanh(x0)]
        elif op == "Softmax":
            out = [torch.softmax(x0, dim=a.get("axis", -1))]
        elif op == "Erf":
            out = [torch.erf(x0)]
        elif op == "Elu":
            out = [F.elu(x0, alpha=a.get("alpha", 1.0))]
        elif op == "Selu":
            out = [F.selu(x0)]
        elif op == "Softplus":
            out = [F.softplus(x0)]
        elif op == "Softsign":
            out = [x0 / (1 + x0.abs())]
        elif op == "Exp":
            out = [torch.exp(x0)]
        elif op == "LeakyRelu":
            out = [F.leaky_relu(x0, a.get("alpha", 0.01))]
        elif op == "PRelu":
            out = [torch.where(x0 >= 0, x0, ins[1] * x0)]
        elif op == "GreaterOrEqual":
            out = [x0 >= ins[1]]
        elif op == "Where":
            out = [torch.where(x0, ins[1], ins[2])]
        elif op == "Flatten":
            out = [x0.reshape(x0.shape[0], -1)]
        elif op == "Reshape":
            shape = [x0.shape[i] if v == 0 else int(v) for i, v in enumerate(ins[1].tolist())]
            out = [x0.reshape(shape)]
        elif op == "Tile":
            out = [x0.repeat(*ins[1].tolist())]
        elif op == "Unsqueeze":
            for ax in sorted(ins[1].tolist()):
                x0 = x0.unsqueeze(ax)
            out = [x0]
        elif op == "Squeeze":
            for ax in sorted(ins[1].tolist(), reverse=True):
                x0 = x0.squeeze(ax)
            out = [x0]
        elif op == "Concat":
            out = [torch.cat(ins, dim=a["axis"])]
        elif op == "Transpose":
            out = [x0.permute(*a["perm"])]
        elif op == "Cast":
            out = [x0.long()]
        elif op == "Gather":
            out = [x0[ins[1]]]
        elif op == "Shape":
            out = [torch.tensor(list(x0.shape)[a.get("start", 0):], dtype=torch.long)]
        elif op == "Expand":
            out = [x0.expand(*ins[1].tolist()).clone()]
        elif op == "Trilu":
            out = [torch.triu(x0) if a.get("upper", 1) else torch.tril(x0)]
        elif op == "Slice":
            starts, ends = ins[1].tolist(), ins[2].tolist()
            axes = ins[3].tolist() if len(ins) > 3 else list(range(len(starts)))
            steps = ins[4].tolist() if len(ins) > 4 else [1] * len(starts)
            for st, en, ax, sp in zip(starts, ends, axes, steps):
                n = x0.shape[ax]
                if sp > 0:
                    idx = torch.arange(*slice(st, en, sp).indices(n))
                else:
                    en = None if en < -n else en
                    idx = torch.tensor(list(range(n))[slice(st, en, sp)], dtype=torch.long)
                x0 = x0.index_select(ax, idx)
            out = [x0]
        elif op == "Pad":
            pads = ins[1].tolist()
            out = [F.pad(x0, torch_pad(pads))]
        elif op in ("ReduceMean", "ReduceMax"):
            keep = bool(a.get("keepdims", 1))
            axes = a["axes"]
            out = [x0.mean(dim=axes, keepdim=keep) if op == "ReduceMean"
                   else x0.amax(dim=axes, keepdim=keep)]
        elif op == "LayerNormalization":
            axis = a["axis"] % x0.dim()
            dims_ = list(range(axis, x0.dim()))
            mu = x0.mean(dim=dims_, keepdim=True)
            var = ((x0 - mu) ** 2).mean(dim=dims_, keepdim=True)
            out = [(x0 - mu) / torch.sqrt(var + a.get("epsilon", 1e-5)) * ins[1] + ins[2]]
        elif op == "Conv":
            w = ins[1]
            r = w.dim() - 2
            kernel = list(w.shape[2:])
            strides = a.get("strides", [1] * r)
            dil = a.get("dilations", [1] * r)
            pads = spatial_pads(x0, a, kernel, strides, dil)
            conv = [F.conv1d, F.conv2d, F.conv3d][r - 1]
            out = [conv(F.pad(x0, torch_pad(pads)), w, ins[2] if len(ins) > 2 else None,
                        stride=strides, dilation=dil, groups=a.get("group", 1))]
        elif op == "ConvTranspose":
            w = ins[1]
            r = w.dim() - 2
            strides = a.get("strides", [1] * r)
            extra = a.get("output_padding", [0] * r)
            pads = a.get("pads", [0] * 2 * r)
            conv = [F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d][r - 1]
            y = conv(x0, w, ins[2] if len(ins) > 2 else None, stride=strides,
                     output_padding=extra)
            for i in range(r):
                n = y.shape[2 + i]
                y = y.narrow(2 + i, pads[i], n - pads[i] - pads[r + i])
            out = [y]
        elif op in ("MaxPool", "AveragePool"):
            kernel = a["kernel_shape"]
            r = len(kernel)
            strides = a.get("strides", [1] * r)
            pads = spatial_pads(x0, a, kernel, strides, [1] * r)
            if op == "MaxPool":
                pool = [F.max_pool1d, F.max_pool2d, F.max_pool3d][r - 1]
                out = [pool(F.pad(x0, torch_pad(pads), value=-math.inf), kernel, strides)]
            else:
                pool = [F.avg_pool1d, F.avg_pool2d, F.avg_pool3d][r - 1]
                total = pool(F.pad(x0, torch_pad(pads)), kernel, strides)
                count = pool(F.pad(torch.ones_like(x0), torch_pad(pads)), kernel, strides)
                out = [total / count]
        elif op == "Resize":
            scales = ins[2].tolist()
            mode = s(a.get("mode", b"nearest"))
            if mode == "linear":  # half_pixel, NHWC with scales [1, sh, sw, 1]
                nchw = x0.permute(0, 3, 1, 2)
                size = [int(nchw.shape[2] * scales[1]), int(nchw.shape[3] * scales[2])]
                y = F.interpolate(nchw, size=size, mode="bilinear", align_corners=False)
                out = [y.permute(0, 2, 3, 1)]
            else:  # nearest, asymmetric, floor
                y = x0
                for ax, sc in enumerate(scales):
                    if sc != 1:
                        n = y.shape[ax]
                        idx = torch.floor(torch.arange(int(n * sc)) / sc).long()
                        y = y.index_select(ax, idx)
                out = [y]
        elif op in ("RNN", "GRU", "LSTM"):
            pad = ins + [None] * (8 - len(ins))
            out = recurrent(op, a, x0, pad[1], pad[2], pad[3], pad[5], pad[6])
        else:
            raise SystemExit("no evaluation of op " + op)
        for name, v in zip(node.output, out):
            env[name] = v
    return [env[o.name] for o in m.graph.output]


def run(path, input_paths):
    result = check(path)
    m = onnx.load(path)
    xs = [np.load(p).astype(np.float32) for p in input_paths]
    with torch.no_grad():
        ys = [y.numpy() for y in evaluate(m, xs)]
    outs = [{"shape": list(y.shape), "values": y.reshape(-1).astype(float).tolist()} for y in ys]
    try:
        import onnxruntime
        sess = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        feed = {vi.name: x for vi, x in zip(m.graph.input, xs)}
        for o, r in zip(outs, sess.run(None, feed)):
            o["onnxruntime"] = r.reshape(-1).astype(float).tolist()
    except ImportError:
        pass
    result["outputs"] = outs
    return result


def main():
    if sys.argv[1] == "check":
        print(json.dumps(check(sys.argv[2])))
    else:
        print(json.dumps(run(sys.argv[2], sys.argv[3:])))


if __name__ == "__main__":
    main()
