#pragma once
// LayerConfig: one layer's Keras config, read so that nothing is silently ignored. A factory
// reads each option it implements with a typed getter (absent: the Keras default), states the
// value it requires of an option it does not implement (Expect: `stateful` must be false,
// constraints must be null), and names the options that change nothing here (Ignore: the
// dtype, the build shapes). Finish() then refuses any key nobody read, so an option Keras
// added later is refused by name rather than dropped. The first problem is kept and reported
// as "layer 'conv2d_1' (Conv2D): option data_format=\"channels_first\" is not supported".
// Thread-safety: plain value.

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "trainer/graph/activation.h"
#include "trainer/graph/initializer.h"
#include "trainer/graph/layer.h"

namespace lockstep::trainer::keras {

// A weight regularizer (kernel_regularizer...): penalty l1 * sum|w| + l2 * sum w^2.
struct Regularizer {
  float l1 = 0, l2 = 0;
  bool any() const { return l1 != 0 || l2 != 0; }
};

class LayerConfig {
 public:
  // `config` is the layer's "config" object; `keras3` says which Keras wrote it (for the
  // defaults that changed, such as hard_sigmoid).
  LayerConfig(nlohmann::json config, std::string name, std::string class_name, bool keras3);

  const std::string& name() const { return name_; }
  const std::string& class_name() const { return class_name_; }
  bool keras3() const { return keras3_; }
  const nlohmann::json& raw() const { return config_; }

  int64_t Int(const std::string& key, int64_t def);
  float Float(const std::string& key, float def);
  bool Bool(const std::string& key, bool def);
  std::string String(const std::string& key, const std::string& def);
  // An int or a list of `n` ints (kernel_size: 3 or [3, 3]).
  std::vector<int64_t> Ints(const std::string& key, size_t n, int64_t def);
  // A list of ints of any length (Reshape's target_shape; null entries read as -1).
  std::vector<int64_t> IntList(const std::string& key);
  // An int or a list of ints (an axis); absent: def.
  std::vector<int64_t> Axes(const std::string& key, std::vector<int64_t> def);
  trainer::Activation Activation(const std::string& key, const std::string& def);
  graph::Initializer Initializer(const std::string& key, const graph::Initializer& def);
  Regularizer Regularization(const std::string& key);
  // A nested object (Bidirectional's "layer"); null when absent.
  nlohmann::json Object(const std::string& key);
  // The option must be absent or equal `expected` (null counts as absent when expected is
  // null).
  void Expect(const std::string& key, const nlohmann::json& expected);
  // Each option absent or null (the constraints, which the engine does not apply).
  void ExpectNull(std::initializer_list<const char*> keys);
  // Either of two spellings Keras used for one option (dropout rate "rate").
  bool Has(const std::string& key) const;
  void Ignore(const std::string& key);
  // Records a refusal of `what` (first one wins).
  void Refuse(const std::string& what);
  void Error(const std::string& what);  // a malformed value, not an unsupported one

  // OK, or the first problem; also refuses every key not read.
  absl::Status Finish();

  absl::Status Prefix(const std::string& message) const;  // "layer 'n' (C): message"

 private:
  const nlohmann::json* Get(const std::string& key);

  nlohmann::json config_;
  std::string name_, class_name_;
  bool keras3_;
  std::set<std::string> read_;
  std::string error_;
};

// A config value printed for a message (strings quoted, long values cut).
std::string Show(const nlohmann::json& v);

// An option naming one axis that must be the last (channels-last): -1 or a positive axis,
// which the layer's build checks; anything else is refused by name (then -1).
int64_t ReadLastAxis(LayerConfig& c, const std::string& key);

}  // namespace lockstep::trainer::keras
