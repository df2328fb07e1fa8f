#include "trainer/graph/loss.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace lockstep::trainer::graph {
namespace {

constexpr float kEps = 1e-7f;

std::string Lower(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '_') continue;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

}  // namespace

absl::StatusOr<Loss> ParseLoss(const nlohmann::json& v) {
  std::string name;
  nlohmann::json cfg = nlohmann::json::object();
  if (v.is_string()) {
    name = v.get<std::string>();
  } else if (v.is_object() && v.value("class_name", "") == "function" && v.contains("config") &&
             v["config"].is_string()) {
    name = v["config"].get<std::string>();  // Keras 3's serialised loss function
  } else if (v.is_object() && v.contains("class_name") && v["class_name"].is_string()) {
    name = v["class_name"].get<std::string>();
    if (v.contains("config") && v["config"].is_object()) cfg = v["config"];
  } else {
    return absl::InvalidArgumentError("loss " + v.dump() + " is not a loss name or object");
  }
  const std::string n = Lower(name);
  Loss l;
  if (n == "categoricalcrossentropy") {
    l.kind = LossKind::kCategoricalCrossentropy;
  } else if (n == "sparsecategoricalcrossentropy") {
    l.kind = LossKind::kSparseCategoricalCrossentropy;
  } else if (n == "binarycrossentropy") {
    l.kind = LossKind::kBinaryCrossentropy;
  } else if (n == "meansquarederror" || n == "mse") {
    l.kind = LossKind::kMeanSquaredError;
  } else if (n == "meanabsoluteerror" || n == "mae") {
    l.kind = LossKind::kMeanAbsoluteError;
  } else if (n == "huber" || n == "huberloss") {
    l.kind = LossKind::kHuber;
  } else {
    return absl::InvalidArgumentError(
        "loss \"" + name +
        "\" is not supported (supported: categorical_crossentropy, "
        "sparse_categorical_crossentropy, binary_crossentropy, mean_squared_error, "
        "mean_absolute_error, huber)");
  }
  for (auto it = cfg.begin(); it != cfg.end(); ++it) {
    const std::string& k = it.key();
    const nlohmann::json& val = it.value();
    if (k == "name" || k == "dtype") continue;
    if (k == "from_logits" && val.is_boolean()) {
      l.from_logits = val.get<bool>();
    } else if (k == "label_smoothing" && val.is_number()) {
      l.label_smoothing = val.get<float>();
    } else if (k == "delta" && val.is_number()) {
      l.delta = val.get<float>();
    } else if (k == "reduction" && val.is_string() &&
               (val == "auto" || val == "sum_over_batch_size" || val == "mean")) {
    } else if (k == "axis" && val.is_number_integer() && val.get<int>() == -1) {
    } else if (k == "ignore_class" && val.is_null()) {
    } else {
      return absl::InvalidArgumentError("loss " + name + ": option " + k + "=" + val.dump() +
                                        " is not supported");
    }
  }
  return l;
}

std::string LossName(const Loss& l) {
  switch (l.kind) {
    case LossKind::kCategoricalCrossentropy:
      return "categorical_crossentropy";
    case LossKind::kSparseCategoricalCrossentropy:
      return "sparse_categorical_crossentropy";
    case LossKind::kBinaryCrossentropy:
      return "binary_crossentropy";
    case LossKind::kMeanSquaredError:
      return "mean_squared_error";
    case LossKind::kMeanAbsoluteError:
      return "mean_absolute_error";
    case LossKind::kHuber:
      return "huber";
  }
  return "?";
}

absl::StatusOr<double> ComputeLoss(const Loss& l, const Tensor& pred, const Tensor& target,
                                   Tensor* dpred, const Tensor* sample_weight) {
  const int64_t c = pred.shape().empty() ? 1 : pred.shape().back();
  const int64_t rows = pred.size() / std::max<int64_t>(c, 1);
  const int64_t examples = pred.shape().size() < 2 ? rows : pred.dim(0);
  if (sample_weight != nullptr && sample_weight->size() != examples) {
    return absl::InvalidArgumentError("sample weights of shape " +
                                      ShapeString(sample_weight->shape()) + " for " +
                                      std::to_string(examples) + " examples");
  }
  // Each example's weight (Keras's sample_weight: its losses scaled, the mean still over every
  // element), by the index of one of its rows or elements.
  const int64_t rows_each = std::max<int64_t>(rows / std::max<int64_t>(examples, 1), 1);
  const int64_t values_each = std::max<int64_t>(pred.size() / std::max<int64_t>(examples, 1), 1);
  auto row_weight = [&](int64_t r) {
    return sample_weight == nullptr ? 1.0f : (*sample_weight)[r / rows_each];
  };
  auto value_weight = [&](int64_t i) {
    return sample_weight == nullptr ? 1.0f : (*sample_weight)[i / values_each];
  };
  const bool sparse = l.kind == LossKind::kSparseCategoricalCrossentropy;
  if (sparse ? target.size() != rows : target.size() != pred.size()) {
    return absl::InvalidArgumentError(
        "targets of shape " + ShapeString(target.shape()) + " do not fit outputs of shape " +
        ShapeString(pred.shape()) + " for " + LossName(l) +
        (sparse ? " (one class id per output row)" : " (one target per output value)"));
  }
  if (dpred != nullptr) dpred->Resize(pred.shape());
  const float* p = pred.data();
  const float* t = target.data();
  float* d = dpred == nullptr ? nullptr : dpred->data();
  double total = 0;
  const auto inv_rows = static_cast<float>(1.0 / static_cast<double>(rows));
  std::vector<float> prob(static_cast<size_t>(c)), y(static_cast<size_t>(c));
  switch (l.kind) {
    case LossKind::kCategoricalCrossentropy:
    case LossKind::kSparseCategoricalCrossentropy:
      for (int64_t r = 0; r < rows; ++r) {
        const float* pr = p + r * c;
        if (sparse) {
          const float id = t[r];
          if (!(id >= 0 && id < static_cast<float>(c)) || id != std::floor(id)) {
            return absl::InvalidArgumentError("class id " + std::to_string(id) + " at row " +
                                              std::to_string(r) + " is outside [0, " +
                                              std::to_string(c) + ")");
          }
          std::fill(y.begin(), y.end(), 0.0f);
          y[static_cast<size_t>(id)] = 1.0f;
        } else {
          std::copy_n(t + r * c, c, y.begin());
        }
        if (l.label_smoothing > 0) {
          for (float& v : y)
            v = v * (1 - l.label_smoothing) + l.label_smoothing / static_cast<float>(c);
        }
        const float w = row_weight(r);
        if (l.from_logits) {
          const float m = *std::max_element(pr, pr + c);
          double sum = 0;
          for (int64_t j = 0; j < c; ++j) sum += std::exp(static_cast<double>(pr[j] - m));
          const double lse = m + std::log(sum);
          double ysum = 0;
          for (int64_t j = 0; j < c; ++j) {
            total -= w * y[static_cast<size_t>(j)] * (pr[j] - lse);
            ysum += y[static_cast<size_t>(j)];
          }
          if (d != nullptr) {
            for (int64_t j = 0; j < c; ++j) {
              const auto sm = static_cast<float>(std::exp(pr[j] - lse));
              d[r * c + j] =
                  w * (sm * static_cast<float>(ysum) - y[static_cast<size_t>(j)]) * inv_rows;
            }
          }
        } else {
          // Keras normalises the probabilities to sum to one, then clips them.
          double sum = 0;
          for (int64_t j = 0; j < c; ++j) sum += pr[j];
          const double s = sum > 0 ? sum : 1.0;
          double dot = 0;  // sum_j y_j * g_j / s, the normalisation's share of the gradient
          for (int64_t j = 0; j < c; ++j) {
            const double q = pr[j] / s;
            const double qc = std::clamp(q, static_cast<double>(kEps), 1.0 - kEps);
            total -= w * y[static_cast<size_t>(j)] * std::log(qc);
            const double g = (q > kEps && q < 1 - kEps) ? -y[static_cast<size_t>(j)] / qc : 0.0;
            prob[static_cast<size_t>(j)] = static_cast<float>(g);
            dot += g * q;
          }
          if (d != nullptr) {
            for (int64_t j = 0; j < c; ++j) {
              d[r * c + j] =
                  w * static_cast<float>((prob[static_cast<size_t>(j)] - dot) / s) * inv_rows;
            }
          }
        }
      }
      return total / static_cast<double>(rows);
    case LossKind::kBinaryCrossentropy: {
      const double inv = 1.0 / static_cast<double>(pred.size());
      for (int64_t i = 0; i < pred.size(); ++i) {
        float yv = t[i];
        const double w = value_weight(i);
        if (l.label_smoothing > 0) yv = yv * (1 - l.label_smoothing) + 0.5f * l.label_smoothing;
        if (l.from_logits) {
          const double x = p[i];
          total += w * (std::max(x, 0.0) - x * yv + std::log1p(std::exp(-std::abs(x))));
          if (d != nullptr) {
            d[i] = static_cast<float>(w * (1.0 / (1.0 + std::exp(-x)) - yv) * inv);
          }
        } else {
          const double q = p[i];
          const double qc = std::clamp(q, static_cast<double>(kEps), 1.0 - kEps);
          total -= w * (yv * std::log(qc) + (1 - yv) * std::log(1 - qc));
          if (d != nullptr) {
            d[i] = (q > kEps && q < 1 - kEps)
                       ? static_cast<float>(w * (-(yv / qc) + (1 - yv) / (1 - qc)) * inv)
                       : 0.0f;
          }
        }
      }
      return total * inv;
    }
    case LossKind::kMeanSquaredError:
    case LossKind::kMeanAbsoluteError:
    case LossKind::kHuber: {
      const double inv = 1.0 / static_cast<double>(pred.size());
      for (int64_t i = 0; i < pred.size(); ++i) {
        const double e = static_cast<double>(p[i]) - t[i];
        double v = 0, g = 0;
        if (l.kind == LossKind::kMeanSquaredError) {
          v = e * e;
          g = 2 * e;
        } else if (l.kind == LossKind::kMeanAbsoluteError) {
          v = std::abs(e);
          g = (e > 0) - (e < 0);
        } else {
          const double a = std::abs(e);
          v = a <= l.delta ? 0.5 * e * e : l.delta * (a - 0.5 * l.delta);
          g = a <= l.delta ? e : l.delta * static_cast<double>((e > 0) - (e < 0));
        }
        const double w = value_weight(i);
        total += w * v;
        if (d != nullptr) d[i] = static_cast<float>(w * g * inv);
      }
      return total * inv;
    }
  }
  return 0.0;
}

int64_t CountCorrect(const Loss& l, const Tensor& pred, const Tensor& target, int64_t* count) {
  const int64_t c = pred.shape().empty() ? 1 : pred.shape().back();
  const int64_t rows = pred.size() / std::max<int64_t>(c, 1);
  int64_t right = 0;
  if (l.kind == LossKind::kBinaryCrossentropy || c == 1) {
    const float threshold = l.from_logits ? 0.0f : 0.5f;
    for (int64_t i = 0; i < pred.size(); ++i) {
      right += (pred[i] > threshold) == (target[i] > 0.5f);
    }
    *count = pred.size();
    return right;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* pr = pred.data() + r * c;
    const int64_t arg = std::max_element(pr, pr + c) - pr;
    int64_t want = 0;
    if (l.kind == LossKind::kSparseCategoricalCrossentropy) {
      want = static_cast<int64_t>(target[r]);
    } else {
      const float* tr = target.data() + r * c;
      want = std::max_element(tr, tr + c) - tr;
    }
    right += arg == want;
  }
  *count = rows;
  return right;
}

}  // namespace lockstep::trainer::graph
