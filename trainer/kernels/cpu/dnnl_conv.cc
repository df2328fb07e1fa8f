#include "trainer/kernels/cpu/dnnl_conv.h"

#include <optional>
#include <string>
#include <unordered_map>

#include "absl/status/status.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "trainer/kernels/cpu/threads.h"

namespace lockstep::trainer::cpu {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;

dnnl::engine& CpuEngine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

Tag DataTag(int rank) { return rank == 1 ? Tag::nwc : rank == 2 ? Tag::nhwc : Tag::ndhwc; }
Tag KernelTag(int rank, bool depthwise) {
  if (depthwise) return rank == 1 ? Tag::wigo : rank == 2 ? Tag::hwigo : Tag::dhwigo;
  return rank == 1 ? Tag::wio : rank == 2 ? Tag::hwio : Tag::dhwio;
}

memory::dims Spatial(const ConvGeometry& g, const std::array<int64_t, 3>& v) {
  return memory::dims(v.begin(), v.begin() + g.rank);
}

memory::dims Data(const ConvGeometry& g, int64_t c, const std::array<int64_t, 3>& sp) {
  memory::dims d{g.n, c};
  for (int a = 0; a < g.rank; ++a) d.push_back(sp[static_cast<size_t>(a)]);
  return d;
}

// A tensor the caller holds in its own layout (`user`) that a primitive wants in another
// (`prim`, oneDNN's blocked weight layouts): reordered into scratch on the way in (In) or out of
// scratch on the way out (Out).
struct Reordered {
  memory::desc user, prim;
  std::optional<memory> scratch;
  std::optional<dnnl::reorder> in, out;

  void Init(const memory::desc& u, const memory::desc& p, bool to_prim) {
    user = u;
    prim = p;
    if (u == p) return;
    scratch.emplace(p, CpuEngine());
    memory um(u, CpuEngine(), DNNL_MEMORY_NONE);
    if (to_prim) {
      in.emplace(um, *scratch);
    } else {
      out.emplace(*scratch, um);
    }
  }
  // The memory the primitive reads: `p` itself, or scratch after a reorder from it.
  memory In(const float* p, dnnl::stream& s) {
    memory um(user, CpuEngine(), const_cast<float*>(p));
    if (!scratch) return um;
    in->execute(s, um, *scratch);
    return *scratch;
  }
  // The memory the primitive writes; Finish copies it to `p`.
  memory Target(float* p) { return scratch ? *scratch : memory(user, CpuEngine(), p); }
  void Finish(float* p, dnnl::stream& s) {
    if (!scratch) return;
    memory um(user, CpuEngine(), p);
    out->execute(s, *scratch, um);
  }
};

}  // namespace

struct DnnlConv::Impl {
  ConvGeometry g;
  bool bias = false;
  memory::desc src, weights, bias_md, dst;
  memory::dims strides, dilates, pad_l, pad_r;
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_forward fwd;
  // Made with the forward one, so that Make() alone can fail.
  dnnl::convolution_backward_data::primitive_desc bwd_data_pd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights::primitive_desc bwd_weights_pd;
  dnnl::convolution_backward_weights bwd_weights;
  // The kernel in each primitive's layout.
  Reordered fwd_w, bwd_data_w, bwd_weights_dw;

  memory Mem(const memory::desc& md, const float* p) const {
    return memory(md, CpuEngine(), const_cast<float*>(p));
  }
};

DnnlConv::DnnlConv(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DnnlConv::~DnnlConv() = default;

absl::StatusOr<std::unique_ptr<DnnlConv>> DnnlConv::Make(const ConvGeometry& g, bool bias) {
  if (!g.valid()) return absl::InvalidArgumentError("convolution geometry out of range");
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.g = g;
  m.bias = bias;
  const Tag data = DataTag(g.rank);
  m.src = memory::desc(Data(g, g.c_in, g.in), memory::data_type::f32, data);
  m.dst = memory::desc(Data(g, g.c_out, g.out), memory::data_type::f32, data);
  memory::dims wd;
  if (g.depthwise) {
    wd = {g.c_in, g.c_out / g.c_in, 1};  // groups, out per group, in per group
  } else {
    wd = {g.c_out, g.c_in};
  }
  for (int a = 0; a < g.rank; ++a) wd.push_back(g.kernel[static_cast<size_t>(a)]);
  m.weights = memory::desc(wd, memory::data_type::f32, KernelTag(g.rank, g.depthwise));
  // The primitives choose their kernel layout (the direct and brgemm kernels want blocked ones;
  // with Keras's layout oneDNN falls back to im2col + GEMM); activations stay channels-last.
  const memory::desc any_w(wd, memory::data_type::f32, Tag::any);
  if (bias) m.bias_md = memory::desc({g.c_out}, memory::data_type::f32, Tag::a);
  m.strides = Spatial(g, g.stride);
  for (int a = 0; a < g.rank; ++a) {
    const auto i = static_cast<size_t>(a);
    m.dilates.push_back(g.dilation[i] - 1);  // oneDNN counts the gaps
    m.pad_l.push_back(g.pad_before[i]);
    m.pad_r.push_back(g.pad_after(i));  // oneDNN rounds the window count down, as Keras does
  }
  const auto direct = dnnl::algorithm::convolution_direct;
  try {
    auto desc = bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, direct,
                                                       m.src, any_w, m.bias_md, m.dst, m.strides,
                                                       m.dilates, m.pad_l, m.pad_r)
                     : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, direct,
                                                       m.src, any_w, m.dst, m.strides, m.dilates,
                                                       m.pad_l, m.pad_r);
    m.fwd_pd = dnnl::convolution_forward::primitive_desc(desc, CpuEngine());
    m.fwd = dnnl::convolution_forward(m.fwd_pd);
    m.bwd_data_pd = dnnl::convolution_backward_data::primitive_desc(
        dnnl::convolution_backward_data::desc(direct, m.src, any_w, m.dst, m.strides, m.dilates,
                                              m.pad_l, m.pad_r),
        CpuEngine(), m.fwd_pd);
    m.bwd_data = dnnl::convolution_backward_data(m.bwd_data_pd);
    auto wdesc =
        bias ? dnnl::convolution_backward_weights::desc(direct, m.src, any_w, m.bias_md, m.dst,
                                                        m.strides, m.dilates, m.pad_l, m.pad_r)
             : dnnl::convolution_backward_weights::desc(direct, m.src, any_w, m.dst, m.strides,
                                                        m.dilates, m.pad_l, m.pad_r);
    m.bwd_weights_pd =
        dnnl::convolution_backward_weights::primitive_desc(wdesc, CpuEngine(), m.fwd_pd);
    m.bwd_weights = dnnl::convolution_backward_weights(m.bwd_weights_pd);
    m.fwd_w.Init(m.weights, m.fwd_pd.weights_desc(), true);
    m.bwd_data_w.Init(m.weights, m.bwd_data_pd.weights_desc(), true);
    m.bwd_weights_dw.Init(m.weights, m.bwd_weights_pd.diff_weights_desc(), false);
  } catch (const dnnl::error& e) {
    return absl::UnimplementedError(std::string("oneDNN has no convolution for this geometry: ") +
                                    e.what());
  }
  return std::unique_ptr<DnnlConv>(new DnnlConv(std::move(impl)));
}

void DnnlConv::Forward(const float* x, const float* w, const float* b, float* y) {
  Impl& m = *impl_;
  UseCpuThreads();
  dnnl::stream s(CpuEngine());
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, m.Mem(m.src, x)},
                                       {DNNL_ARG_WEIGHTS, m.fwd_w.In(w, s)},
                                       {DNNL_ARG_DST, m.Mem(m.dst, y)}};
  if (m.bias) args.emplace(DNNL_ARG_BIAS, m.Mem(m.bias_md, b));
  m.fwd.execute(s, args);
  s.wait();
}

void DnnlConv::BackwardData(const float* dy, const float* w, float* dx) {
  Impl& m = *impl_;
  UseCpuThreads();
  dnnl::stream s(CpuEngine());
  m.bwd_data.execute(s, {{DNNL_ARG_DIFF_DST, m.Mem(m.dst, dy)},
                         {DNNL_ARG_WEIGHTS, m.bwd_data_w.In(w, s)},
                         {DNNL_ARG_DIFF_SRC, m.Mem(m.src, dx)}});
  s.wait();
}

void DnnlConv::BackwardWeights(const float* x, const float* dy, float* dw, float* db) {
  Impl& m = *impl_;
  UseCpuThreads();
  dnnl::stream s(CpuEngine());
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, m.Mem(m.src, x)},
                                       {DNNL_ARG_DIFF_DST, m.Mem(m.dst, dy)},
                                       {DNNL_ARG_DIFF_WEIGHTS, m.bwd_weights_dw.Target(dw)}};
  if (m.bias) args.emplace(DNNL_ARG_DIFF_BIAS, m.Mem(m.bias_md, db));
  m.bwd_weights.execute(s, args);
  m.bwd_weights_dw.Finish(dw, s);
  s.wait();
}

}  // namespace lockstep::trainer::cpu
