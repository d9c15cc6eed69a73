// Byte counts as people write them ("8GB", "512MiB", "1.5G", "4096") and as every message and log
// line shows them ("1.50 GiB"): one meaning for every flag that takes a size (dscpp-runtime
// --device_memory_limit, dscpp export-hf --max_shard_size, dscpp aio-bench --size and
// --block_sizes, the benchmarks) and one form wherever bytes are printed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dscpp {

// A positive byte count: a number (fractions allowed, "1.5G") and an optional unit, case ignored.
// The units mean what they mean in DeepSpeed: K, M, G, T are powers of 1024, as
// refine_integer_value (deepspeed/nvme/test_ds_aio_utils.py) reads the sizes given to ds_io and
// ds_nvme_tune; KB, MB, GB, TB are powers of 1000, as deepspeed/utils/zero_to_fp32.py's
// --max_shard_size is read (huggingface_hub's parse_size_to_int, to which it hands the text);
// KiB, MiB, GiB, TiB are powers of 1024 and B or no unit are bytes. A fraction of a byte is
// dropped, as both do. Throws dscpp::Error naming `what` (the flag or key), what is expected and
// the text found.
int64_t parse_bytes(std::string_view text, std::string_view what);

// 1536 -> "1.50 KiB", 3 << 30 -> "3.00 GiB"; below 1 KiB plain bytes ("512 B").
std::string format_bytes(int64_t bytes);

// The shortest exact form parse_bytes reads back: 1048576 -> "1M", 4096 -> "4K", 1000 -> "1000".
std::string short_bytes(int64_t bytes);

}  // namespace dscpp
