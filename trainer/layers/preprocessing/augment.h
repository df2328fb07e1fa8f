#pragma once
// Image augmentation layers (Keras's RandomFlip, RandomRotation): a random transform per
// example in training, the identity in inference, channels-last [batch, h, w, c]. The draws
// come from the call's generator, so a seeded run repeats them; the transforms are linear in
// the image, so gradients flow back through them.
// Thread-safety: one thread per layer object (layer.h).

#include <memory>
#include <string>

#include "trainer/graph/layer.h"

namespace lockstep::trainer::graph {

struct FlipOptions {
  bool horizontal = true, vertical = true;
};
// Flips each example left-right and/or up-down, each with probability 1/2.
std::unique_ptr<Layer> MakeRandomFlip(std::string name, bool horizontal, bool vertical);

enum class FillMode { kReflect, kWrap, kConstant, kNearest };
struct RotationOptions {
  float lower = 0, upper = 0;  // fractions of a full turn (factor 0.15 is [-0.15, 0.15])
  FillMode fill = FillMode::kReflect;
  float fill_value = 0;
  bool bilinear = true;  // else nearest
};
// Rotates each example about its centre by an angle drawn uniformly from the range, as
// Keras's ImageProjectiveTransform samples: output pixel (x, y) reads input
// (cos a * x - sin a * y + dx, sin a * x + cos a * y + dy), outside points filled per `fill`.
std::unique_ptr<Layer> MakeRandomRotation(std::string name, RotationOptions o);

}  // namespace lockstep::trainer::graph
