#include "trainer/comm/peer_lost.h"

#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"

namespace lockstep::trainer::comm {

absl::Status PeerLostError(absl::string_view what) {
  // A message already naming the loss (a lower layer's) is not prefixed twice.
  std::string message =
      absl::StartsWith(what, "peer lost: ") ? std::string(what) : "peer lost: " + std::string(what);
  absl::Status s = absl::AbortedError(message);
  s.SetPayload(kPeerLostPayload, absl::Cord());
  return s;
}

absl::Status AsPeerLost(const absl::Status& s) {
  if (s.ok() || IsPeerLost(s)) return s;
  return PeerLostError(s.message());
}

bool IsPeerLost(const absl::Status& s) {
  return !s.ok() && s.GetPayload(kPeerLostPayload).has_value();
}

}  // namespace lockstep::trainer::comm
