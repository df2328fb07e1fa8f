#include "trainer/data/csv.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep::trainer {
namespace {

// A number filling the whole field (spaces around it allowed).
bool ParseNumber(const std::string& field, float* out) {
  const char* begin = field.c_str();
  char* end = nullptr;
  errno = 0;
  const float v = std::strtof(begin, &end);
  if (end == begin || errno == ERANGE) return false;
  while (*end == ' ' || *end == '\t') ++end;
  if (*end != '\0') return false;
  *out = v;
  return true;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> SplitCsvLine(const std::string& line, char delimiter) {
  std::vector<std::string> out;
  std::string field;
  size_t i = 0;
  for (;;) {
    field.clear();
    if (i < line.size() && line[i] == '"') {
      ++i;
      for (;;) {
        if (i >= line.size()) return absl::InvalidArgumentError("a quote left open");
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            field += '"';
            i += 2;
            continue;
          }
          ++i;
          break;
        }
        field += line[i++];
      }
      if (i < line.size() && line[i] != delimiter) {
        return absl::InvalidArgumentError("text after a closing quote");
      }
    } else {
      const size_t end = line.find(delimiter, i);
      field = line.substr(i, end == std::string::npos ? std::string::npos : end - i);
      i = end == std::string::npos ? line.size() : end;
    }
    out.push_back(field);
    if (i >= line.size()) break;
    ++i;                     // the delimiter
    if (i == line.size()) {  // a trailing delimiter: one more, empty, field
      out.emplace_back();
      break;
    }
  }
  return out;
}

absl::StatusOr<Dataset> LoadCsv(const std::string& glob, const DataSpec& spec, FileSet* files_out,
                                FileShard shard) {
  absl::StatusOr<FileSet> set = ShardedFiles(glob, shard);
  if (!set.ok()) return set.status();
  if (files_out != nullptr) *files_out = *set;
  const std::vector<std::string>* files = &set->files;
  std::vector<std::string> columns = spec.columns;  // fixed by the first file's header
  // Each source's columns: the inputs', then the labels'; and each source's values.
  std::vector<std::vector<size_t>> sources;
  std::vector<std::vector<float>> values;
  const size_t input_sources = std::max<size_t>(spec.input_columns.size(), 1);
  int64_t rows = 0;
  auto index = [&](const std::string& file, const std::string& name) -> absl::StatusOr<size_t> {
    auto it = std::find(columns.begin(), columns.end(), name);
    if (it == columns.end()) {
      return absl::DataLossError(file + ": no column \"" + name + "\" (the columns are " +
                                 absl::StrJoin(columns, ", ") + ")");
    }
    return static_cast<size_t>(it - columns.begin());
  };
  // The positions of the named columns.
  auto indices = [&](const std::string& file,
                     const std::vector<std::string>& names) -> absl::StatusOr<std::vector<size_t>> {
    std::vector<size_t> out;
    for (const std::string& name : names) {
      absl::StatusOr<size_t> c = index(file, name);
      if (!c.ok()) return c.status();
      out.push_back(*c);
    }
    return out;
  };
  // Which columns each source takes, once the columns are known.
  auto layout = [&](const std::string& file) -> absl::Status {
    std::vector<std::vector<size_t>> labels;
    for (const auto& l : spec.label_columns) {
      absl::StatusOr<std::vector<size_t>> c = indices(file, l.what);
      if (!c.ok()) return c.status();
      labels.push_back(std::move(*c));
    }
    std::vector<size_t> weight;
    if (!spec.sample_weight.empty()) {
      absl::StatusOr<std::vector<size_t>> c = indices(file, {spec.sample_weight});
      if (!c.ok()) return c.status();
      weight = std::move(*c);
    }
    if (spec.input_columns.empty()) {  // every column that is not a label or the weight
      std::vector<bool> taken(columns.size(), false);
      for (const auto& l : labels) {
        for (size_t c : l) taken[c] = true;
      }
      for (size_t c : weight) taken[c] = true;
      sources.emplace_back();
      for (size_t c = 0; c < columns.size(); ++c) {
        if (!taken[c]) sources.back().push_back(c);
      }
    }
    for (const auto& in : spec.input_columns) {
      absl::StatusOr<std::vector<size_t>> c = indices(file, in.what);
      if (!c.ok()) return c.status();
      sources.push_back(std::move(*c));
    }
    for (const auto& in : sources) {
      if (in.empty()) return absl::InvalidArgumentError("data spec: no input columns");
    }
    sources.insert(sources.end(), labels.begin(), labels.end());
    if (!weight.empty()) sources.push_back(weight);
    values.resize(sources.size());
    return absl::OkStatus();
  };
  for (const std::string& file : *files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) return absl::PermissionDeniedError("cannot read " + file);
    std::string line;
    int64_t number = 0;
    bool first = true;
    while (std::getline(in, line)) {
      ++number;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank
      const std::string at = absl::StrCat(file, ":", number);
      absl::StatusOr<std::vector<std::string>> fields = SplitCsvLine(line, spec.delimiter);
      if (!fields.ok())
        return absl::DataLossError(at + ": " + std::string(fields.status().message()));
      if (first && spec.header) {
        first = false;
        if (columns.empty()) columns = *fields;
        if (*fields != columns) {
          return absl::DataLossError(at + ": the header (" + absl::StrJoin(*fields, ", ") +
                                     ") is not the columns (" + absl::StrJoin(columns, ", ") + ")");
        }
        if (sources.empty()) {
          if (absl::Status s = layout(file); !s.ok()) return s;
        }
        continue;
      }
      first = false;
      if (sources.empty()) {  // no header: the spec's columns
        if (absl::Status s = layout(file); !s.ok()) return s;
      }
      if (fields->size() != columns.size()) {
        return absl::DataLossError(absl::StrCat(at, ": ", fields->size(),
                                                " fields; the columns are ", columns.size(), " (",
                                                absl::StrJoin(columns, ", "), ")"));
      }
      for (size_t k = 0; k < sources.size(); ++k) {
        const bool label = k >= input_sources;
        for (size_t c : sources[k]) {
          const std::string& f = (*fields)[c];
          float v = 0;
          if (label && !spec.label_vocabulary.empty()) {
            auto it = std::find(spec.label_vocabulary.begin(), spec.label_vocabulary.end(), f);
            if (it == spec.label_vocabulary.end()) {
              return absl::DataLossError(at + ": label \"" + f + "\" is not in label_vocabulary");
            }
            v = static_cast<float>(it - spec.label_vocabulary.begin());
          } else if (f.find_first_not_of(" \t") == std::string::npos) {
            if (!spec.missing || label) {
              return absl::DataLossError(
                  at + ": column \"" + columns[c] + "\" is empty" +
                  (label ? " (a label has a value)" : " (give the spec a \"missing\" value)"));
            }
            v = *spec.missing;
          } else if (!ParseNumber(f, &v)) {
            return absl::DataLossError(at + ": column \"" + columns[c] + "\" is \"" + f +
                                       "\", not a number" +
                                       (label ? " (for words, give label_vocabulary)" : ""));
          }
          values[k].push_back(v);
        }
      }
      ++rows;
    }
    if (in.bad()) return absl::DataLossError("reading " + file + " failed");
  }
  Dataset d;
  if (!spec.sample_weight.empty() && !sources.empty()) {
    d.sample_weights = Tensor({rows}, std::move(values.back()));
    sources.pop_back();
  }
  for (size_t k = 0; k < sources.size(); ++k) {
    // One label column is one value per example ([rows]: a class id or a value).
    const bool one_label = k >= input_sources && sources[k].size() == 1;
    Shape shape = one_label ? Shape{rows} : Shape{rows, static_cast<int64_t>(sources[k].size())};
    (k < input_sources ? d.inputs : d.targets).emplace_back(shape, std::move(values[k]));
  }
  return d;
}

}  // namespace lockstep::trainer
