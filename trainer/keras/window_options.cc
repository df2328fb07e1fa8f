#include "trainer/keras/window_options.h"

#include <algorithm>
#include <cctype>

namespace lockstep::trainer::keras {

void NoLowRank(LayerConfig& c) {
  for (const char* k : {"lora_rank", "lora_alpha", "dora_rank", "dora_alpha"}) c.Expect(k, nullptr);
}

namespace {

std::string Lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

}  // namespace

graph::Padding ReadPadding(LayerConfig& c, bool allow_causal) {
  const std::string p = c.String("padding", "valid");
  const std::string l = Lower(p);  // Keras 3 lower-cases it
  if (l == "valid") return graph::Padding::kValid;
  if (l == "same") return graph::Padding::kSame;
  if (l == "causal" && allow_causal) return graph::Padding::kCausal;
  c.Refuse("option padding=\"" + p + "\"");
  return graph::Padding::kValid;
}

std::vector<int64_t> ReadPositive(LayerConfig& c, const std::string& key, int rank, int64_t def) {
  if (def == 0 && !c.Has(key)) {
    c.Error("option " + key + " is required");
    c.Ignore(key);
    return std::vector<int64_t>(static_cast<size_t>(rank), 1);
  }
  std::vector<int64_t> v = c.Ints(key, static_cast<size_t>(rank), def);
  if (std::any_of(v.begin(), v.end(), [](int64_t x) { return x <= 0; })) {
    c.Error("option " + key + "=" + ShapeString(v) + " must be positive");
    return std::vector<int64_t>(static_cast<size_t>(rank), 1);
  }
  return v;
}

std::vector<int64_t> ReadStrides(LayerConfig& c, int rank, const std::vector<int64_t>& def) {
  if (!c.Has("strides")) {
    c.Ignore("strides");
    return def;
  }
  return ReadPositive(c, "strides", rank, 1);
}

void ChannelsLast(LayerConfig& c) { c.Expect("data_format", "channels_last"); }

}  // namespace lockstep::trainer::keras
