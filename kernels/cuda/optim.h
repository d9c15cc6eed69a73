// Fused multi-tensor optimizers on the device: every tensor of a parameter group updated in
// as few launches as the 4 KB kernel argument allows (chunks of 65,536 elements, launch.h),
// each element through the update rule of kernels/optimizer_math.h that the CPU loops
// (kernels/cpu/optim) use. Parameters and state are fp32 (the master copy); gradients are in
// `g_type` (fp32, or the fp16/bf16 gradient buffer read directly).
#pragma once

#include "kernels/amp_math.h"
#include "kernels/cuda/launch.h"
#include "kernels/optimizer_math.h"

#include <cstdint>

namespace dscpp::DSCPP_CUDA_NS {

// Host arrays of `count` device pointers each (tensor k: w[k], g[k], … of sizes[k] elements).
struct TensorLists {
  int count = 0;
  const int64_t* sizes = nullptr;
  float* const* w = nullptr;
  const void* const* g = nullptr;
  hd::Storage g_type = hd::Storage::f32;
  float* const* s1 = nullptr;  // m (Adam, LAMB, Lion), momentum buffer (SGD), sum (Adagrad)
  float* const* s2 = nullptr;  // v (Adam, LAMB)
};

Status adam_step(const TensorLists& t, const kernels::AdamCoeffs<float>& c, Stream stream);
Status sgd_step(const TensorLists& t, const kernels::SgdCoeffs<float>& c, Stream stream);  // s1 unused without momentum
Status adagrad_step(const TensorLists& t, const kernels::AdagradCoeffs<float>& c, Stream stream);
Status lion_step(const TensorLists& t, const kernels::LionCoeffs<float>& c, Stream stream);

// LAMB, one trust ratio per tensor, in DeepSpeed FusedLamb's three passes: (1) m, v; (2) Σw²
// and Σu² per tensor as block partials, then the ratio ‖w‖/‖u‖ clamped, on the device; (3)
// w = fma(u, −step·ratio, w). `scratch` is device memory of lamb_scratch_doubles(t) doubles;
// it ends holding the ratios in its first `count` entries.
int64_t lamb_scratch_doubles(const TensorLists& t);
Status lamb_step(const TensorLists& t, const kernels::LambCoeffs<float>& c, double step_size, double min_coeff,
                 double max_coeff, double* scratch, Stream stream);

}  // namespace dscpp::DSCPP_CUDA_NS
