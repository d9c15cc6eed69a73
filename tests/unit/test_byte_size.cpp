// The one byte-size parser and printer (core/byte_size.h): DeepSpeed's meaning of each unit, and
// errors that name the flag, what it takes and what was given.
#include "core/byte_size.h"
#include "core/error.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

using namespace dscpp;
using Catch::Contains;

TEST_CASE("parse_bytes: K, M, G, T and KiB..TiB are powers of 1024, KB..TB powers of 1000", "[byte_size]") {
  CHECK(parse_bytes("4096", "x") == 4096);
  CHECK(parse_bytes("4096B", "x") == 4096);
  // refine_integer_value (DeepSpeed's ds_io / ds_nvme_tune sizes): K, M, G binary.
  CHECK(parse_bytes("256K", "x") == 256 << 10);
  CHECK(parse_bytes("1M", "x") == 1 << 20);
  CHECK(parse_bytes("8G", "x") == int64_t{8} << 30);
  CHECK(parse_bytes("2T", "x") == int64_t{2} << 40);
  CHECK(parse_bytes("2GiB", "x") == int64_t{2} << 30);
  CHECK(parse_bytes("512MiB", "x") == int64_t{512} << 20);
  // --max_shard_size as DeepSpeed's zero_to_fp32 reads it: GB is 10^9.
  CHECK(parse_bytes("8GB", "x") == 8'000'000'000);
  CHECK(parse_bytes("5GB", "x") == 5'000'000'000);
  CHECK(parse_bytes("20KB", "x") == 20'000);
  CHECK(parse_bytes("500MB", "x") == 500'000'000);
  CHECK(parse_bytes("1TB", "x") == 1'000'000'000'000);
  // Case is ignored.
  CHECK(parse_bytes("1m", "x") == 1 << 20);
  CHECK(parse_bytes("5gb", "x") == 5'000'000'000);
  CHECK(parse_bytes("3kib", "x") == 3 << 10);
}

TEST_CASE("parse_bytes: fractions and exponents, a fraction of a byte dropped", "[byte_size]") {
  CHECK(parse_bytes("1.5G", "x") == int64_t{3} << 29);
  CHECK(parse_bytes("0.5GB", "x") == 500'000'000);
  CHECK(parse_bytes(".5K", "x") == 512);
  CHECK(parse_bytes("1e9", "x") == 1'000'000'000);
  CHECK(parse_bytes("2.5e3KB", "x") == 2'500'000);
  CHECK(parse_bytes("1.9", "x") == 1);
  CHECK(parse_bytes("0.1K", "x") == 102);
  // Whole numbers are exact, however large.
  CHECK(parse_bytes("9223372036854775807", "x") == INT64_MAX);
  CHECK(parse_bytes("8388607T", "x") == (int64_t{8388607} << 40));
}

TEST_CASE("parse_bytes: errors name the flag, what it takes and what was given", "[byte_size]") {
  CHECK_THROWS_WITH(parse_bytes("1Q", "--size"),
                    Contains("--size: expected a unit K, M, G, T or KiB, MiB, GiB, TiB (powers of 1024), KB, MB, GB, "
                             "TB (powers of 1000) or B after the number, found \"Q\" in \"1Q\""));
  CHECK_THROWS_WITH(parse_bytes("1e", "--size"), Contains("found \"e\" in \"1e\""));
  for (const char* bad : {"-1", "", "G", "0", "0G", "0.0001", "abc", "1..5", "+3", " 4K", "0x10", "inf"})
    CHECK_THROWS_WITH(parse_bytes(bad, "--device_memory_limit"),
                      Contains("--device_memory_limit: expected") && Contains(std::string("\"") + bad + "\""));
  CHECK_THROWS_WITH(parse_bytes("4K ", "--size"), Contains("found \"K \" in \"4K \""));
  CHECK_THROWS_WITH(parse_bytes("9223372036854775808", "--size"),
                    Contains("--size: expected a byte count below 2^63 (8 EiB), found \"9223372036854775808\""));
  CHECK_THROWS_WITH(parse_bytes("8388608T", "--size"), Contains("below 2^63"));
  CHECK_THROWS_WITH(parse_bytes("1e30", "--size"), Contains("below 2^63"));
  CHECK_THROWS_AS(parse_bytes("1Q", "--size"), Error);
}

TEST_CASE("format_bytes: bytes below 1 KiB, else two decimals of the largest binary unit", "[byte_size]") {
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(1024) == "1.00 KiB");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(int64_t{37} * 1048576 / 10) == "3.70 MiB");
  CHECK(format_bytes(int64_t{3} << 30) == "3.00 GiB");
  CHECK(format_bytes(int64_t{5} << 40) == "5.00 TiB");
  CHECK(format_bytes(int64_t{5000} << 40) == "5000.00 TiB");
  CHECK(format_bytes(-2048) == "-2.00 KiB");
}

TEST_CASE("short_bytes: the shortest form parse_bytes reads back exactly", "[byte_size]") {
  CHECK(short_bytes(1 << 20) == "1M");
  CHECK(short_bytes(4096) == "4K");
  CHECK(short_bytes(1000) == "1000");
  CHECK(short_bytes(int64_t{3} << 40) == "3T");
  for (int64_t b : {int64_t{4096}, int64_t{1} << 20, int64_t{3} << 30, int64_t{1000}, int64_t{12288}})
    CHECK(parse_bytes(short_bytes(b), "x") == b);
}
