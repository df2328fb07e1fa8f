#pragma once
// A data-spec file: where the user's data is and what is in it. JSON, one of the formats below.
// Each names what feeds the model's inputs ("input", "x") and what its outputs are trained
// against ("label", "y"): one source for a one-input (one-output) model, a list of sources for
// the model's inputs (outputs) in order, or an object from the model's input (output) layer
// names to sources, as Keras's fit takes x and y. "target": "input" trains every output against
// the model's input (an autoencoder) and then needs no label.
//
// TFRecord files of tf.train.Example, described as tf.io.parse_example is told:
//   {"format": "tfrecord",
//    "files": "/data/train-*.tfrecord.gz",           a glob (gzip files are recognised)
//    "validation_files": "/data/val-*.tfrecord",     optional: evaluated each epoch
//    "features": {"image": {"dtype": "float32", "shape": [28, 28, 1]},
//                 "tokens": {"dtype": "int64", "shape": [100], "var_len": true, "default": 0},
//                 "label": {"dtype": "int64"}},
//    "input": "image", "label": "label",             or lists, or {"model_name": "feature"}
//    "skip_corrupt": false}                          skip (and count) records whose CRC fails
// A fixed-length feature must hold exactly its shape's number of values (a missing one takes
// "default" when given); a var_len feature is padded with "default" (else 0) or cut to its
// shape's first axis. Inputs are float32 or int64 (token ids); a label is an int64 class id,
// or values of any shape (float32 or int64: regression targets, one-hot rows, masks).
//
// NumPy arrays (np.save's .npy, or a member of np.savez's .npz as FILE.npz:KEY):
//   {"format": "numpy", "x": "/data/mnist.npz:x_train", "y": "/data/mnist.npz:y_train",
//    "validation_x": "/data/mnist.npz:x_test", "validation_y": "/data/mnist.npz:y_test"}
// x is [N, ...] of any numeric dtype; y is [N, ...]: class ids ([N] or [N, 1]), one-hot rows,
// or values of the output's shape.
//
// CSV files with a header line (or "columns"), numeric input columns and label columns:
//   {"format": "csv", "files": "/data/train-*.csv", "validation_files": "/data/val.csv",
//    "label": "species", "label_vocabulary": ["setosa", "versicolor", "virginica"],
//    "input": ["sepal_length", "sepal_width"],       optional: every other column
//    "header": true, "delimiter": ",", "missing": 0}  an empty field's value (else an error)
// A label is one column (a class id, a real value, or one of label_vocabulary: its index), a
// list of columns (one target of that many values), or {"output_name": column(s)}; "input" is
// a list of columns or {"input_name": [columns]}.
//
// A directory of images by class folder, as image_dataset_from_directory reads one (images.h):
//   {"format": "images", "directory": "/data/train", "validation_directory": "/data/val",
//    "input_scale": 0.00392156862745098}
// The images are resized to the model's input height and width, in its channels (1 or 3).
//
// Every format also takes "validation_split" (the last fraction of the training examples held
// out, as Keras's validation_split; not with validation files) and "input_scale" (the inputs
// multiplied by it as they are read: 1/255 for uint8 pixels).
// Thread-safety: plain values.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainer/tensor/tensor.h"

namespace lockstep::trainer {

enum class DataFormat { kTfRecord, kNumpy, kCsv, kImages };
enum class FeatureType { kFloat32, kInt64 };

struct FeatureSpec {
  std::string name;
  FeatureType type = FeatureType::kFloat32;
  Shape shape;  // per example; empty: one value
  bool var_len = false;
  std::optional<float> default_value;
  int64_t size() const { return NumElements(shape); }
};

// A source of one of the model's inputs or targets: `feeds` names the model's input or output
// layer it feeds ("" when sources are matched by position), `what` is the source (a feature, a
// ReadNumpy location, CSV columns).
template <typename T>
struct Feeds {
  std::string feeds;
  T what;
};

struct DataSpec {
  DataFormat format = DataFormat::kTfRecord;
  double validation_split = 0;
  float input_scale = 1;
  bool target_is_input = false;  // "target": "input"
  // "sample_weight": each example's weight in the loss (a feature, a NumPy location, a CSV
  // column; "validation_sample_weight" for NumPy's validation arrays); "" for none.
  std::string sample_weight, validation_sample_weight;
  // tfrecord
  std::string files;
  std::string validation_files;
  std::vector<Feeds<FeatureSpec>> input_features, label_features;
  std::optional<FeatureSpec> weight_feature;  // the sample_weight feature
  bool skip_corrupt = false;
  // numpy
  std::vector<Feeds<std::string>> x, y, validation_x, validation_y;
  // csv (files and validation_files too)
  bool header = true;
  char delimiter = ',';
  std::vector<std::string> columns;  // the files' columns (from the header line when empty)
  // The inputs' and the labels' columns; one input of every other column when no input is named.
  std::vector<Feeds<std::vector<std::string>>> input_columns, label_columns;
  std::vector<std::string> label_vocabulary;  // string labels: each one's class is its index
  std::optional<float> missing;               // what an empty field holds (else an error)
  // images
  std::string directory, validation_directory;
};

// InvalidArgument naming the field (as "data spec: features.image.shape: ...").
absl::StatusOr<DataSpec> ParseDataSpec(const nlohmann::json& j);
// The file, parsed (InvalidArgument too when it cannot be read).
absl::StatusOr<DataSpec> LoadDataSpec(const std::string& path);

}  // namespace lockstep::trainer
