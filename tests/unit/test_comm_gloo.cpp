#include <catch2/catch.hpp>

TEST_CASE("placeholder until the comm_gloo tests land") { SUCCEED(); }
