#include <catch2/catch.hpp>

TEST_CASE("placeholder until the comm_shm tests land") { SUCCEED(); }
