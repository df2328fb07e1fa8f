#include "trainer/layers/rnn/rnn_kernels.h"

#include "trainer/kernels/cuda/activation.cuh"
#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/dtype.cuh"
#include "trainer/kernels/cuda/elementwise.h"
#include "trainer/kernels/cuda/gemm.h"

namespace lockstep::trainer::cuda {
namespace {

using act::ActBackward;
using act::ActForward;

// One activation as the kernels take it.
struct Fn {
  Act kind;
  float alpha;
  __device__ float F(float z) const { return ActForward(kind, alpha, z); }
  // dL/dz from z, y = F(z) and dL/dy.
  __device__ float B(float z, float y, float g) const { return ActBackward(kind, alpha, z, y, g); }
};
Fn FnOf(const Activation& a) { return {a.kind, a.alpha}; }

#define LOCKSTEP_FOR_EACH(i, n)                                             \
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

// out[(s * B + r) * d + j] = x[(r * T + time(s)) * d + j], time(s) = T - 1 - s when reversed.
// (With d = 1 it lines a [B, T] mask up with the steps.)
template <typename T>
__global__ void ToTimeMajorKernel(const T* __restrict__ x, int64_t b, int64_t t, int64_t d,
                                  bool reverse, float* __restrict__ out) {
  LOCKSTEP_FOR_EACH(i, b * t * d) {
    const int64_t j = i % d, row = i / d, r = row % b, s = row / b;
    const int64_t time = reverse ? t - 1 - s : s;
    out[i] = ToFloat(x[(r * t + time) * d + j]);
  }
}

// The inverse: out [B, T, n] from time-major rows, times the step's mask (time-major [T*B])
// when `mask` is given.
template <typename T>
__global__ void FromTimeMajorKernel(const float* __restrict__ in, int64_t b, int64_t t, int64_t n,
                                    bool reverse, const float* __restrict__ mask,
                                    T* __restrict__ out) {
  LOCKSTEP_FOR_EACH(i, b * t * n) {
    const int64_t j = i % n, row = i / n, time = row % t, r = row / t;
    const int64_t s = reverse ? t - 1 - time : time;
    const float v = in[(s * b + r) * n + j];
    out[i] = FromFloat<T>(mask != nullptr ? v * mask[s * b + r] : v);
  }
}

// Whether row r skips this step: its mask (the step's [B] values, or null) is 0. A skipped row
// keeps its state; in backward its state gradient passes back unchanged.
__device__ __forceinline__ bool Skipped(const float* m, int64_t r) {
  return m != nullptr && m[r] == 0.0f;
}

// dst [rows, n] = src[:, c0 : c0 + n] of a [rows, ld] matrix; and the reverse (overwriting).
__global__ void GatherColsKernel(const float* __restrict__ src, int64_t rows, int64_t ld,
                                 int64_t c0, int64_t n, float* __restrict__ dst) {
  LOCKSTEP_FOR_EACH(i, rows * n) { dst[i] = src[(i / n) * ld + c0 + i % n]; }
}
__global__ void ScatterColsKernel(const float* __restrict__ src, int64_t rows, int64_t ld,
                                  int64_t c0, int64_t n, float* __restrict__ dst) {
  LOCKSTEP_FOR_EACH(i, rows * n) { dst[(i / n) * ld + c0 + i % n] = src[i]; }
}

// One step's cell over [B, u]. `a` and `g` are the step's [B, G*u] rows; `rec` its recurrent
// product; hp/hn the previous and next states.
__global__ void SimpleStepKernel(Fn f, int64_t b, int64_t u, const float* __restrict__ m,
                                 float* __restrict__ a, const float* __restrict__ rec,
                                 float* __restrict__ g, const float* __restrict__ hp,
                                 float* __restrict__ hn) {
  LOCKSTEP_FOR_EACH(i, b * u) {
    const float z = a[i] + rec[i];
    a[i] = z;
    g[i] = f.F(z);
    hn[i] = Skipped(m, i / u) ? hp[i] : g[i];
  }
}

__global__ void LstmStepKernel(Fn f, Fn rf, int64_t b, int64_t u, const float* __restrict__ m,
                               float* __restrict__ a, const float* __restrict__ rec,
                               float* __restrict__ g, const float* __restrict__ hp,
                               const float* __restrict__ cp, float* __restrict__ cn,
                               float* __restrict__ e, float* __restrict__ hn) {
  LOCKSTEP_FOR_EACH(i, b * u) {
    const int64_t r = i / u, j = i % u, base = r * 4 * u + j;
    float z[4];
    for (int q = 0; q < 4; ++q) {
      z[q] = a[base + q * u] + rec[base + q * u];
      a[base + q * u] = z[q];
    }
    const float in = rf.F(z[0]), fg = rf.F(z[1]), cc = f.F(z[2]), o = rf.F(z[3]);
    g[base] = in;
    g[base + u] = fg;
    g[base + 2 * u] = cc;
    g[base + 3 * u] = o;
    const float c = fg * cp[i] + in * cc;
    e[i] = f.F(c);
    if (Skipped(m, r)) {
      cn[i] = cp[i];
      hn[i] = hp[i];
    } else {
      cn[i] = c;
      hn[i] = o * e[i];
    }
  }
}

// GRU reset_after: rec = h U (the recurrent bias `rb` added here).
__global__ void GruAfterStepKernel(Fn f, Fn rf, int64_t b, int64_t u, const float* __restrict__ m,
                                   float* __restrict__ a, const float* __restrict__ rec,
                                   const float* __restrict__ rb, float* __restrict__ g,
                                   const float* __restrict__ hp, float* __restrict__ e,
                                   float* __restrict__ hn) {
  LOCKSTEP_FOR_EACH(i, b * u) {
    const int64_t r = i / u, j = i % u, base = r * 3 * u + j;
    auto bias = [&](int q) { return rb != nullptr ? rb[q * u + j] : 0.0f; };
    const float z0 = a[base] + rec[base] + bias(0);
    const float z1 = a[base + u] + rec[base + u] + bias(1);
    a[base] = z0;
    a[base + u] = z1;
    const float zg = rf.F(z0), rg = rf.F(z1);
    const float rh = rec[base + 2 * u] + bias(2);
    e[i] = rh;
    const float z2 = a[base + 2 * u] + rg * rh;
    a[base + 2 * u] = z2;
    const float hh = f.F(z2);
    g[base] = zg;
    g[base + u] = rg;
    g[base + 2 * u] = hh;
    hn[i] = Skipped(m, r) ? hp[i] : zg * hp[i] + (1.0f - zg) * hh;
  }
}

// GRU reset_before, first half: the gates from rec = h U_zr [B, 2u]; e = r * h.
__global__ void GruBeforeGatesKernel(Fn rf, int64_t b, int64_t u, float* __restrict__ a,
                                     const float* __restrict__ rec, float* __restrict__ g,
                                     const float* __restrict__ hp, float* __restrict__ e) {
  LOCKSTEP_FOR_EACH(i, b * u) {
    const int64_t r = i / u, j = i % u, base = r * 3 * u + j, rb = r * 2 * u + j;
    const float z0 = a[base] + rec[rb], z1 = a[base + u] + rec[rb + u];
    a[base] = z0;
    a[base + u] = z1;
    g[base] = rf.F(z0);
    g[base + u] = rf.F(z1);
    e[i] = g[base + u] * hp[i];
  }
}
// Second half: the candidate from cand = (r * h) U_h [B, u].
__global__ void GruBeforeCandidateKernel(Fn f, int64_t b, int64_t u, const float* __restrict__ m,
                                         float* __restrict__ a, const float* __restrict__ cand,
                                         float* __restrict__ g, const float* __restrict__ hp,
                                         float* __restrict__ hn) {
  LOCKSTEP_FOR_EACH(i, b * u) {
    const int64_t r = i / u, j = i % u, base = r * 3 * u + j;
    const float z2 = a[base + 2 * u] + cand[i];
    a[base + 2 * u] = z2;
    const float hh = f.F(z2);
    g[base + 2 * u] = hh;
    const float zg = g[base];
    hn[i] = Skipped(m, r) ? hp[i] : zg * hp[i] + (1.0f - zg) * hh;
  }
}

// dL/d(new h) of one step: the carried gradient plus the step's output gradient (`dys`, the
// step's [B, u] rows of dy, or null).
__device__ __forceinline__ float StateGrad(const float* gh, const float* dys, int64_t i) {
  return gh[i] + (dys != nullptr ? dys[i] : 0.0f);
}

// What a skipped row passes back as the previous state's gradient: the carried gradient, and
// the step's output gradient too unless the layer outputs zeros at masked steps.
struct MaskBack {
  const float* m;  // the step's [B] mask values, or null
  bool zero_out;   // zero_output_for_mask with return_sequences
  __device__ bool Skip(int64_t r) const { return Skipped(m, r); }
  __device__ float Carry(const float* gh, const float* dys, int64_t i) const {
    return zero_out ? gh[i] : StateGrad(gh, dys, i);
  }
};

// In the backward kernels each thread reads and then writes gh[i]: the caller then adds the
// state's part through the recurrent kernel (a GEMM with beta 1), which is zero on skipped rows.
__global__ void SimpleBackKernel(Fn f, int64_t b, int64_t u, MaskBack mb,
                                 const float* __restrict__ a, const float* __restrict__ g,
                                 float* __restrict__ gh, const float* __restrict__ dys,
                                 float* __restrict__ da) {
  LOCKSTEP_FOR_EACH(i, b * u) {
    if (mb.Skip(i / u)) {
      da[i] = 0;
      gh[i] = mb.Carry(gh, dys, i);
    } else {
      da[i] = f.B(a[i], g[i], StateGrad(gh, dys, i));
      gh[i] = 0;
    }
  }
}

// gc is carried back in place.
__global__ void LstmBackKernel(Fn f, Fn rf, int64_t b, int64_t u, MaskBack mb,
                               const float* __restrict__ a, const float* __restrict__ g,
                               const float* __restrict__ cp, const float* __restrict__ cn,
                               const float* __restrict__ e, float* __restrict__ gh,
                               const float* __restrict__ dys, float* __restrict__ gc,
                               float* __restrict__ da) {
  LOCKSTEP_FOR_EACH(i, b * u) {
    const int64_t r = i / u, j = i % u, base = r * 4 * u + j;
    if (mb.Skip(r)) {
      for (int q = 0; q < 4; ++q) da[base + q * u] = 0;
      gh[i] = mb.Carry(gh, dys, i);
      continue;  // gc passes back unchanged
    }
    const float gn = StateGrad(gh, dys, i);
    gh[i] = 0;
    const float in = g[base], fg = g[base + u], cc = g[base + 2 * u], o = g[base + 3 * u];
    da[base + 3 * u] = rf.B(a[base + 3 * u], o, gn * e[i]);
    const float dc = gc[i] + f.B(cn[i], e[i], gn * o);
    da[base] = rf.B(a[base], in, dc * cc);
    da[base + u] = rf.B(a[base + u], fg, dc * cp[i]);
    da[base + 2 * u] = f.B(a[base + 2 * u], cc, dc * in);
    gc[i] = dc * fg;
  }
}

// GRU reset_after: da (for the input projection), dr (for the recurrent product, its bias
// included) and gh = gn * z, to which the caller adds dr U^T.
__global__ void GruAfterBackKernel(Fn f, Fn rf, int64_t b, int64_t u, MaskBack mb,
                                   const float* __restrict__ a, const float* __restrict__ g,
                                   const float* __restrict__ hp, const float* __restrict__ e,
                                   const float* __restrict__ dys, float* __restrict__ gh,
                                   float* __restrict__ da, float* __restrict__ dr) {
  LOCKSTEP_FOR_EACH(i, b * u) {
    const int64_t r = i / u, j = i % u, base = r * 3 * u + j;
    if (mb.Skip(r)) {
      for (int q = 0; q < 3; ++q) da[base + q * u] = dr[base + q * u] = 0;
      gh[i] = mb.Carry(gh, dys, i);
      continue;
    }
    const float gn = StateGrad(gh, dys, i);
    const float zg = g[base], rg = g[base + u], hh = g[base + 2 * u];
    const float d2 = f.B(a[base + 2 * u], hh, gn * (1.0f - zg));
    const float d0 = rf.B(a[base], zg, gn * (hp[i] - hh));
    const float d1 = rf.B(a[base + u], rg, d2 * e[i]);
    da[base] = d0;
    da[base + u] = d1;
    da[base + 2 * u] = d2;
    dr[base] = d0;
    dr[base + u] = d1;
    dr[base + 2 * u] = d2 * rg;
    gh[i] = gn * zg;
  }
}

// GRU reset_before, first half: dz and the candidate's gradient (also compact in dh2, for
// (r * h)'s gradient dh2 U_h^T), gh = gn * z.
__global__ void GruBeforeBack1Kernel(Fn f, Fn rf, int64_t b, int64_t u, MaskBack mb,
                                     const float* __restrict__ a, const float* __restrict__ g,
                                     const float* __restrict__ hp, const float* __restrict__ dys,
                                     float* __restrict__ gh, float* __restrict__ da,
                                     float* __restrict__ dh2) {
  LOCKSTEP_FOR_EACH(i, b * u) {
    const int64_t r = i / u, j = i % u, base = r * 3 * u + j;
    if (mb.Skip(r)) {
      da[base] = da[base + 2 * u] = dh2[i] = 0;
      gh[i] = mb.Carry(gh, dys, i);
      continue;
    }
    const float gn = StateGrad(gh, dys, i);
    const float zg = g[base], hh = g[base + 2 * u];
    const float d2 = f.B(a[base + 2 * u], hh, gn * (1.0f - zg));
    da[base] = rf.B(a[base], zg, gn * (hp[i] - hh));
    da[base + 2 * u] = d2;
    dh2[i] = d2;
    gh[i] = gn * zg;
  }
}
// Second half, from drh = d(r * h): dr, gh += drh * r, and the z/r gradients compact in dzr
// (for dzr U_zr^T).
__global__ void GruBeforeBack2Kernel(Fn rf, int64_t b, int64_t u, MaskBack mb,
                                     const float* __restrict__ a, const float* __restrict__ g,
                                     const float* __restrict__ hp, const float* __restrict__ drh,
                                     float* __restrict__ gh, float* __restrict__ da,
                                     float* __restrict__ dzr) {
  LOCKSTEP_FOR_EACH(i, b * u) {
    const int64_t r = i / u, j = i % u, base = r * 3 * u + j, zb = r * 2 * u + j;
    if (mb.Skip(r)) {
      da[base + u] = dzr[zb] = dzr[zb + u] = 0;
      continue;
    }
    const float rg = g[base + u];
    const float d1 = rf.B(a[base + u], rg, drh[i] * hp[i]);
    da[base + u] = d1;
    gh[i] += drh[i] * rg;
    dzr[zb] = da[base];
    dzr[zb + u] = d1;
  }
}

absl::Status F32(GpuContext* ctx, DeviceTensor* t, Shape s) {
  return t->Resize(ctx, s, DType::kF32);
}

absl::Status Zero(GpuContext* ctx, DeviceTensor* t) {
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemsetAsync(t->data(), 0, t->bytes(), ctx->stream()));
  return absl::OkStatus();
}

}  // namespace

absl::Status Recurrent::Forward(const DeviceTensor& x, const DeviceTensor* mask, RnnStates initial,
                                const float* kernel, const float* recurrent, const float* bias,
                                DeviceTensor* y) {
  if (x.shape().size() != 3) {
    return absl::InvalidArgumentError("Recurrent: the input " + ShapeString(x.shape()) +
                                      " is not [batch, time, features]");
  }
  const int64_t b = x.dim(0), t = x.dim(1), d = x.dim(2), u = spec_.units, gu = spec_.gates() * u;
  const int64_t rows = t * b;
  if (mask != nullptr && (mask->dtype() != DType::kF32 || mask->size() != rows)) {
    return absl::InvalidArgumentError("Recurrent: a mask " + ShapeString(mask->shape()) +
                                      " does not fit the input " + ShapeString(x.shape()));
  }
  masked_ = mask != nullptr && rows > 0;
  const bool lstm = spec_.cell == RnnCell::kLstm;
  for (const DeviceTensor* s : {initial.h, lstm ? initial.c : nullptr}) {
    if (s != nullptr && s->size() != b * u) {
      return absl::InvalidArgumentError("Recurrent: an initial state " + ShapeString(s->shape()) +
                                        " is not [batch, units] for the input " +
                                        ShapeString(x.shape()));
    }
  }
  x_shape_ = x.shape();
  x_dtype_ = x.dtype();
  const Fn f = FnOf(spec_.activation), rf = FnOf(spec_.recurrent_activation);
  const bool gru = spec_.cell == RnnCell::kGru;
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &xt_, {rows, d}));
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &a_, {rows, gu}));
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &g_, {rows, gu}));
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &h_, {rows + b, u}));
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &c_, {spec_.cell == RnnCell::kLstm ? rows + b : 1, u}));
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &e_, {std::max<int64_t>(rows, 1), u}));
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &rec_, {b, gu}));
  LOCKSTEP_RETURN_IF_ERROR(
      y->Resize(ctx_, spec_.return_sequences ? Shape{b, t, u} : Shape{b, u}, x.dtype()));
  LOCKSTEP_RETURN_IF_ERROR(Zero(ctx_, &h_));
  LOCKSTEP_RETURN_IF_ERROR(Zero(ctx_, &c_));
  // The initial states are the first rows of the state buffers.
  if (initial.h != nullptr) {
    LOCKSTEP_RETURN_IF_ERROR(
        Cast(ctx_, initial.h->data(), initial.h->dtype(), h_.data(), DType::kF32, b * u));
  }
  if (lstm && initial.c != nullptr) {
    LOCKSTEP_RETURN_IF_ERROR(
        Cast(ctx_, initial.c->data(), initial.c->dtype(), c_.data(), DType::kF32, b * u));
  }
  if (rows == 0) {
    if (spec_.return_sequences) return Zero(ctx_, y);
    return Cast(ctx_, h_.data(), DType::kF32, y->data(), y->dtype(), b * u);
  }
  cudaStream_t st = ctx_->stream();

  // Inputs (and the mask) time-major in processing order, and every step's input projection.
  DispatchDType(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    ToTimeMajorKernel<T><<<Blocks(rows * d), kThreads, 0, st>>>(
        x.as<T>(), b, t, d, spec_.go_backwards, xt_.as<float>());
    return 0;
  });
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  if (masked_) {
    LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &m_, {rows}));
    ToTimeMajorKernel<float><<<Blocks(rows), kThreads, 0, st>>>(mask->as<float>(), b, t, 1,
                                                                spec_.go_backwards, m_.as<float>());
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  }
  LOCKSTEP_RETURN_IF_ERROR(
      Gemm(ctx_, false, false, rows, gu, d, 1.0f, xt_.as<float>(), kernel, 0.0f, a_.as<float>()));
  if (bias != nullptr) LOCKSTEP_RETURN_IF_ERROR(AddBias(ctx_, &a_, bias, rows, gu, 1));
  if (gru && !spec_.reset_after) {
    LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &uzr_, {u, 2 * u}));
    LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &uh_, {u, u}));
    LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &t_, {b, u}));
    GatherColsKernel<<<Blocks(u * 2 * u), kThreads, 0, st>>>(recurrent, u, gu, 0, 2 * u,
                                                             uzr_.as<float>());
    GatherColsKernel<<<Blocks(u * u), kThreads, 0, st>>>(recurrent, u, gu, 2 * u, u,
                                                         uh_.as<float>());
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  }

  const unsigned int blocks = Blocks(b * u);
  for (int64_t step = 0; step < t; ++step) {
    const int64_t off = step * b;
    float* as = a_.as<float>() + off * gu;
    float* gs = g_.as<float>() + off * gu;
    const float* hp = h_.as<float>() + off * u;
    float* hn = h_.as<float>() + (off + b) * u;
    float* es = e_.as<float>() + off * u;
    float* rec = rec_.as<float>();
    const float* ms = masked_ ? m_.as<float>() + off : nullptr;
    switch (spec_.cell) {
      case RnnCell::kSimpleRnn:
        LOCKSTEP_RETURN_IF_ERROR(
            Gemm(ctx_, false, false, b, gu, u, 1.0f, hp, recurrent, 0.0f, rec));
        SimpleStepKernel<<<blocks, kThreads, 0, st>>>(f, b, u, ms, as, rec, gs, hp, hn);
        break;
      case RnnCell::kLstm:
        LOCKSTEP_RETURN_IF_ERROR(
            Gemm(ctx_, false, false, b, gu, u, 1.0f, hp, recurrent, 0.0f, rec));
        LstmStepKernel<<<blocks, kThreads, 0, st>>>(f, rf, b, u, ms, as, rec, gs, hp,
                                                    c_.as<float>() + off * u,
                                                    c_.as<float>() + (off + b) * u, es, hn);
        break;
      case RnnCell::kGru:
        if (spec_.reset_after) {
          LOCKSTEP_RETURN_IF_ERROR(
              Gemm(ctx_, false, false, b, gu, u, 1.0f, hp, recurrent, 0.0f, rec));
          GruAfterStepKernel<<<blocks, kThreads, 0, st>>>(
              f, rf, b, u, ms, as, rec, bias != nullptr ? bias + gu : nullptr, gs, hp, es, hn);
        } else {
          LOCKSTEP_RETURN_IF_ERROR(
              Gemm(ctx_, false, false, b, 2 * u, u, 1.0f, hp, uzr_.as<float>(), 0.0f, rec));
          GruBeforeGatesKernel<<<blocks, kThreads, 0, st>>>(rf, b, u, as, rec, gs, hp, es);
          LOCKSTEP_RETURN_IF_ERROR(
              Gemm(ctx_, false, false, b, u, u, 1.0f, es, uh_.as<float>(), 0.0f, t_.as<float>()));
          GruBeforeCandidateKernel<<<blocks, kThreads, 0, st>>>(f, b, u, ms, as, t_.as<float>(), gs,
                                                                hp, hn);
        }
        break;
    }
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  }

  // The outputs: every step's state in processing order (as Keras returns a go_backwards
  // sequence; a masked step repeats the last state, or is zero), or the last one.
  if (spec_.return_sequences) {
    const float* zero = masked_ && ZeroOutput() ? m_.as<float>() : nullptr;
    DispatchDType(y->dtype(), [&](auto tag) {
      using T = decltype(tag);
      FromTimeMajorKernel<T><<<Blocks(rows * u), kThreads, 0, st>>>(h_.as<float>() + b * u, b, t, u,
                                                                    Aligned(), zero, y->as<T>());
      return 0;
    });
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  }
  return Cast(ctx_, h_.as<float>() + rows * u, DType::kF32, y->data(), y->dtype(), b * u);
}

absl::Status Recurrent::FinalStates(DeviceTensor* h, DeviceTensor* c) {
  const int64_t b = x_shape_[0], t = x_shape_[1], u = spec_.units;
  if (h != nullptr) {
    LOCKSTEP_RETURN_IF_ERROR(h->Resize(ctx_, {b, u}, x_dtype_));
    LOCKSTEP_RETURN_IF_ERROR(
        Cast(ctx_, h_.as<float>() + t * b * u, DType::kF32, h->data(), x_dtype_, b * u));
  }
  if (c != nullptr && spec_.cell == RnnCell::kLstm) {
    LOCKSTEP_RETURN_IF_ERROR(c->Resize(ctx_, {b, u}, x_dtype_));
    LOCKSTEP_RETURN_IF_ERROR(
        Cast(ctx_, c_.as<float>() + t * b * u, DType::kF32, c->data(), x_dtype_, b * u));
  }
  return absl::OkStatus();
}

absl::Status Recurrent::Backward(const DeviceTensor* dy, RnnStates dfinal, const float* kernel,
                                 const float* recurrent, DeviceTensor* dx, RnnStateGrads dinitial,
                                 float* dkernel, float* drecurrent, float* dbias) {
  const int64_t b = x_shape_[0], t = x_shape_[1], d = x_shape_[2], u = spec_.units;
  const int64_t gu = spec_.gates() * u, rows = t * b;
  const Fn f = FnOf(spec_.activation), rf = FnOf(spec_.recurrent_activation);
  const bool lstm = spec_.cell == RnnCell::kLstm;
  const bool gru_after = spec_.cell == RnnCell::kGru && spec_.reset_after;
  const bool gru_before = spec_.cell == RnnCell::kGru && !spec_.reset_after;
  if (dy != nullptr && dy->size() != (spec_.return_sequences ? rows * u : b * u)) {
    return absl::InvalidArgumentError("Recurrent: the output gradient " + ShapeString(dy->shape()) +
                                      " does not fit the last forward pass");
  }
  for (const DeviceTensor* s : {dfinal.h, lstm ? dfinal.c : nullptr}) {
    if (s != nullptr && s->size() != b * u) {
      return absl::InvalidArgumentError("Recurrent: a final state's gradient " +
                                        ShapeString(s->shape()) + " is not [batch, units]");
    }
  }
  // The state gradients start from the final states' (return_state), and end as the initial
  // states'.
  cudaStream_t st = ctx_->stream();
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &gh_, {b, u}));
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &gc_, {b, u}));
  LOCKSTEP_RETURN_IF_ERROR(Zero(ctx_, &gh_));
  LOCKSTEP_RETURN_IF_ERROR(Zero(ctx_, &gc_));
  if (dfinal.h != nullptr) {
    LOCKSTEP_RETURN_IF_ERROR(
        Cast(ctx_, dfinal.h->data(), dfinal.h->dtype(), gh_.data(), DType::kF32, b * u));
  }
  if (lstm && dfinal.c != nullptr) {
    LOCKSTEP_RETURN_IF_ERROR(
        Cast(ctx_, dfinal.c->data(), dfinal.c->dtype(), gc_.data(), DType::kF32, b * u));
  }
  auto initial_grads = [&]() -> absl::Status {
    if (dinitial.h != nullptr) {
      LOCKSTEP_RETURN_IF_ERROR(dinitial.h->Resize(ctx_, {b, u}, x_dtype_));
      LOCKSTEP_RETURN_IF_ERROR(
          Cast(ctx_, gh_.data(), DType::kF32, dinitial.h->data(), x_dtype_, b * u));
    }
    if (lstm && dinitial.c != nullptr) {
      LOCKSTEP_RETURN_IF_ERROR(dinitial.c->Resize(ctx_, {b, u}, x_dtype_));
      LOCKSTEP_RETURN_IF_ERROR(
          Cast(ctx_, gc_.data(), DType::kF32, dinitial.c->data(), x_dtype_, b * u));
    }
    return absl::OkStatus();
  };
  if (dx != nullptr) LOCKSTEP_RETURN_IF_ERROR(dx->Resize(ctx_, x_shape_, x_dtype_));
  if (rows == 0) {
    LOCKSTEP_RETURN_IF_ERROR(initial_grads());
    if (dx != nullptr) LOCKSTEP_RETURN_IF_ERROR(Zero(ctx_, dx));
    for (auto [p, n] : {std::pair{dkernel, d * gu}, std::pair{drecurrent, u * gu},
                        std::pair{dbias, gru_after ? 2 * gu : gu}}) {
      if (p != nullptr) {
        LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemsetAsync(p, 0, n * sizeof(float), ctx_->stream()));
      }
    }
    return absl::OkStatus();
  }
  LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &da_, {rows, gu}));
  if (gru_after) LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &dr_, {rows, gu}));
  if (gru_before) {
    LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &dzr_, {rows, 2 * u}));
    LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &dh2_, {rows, u}));
    LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &t_, {b, u}));
  }
  // dy in processing order: every step's rows, or the last step's.
  if (dy != nullptr) {
    LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &dyt_, {spec_.return_sequences ? rows : b, u}));
  }
  if (dy != nullptr && spec_.return_sequences) {
    DispatchDType(dy->dtype(), [&](auto tag) {
      using T = decltype(tag);
      ToTimeMajorKernel<T><<<Blocks(rows * u), kThreads, 0, st>>>(dy->as<T>(), b, t, u, Aligned(),
                                                                  dyt_.as<float>());
      return 0;
    });
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  } else if (dy != nullptr) {
    LOCKSTEP_RETURN_IF_ERROR(Cast(ctx_, dy->data(), dy->dtype(), dyt_.data(), DType::kF32, b * u));
  }

  const unsigned int blocks = Blocks(b * u);
  float* gh = gh_.as<float>();
  for (int64_t step = t; step-- > 0;) {
    const int64_t off = step * b;
    const float* as = a_.as<float>() + off * gu;
    const float* gs = g_.as<float>() + off * gu;
    const float* hp = h_.as<float>() + off * u;
    const float* es = e_.as<float>() + off * u;
    float* das = da_.as<float>() + off * gu;
    const float* dys = dy == nullptr            ? nullptr
                       : spec_.return_sequences ? dyt_.as<float>() + off * u
                       : step == t - 1          ? dyt_.as<float>()
                                                : nullptr;
    const MaskBack mb{masked_ ? m_.as<float>() + off : nullptr, ZeroOutput()};
    switch (spec_.cell) {
      case RnnCell::kSimpleRnn:
        SimpleBackKernel<<<blocks, kThreads, 0, st>>>(f, b, u, mb, as, gs, gh, dys, das);
        LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
        LOCKSTEP_RETURN_IF_ERROR(Gemm(ctx_, false, true, b, u, gu, 1.0f, das, recurrent, 1.0f, gh));
        break;
      case RnnCell::kLstm:
        LstmBackKernel<<<blocks, kThreads, 0, st>>>(
            f, rf, b, u, mb, as, gs, c_.as<float>() + off * u, c_.as<float>() + (off + b) * u, es,
            gh, dys, gc_.as<float>(), das);
        LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
        LOCKSTEP_RETURN_IF_ERROR(Gemm(ctx_, false, true, b, u, gu, 1.0f, das, recurrent, 1.0f, gh));
        break;
      case RnnCell::kGru:
        if (gru_after) {
          float* drs = dr_.as<float>() + off * gu;
          GruAfterBackKernel<<<blocks, kThreads, 0, st>>>(f, rf, b, u, mb, as, gs, hp, es, dys, gh,
                                                          das, drs);
          LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
          LOCKSTEP_RETURN_IF_ERROR(
              Gemm(ctx_, false, true, b, u, gu, 1.0f, drs, recurrent, 1.0f, gh));
        } else {
          float* dh2 = dh2_.as<float>() + off * u;
          float* dzr = dzr_.as<float>() + off * 2 * u;
          GruBeforeBack1Kernel<<<blocks, kThreads, 0, st>>>(f, rf, b, u, mb, as, gs, hp, dys, gh,
                                                            das, dh2);
          LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
          LOCKSTEP_RETURN_IF_ERROR(
              Gemm(ctx_, false, true, b, u, u, 1.0f, dh2, uh_.as<float>(), 0.0f, t_.as<float>()));
          GruBeforeBack2Kernel<<<blocks, kThreads, 0, st>>>(rf, b, u, mb, as, gs, hp,
                                                            t_.as<float>(), gh, das, dzr);
          LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
          LOCKSTEP_RETURN_IF_ERROR(
              Gemm(ctx_, false, true, b, u, 2 * u, 1.0f, dzr, uzr_.as<float>(), 1.0f, gh));
        }
        break;
    }
  }

  // The weights' gradients over every step at once.
  const float* da = da_.as<float>();
  const float* hprev = h_.as<float>();  // the first T steps' previous states
  if (dkernel != nullptr) {
    LOCKSTEP_RETURN_IF_ERROR(
        Gemm(ctx_, true, false, d, gu, rows, 1.0f, xt_.as<float>(), da, 0.0f, dkernel));
  }
  if (dbias != nullptr) {
    LOCKSTEP_RETURN_IF_ERROR(BiasGrad(ctx_, da_, dbias, rows, gu, 1));
    if (gru_after) LOCKSTEP_RETURN_IF_ERROR(BiasGrad(ctx_, dr_, dbias + gu, rows, gu, 1));
  }
  if (drecurrent != nullptr) {
    if (gru_after) {
      LOCKSTEP_RETURN_IF_ERROR(
          Gemm(ctx_, true, false, u, gu, rows, 1.0f, hprev, dr_.as<float>(), 0.0f, drecurrent));
    } else if (gru_before) {
      DeviceTensor part;
      LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &part, {u, 2 * u}));
      LOCKSTEP_RETURN_IF_ERROR(Gemm(ctx_, true, false, u, 2 * u, rows, 1.0f, hprev,
                                    dzr_.as<float>(), 0.0f, part.as<float>()));
      ScatterColsKernel<<<Blocks(u * 2 * u), kThreads, 0, st>>>(part.as<float>(), u, gu, 0, 2 * u,
                                                                drecurrent);
      LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
      LOCKSTEP_RETURN_IF_ERROR(Gemm(ctx_, true, false, u, u, rows, 1.0f, e_.as<float>(),
                                    dh2_.as<float>(), 0.0f, part.as<float>()));
      ScatterColsKernel<<<Blocks(u * u), kThreads, 0, st>>>(part.as<float>(), u, gu, 2 * u, u,
                                                            drecurrent);
      LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
    } else {
      LOCKSTEP_RETURN_IF_ERROR(
          Gemm(ctx_, true, false, u, gu, rows, 1.0f, hprev, da, 0.0f, drecurrent));
    }
  }
  if (dx != nullptr) {
    LOCKSTEP_RETURN_IF_ERROR(F32(ctx_, &dxt_, {rows, d}));
    LOCKSTEP_RETURN_IF_ERROR(
        Gemm(ctx_, false, true, rows, d, gu, 1.0f, da, kernel, 0.0f, dxt_.as<float>()));
    DispatchDType(dx->dtype(), [&](auto tag) {
      using T = decltype(tag);
      FromTimeMajorKernel<T><<<Blocks(rows * d), kThreads, 0, st>>>(
          dxt_.as<float>(), b, t, d, spec_.go_backwards, nullptr, dx->as<T>());
      return 0;
    });
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  }
  return initial_grads();
}

}  // namespace lockstep::trainer::cuda
