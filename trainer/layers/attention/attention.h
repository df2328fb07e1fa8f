#pragma once
// Keras's MultiHeadAttention: per-head projections of query, key and value, scaled dot-product
// attention softmaxed over the keys, and the heads projected back to the query's width:
//   Q = query Wq + bq   (query/kernel [d_query, heads, key_dim], query/bias [heads, key_dim])
//   K = key Wk + bk     (key/kernel [d_key, heads, key_dim])
//   V = value Wv + bv   (value/kernel [d_value, heads, value_dim])
//   P = softmax(Q K^T / sqrt(key_dim) - 1e9 * (1 - mask))  per head, over the keys
//   out = (dropout(P) V) Wo + bo  (attention_output/kernel [heads, value_dim, d_query])
// Inputs: [query, value] or [query, value, key] (key defaults to value), [batch, ..., features]
// with attention over every axis between the batch and the features (flattened). The mask
// is Keras's: the query's mask [batch, T] masks rows, the value's and the key's [batch, S] mask
// keys, all combined (a row with no key left attends uniformly, as Keras's -1e9 gives); the
// output keeps the query's mask. Dropout applies to the attention probabilities in training.
// Thread-safety: one thread per layer object (layer.h).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/graph/initializer.h"
#include "trainer/graph/layer.h"

namespace lockstep::trainer::graph {

struct MultiHeadAttentionOptions {
  int64_t num_heads = 1;
  int64_t key_dim = 1;
  int64_t value_dim = 0;  // 0: key_dim
  float dropout = 0;
  bool use_bias = true;
  // Keras's attention_axes as the config gives them (empty: the default). Only the default
  // set (every axis between batch and features) is supported; Build refuses others.
  std::vector<int64_t> attention_axes;
  // Keras's call argument use_causal_mask: query t attends to keys s <= t.
  bool use_causal_mask = false;
  Initializer kernel_initializer = GlorotUniform();
  Initializer bias_initializer = Zeros();
  float kernel_l1 = 0, kernel_l2 = 0, bias_l1 = 0, bias_l2 = 0;
};

std::unique_ptr<Layer> MakeMultiHeadAttention(std::string name, MultiHeadAttentionOptions o);

// Sets a MultiHeadAttention layer's use_causal_mask (Keras passes it per call; the loader sets
// it from the call). False when `l` is not a MultiHeadAttention layer.
bool SetCausalMask(Layer& l, bool causal);

}  // namespace lockstep::trainer::graph
