#include "trainer/keras/weights_file.h"

#include <hdf5.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainer/data/zip_archive.h"

namespace lockstep::trainer::keras {
namespace {

using graph::Layer;
using graph::Weight;
using nlohmann::json;

// ---- The layout ----------------------------------------------------------------------------

bool IsRecurrentClass(const std::string& c) {
  return c == "LSTM" || c == "GRU" || c == "SimpleRNN" || c == "RNN";
}

const json& ConfigOf(const json& entry) {
  static const json kNone = json::object();
  return entry.is_object() && entry.contains("config") && entry["config"].is_object()
             ? entry["config"]
             : kNone;
}

// A weight and its name inside the object being placed ("kernel" in a cell, "query/kernel" in
// a MultiHeadAttention).
struct Local {
  Layer* layer;
  Weight* weight;
  std::string name;
};

class LayoutBuilder {
 public:
  explicit LayoutBuilder(const KerasModel& m) : m_(m) {}

  absl::StatusOr<WeightLayout> Build() {
    const json& model = *m_.config;
    out_.keras3_objects.emplace_back("", m_.name);
    const bool sequential = ClassOf(model) == "Sequential";
    for (const json& e : LayersOf(model)) {
      const std::string cls = ClassOf(e);
      if (IsOpClass(cls) || (sequential && cls == "InputLayer")) continue;
      out_.keras2_layers.push_back(NameOf(e));
    }
    if (absl::Status s = Model(model, "", nullptr); !s.ok()) return s;
    return std::move(out_);
  }

 private:
  // The layers of a model entry under `prefix` ("" or "layers/functional/"). `group`: the
  // Keras 2 group its weights go to (null at the top: each layer its own).
  absl::Status Model(const json& model, const std::string& prefix, const std::string* group) {
    const bool sequential = ClassOf(model) == "Sequential";
    std::map<std::string, int> used;
    for (const json& e : LayersOf(model)) {
      const std::string cls = ClassOf(e);
      if (IsOpClass(cls) || (sequential && cls == "InputLayer")) continue;
      const bool nested = IsModelClass(cls);
      std::string key =
          KerasSnakeCase(nested ? (cls == "Sequential" ? "Sequential" : "Functional") : cls);
      if (auto [it, fresh] = used.emplace(key, 0); !fresh)
        key += "_" + std::to_string(++it->second);
      const std::string path = prefix + "layers/" + key;
      const std::string name = NameOf(e);
      const std::string& g = group != nullptr ? *group : name;
      if (nested) {
        out_.keras3_objects.emplace_back(path, name);
        if (absl::Status s = Model(e, path + "/", &g); !s.ok()) return s;
        continue;
      }
      auto it = m_.layer_of.find(&e);
      if (it == m_.layer_of.end()) {  // an InputLayer
        out_.keras3_objects.emplace_back(path, name);
        continue;
      }
      Layer* l = it->second;
      std::vector<Local> ws;
      for (Weight& w : l->weights()) ws.push_back({l, &w, w.name});
      // Keras 2 names a nested model's weights by their layer, a top-level layer's by itself.
      if (absl::Status s = Place(e, cls, name, ws, path, g, name + "/"); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  // Places a layer's (or a sub-object's) weights: the object at `path`, its variables after.
  absl::Status Place(const json& e, const std::string& cls, const std::string& name,
                     const std::vector<Local>& ws, const std::string& path,
                     const std::string& group, const std::string& k2prefix) {
    out_.keras3_objects.emplace_back(path, name);
    if (cls == "MultiHeadAttention") {
      static const std::pair<const char*, const char*> kDense[] = {
          {"query", "_query_dense"},
          {"key", "_key_dense"},
          {"value", "_value_dense"},
          {"attention_output", "_output_dense"}};
      size_t placed = 0;
      for (const auto& [sub, attr] : kDense) {
        std::vector<Local> mine;
        for (const Local& w : ws) {
          if (w.name.rfind(std::string(sub) + "/", 0) == 0) mine.push_back(w);
        }
        if (mine.empty()) continue;
        placed += mine.size();
        out_.keras3_objects.emplace_back(path + "/" + attr, sub);
        Vars(mine, path + "/" + attr, group, k2prefix);
      }
      if (placed != ws.size()) return Unplaced(name, cls);
      return absl::OkStatus();
    }
    if (IsRecurrentClass(cls)) {
      const json& cfg = ConfigOf(e);
      const std::string cell = cls == "RNN" && cfg.contains("cell")
                                   ? KerasSnakeCase(ClassOf(cfg["cell"]))
                                   : KerasSnakeCase(cls + "Cell");
      out_.keras3_objects.emplace_back(path + "/cell", cell);
      Vars(ws, path + "/cell", group, k2prefix + cell + "/");
      return absl::OkStatus();
    }
    if (cls == "Bidirectional") {
      const json& cfg = ConfigOf(e);
      if (ws.empty()) return absl::OkStatus();
      const std::string fwd = ws[0].name.substr(0, ws[0].name.find('/'));
      std::vector<Local> forward, backward;
      std::string bwd;
      for (const Local& w : ws) {
        const size_t slash = w.name.find('/');
        if (slash == std::string::npos) return Unplaced(name, cls);
        const std::string owner = w.name.substr(0, slash);
        Local inner{w.layer, w.weight, w.name.substr(slash + 1)};
        if (owner == fwd) {
          forward.push_back(std::move(inner));
        } else {
          bwd = owner;
          backward.push_back(std::move(inner));
        }
      }
      const json& f = cfg.contains("layer") ? cfg["layer"] : json::object();
      const json& b = cfg.contains("backward_layer") && cfg["backward_layer"].is_object()
                          ? cfg["backward_layer"]
                          : f;
      if (absl::Status s = Place(f, ClassOf(f), fwd, forward, path + "/forward_layer", group,
                                 k2prefix + fwd + "/");
          !s.ok()) {
        return s;
      }
      return Place(b, ClassOf(b), bwd, backward, path + "/backward_layer", group,
                   k2prefix + bwd + "/");
    }
    if (cls == "TimeDistributed") {
      const json& cfg = ConfigOf(e);
      const json& inner = cfg.contains("layer") ? cfg["layer"] : json::object();
      return Place(inner, ClassOf(inner), NameOf(inner), ws, path + "/layer", group, k2prefix);
    }
    if (cls == "Normalization") {
      // Keras 2 counts the examples adapt saw; Keras 3 keeps only the mean and the variance.
      std::vector<Local> kept;
      for (const Local& w : ws) {
        if (w.name != "count") kept.push_back(w);
      }
      Vars(kept, path, group, k2prefix);
      for (const Local& w : ws) {
        if (w.name == "count")
          out_.variables.push_back({w.layer, w.weight, "", group, k2prefix + "count:0"});
      }
      return absl::OkStatus();
    }
    Vars(ws, path, group, k2prefix);
    return absl::OkStatus();
  }

  void Vars(const std::vector<Local>& ws, const std::string& path, const std::string& group,
            const std::string& k2prefix) {
    for (size_t i = 0; i < ws.size(); ++i) {
      out_.variables.push_back({ws[i].layer, ws[i].weight, path + "/vars/" + std::to_string(i),
                                group, k2prefix + ws[i].name + ":0"});
    }
  }

  static absl::Status Unplaced(const std::string& name, const std::string& cls) {
    return absl::InvalidArgumentError("layer '" + name + "' (" + cls +
                                      "): its weights do not map onto Keras's variables");
  }

  const KerasModel& m_;
  WeightLayout out_;
};

// Each Keras 2 group's variables in Keras 2's order: trainable, then the others.
std::vector<std::pair<std::string, std::vector<const KerasVariable*>>> Keras2Groups(
    const WeightLayout& l) {
  std::vector<std::pair<std::string, std::vector<const KerasVariable*>>> out;
  for (const std::string& name : l.keras2_layers) {
    std::vector<const KerasVariable*> vs;
    for (const KerasVariable& v : l.variables) {
      if (v.keras2_group == name) vs.push_back(&v);
    }
    std::stable_partition(vs.begin(), vs.end(),
                          [](const KerasVariable* v) { return v->weight->trainable; });
    out.emplace_back(name, std::move(vs));
  }
  return out;
}

// ---- HDF5 ----------------------------------------------------------------------------------

// An HDF5 identifier closed when it goes.
class Hid {
 public:
  Hid() = default;
  Hid(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  Hid(Hid&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  Hid& operator=(Hid&& o) noexcept {
    if (this != &o) {
      Reset();
      id_ = std::exchange(o.id_, -1);
      close_ = o.close_;
    }
    return *this;
  }
  ~Hid() { Reset(); }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  void Reset() {
    if (id_ >= 0 && close_ != nullptr) close_(id_);
    id_ = -1;
  }
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

// HDF5 prints its error stack to stderr by default; our errors say what failed instead.
void Quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

absl::Status Failed(const std::string& path, const std::string& what) {
  return absl::InternalError("cannot write " + path + ": " + what);
}

Hid ScalarSpace() { return Hid(H5Screate(H5S_SCALAR), H5Sclose); }

// A scalar variable-length UTF-8 string attribute (what h5py writes for a Python str).
bool WriteTextAttr(hid_t loc, const char* name, const std::string& value) {
  Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
  if (!type.ok() || H5Tset_size(type.get(), H5T_VARIABLE) < 0 ||
      H5Tset_cset(type.get(), H5T_CSET_UTF8) < 0) {
    return false;
  }
  Hid space = ScalarSpace();
  Hid a(H5Acreate2(loc, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  const char* p = value.c_str();
  return a.ok() && H5Awrite(a.get(), type.get(), &p) >= 0;
}

// A fixed-length byte-string attribute, one string or an array of them (what h5py writes for
// NumPy bytes: Keras 2's layer_names, weight_names, backend, keras_version).
bool WriteBytesAttr(hid_t loc, const std::string& name, const std::vector<std::string>& values,
                    bool scalar) {
  size_t width = 1;
  for (const std::string& v : values) width = std::max(width, v.size());
  std::string buf(values.size() * width, '\0');
  for (size_t i = 0; i < values.size(); ++i) buf.replace(i * width, values[i].size(), values[i]);
  Hid type(H5Tcopy(H5T_C_S1), H5Tclose);
  if (!type.ok() || H5Tset_size(type.get(), width) < 0 ||
      H5Tset_strpad(type.get(), H5T_STR_NULLPAD) < 0) {
    return false;
  }
  const hsize_t n = values.size();
  Hid space = scalar ? ScalarSpace() : Hid(H5Screate_simple(1, &n, nullptr), H5Sclose);
  Hid a(H5Acreate2(loc, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  return a.ok() && H5Awrite(a.get(), type.get(), buf.data()) >= 0;
}

// Keras 2's save_attributes_to_hdf5_group: a list too big for an object header (64 KiB) is
// split into name0, name1, ...
bool WriteNamesAttr(hid_t loc, const std::string& name, const std::vector<std::string>& values) {
  constexpr size_t kHeaderLimit = 64512;
  size_t width = 1;
  for (const std::string& v : values) width = std::max(width, v.size());
  if (values.size() * width <= kHeaderLimit) return WriteBytesAttr(loc, name, values, false);
  const size_t per = std::max<size_t>(1, kHeaderLimit / width);
  for (size_t i = 0, chunk = 0; i < values.size(); i += per, ++chunk) {
    std::vector<std::string> part(
        values.begin() + static_cast<std::ptrdiff_t>(i),
        values.begin() + static_cast<std::ptrdiff_t>(std::min(values.size(), i + per)));
    if (!WriteBytesAttr(loc, name + std::to_string(chunk), part, false)) return false;
  }
  return true;
}

Hid CreateGroup(hid_t loc, const std::string& path) {
  Hid lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  return Hid(H5Gcreate2(loc, path.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
}

bool WriteDataset(hid_t loc, const std::string& path, const Tensor& t, bool as_int64) {
  std::vector<hsize_t> dims(t.shape().begin(), t.shape().end());
  Hid space =
      dims.empty()
          ? ScalarSpace()
          : Hid(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  Hid lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Hid d(H5Dcreate2(loc, path.c_str(), as_int64 ? H5T_STD_I64LE : H5T_IEEE_F32LE, space.get(),
                   lcpl.get(), H5P_DEFAULT, H5P_DEFAULT),
        H5Dclose);
  if (!d.ok()) return false;
  if (as_int64) {
    std::vector<int64_t> v(t.values().begin(), t.values().end());
    return H5Dwrite(d.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0;
  }
  return H5Dwrite(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t.data()) >= 0;
}

// Writes an HDF5 file through `body`; on failure no file is left.
absl::Status WriteH5(const std::string& path, const std::function<absl::Status(hid_t)>& body) {
  Quiet();
  absl::Status s;
  {
    Hid f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
    if (!f.ok()) return Failed(path, "cannot create the file");
    s = body(f.get());
    if (s.ok() && H5Fflush(f.get(), H5F_SCOPE_GLOBAL) < 0) s = Failed(path, "flush failed");
  }
  if (!s.ok()) std::remove(path.c_str());
  return s;
}

// ---- Reading -------------------------------------------------------------------------------

// Whether every link of `path` exists under `loc` (H5Lexists wants its parents to exist).
bool Exists(hid_t loc, const std::string& path) {
  size_t at = 0;
  while (true) {
    const size_t slash = path.find('/', at);
    const std::string prefix = path.substr(0, slash);
    if (H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (slash == std::string::npos) return true;
    at = slash + 1;
  }
}

// The strings of an attribute (fixed-length or variable-length, one or an array); nullopt when
// there is no such attribute.
std::optional<std::vector<std::string>> ReadStringsAttr(hid_t loc, const std::string& name) {
  if (H5Aexists(loc, name.c_str()) <= 0) return std::nullopt;
  Hid a(H5Aopen(loc, name.c_str(), H5P_DEFAULT), H5Aclose);
  Hid type(H5Aget_type(a.get()), H5Tclose);
  Hid space(H5Aget_space(a.get()), H5Sclose);
  if (!a.ok() || !type.ok() || !space.ok() || H5Tget_class(type.get()) != H5T_STRING) {
    return std::nullopt;
  }
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) return std::nullopt;
  std::vector<std::string> out;
  if (H5Tis_variable_str(type.get()) > 0) {
    std::vector<char*> ptrs(static_cast<size_t>(n), nullptr);
    Hid mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    if (H5Aread(a.get(), mem.get(), ptrs.data()) < 0) return std::nullopt;
    for (char* p : ptrs) out.emplace_back(p != nullptr ? p : "");
    H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, ptrs.data());
    return out;
  }
  const size_t width = H5Tget_size(type.get());
  std::string buf(static_cast<size_t>(n) * width, '\0');
  if (H5Aread(a.get(), type.get(), buf.data()) < 0) return std::nullopt;
  for (hssize_t i = 0; i < n; ++i) {
    std::string s = buf.substr(static_cast<size_t>(i) * width, width);
    s.erase(std::find(s.begin(), s.end(), '\0'), s.end());
    out.push_back(std::move(s));
  }
  return out;
}

// Keras 2's load_attributes_from_hdf5_group: `name`, or its chunks name0, name1, ...
std::vector<std::string> ReadNamesAttr(hid_t loc, const std::string& name) {
  if (auto v = ReadStringsAttr(loc, name)) return *v;
  std::vector<std::string> out;
  for (int chunk = 0;; ++chunk) {
    auto part = ReadStringsAttr(loc, name + std::to_string(chunk));
    if (!part) return out;
    out.insert(out.end(), part->begin(), part->end());
  }
}

// A numeric dataset as float32, with its shape.
struct Array {
  Shape shape;
  std::vector<float> values;
};
absl::StatusOr<Array> ReadArray(hid_t loc, const std::string& path, const std::string& file) {
  Hid d(H5Dopen2(loc, path.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.ok()) return absl::InvalidArgumentError(file + ": " + path + " is not a dataset");
  Hid type(H5Dget_type(d.get()), H5Tclose);
  const H5T_class_t tc = H5Tget_class(type.get());
  if (tc != H5T_FLOAT && tc != H5T_INTEGER) {
    return absl::InvalidArgumentError(file + ": " + path + " is not numeric");
  }
  Hid space(H5Dget_space(d.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) return absl::InvalidArgumentError(file + ": " + path + " has no shape");
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  Array out;
  size_t n = 1;
  for (hsize_t v : dims) {
    out.shape.push_back(static_cast<int64_t>(v));
    n *= static_cast<size_t>(v);
  }
  out.values.resize(n);
  if (n > 0 &&
      H5Dread(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.values.data()) < 0) {
    return absl::DataLossError(file + ": " + path + " cannot be read");
  }
  return out;
}

std::string ShapeText(const Shape& s) { return "[" + absl::StrJoin(s, ", ") + "]"; }

std::string WeightText(const KerasVariable& v) {
  return "layer '" + v.layer->name() + "' weight '" + v.weight->name + "'";
}

// Values staged for the model, assigned only once the whole file has been read and checked.
class Staged {
 public:
  absl::Status Add(const KerasVariable& v, Array a, const std::string& file,
                   const std::string& where) {
    const Shape& want = v.weight->value.shape();
    if (v.layer->class_name() == "LSTM" && v.weight->name == "bias" && want.size() == 1 &&
        a.shape == Shape{2 * want[0]}) {
      // A CuDNNLSTM's biases: the input's and the recurrent kernel's, which only ever add.
      for (int64_t i = 0; i < want[0]; ++i) {
        a.values[static_cast<size_t>(i)] += a.values[static_cast<size_t>(want[0] + i)];
      }
      a.values.resize(static_cast<size_t>(want[0]));
      a.shape = want;
    }
    if (v.layer->class_name() == "GRU" && v.weight->name == "bias" && want.size() == 2 &&
        a.shape == Shape{want[0] * want[1]}) {
      a.shape = want;  // a CuDNNGRU's [input; recurrent] biases, flat
    }
    if (a.shape != want) {
      return absl::InvalidArgumentError(file + ": " + WeightText(v) + " is " +
                                        ShapeText(v.weight->value.shape()) + " in the model, " +
                                        ShapeText(a.shape) + " in the file (" + where + ")");
    }
    values_.emplace_back(v.weight, std::move(a.values));
    return absl::OkStatus();
  }
  void Assign() {
    for (auto& [w, vals] : values_) w->value.values() = std::move(vals);
  }

 private:
  std::vector<std::pair<Weight*, std::vector<float>>> values_;
};

size_t CountLinks(hid_t loc, const std::string& path) {
  if (!Exists(loc, path)) return 0;
  Hid g(H5Gopen2(loc, path.c_str(), H5P_DEFAULT), H5Gclose);
  H5G_info_t info;
  if (!g.ok() || H5Gget_info(g.get(), &info) < 0) return 0;
  return static_cast<size_t>(info.nlinks);
}

absl::Status ReadKeras3(hid_t f, const std::string& file, const WeightLayout& l) {
  std::map<std::string, size_t> ours;  // each object's variable count
  for (const KerasVariable& v : l.variables) {
    if (!v.keras3_path.empty()) ++ours[v.keras3_path.substr(0, v.keras3_path.rfind("/vars/"))];
  }
  for (const auto& [path, name] : l.keras3_objects) {
    const std::string vars = path.empty() ? "vars" : path + "/vars";
    const size_t theirs = CountLinks(f, vars);
    const size_t mine = ours.count(path) ? ours[path] : 0;
    if (theirs != mine) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": '", name, "' (", path.empty() ? "the model" : path, ") has ",
                       theirs, " variable(s) in the file, ", mine,
                       " in the model (weights saved from another architecture?)"));
    }
  }
  Staged staged;
  for (const KerasVariable& v : l.variables) {
    if (v.keras3_path.empty()) continue;
    absl::StatusOr<Array> a = ReadArray(f, v.keras3_path, file);
    if (!a.ok()) return a.status();
    if (absl::Status s = staged.Add(v, std::move(*a), file, v.keras3_path); !s.ok()) return s;
  }
  staged.Assign();
  return absl::OkStatus();
}

absl::Status ReadKeras2(hid_t root, const std::string& file, const WeightLayout& l) {
  struct Theirs {
    std::string layer;
    std::vector<std::string> names;
  };
  std::vector<Theirs> theirs;
  for (const std::string& layer : ReadNamesAttr(root, "layer_names")) {
    if (!Exists(root, layer)) {
      return absl::InvalidArgumentError(file + ": layer_names lists '" + layer +
                                        "' but the file has no such group");
    }
    Hid g(H5Gopen2(root, layer.c_str(), H5P_DEFAULT), H5Gclose);
    std::vector<std::string> names = ReadNamesAttr(g.get(), "weight_names");
    if (!names.empty()) theirs.push_back({layer, std::move(names)});
  }
  std::vector<std::pair<std::string, std::vector<const KerasVariable*>>> ours;
  for (auto& g : Keras2Groups(l)) {
    if (!g.second.empty()) ours.push_back(std::move(g));
  }
  if (theirs.size() != ours.size()) {
    std::vector<std::string> a, b;
    for (const Theirs& t : theirs) a.push_back(t.layer);
    for (const auto& o : ours) b.push_back(o.first);
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": the file has weights for ", theirs.size(), " layer(s) (", absl::StrJoin(a, ", "),
        "), the model ", ours.size(), " (", absl::StrJoin(b, ", "),
        "); Keras 2 weights load by the order of the layers that have weights"));
  }
  Staged staged;
  for (size_t i = 0; i < ours.size(); ++i) {
    const Theirs& t = theirs[i];
    const auto& [layer, vars] = ours[i];
    if (t.names.size() != vars.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": layer '", layer, "' has ", vars.size(), " weight(s) in the model, the file's '",
          t.layer, "' (its layer ", i + 1, " with weights) ", t.names.size()));
    }
    Hid g(H5Gopen2(root, t.layer.c_str(), H5P_DEFAULT), H5Gclose);
    for (size_t k = 0; k < vars.size(); ++k) {
      if (!Exists(g.get(), t.names[k])) {
        return absl::InvalidArgumentError(file + ": group '" + t.layer + "' lists weight '" +
                                          t.names[k] + "' but has no such dataset");
      }
      absl::StatusOr<Array> a = ReadArray(g.get(), t.names[k], file);
      if (!a.ok()) return a.status();
      if (absl::Status s = staged.Add(*vars[k], std::move(*a), file, t.layer + "/" + t.names[k]);
          !s.ok()) {
        return s;
      }
    }
  }
  staged.Assign();
  return absl::OkStatus();
}

absl::Status ReadH5(hid_t f, const std::string& file, const WeightLayout& l) {
  if (H5Aexists(f, "layer_names") > 0 || H5Aexists(f, "layer_names0") > 0) {
    return ReadKeras2(f, file, l);
  }
  if (H5Lexists(f, "model_weights", H5P_DEFAULT) > 0) {  // a whole model.save("x.h5")
    Hid g(H5Gopen2(f, "model_weights", H5P_DEFAULT), H5Gclose);
    return ReadKeras2(g.get(), file, l);
  }
  if (H5Lexists(f, "layers", H5P_DEFAULT) > 0 || H5Lexists(f, "vars", H5P_DEFAULT) > 0) {
    return ReadKeras3(f, file, l);
  }
  return absl::InvalidArgumentError(
      file + ": an HDF5 file without Keras weights (no layer_names, model_weights or layers)");
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

// Keras's three regular expressions, applied as Python's re.sub applies them (left to right,
// matches not overlapping):
//   \W+ -> ""; (.)([A-Z][a-z]+) -> \1_\2; ([a-z])([A-Z]) -> \1_\2; then lower case.
std::string KerasSnakeCase(const std::string& name) {
  auto upper = [](char c) { return c >= 'A' && c <= 'Z'; };
  auto lower = [](char c) { return c >= 'a' && c <= 'z'; };
  std::string s;
  for (char c : name) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') s += c;
  }
  std::string a;
  for (size_t i = 0; i < s.size();) {
    if (i + 2 < s.size() && upper(s[i + 1]) && lower(s[i + 2])) {
      size_t end = i + 3;
      while (end < s.size() && lower(s[end])) ++end;
      a += s[i];
      a += '_';
      a.append(s, i + 1, end - i - 1);
      i = end;
    } else {
      a += s[i++];
    }
  }
  std::string b;
  for (size_t i = 0; i < a.size();) {
    if (i + 1 < a.size() && lower(a[i]) && upper(a[i + 1])) {
      b += a[i];
      b += '_';
      b += a[i + 1];
      i += 2;
    } else {
      b += a[i++];
    }
  }
  std::transform(b.begin(), b.end(), b.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return b;
}

absl::StatusOr<WeightLayout> LayoutOf(const KerasModel& m) {
  if (m.config == nullptr) {
    return absl::InvalidArgumentError("the model was not loaded from a Keras model file");
  }
  return LayoutBuilder(m).Build();
}

absl::Status WriteKeras3Weights(const KerasModel& m, const std::string& path) {
  absl::StatusOr<WeightLayout> l = LayoutOf(m);
  if (!l.ok()) return l.status();
  return WriteH5(path, [&](hid_t f) {
    for (const auto& [obj, name] : l->keras3_objects) {
      Hid g = CreateGroup(f, obj.empty() ? "vars" : obj + "/vars");
      if (!g.ok() || !WriteTextAttr(g.get(), "name", name)) {
        return Failed(path, "group " + obj + "/vars");
      }
    }
    for (const KerasVariable& v : l->variables) {
      if (v.keras3_path.empty()) continue;
      if (!WriteDataset(f, v.keras3_path, v.weight->value, false)) {
        return Failed(path, "dataset " + v.keras3_path);
      }
    }
    return absl::OkStatus();
  });
}

absl::Status WriteKeras2Weights(const KerasModel& m, const std::string& path) {
  absl::StatusOr<WeightLayout> l = LayoutOf(m);
  if (!l.ok()) return l.status();
  return WriteH5(path, [&](hid_t f) {
    if (!WriteNamesAttr(f, "layer_names", l->keras2_layers) ||
        !WriteBytesAttr(f, "backend", {"tensorflow"}, true) ||
        // The layout written is tf.keras 2's; its loader reads this for old-format conversions.
        !WriteBytesAttr(f, "keras_version", {"2.15.0"}, true)) {
      return Failed(path, "root attributes");
    }
    auto groups = Keras2Groups(*l);
    // Keras writes the groups sorted by name (no group name a prefix of a later one's path).
    std::sort(groups.begin(), groups.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [layer, vars] : groups) {
      Hid g = CreateGroup(f, layer);
      std::vector<std::string> names;
      for (const KerasVariable* v : vars) names.push_back(v->keras2_name);
      if (!g.ok() || !WriteNamesAttr(g.get(), "weight_names", names)) {
        return Failed(path, "group " + layer);
      }
      for (const KerasVariable* v : vars) {
        const bool count = v->layer->class_name() == "Normalization" && v->weight->name == "count";
        if (!WriteDataset(g.get(), v->keras2_name, v->weight->value, count)) {
          return Failed(path, "dataset " + layer + "/" + v->keras2_name);
        }
      }
    }
    return absl::OkStatus();
  });
}

absl::Status WriteKerasArchive(const KerasModel& m, const std::string& path) {
  if (m.config == nullptr) {
    return absl::InvalidArgumentError("the model was not loaded from a Keras model file");
  }
  const std::string weights = path + ".weights.h5.tmp";
  if (absl::Status s = WriteKeras3Weights(m, weights); !s.ok()) return s;
  std::string h5 = Slurp(weights);
  std::remove(weights.c_str());
  if (h5.empty()) return Failed(path, "the weights file vanished");
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(date, sizeof date, "%Y-%m-%d@%H:%M:%S", &tm);
  // keras_version: the version of the archive layout written (Keras 3's).
  const json metadata = {{"keras_version", "3.0.0"}, {"date_saved", date}};
  return WriteZip(path, {{"metadata.json", metadata.dump()},
                         {"config.json", m.config->dump()},
                         {"model.weights.h5", std::move(h5)}});
}

absl::Status ReadKerasWeights(const std::string& path, KerasModel* m) {
  absl::StatusOr<WeightLayout> l = LayoutOf(*m);
  if (!l.ok()) return l.status();
  Quiet();
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("weights file " + path + " cannot be read");
  char magic[8] = {};
  in.read(magic, sizeof magic);
  in.close();
  if (std::string(magic, 4) == "PK\x03\x04") {  // a .keras archive
    absl::StatusOr<std::string> h5 = ReadZipMember(path, "model.weights.h5");
    if (!h5.ok()) {
      return absl::InvalidArgumentError(path + ": a zip file without model.weights.h5 (" +
                                        std::string(h5.status().message()) + ")");
    }
    Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    H5Pset_fapl_core(fapl.get(), 1 << 20, 0);
    H5Pset_file_image(fapl.get(), h5->data(), h5->size());
    Hid f(H5Fopen("model.weights.h5", H5F_ACC_RDONLY, fapl.get()), H5Fclose);
    if (!f.ok()) return absl::InvalidArgumentError(path + ": model.weights.h5 is not HDF5");
    return ReadH5(f.get(), path + ":model.weights.h5", *l);
  }
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    return absl::InvalidArgumentError(path + ": neither a .keras archive nor an HDF5 weights file");
  }
  Hid f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!f.ok()) return absl::InvalidArgumentError(path + ": the HDF5 file cannot be opened");
  return ReadH5(f.get(), path, *l);
}

}  // namespace lockstep::trainer::keras
