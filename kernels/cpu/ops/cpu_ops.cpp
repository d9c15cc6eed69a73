// The CPU ops table: assembling it, host copies, and the thread/BLAS settings (the GEMMs are in
// gemm.cpp).
#include "kernels/cpu/ops/cpu_ops.h"

#include "core/thread_pool.h"
#include "kernels/cpu/ops/cpu_ops_internal.h"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace dscpp::kernels {
namespace cpu::op {

// Device memory is host memory on the CPU; memmove because a caller may pass one buffer twice.
int to_host(const dscpp_ops* o, const void* src, void* dst, size_t bytes) {
  if (int s = check_table(o)) return s;
  if (bytes > 0 && (src == nullptr || dst == nullptr)) return DSCPP_E_INVALID_ARGUMENT;
  if (bytes > 0) std::memmove(dst, src, bytes);
  return DSCPP_OK;
}
int from_host(const dscpp_ops* o, const void* src, void* dst, size_t bytes) { return to_host(o, src, dst, bytes); }

}  // namespace cpu::op

dscpp_ops cpu_ops(dscpp_dtype dtype, void* device) {
  dscpp_ops t{};
  t.struct_size = static_cast<uint32_t>(sizeof(dscpp_ops));
  t.dtype = dtype;
  t.device = device;
  // One set of functions for every dtype: each op checks `dtype` first, so a table for a dtype
  // without kernels answers DSCPP_E_UNSUPPORTED from every entry instead of holding NULLs.
  namespace op = cpu::op;
  DSCPP_FILL_OPS;
  return t;
}

void set_cpu_threads(int n) {
  n = std::max(1, n);
  openblas_set_num_threads(n);
  dscpp::set_num_threads(n);
}

std::string blas_description() {
  // The config string starts with "OpenBLAS <version>" and lists the build options.
  const char* config = openblas_get_config();
  std::string s = config ? config : "OpenBLAS (no config)";
  const char* core = openblas_get_corename();
  s += ", core ";
  s += core ? core : "unknown";
  if (const char* env = std::getenv("OPENBLAS_CORETYPE"); env && *env) {
    s += " (OPENBLAS_CORETYPE=";
    s += env;
    s += ")";
  }
  const int threads = openblas_get_num_threads();
  s += ", " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
  s += "; fp32 GEMM: " + gemm_description();
  return s;
}

}  // namespace dscpp::kernels
