#!/usr/bin/env python3
"""PyTorch as an independent oracle for the recurrent and attention layers' tests.

Usage: recurrent_attention_oracle.py CASE   (lstm, lstm_return_sequences, gru_reset_after,
gru_reset_before, simple_rnn, bidirectional_lstm_concat, embedding, mha)

Prints one JSON object: the Keras layer config the C++ test builds ("config", "keras3"), the
inputs and their masks, the weights in Keras's names and layouts, the projections r_k of the
loss L = sum_k <output_k, r_k>, and PyTorch's outputs, input gradients and weight gradients
(in Keras's layouts). Inputs and weights are float32 values; PyTorch computes in float64.
Exits 77 when torch cannot be imported (the C++ test then skips).

Where Keras and PyTorch differ, and how this script bridges it:
- Gate order. Keras LSTM kernels hold the gates as i, f, c, o, PyTorch's weight_ih as i, f, g, o
  (the same order, c == g); Keras GRU holds z, r, h, PyTorch r, z, n. Keras kernels are
  [in, G*units] (x @ kernel), PyTorch weights [G*units, in] (W @ x): transposed.
- Biases. Keras has one bias ([G*units]); PyTorch two (bias_ih, bias_hh), which add: the Keras
  bias goes into bias_ih and bias_hh is zero (its gradient equals bias_ih's). GRU with
  reset_after=True (Keras 2.x's and 3's default) is PyTorch's GRU: the Keras bias [2, 3u] is
  [input bias; recurrent bias] = [bias_ih; bias_hh] after the gate reordering.
- GRU reset_after=False (Keras 2.0-2.2, and an option later) applies the reset gate before the
  recurrent matmul, hh = tanh(x W_h + b_h + (r * h) U_h), which PyTorch has no module for: this
  script computes it by hand.
- hard_sigmoid (Keras 2.0-2.2's recurrent_activation): max(0, min(1, 0.2 x + 0.5)) in Keras 2
  (relu6(x + 3) / 6 in Keras 3); PyTorch's RNN modules only use sigmoid, so it is by hand too.
- go_backwards. Keras reads the sequence from its end and returns the outputs in that reversed
  order; PyTorch has no such flag: the script runs on the flipped sequence.
- Masks. Keras carries the states over a masked step and repeats the previous output there
  (zeros before the first step; zeros everywhere masked when zero_output_for_mask, which
  Bidirectional forces for sequences); PyTorch uses packed sequences, whose padded outputs are
  zero and whose final state is that of each sequence's last valid step. For post-padded
  sequences the states and the Bidirectional outputs agree; for a lone RNN returning sequences
  the script repeats the last valid output over the padding (Keras's rule) itself.
- Bidirectional. Both align the backward direction's outputs with the original time steps;
  Keras names the weights forward_<layer>/... and backward_<layer>/..., PyTorch *_reverse.
- Multi-head attention. Keras projects query, key and value with per-head kernels
  [dim, heads, key_dim] (key_dim and value_dim free, inputs of different widths) and projects
  back to the query's width with [heads, value_dim, dim]; PyTorch's nn.MultiheadAttention packs
  the projections of equal widths into one in_proj_weight [3E, E] with E = heads * head_dim, so
  the script computes Keras's einsums by hand. Both scale scores by 1/sqrt(key_dim); Keras
  masks by adding -1e9 (a query whose keys are all masked gets uniform weights), PyTorch by
  -inf (NaN rows).
"""

import json
import math
import sys

try:
    import torch
    import torch.nn.functional as F
except Exception:  # noqa: BLE001 - any import failure means no oracle
    sys.exit(77)

torch.set_default_dtype(torch.float64)
GEN = torch.Generator().manual_seed(1234)


def rand(*shape, lo=-1.0, hi=1.0):
    """Uniform values that float32 represents exactly, as float64."""
    t = torch.rand(*shape, generator=GEN, dtype=torch.float32) * (hi - lo) + lo
    return t.double()


def tj(t):
    if t is None:
        return None
    t = t.detach().double()
    return {"shape": list(t.shape), "data": [float(v) for v in t.reshape(-1).tolist()]}


def mask_from_lengths(lengths, t):
    return torch.tensor([[1.0 if s < n else 0.0 for s in range(t)] for n in lengths])


def emit(config, keras3, inputs, masks, weights, forward, differentiable=None):
    """Runs forward(inputs, weights) -> outputs with autograd and prints the case."""
    differentiable = differentiable or [True] * len(inputs)
    xs = [x.clone().requires_grad_(d) for x, d in zip(inputs, differentiable)]
    ws = {k: v.clone().requires_grad_(True) for k, v in weights.items()}
    outs, extra = forward(xs, ws)
    proj = [rand(*o.shape) for o in outs]
    loss = sum((o * r).sum() for o, r in zip(outs, proj))
    loss.backward()
    doc = {
        "config": config,
        "keras3": keras3,
        "inputs": [tj(x) for x in inputs],
        "masks": [tj(m) for m in masks],
        "weights": {k: tj(v) for k, v in weights.items()},
        "projections": [tj(r) for r in proj],
        "outputs": [tj(o) for o in outs],
        "input_grads": [tj(x.grad) if d else None for x, d in zip(xs, differentiable)],
        "weight_grads": {k: tj(v.grad) for k, v in ws.items()},
    }
    doc.update(extra)
    print(json.dumps(doc))


def rnn_config(cls, name, units, **kw):
    cfg = {"name": name, "units": units, "activation": "tanh", "use_bias": True}
    cfg.update(kw)
    return {"class_name": cls, "config": cfg}


def lstm_weights(d, u, prefix=""):
    return {
        prefix + "kernel": rand(d, 4 * u, lo=-0.6, hi=0.6),
        prefix + "recurrent_kernel": rand(u, 4 * u, lo=-0.6, hi=0.6),
        prefix + "bias": rand(4 * u, lo=-0.3, hi=0.3),
    }


def run_rnn(module, params, x, hx=None, lengths=None):
    """Calls a PyTorch RNN module with `params` (name -> tensor, differentiable) in place of
    its own parameters: the module's forward reads its _flat_weights list."""
    module._flat_weights = [params[n] for n in module._flat_weights_names]
    if lengths is not None:
        packed = torch.nn.utils.rnn.pack_padded_sequence(
            x, torch.tensor(lengths), batch_first=True, enforce_sorted=False)
        out, h = module(packed, hx)
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True,
                                                        total_length=x.shape[1])
        return out, h
    return module(x, hx)


def lstm_params(ws, prefix="", suffix=""):
    return {
        "weight_ih_l0" + suffix: ws[prefix + "kernel"].t(),
        "weight_hh_l0" + suffix: ws[prefix + "recurrent_kernel"].t(),
        "bias_ih_l0" + suffix: ws[prefix + "bias"],
        "bias_hh_l0" + suffix: torch.zeros_like(ws[prefix + "bias"]),
    }


def case_lstm():
    b, t, d, u = 3, 5, 4, 3
    lengths = [5, 3, 1]
    x = rand(b, t, d)
    config = rnn_config("LSTM", "lstm", u, recurrent_activation="sigmoid",
                        return_sequences=False, return_state=False)

    def forward(xs, ws):
        m = torch.nn.LSTM(d, u, batch_first=True)
        _, (h, _) = run_rnn(m, lstm_params(ws), xs[0], lengths=lengths)
        return [h[0]], {}

    emit(config, False, [x], [mask_from_lengths(lengths, t)], lstm_weights(d, u), forward)


def case_lstm_return_sequences():
    b, t, d, u = 2, 4, 3, 5
    x, h0, c0 = rand(b, t, d), rand(b, u, lo=-0.5, hi=0.5), rand(b, u, lo=-0.5, hi=0.5)
    config = rnn_config("LSTM", "lstm", u, recurrent_activation="sigmoid",
                        return_sequences=True, return_state=True)

    def forward(xs, ws):
        m = torch.nn.LSTM(d, u, batch_first=True)
        y, (h, c) = run_rnn(m, lstm_params(ws), xs[0], (xs[1][None], xs[2][None]))
        return [y, h[0], c[0]], {}

    emit(config, False, [x, h0, c0], [None, None, None], lstm_weights(d, u), forward)


def gru_reorder(w, u):
    """Keras gate blocks z, r, h along the last axis -> PyTorch's r, z, n."""
    z, r, h = w[..., :u], w[..., u:2 * u], w[..., 2 * u:]
    return torch.cat([r, z, h], dim=-1)


def case_gru_reset_after():
    b, t, d, u = 3, 4, 3, 4
    lengths = [4, 2, 3]
    x = rand(b, t, d)
    config = rnn_config("GRU", "gru", u, recurrent_activation="sigmoid", reset_after=True,
                        return_sequences=True)
    weights = {
        "kernel": rand(d, 3 * u, lo=-0.6, hi=0.6),
        "recurrent_kernel": rand(u, 3 * u, lo=-0.6, hi=0.6),
        "bias": rand(2, 3 * u, lo=-0.3, hi=0.3),
    }

    def forward(xs, ws):
        m = torch.nn.GRU(d, u, batch_first=True)
        params = {
            "weight_ih_l0": gru_reorder(ws["kernel"], u).t(),
            "weight_hh_l0": gru_reorder(ws["recurrent_kernel"], u).t(),
            "bias_ih_l0": gru_reorder(ws["bias"][0], u),
            "bias_hh_l0": gru_reorder(ws["bias"][1], u),
        }
        y, _ = run_rnn(m, params, xs[0], lengths=lengths)
        # Keras repeats the last valid output over the padding (PyTorch pads with zeros).
        idx = torch.tensor([[min(s, n - 1) for s in range(t)] for n in lengths])
        y = torch.gather(y, 1, idx[:, :, None].expand(b, t, u))
        return [y], {}

    emit(config, False, [x], [mask_from_lengths(lengths, t)], weights, forward)


def hard_sigmoid_k2(v):
    return torch.clamp(0.2 * v + 0.5, 0.0, 1.0)


def case_gru_reset_before():
    b, t, d, u = 2, 5, 3, 4
    x = rand(b, t, d)
    config = rnn_config("GRU", "gru_1", u, recurrent_activation="hard_sigmoid",
                        reset_after=False, return_sequences=False, return_state=True,
                        implementation=1)
    weights = {
        "kernel": rand(d, 3 * u, lo=-0.6, hi=0.6),
        "recurrent_kernel": rand(u, 3 * u, lo=-0.6, hi=0.6),
        "bias": rand(3 * u, lo=-0.3, hi=0.3),
    }

    def forward(xs, ws):
        k, rk, bias = ws["kernel"], ws["recurrent_kernel"], ws["bias"]
        h = torch.zeros(b, u)
        for s in range(t):
            xw = xs[0][:, s] @ k + bias
            rz = h @ rk[:, :2 * u]
            z = hard_sigmoid_k2(xw[:, :u] + rz[:, :u])
            r = hard_sigmoid_k2(xw[:, u:2 * u] + rz[:, u:])
            hh = torch.tanh(xw[:, 2 * u:] + (r * h) @ rk[:, 2 * u:])
            h = z * h + (1 - z) * hh
        return [h, h], {}

    emit(config, False, [x], [None], weights, forward)


def case_simple_rnn():
    b, t, d, u = 2, 4, 3, 3
    x = rand(b, t, d)
    config = rnn_config("SimpleRNN", "simple_rnn", u, return_sequences=True, go_backwards=True)
    weights = {
        "kernel": rand(d, u, lo=-0.6, hi=0.6),
        "recurrent_kernel": rand(u, u, lo=-0.6, hi=0.6),
        "bias": rand(u, lo=-0.3, hi=0.3),
    }

    def forward(xs, ws):
        m = torch.nn.RNN(d, u, batch_first=True, nonlinearity="tanh")
        params = {
            "weight_ih_l0": ws["kernel"].t(),
            "weight_hh_l0": ws["recurrent_kernel"].t(),
            "bias_ih_l0": ws["bias"],
            "bias_hh_l0": torch.zeros_like(ws["bias"]),
        }
        # go_backwards: the reversed sequence, outputs in processing order.
        y, _ = run_rnn(m, params, torch.flip(xs[0], [1]))
        return [y], {}

    emit(config, False, [x], [None], weights, forward)


def case_bidirectional_lstm_concat():
    b, t, d, u = 3, 5, 4, 3
    lengths = [5, 2, 4]
    x = rand(b, t, d)
    inner = rnn_config("LSTM", "lstm", u, recurrent_activation="sigmoid",
                       return_sequences=True, return_state=False)
    config = {"class_name": "Bidirectional",
              "config": {"name": "bidirectional", "layer": inner, "merge_mode": "concat"}}
    weights = lstm_weights(d, u, "forward_lstm/")
    weights.update(lstm_weights(d, u, "backward_lstm/"))

    def forward(xs, ws):
        m = torch.nn.LSTM(d, u, batch_first=True, bidirectional=True)
        params = lstm_params(ws, "forward_lstm/")
        params.update(lstm_params(ws, "backward_lstm/", "_reverse"))
        y, _ = run_rnn(m, params, xs[0], lengths=lengths)
        return [y], {}

    emit(config, False, [x], [mask_from_lengths(lengths, t)], weights, forward)


def case_embedding():
    b, t, vocab, dim = 2, 4, 7, 3
    ids = torch.tensor([[2.0, 0.0, 6.0, 2.0], [1.0, 5.0, 0.0, 0.0]])
    config = {"class_name": "Embedding",
              "config": {"name": "embedding", "input_dim": vocab, "output_dim": dim,
                         "mask_zero": True, "input_length": t}}
    weights = {"embeddings": rand(vocab, dim)}

    def forward(xs, ws):
        return [F.embedding(xs[0].long(), ws["embeddings"])], {
            "output_mask": tj((ids != 0).double())}

    emit(config, False, [ids], [None], weights, forward, differentiable=[False])


def case_mha():
    b, t, s, dq, dv, dk = 2, 3, 4, 5, 6, 4
    heads, key_dim, value_dim = 2, 3, 2
    lengths = [4, 2]
    query, value, key = rand(b, t, dq), rand(b, s, dv), rand(b, s, dk)
    config = {"class_name": "MultiHeadAttention",
              "config": {"name": "mha", "num_heads": heads, "key_dim": key_dim,
                         "value_dim": value_dim, "dropout": 0.0, "use_bias": True,
                         "output_shape": None, "attention_axes": None, "seed": None}}
    weights = {
        "query/kernel": rand(dq, heads, key_dim),
        "query/bias": rand(heads, key_dim, lo=-0.2, hi=0.2),
        "key/kernel": rand(dk, heads, key_dim),
        "key/bias": rand(heads, key_dim, lo=-0.2, hi=0.2),
        "value/kernel": rand(dv, heads, value_dim),
        "value/bias": rand(heads, value_dim, lo=-0.2, hi=0.2),
        "attention_output/kernel": rand(heads, value_dim, dq),
        "attention_output/bias": rand(dq, lo=-0.2, hi=0.2),
    }
    vmask = mask_from_lengths(lengths, s)

    def forward(xs, ws):
        q = torch.einsum("btd,dhk->bthk", xs[0], ws["query/kernel"]) + ws["query/bias"]
        k = torch.einsum("bsd,dhk->bshk", xs[2], ws["key/kernel"]) + ws["key/bias"]
        v = torch.einsum("bsd,dhk->bshk", xs[1], ws["value/kernel"]) + ws["value/bias"]
        scores = torch.einsum("bthk,bshk->bhts", q, k) / math.sqrt(key_dim)
        scores = scores + (1.0 - vmask[:, None, None, :]) * -1e9
        p = torch.softmax(scores, dim=-1)
        o = torch.einsum("bhts,bshv->bthv", p, v)
        out = torch.einsum("bthv,hvd->btd", o, ws["attention_output/kernel"])
        return [out + ws["attention_output/bias"]], {}

    emit(config, True, [query, value, key], [None, vmask, None], weights, forward)


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CASES:
        sys.stderr.write("usage: %s {%s}\n" % (sys.argv[0], ",".join(sorted(CASES))))
        sys.exit(2)
    CASES[sys.argv[1]]()
