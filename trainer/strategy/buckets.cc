#include "trainer/strategy/buckets.h"

#include <algorithm>

namespace lockstep::trainer {

std::vector<Bucket> PlanBuckets(const std::vector<int64_t>& param_sizes, int64_t first_bytes,
                                int64_t bytes) {
  std::vector<Bucket> out;
  Bucket cur;
  for (size_t i = param_sizes.size(); i-- > 0;) {
    cur.params.push_back(i);
    cur.elements += param_sizes[i];
    const int64_t limit = out.empty() ? first_bytes : bytes;
    if (cur.elements * static_cast<int64_t>(sizeof(float)) >= limit) {
      out.push_back(std::move(cur));
      cur = Bucket{};
    }
  }
  if (!cur.params.empty()) out.push_back(std::move(cur));
  return out;
}

BucketReducer::BucketReducer(std::vector<Tensor*> grads, comm::Collective* comm,
                             int64_t first_bytes, int64_t bytes)
    : grads_(std::move(grads)), comm_(comm) {
  std::vector<int64_t> sizes;
  for (Tensor* g : grads_) sizes.push_back(g->size());
  buckets_ = PlanBuckets(sizes, first_bytes, bytes);
  bucket_of_.resize(grads_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t p : buckets_[b].params) bucket_of_[p] = b;
    buffers_.emplace_back(buckets_[b].elements);
  }
  pending_.resize(buckets_.size());
  works_.resize(buckets_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].params.size();
}

void BucketReducer::Ready(size_t first, size_t count) {
  for (size_t p = first; p < first + count; ++p) {
    const size_t b = bucket_of_[p];
    if (--pending_[b] == 0) Launch(b);
  }
}

void BucketReducer::Launch(size_t b) {
  float* dst = buffers_[b].data();
  for (size_t p : buckets_[b].params) {
    std::copy_n(grads_[p]->data(), grads_[p]->size(), dst);
    dst += grads_[p]->size();
  }
  works_[b] = comm_->AllReduce(buffers_[b].data(), buckets_[b].elements);
}

absl::Status BucketReducer::Finish(absl::Duration timeout) {
  // Buckets are issued in bucket order on every rank (the contract): a bucket whose
  // gradients were never reported is issued here, after the ones before it.
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (works_[b] == nullptr) Launch(b);
  }
  absl::Status first;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    absl::Status s = works_[b]->Wait(timeout);
    if (first.ok() && !s.ok()) first = s;
  }
  const float scale = 1.0f / static_cast<float>(comm_->size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const float* src = buffers_[b].data();
    for (size_t p : buckets_[b].params) {
      // Plain locals: the loop is as quick unoptimised (the sanitizer build) as it can be.
      float* __restrict g = grads_[p]->data();
      const int64_t n = grads_[p]->size();
      for (int64_t i = 0; i < n; ++i) g[i] = src[i] * scale;
      src += n;
    }
    works_[b] = nullptr;
    pending_[b] = buckets_[b].params.size();
  }
  return first;
}

}  // namespace lockstep::trainer
