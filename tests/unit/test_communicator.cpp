#include <catch2/catch.hpp>

TEST_CASE("placeholder until the communicator tests land") { SUCCEED(); }
