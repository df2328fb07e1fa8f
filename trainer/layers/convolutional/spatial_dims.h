#pragma once
// What the layers over channels-last batches with 1 to 3 spatial axes share (pooling's and
// reshaping's spatial layers): a batch's dimensions padded to three spatial axes, the class
// name of a rank, and the one-input rank check. Thread-safety: pure functions.

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/graph/layer.h"
#include "trainer/layers/convolutional/convolutional.h"

namespace lockstep::trainer::graph {

inline std::string RankClass(const char* base, int rank) {
  return std::string(base) + std::to_string(rank) + "D";
}

// Checks one input [spatial (rank axes)..., channels] with known channels.
inline absl::Status CheckRank(const Layer& l, const std::vector<Shape>& in, int rank) {
  if (in.size() != 1 || in[0].size() != static_cast<size_t>(rank) + 1) {
    return LayerError(l, "takes one input of rank " + std::to_string(rank + 2) + " (batch, " +
                             (rank == 1 ? "steps" : "spatial axes") +
                             ", channels), got per-example shape " +
                             ShapeString(in.empty() ? Shape{} : in[0]));
  }
  return absl::OkStatus();
}

// A channels-last batch with its spatial axes padded to three (leading axes of length 1).
struct Dims {
  int64_t n = 0, c = 0;
  int64_t s[kSpatialAxes] = {1, 1, 1};
  int64_t size() const { return s[0] * s[1] * s[2]; }
};

inline Dims DimsOf(const Shape& x, int rank) {
  Dims d;
  d.n = x[0];
  d.c = x.back();
  for (int a = 0; a < rank; ++a) d.s[kSpatialAxes - rank + a] = x[static_cast<size_t>(a) + 1];
  return d;
}

inline Shape ShapeOf(const Dims& d, int rank) {
  Shape s{d.n};
  for (int a = 0; a < rank; ++a) s.push_back(d.s[kSpatialAxes - rank + a]);
  s.push_back(d.c);
  return s;
}

}  // namespace lockstep::trainer::graph
