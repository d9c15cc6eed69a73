// Byte counts as people write them: "1G", "256K", "4096" in, "1.00 GiB" out. Used by the aio
// engine's error messages and `dscpp aio-bench`'s flags.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dscpp::offload {

// "4096", "64K", "1M", "1G", "2T" (binary multiples, an optional trailing "B"/"iB", case
// ignored). Throws dscpp::Error naming `what` and the text when it is not a positive count.
int64_t parse_bytes(std::string_view text, std::string_view what);

// 1536 -> "1.50 KiB"; below 1 KiB plain bytes ("512 B").
std::string format_bytes(int64_t bytes);

// The shortest exact form parse_bytes accepts: 1048576 -> "1M", 4096 -> "4K", 1000 -> "1000".
std::string short_bytes(int64_t bytes);

}  // namespace dscpp::offload
