// How far apart two words are, for "did you mean" suggestions (config keys, host names, plugin
// argument keys): the optimal-string-alignment distance (Damerau–Levenshtein without repeated
// edits of one substring), case-insensitive — transposed letters are the commonest typo.
#pragma once

#include <cstddef>
#include <string_view>

namespace dscpp {

size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace dscpp
