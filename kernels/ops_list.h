// The ops of the plugin table (include/dscpp/model.h's dscpp_ops), listed once. A table
// implementation (kernels/cpu/ops, kernels/cuda) defines, in a namespace `op` of its own, one
// function per entry with the field's exact type (declared by DSCPP_DECLARE_OPS), and fills a
// table with DSCPP_FILL_OPS. So an op is added here, in the ABI and in each implementation:
// a table that lacks it does not link, and the static_assert below fails when a field of the
// ABI is missing from this list.
#pragma once

#include "dscpp/model.h"

#include <cstddef>
#include <type_traits>

#define DSCPP_OPS_TABLE(X)                                                                                       \
  X(gemm) X(gemm_strided_batched) X(fill) X(copy) X(add) X(axpy) X(scale) X(bias_add) X(bias_grad)               \
  X(gelu_forward) X(gelu_backward) X(relu_forward) X(relu_backward) X(layernorm_forward) X(layernorm_backward)   \
  X(softmax_forward) X(softmax_backward) X(causal_softmax_forward) X(causal_softmax_backward)                    \
  X(embedding_forward) X(embedding_backward) X(cross_entropy_forward) X(cross_entropy_backward) X(to_host)       \
  X(from_host) X(causal_attention_forward) X(causal_attention_backward) X(linear_forward) X(linear_backward)     \
  X(flash_attention_forward) X(flash_attention_backward) X(mul) X(silu_forward) X(silu_backward) X(swiglu_forward)    \
  X(swiglu_backward) X(rmsnorm_forward) X(rmsnorm_backward) X(rope_forward) X(rope_backward) X(copy_2d)  \
  X(flash_attention_masked_forward) X(flash_attention_masked_backward) X(relative_bias_forward)                     \
  X(relative_bias_backward) X(masked_softmax_forward) X(dropout)

// Declarations of the op functions, each of its field's function type (inside namespace op).
#define DSCPP_DECLARE_OP_(name) std::remove_pointer_t<decltype(dscpp_ops::name)> name;
#define DSCPP_DECLARE_OPS DSCPP_OPS_TABLE(DSCPP_DECLARE_OP_)

// Fills every op field of a dscpp_ops named `t` from the `op` namespace seen where it is used.
#define DSCPP_FILL_OP_(name) t.name = op::name;
#define DSCPP_FILL_OPS DSCPP_OPS_TABLE(DSCPP_FILL_OP_)

namespace dscpp::kernels {
#define DSCPP_COUNT_OP_(name) +1
// The ops follow the table's three header fields (struct_size, dtype, device) as one function
// pointer each: a field the list misses changes the size.
static_assert(sizeof(dscpp_ops) == offsetof(dscpp_ops, gemm) + (0 DSCPP_OPS_TABLE(DSCPP_COUNT_OP_)) * sizeof(void*),
              "DSCPP_OPS_TABLE must list every op of dscpp_ops");
#undef DSCPP_COUNT_OP_
}  // namespace dscpp::kernels
