#pragma once
// CSV files as a dataset (data_spec.h's "csv" format): numeric input columns and a label column,
// the files a glob matches in name order, RFC 4180 quoting ("a, b" and "" inside quotes), CRLF
// or LF line ends, blank lines skipped.
// Thread-safety: plain functions.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/data/data_spec.h"
#include "trainer/data/dataset.h"
#include "trainer/data/files.h"

namespace lockstep::trainer {

// The fields of one line; InvalidArgument for a quote left open or text after a closing quote.
absl::StatusOr<std::vector<std::string>> SplitCsvLine(const std::string& line, char delimiter);

// Every row of the files `glob` matches: an input [rows, columns] per input source and a target
// per label source ([rows] for one column, else [rows, columns]), in the spec's order. DataLoss
// names the file and line: a row with the wrong number of fields, a field that is not a number
// (or an empty input without "missing"), a label not in label_vocabulary, a header that differs
// from the first file's or lacks a named column.
// `shard`: this worker's part of the files (files.h); `files` gets the files read.
absl::StatusOr<Dataset> LoadCsv(const std::string& glob, const DataSpec& spec,
                                FileSet* files = nullptr, FileShard shard = {});

}  // namespace lockstep::trainer
