#pragma once
// The recurrent layers (SimpleRNN, LSTM, GRU) and the wrappers that apply a layer along the time
// axis (Bidirectional, TimeDistributed), with Keras's semantics, weight names and layouts.
// Sequences are [batch, time, features]. (Embedding, which often feeds them, is a core layer:
// layers/core/core.h.)
//
// Recurrent layers, as Keras computes them:
//   SimpleRNN  h = act(x W + b + h' U)
//   LSTM       [i f c o] = x W + h' U + b (kernel [in, 4u], gate blocks in that order);
//              c = ra(f) c' + ra(i) act(c~), h = ra(o) act(c)
//   GRU        [z r h] blocks (kernel [in, 3u]); reset_after (bias [2, 3u]: input, recurrent):
//              hh = act(x W_h + b_h + ra(r) (h' U_h + b'_h)); reset_before (bias [3u]):
//              hh = act(x W_h + b_h + (ra(r) h') U_h); h = z h' + (1 - z) hh
// (ra is recurrent_activation, act the activation; primes are the previous step). Masks
// ([batch, time] of 0/1) follow Keras's backend rnn: at a masked step every state is carried
// over unchanged and the output repeats the previous step's output (zeros before the first
// step), or is zero when zero_output_for_mask (which Bidirectional forces for sequences); the
// last output is the last step's output under that rule without zeroing. go_backwards reads
// the sequence from its end and returns the outputs in that (reversed) order, as Keras does.
// Dropout draws one mask per sequence ([batch, features]) shared by all time steps, as Keras
// does: on the inputs (dropout) and on the previous state where each gate's recurrent product
// reads it (recurrent_dropout); one mask per gate where Keras's implementation 1 draws them
// (Keras 2 configs stating implementation 0 or 1; Keras 3 whenever recurrent_dropout is set).
//
// Wrappers hold their inner layers and expose the inner weights as their own (Bidirectional
// names them "forward_lstm/kernel", TimeDistributed keeps the inner names); a wrapper's calls
// keep the inner calls' records inside the wrapper's own Saved.
// Thread-safety: one thread per layer object (graph/layer.h).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/graph/activation.h"
#include "trainer/graph/initializer.h"
#include "trainer/graph/layer.h"

namespace lockstep::trainer::graph {

struct RnnOptions {
  int64_t units = 1;
  Activation activation{Act::kTanh, 0};
  Activation recurrent_activation{Act::kSigmoid, 0};  // LSTM and GRU
  bool use_bias = true;
  Initializer kernel_initializer = GlorotUniform();
  Initializer recurrent_initializer = Orthogonal();
  Initializer bias_initializer = Zeros();
  bool unit_forget_bias = true;  // LSTM: the forget gate's bias starts at 1
  float kernel_l1 = 0, kernel_l2 = 0, recurrent_l1 = 0, recurrent_l2 = 0, bias_l1 = 0, bias_l2 = 0;
  float dropout = 0;              // on the inputs, in training, when in (0, 1)
  bool dropout_per_gate = false;  // implementation 0/1 (Keras 3: any recurrent_dropout)
  // On the state each gate's recurrent product reads (the carried state itself is not
  // dropped), in training, when in (0, 1): one mask per sequence, per gate when set.
  float recurrent_dropout = 0;
  bool recurrent_dropout_per_gate = false;
  bool return_sequences = false;
  bool return_state = false;
  bool go_backwards = false;
  bool zero_output_for_mask = false;
  bool reset_after = true;  // GRU
};
// Inputs: x [batch, time, in], then optionally the initial states ([batch, units] each: h, and
// c for LSTM). Outputs: [batch, time, units] (return_sequences) or [batch, units], then with
// return_state the final states (h, and c for LSTM). Weights "kernel" [in, G*u],
// "recurrent_kernel" [u, G*u], "bias" ([G*u], GRU reset_after [2, 3u]).
std::unique_ptr<Layer> MakeRnn(std::string name, RnnCell cell, RnnOptions o);
const char* RnnClassName(RnnCell cell);  // "SimpleRNN", "LSTM", "GRU"

enum class BidirectionalMerge { kConcat, kSum, kMul, kAve, kNone };
struct BidirectionalOptions {
  BidirectionalMerge merge = BidirectionalMerge::kConcat;
  bool return_sequences = false, return_state = false;
  // The inner layers (their own options through OptionsOf), whose weights the wrapper holds
  // as its own: the forward layer's, then the backward layer's.
  const Layer* forward = nullptr;
  const Layer* backward = nullptr;
};
// Runs `forward` on the sequence and `backward` (a go_backwards copy) on it too, flips the
// backward outputs back into time order (when they are sequences) and merges them; kNone
// returns both. Inputs: x, then the forward layer's initial states, then the backward
// layer's. Outputs: the merged output (or both), then with return_state the forward layer's
// final states and the backward layer's. The inner layers' names prefix their weights.
std::unique_ptr<Layer> MakeBidirectional(std::string name, std::unique_ptr<Layer> forward,
                                         std::unique_ptr<Layer> backward, BidirectionalMerge merge,
                                         bool return_sequences, bool return_state);

struct TimeDistributedOptions {
  const Layer* inner = nullptr;  // its weights are the wrapper's, under the same names
};
// Applies `inner` to every time step: [batch, time, ...] runs as [batch * time, ...] and is
// reshaped back. The input's mask passes through; the inner layer sees none.
std::unique_ptr<Layer> MakeTimeDistributed(std::string name, std::unique_ptr<Layer> inner);

}  // namespace lockstep::trainer::graph
