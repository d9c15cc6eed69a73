#include <catch2/catch.hpp>

TEST_CASE("placeholder until the store tests land") { SUCCEED(); }
