// Element types of tensors and buffers, their names as DeepSpeed configs spell them, and bulk
// conversion between the floating-point ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dscpp {

enum class DType : uint8_t { f32, f16, bf16, f64, i8, u8, i32, i64 };

// Raised for a DType value outside the enum (a cast from a corrupt integer): a dscpp bug.
[[noreturn]] void invalid_dtype(int value);

// Bytes per element.
constexpr size_t dtype_size(DType type) {
  switch (type) {
    case DType::f32:
      return 4;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::f64:
      return 8;
    case DType::i8:
      return 1;
    case DType::u8:
      return 1;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
  }
  invalid_dtype(static_cast<int>(type));
}

// Short canonical name: "fp32", "fp16", "bf16", "fp64", "int8", "uint8", "int32", "int64".
std::string_view dtype_name(DType type);

// Accepts the spellings of DeepSpeed's DtypeEnum (case-sensitive, as there):
//   fp16: torch.float16 fp16 float16 half      fp32: torch.float32 fp32 float32 float
//   bf16: torch.bfloat16 bf16 bfloat16 bfloat  int8: torch.int8 int8
// and the same pattern for the others (fp64: torch.float64 fp64 float64 double; uint8;
// int32: ... int; int64: ... long), plus the torch aliases torch.half/float/double/int/long.
// Returns nullopt for anything else; the caller owns the error message (it knows the key).
std::optional<DType> parse_dtype(std::string_view name);

// Converts n elements from `src` (type src_type) to `dst` (type dst_type), rounding to
// nearest-even where the destination is narrower (see core/half.h for NaN/Inf/subnormals).
// Supported: any pair among fp32, fp16, bf16 and fp64, and any type to itself (a copy).
// Every result is rounded once from the exact source value (fp64 -> fp16/bf16 included).
// Other pairs throw dscpp::Error naming both types. The ranges must not overlap.
// Whether bulk fp32<->fp16 conversion uses the CPU's F16C instructions (checked once).
bool cpu_has_f16c();

void convert(const void* src, DType src_type, void* dst, DType dst_type, size_t n);

}  // namespace dscpp
