#pragma once
// The typed status of a lost peer: a collective, a rendezvous or the coordination service failed
// because another task of the group is gone (or cannot be reached). It is Aborted, its message
// starts "peer lost: ", and it carries a payload (kPeerLostPayload) that marks it, so that
// callers recognise it by type rather than by reading its message. The trainer exits with the
// retryable code and the termination reason PeerLost on it; in-place recovery regroups on it.
// Thread-safety: pure functions.

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace lockstep::trainer::comm {

inline constexpr absl::string_view kPeerLostPayload = "type.lockstep.dev/trainer.PeerLost";

// Aborted("peer lost: <what>"), marked.
absl::Status PeerLostError(absl::string_view what);

// A failed collective or rendezvous means a peer is gone: `s` as a peer-lost status (one that
// is already so is returned as it is; OK stays OK).
absl::Status AsPeerLost(const absl::Status& s);

bool IsPeerLost(const absl::Status& s);

}  // namespace lockstep::trainer::comm
