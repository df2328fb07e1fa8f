#include "operator/kube/transport.h"

#include "absl/strings/match.h"

namespace lockstep::kube {
namespace {

const std::string* FindHeader(const std::vector<std::pair<std::string, std::string>>& headers,
                              std::string_view name) {
  for (const auto& [key, value] : headers) {
    if (absl::EqualsIgnoreCase(key, absl::string_view(name.data(), name.size()))) return &value;
  }
  return nullptr;
}

}  // namespace

void HttpRequest::SetHeader(std::string name, std::string value) {
  for (auto& [key, old] : headers) {
    if (absl::EqualsIgnoreCase(key, name)) {
      old = std::move(value);
      return;
    }
  }
  headers.emplace_back(std::move(name), std::move(value));
}

const std::string* HttpRequest::Header(std::string_view name) const {
  return FindHeader(headers, name);
}

const std::string* HttpResponse::Header(std::string_view name) const {
  return FindHeader(headers, name);
}

const std::string* StreamedResponse::Header(std::string_view name) const {
  return FindHeader(headers, name);
}

absl::StatusOr<std::string> ReadAll(BodyStream& body, size_t limit) {
  std::string out;
  while (out.size() < limit) {
    absl::StatusOr<std::string> chunk = body.Read();
    if (!chunk.ok()) return chunk.status();
    if (chunk->empty()) break;
    out += *chunk;
  }
  return out;
}

}  // namespace lockstep::kube
