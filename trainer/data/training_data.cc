#include "trainer/data/training_data.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "trainer/data/csv.h"
#include "trainer/data/images.h"
#include "trainer/data/numpy.h"
#include "trainer/data/tfrecord_dataset.h"
#include "trainer/model/fit_data.h"

namespace lockstep::trainer {
namespace {

// The data spec's examples: the training data, and the validation data or the last fraction
// of the training examples held out; each fitted to the model's inputs and outputs.
class SpecLoader {
 public:
  SpecLoader(const TrainerConfig& c, DataSpec spec, const std::vector<ModelInput>& inputs,
             const std::vector<ModelOutput>& outputs)
      : c_(c), spec_(std::move(spec)), inputs_(inputs), outputs_(outputs) {
    sources_ = {.target_is_input = spec_.target_is_input, .input_scale = spec_.input_scale};
    if (spec_.format == DataFormat::kTfRecord) {
      sources_.input_names = Feeding(spec_.input_features);
      sources_.target_names = Feeding(spec_.label_features);
    } else if (spec_.format == DataFormat::kCsv) {
      sources_.input_names = Feeding(spec_.input_columns);
      sources_.target_names = Feeding(spec_.label_columns);
    } else if (spec_.format == DataFormat::kNumpy) {
      sources_.input_names = Feeding(spec_.x);
      sources_.target_names = Feeding(spec_.y);
    }
  }

  absl::StatusOr<Datasets> Load(FileShard shard) {
    Datasets d;
    // Held-out examples come from every file: the training files are not split then.
    const FileShard part = spec_.validation_split > 0 ? FileShard{} : shard;
    absl::Status s;
    switch (spec_.format) {
      case DataFormat::kImages:
        s = ImageFolders(d);
        break;
      case DataFormat::kCsv:
        s = Rows(spec_.files, &d.train, part);
        if (s.ok() && !spec_.validation_files.empty())
          s = Rows(spec_.validation_files, &d.test, {});
        break;
      case DataFormat::kTfRecord:
        s = Records(spec_.files, &d.train, part);
        if (s.ok() && !spec_.validation_files.empty()) {
          s = Records(spec_.validation_files, &d.test, {});
        }
        break;
      default:
        s = Arrays(spec_.x, spec_.y, spec_.sample_weight, &d.train);
        if (s.ok() && !spec_.validation_x.empty()) {
          s = Arrays(spec_.validation_x, spec_.validation_y, spec_.validation_sample_weight,
                     &d.test);
        }
    }
    if (!s.ok()) return s;
    if (spec_.validation_split > 0) {
      // The last fraction of the examples, as Keras's validation_split takes it.
      const int64_t n = d.train.size();
      const auto held = static_cast<int64_t>(static_cast<double>(n) * spec_.validation_split);
      d.test = trainer::Rows(d.train, n - held, held);
      d.train = trainer::Rows(d.train, 0, n - held);
    }
    d.corrupt_records_skipped = skipped_;
    d.corrupt_bytes_unreadable = unreadable_bytes_;
    d.train_sharded = sharded_;
    return d;
  }

 private:
  template <typename F>
  static std::vector<std::string> Feeding(const std::vector<F>& feeds) {
    std::vector<std::string> out;
    for (const auto& f : feeds) out.push_back(f.feeds);
    return out;
  }

  // Fits the examples to the model; `what` names the source.
  absl::Status Fit(Dataset& d, const std::string& what) {
    sources_.what = what;
    if (absl::Status s = FitToModel(inputs_, outputs_, sources_, &d); !s.ok()) {
      return absl::Status(s.code(),
                          "--data-spec " + c_.data_spec + ": " + std::string(s.message()));
    }
    return absl::OkStatus();
  }

  static std::string ShardNote(bool sharded, FileShard part, size_t files, size_t matched) {
    if (sharded) {
      return absl::StrCat(" (worker ", part.index, " of ", part.count, "'s ", files, " of ",
                          matched, " files)");
    }
    if (part.count > 1 && matched >= static_cast<size_t>(part.count)) {
      // Split by file, one worker would have a file more than another.
      return absl::StrCat(" (", matched, " files do not divide over ", part.count,
                          " workers: every worker reads them all and takes its slice of each "
                          "batch)");
    }
    return "";
  }

  absl::Status Records(const std::string& glob, Dataset* out, FileShard part) {
    TfRecordReport report;
    absl::StatusOr<Dataset> loaded = LoadTfRecords(glob, spec_, &report, 0, part);
    if (!loaded.ok()) return loaded.status();
    skipped_ += report.skipped;
    unreadable_bytes_ += report.unreadable_bytes;
    sharded_ = sharded_ || report.sharded;
    common::LogInfo("data", report.records, " records from ", report.files.size(), " file(s) of ",
                    glob, ShardNote(report.sharded, part, report.files.size(), report.matched),
                    report.skipped > 0
                        ? ", " + std::to_string(report.skipped) + " corrupt record(s) skipped"
                        : "");
    // What skip_corrupt cost, file by file: a bad length loses the rest of its file, which a
    // count of skipped records does not show.
    for (const CorruptFile& f : report.corrupt) {
      common::LogWarning(
          "data", f.file, ": ", f.records_skipped, " corrupt record(s) skipped",
          f.unreadable_bytes > 0
              ? absl::StrCat(", and the last ", f.unreadable_bytes,
                             " bytes could not be read (the records past a corrupt length "
                             "cannot be framed: the rest of the file is lost)")
              : "",
          "; first: ", f.first_problem);
    }
    *out = std::move(*loaded);
    return Fit(*out, glob);
  }

  absl::Status Arrays(const std::vector<Feeds<std::string>>& x,
                      const std::vector<Feeds<std::string>>& y, const std::string& w,
                      Dataset* out) {
    std::vector<std::string> xs, ys;
    for (const auto& f : x) xs.push_back(f.what);
    for (const auto& f : y) ys.push_back(f.what);
    absl::StatusOr<Dataset> loaded = LoadNumpyDataset(xs, ys, w);
    if (!loaded.ok()) return loaded.status();
    common::LogInfo("data", loaded->size(), " examples from ", absl::StrJoin(xs, ", "),
                    ys.empty() ? "" : " and " + absl::StrJoin(ys, ", "));
    *out = std::move(*loaded);
    return Fit(*out, xs[0]);
  }

  absl::Status Rows(const std::string& glob, Dataset* out, FileShard part) {
    FileSet files;
    absl::StatusOr<Dataset> loaded = LoadCsv(glob, spec_, &files, part);
    if (!loaded.ok()) return loaded.status();
    sharded_ = sharded_ || files.sharded;
    common::LogInfo("data", loaded->size(), " rows from ", files.files.size(), " file(s) of ", glob,
                    ShardNote(files.sharded, part, files.files.size(), files.matched));
    *out = std::move(*loaded);
    return Fit(*out, glob);
  }

  absl::Status Images(const std::string& dir, Dataset* out, std::vector<std::string>* names) {
    const Shape example = inputs_[0].shape;
    // [height, width, channels], or a built-in model's [1, height, width].
    const bool hwc = example.size() == 3 && (example[2] == 1 || example[2] == 3);
    const bool chw = example.size() == 3 && example[0] == 1;
    if (inputs_.size() != 1 || (!hwc && !chw)) {
      return absl::InvalidArgumentError("--model " + c_.model + " takes " + ShapeString(example) +
                                        (inputs_.size() != 1 ? " and more inputs" : "") +
                                        "; images need one input [height, width, 1 or 3 channels]");
    }
    const int64_t h = hwc ? example[0] : example[1], w = hwc ? example[1] : example[2];
    absl::StatusOr<Dataset> loaded = LoadImageFolder(dir, h, w, hwc ? example[2] : 1, names);
    if (!loaded.ok()) return loaded.status();
    common::LogInfo("data", loaded->size(), " images of ", names->size(), " classes (",
                    absl::StrJoin(*names, ", "), ") from ", dir);
    *out = std::move(*loaded);
    if (spec_.target_is_input) out->targets.clear();
    return Fit(*out, dir);
  }

  // The training folder and the validation folder, whose classes must be the same.
  absl::Status ImageFolders(Datasets& d) {
    std::vector<std::string> class_names, validation_names;
    if (absl::Status s = Images(spec_.directory, &d.train, &class_names); !s.ok()) return s;
    if (spec_.validation_directory.empty()) return absl::OkStatus();
    if (absl::Status s = Images(spec_.validation_directory, &d.test, &validation_names); !s.ok()) {
      return s;
    }
    if (validation_names != class_names) {
      return absl::DataLossError(spec_.validation_directory + " has the classes " +
                                 absl::StrJoin(validation_names, ", ") + "; " + spec_.directory +
                                 " has " + absl::StrJoin(class_names, ", "));
    }
    return absl::OkStatus();
  }

  const TrainerConfig& c_;
  const DataSpec spec_;
  const std::vector<ModelInput>& inputs_;
  const std::vector<ModelOutput>& outputs_;
  DataSources sources_;
  int64_t skipped_ = 0;           // corrupt TFRecord records (skip_corrupt)
  int64_t unreadable_bytes_ = 0;  // past corrupt TFRecord framing (skip_corrupt)
  bool sharded_ = false;          // the training files split by file (FileShard)
};

// Fashion-MNIST from --data-dir, for a model of one 28x28 input and at least 10 classes.
absl::StatusOr<Datasets> FashionMnist(const TrainerConfig& c, const std::vector<ModelInput>& inputs,
                                      const std::vector<ModelOutput>& outputs) {
  const Shape example = inputs[0].shape;
  const int64_t classes = Classes(outputs[0]);
  if (inputs.size() != 1 || outputs.size() != 1 || NumElements(example) != 28 * 28 ||
      classes < 10 || outputs[0].shape.size() != 1) {
    return absl::InvalidArgumentError(
        "--model " + c.model + " takes " + std::to_string(inputs.size()) +
        " input(s), the first of shape " + ShapeString(example) + ", and gives " +
        std::to_string(outputs.size()) + " output(s), the first of shape " +
        ShapeString(outputs[0].shape) +
        "; Fashion-MNIST has 28x28 images of 10 classes (use --dataset synthetic to "
        "train it on data of its own shape, or --data-spec for your data)");
  }
  Datasets d;
  absl::StatusOr<Dataset> tr = LoadFashionMnist(c.data_dir, "train");
  if (!tr.ok()) return tr.status();
  absl::StatusOr<Dataset> te = LoadFashionMnist(c.data_dir, "t10k");
  if (!te.ok()) return te.status();
  d.train = std::move(*tr);
  d.test = std::move(*te);
  for (Dataset* s : {&d.train, &d.test}) {
    if (absl::Status st = FitToModel(inputs, outputs, {.what = c.data_dir}, s); !st.ok()) {
      return st;
    }
  }
  return d;
}

}  // namespace

absl::StatusOr<Datasets> LoadTrainingData(const TrainerConfig& c,
                                          const std::vector<ModelInput>& inputs,
                                          const std::vector<ModelOutput>& outputs,
                                          FileShard shard) {
  absl::StatusOr<Datasets> d;
  if (c.dataset == "spec") {
    absl::StatusOr<DataSpec> spec = LoadDataSpec(c.data_spec);
    if (!spec.ok()) return spec.status();
    d = SpecLoader(c, *std::move(spec), inputs, outputs).Load(shard);
  } else if (c.dataset == "synthetic") {
    const SyntheticSignature sig = SyntheticFor(inputs, outputs);
    const int64_t test_size = std::max<int64_t>(c.synthetic_size / 5, 1);
    d = Datasets{.train = SyntheticDataset(c.synthetic_size, c.seed, 0, sig),
                 .test = SyntheticDataset(test_size, c.seed, 1, sig)};
  } else {
    d = FashionMnist(c, inputs, outputs);
  }
  if (!d.ok()) return d.status();
  if (c.batch_size > d->train.size()) {
    return absl::InvalidArgumentError("--batch-size " + std::to_string(c.batch_size) +
                                      " is larger than the " + std::to_string(d->train.size()) +
                                      " training examples");
  }
  return d;
}

}  // namespace lockstep::trainer
