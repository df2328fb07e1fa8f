#include "trainer/model/fit_data.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep::trainer {
namespace {

template <typename T>
std::string Names(const std::vector<T>& v) {
  std::vector<std::string> out;
  for (const T& e : v) out.push_back("'" + e.name + "'");
  return absl::StrJoin(out, ", ");
}

// Orders `tensors` as the model's `wanted` (by `names`, or by position).
template <typename T>
absl::Status Order(const std::vector<T>& wanted, const std::vector<std::string>& names,
                   const std::string& kind, const std::string& what, std::vector<Tensor>* tensors) {
  if (names.empty() ||
      std::all_of(names.begin(), names.end(), [](const std::string& n) { return n.empty(); })) {
    if (tensors->size() != wanted.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": ", tensors->size(), " ", kind, " source(s); the model has ", wanted.size(), " ",
          kind, "s (", Names(wanted), "); give one for each, in order or by name"));
    }
    return absl::OkStatus();
  }
  std::vector<Tensor> ordered(wanted.size());
  std::vector<bool> given(wanted.size(), false);
  for (size_t i = 0; i < names.size(); ++i) {
    auto it =
        std::find_if(wanted.begin(), wanted.end(), [&](const T& w) { return w.name == names[i]; });
    if (it == wanted.end()) {
      return absl::InvalidArgumentError(what + ": the model has no " + kind + " '" + names[i] +
                                        "' (its " + kind + "s: " + Names(wanted) + ")");
    }
    const auto k = static_cast<size_t>(it - wanted.begin());
    ordered[k] = std::move((*tensors)[i]);
    given[k] = true;
  }
  for (size_t k = 0; k < wanted.size(); ++k) {
    if (!given[k]) {
      return absl::InvalidArgumentError(what + ": nothing feeds the model's " + kind + " '" +
                                        wanted[k].name + "'");
    }
  }
  *tensors = std::move(ordered);
  return absl::OkStatus();
}

Shape WithBatch(int64_t n, const Shape& s) {
  Shape out{n};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

bool IsClassId(float v, int64_t classes) {
  return v >= 0 && v < static_cast<float>(classes) && v == std::floor(v);
}

absl::Status FitTarget(const ModelOutput& o, const std::string& what, int64_t n, Tensor* t) {
  const Shape want = TargetShape(o);
  const int64_t have = ExampleSize(*t);
  const int64_t classes = o.shape.empty() ? 1 : o.shape.back();
  const int64_t ids = NumElements(o.shape) / std::max<int64_t>(classes, 1);
  const std::string out = "output '" + o.name + "' " + ShapeString(o.shape);
  auto bad_id = [&](int64_t i, float v) {
    return absl::DataLossError(absl::StrCat(
        what, ": example ", i / std::max<int64_t>(ids, 1), " has the class id ", v, " for ", out,
        " (", graph::LossName(o.loss), " takes ids in [0, ", classes, "))"));
  };
  const std::string fits_not = absl::StrCat(
      what, ": targets of shape ", ShapeString(ExampleShape(*t)), " per example do not fit ", out,
      " trained with ", graph::LossName(o.loss), " (it takes ", ShapeString(want), " per example");
  switch (o.loss.kind) {
    case LossKind::kSparseCategoricalCrossentropy: {
      if (have == ids) {
        for (int64_t i = 0; i < t->size(); ++i) {
          if (!IsClassId((*t)[i], classes)) return bad_id(i, (*t)[i]);
        }
        *t = t->Reshaped(WithBatch(n, want));
        return absl::OkStatus();
      }
      if (have == NumElements(o.shape) && classes > 1) {  // one-hot rows: their ids
        Tensor y(WithBatch(n, want));
        for (int64_t r = 0; r < n * ids; ++r) {
          const float* row = t->data() + r * classes;
          int64_t ones = 0, zeros = 0, at = 0;
          for (int64_t j = 0; j < classes; ++j) {
            if (row[j] == 1.0f) {
              ++ones;
              at = j;
            } else if (row[j] == 0.0f) {
              ++zeros;
            }
          }
          if (ones != 1 || zeros != classes - 1) {
            return absl::DataLossError(absl::StrCat(
                what, ": example ", r / std::max<int64_t>(ids, 1), " has a target row for ", out,
                " that is not one-hot; for soft or multi-hot targets give --loss "
                "categorical_crossentropy or binary_crossentropy"));
          }
          y[r] = static_cast<float>(at);
        }
        *t = std::move(y);
        return absl::OkStatus();
      }
      return absl::InvalidArgumentError(fits_not + ": class ids)");
    }
    case LossKind::kCategoricalCrossentropy: {
      if (have == NumElements(o.shape)) {
        *t = t->Reshaped(WithBatch(n, o.shape));
        return absl::OkStatus();
      }
      if (have == ids) {  // class ids: one-hot rows
        Tensor y(WithBatch(n, o.shape));
        y.Fill(0.0f);
        for (int64_t r = 0; r < n * ids; ++r) {
          if (!IsClassId((*t)[r], classes)) return bad_id(r, (*t)[r]);
          y[r * classes + static_cast<int64_t>((*t)[r])] = 1.0f;
        }
        *t = std::move(y);
        return absl::OkStatus();
      }
      return absl::InvalidArgumentError(fits_not + ": one-hot rows, or class ids)");
    }
    default:
      if (have != NumElements(o.shape)) return absl::InvalidArgumentError(fits_not + ")");
      *t = t->Reshaped(WithBatch(n, o.shape));
      return absl::OkStatus();
  }
}

}  // namespace

absl::Status FitToModel(const std::vector<ModelInput>& inputs,
                        const std::vector<ModelOutput>& outputs, const DataSources& src,
                        Dataset* d) {
  const std::string& what = src.what;
  if (absl::Status s = Order(inputs, src.input_names, "input", what, &d->inputs); !s.ok()) {
    return s;
  }
  const int64_t n = d->size();
  for (size_t k = 0; k < inputs.size(); ++k) {
    Tensor& t = d->inputs[k];
    if (t.shape().empty() || t.dim(0) != n) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": input '", inputs[k].name, "' has ",
                                                     t.shape().empty() ? 0 : t.dim(0),
                                                     " examples; the first input has ", n));
    }
    if (ExampleSize(t) != NumElements(inputs[k].shape)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": examples of shape ", ShapeString(ExampleShape(t)), " (", ExampleSize(t),
          " values) for input '", inputs[k].name, "'; the model takes ",
          ShapeString(inputs[k].shape), " (", NumElements(inputs[k].shape), ")"));
    }
    t = t.Reshaped(WithBatch(n, inputs[k].shape));
    if (src.input_scale != 1.0f) {
      for (float& v : t.values()) v *= src.input_scale;
    }
  }
  if (src.target_is_input) {
    if (inputs.size() != 1) {
      return absl::InvalidArgumentError(what +
                                        ": \"target\": \"input\" needs a one-input model; "
                                        "this one has " +
                                        Names(inputs));
    }
    d->targets.assign(outputs.size(), d->inputs[0]);
  } else if (absl::Status s = Order(outputs, src.target_names, "output", what, &d->targets);
             !s.ok()) {
    return s;
  }
  if (d->sample_weights.size() > 0) {
    Tensor& w = d->sample_weights;
    if (w.size() != n) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", w.size(), " sample weights for ", n, " examples"));
    }
    w = w.Reshaped({n});
    for (int64_t i = 0; i < n; ++i) {
      if (!(w[i] >= 0) || !std::isfinite(w[i])) {
        return absl::DataLossError(absl::StrCat(what, ": example ", i, " has the sample weight ",
                                                w[i], " (weights are finite and not negative)"));
      }
    }
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    Tensor& t = d->targets[k];
    if (t.shape().empty() || t.dim(0) != n) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the targets of output '", outputs[k].name, "' number ",
                       t.shape().empty() ? 0 : t.dim(0), "; the inputs ", n));
    }
    if (absl::Status s = FitTarget(outputs[k], what, n, &t); !s.ok()) return s;
  }
  return absl::OkStatus();
}

SyntheticSignature SyntheticFor(const std::vector<ModelInput>& inputs,
                                const std::vector<ModelOutput>& outputs) {
  SyntheticSignature sig;
  sig.inputs.clear();
  sig.targets.clear();
  for (const ModelInput& in : inputs) sig.inputs.push_back({in.shape, in.vocabulary});
  bool classes_set = false;
  for (const ModelOutput& o : outputs) {
    SyntheticTarget t;
    t.shape = TargetShape(o);
    t.classes = o.shape.empty() ? 1 : o.shape.back();
    switch (o.loss.kind) {
      case LossKind::kSparseCategoricalCrossentropy:
        t.form = TargetForm::kClassIds;
        break;
      case LossKind::kCategoricalCrossentropy:
        t.form = TargetForm::kOneHot;
        break;
      case LossKind::kBinaryCrossentropy:
        t.form = TargetForm::kBinary;
        t.classes = 2;
        break;
      default:
        t.form = TargetForm::kReal;
        break;
    }
    // The hidden classes: the first classifier's (one class per example), else 10.
    const int64_t size = NumElements(t.shape);
    const bool one_class = t.form == TargetForm::kOneHot ? size == t.classes
                                                         : t.form != TargetForm::kReal && size == 1;
    if (!classes_set && one_class) {
      sig.classes = static_cast<int32_t>(t.classes);
      classes_set = true;
    }
    sig.targets.push_back(t);
  }
  return sig;
}

}  // namespace lockstep::trainer
