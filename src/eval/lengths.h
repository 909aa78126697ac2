// lengths.h: parsing of --lengths ("2k,4k,8k", "32768", "1m"), --depths ("0,0.25,0.5" or
// "0%,50%,100%") and --attn lists, with messages that say what is wrong.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace longctx::eval {

// "2k" = 2048, "1m" = 1048576, "3000" = 3000; k/m are binary (1024). Throws Error for "2q".
int64_t parse_length(std::string_view text);
std::vector<int64_t> parse_lengths(std::string_view list);
// Fractions in [0, 1], or percentages with '%'.
std::vector<double> parse_depths(std::string_view list);
// "2048" -> "2K", "3000" -> "3000".
std::string format_length(int64_t n);
// Splits --attn values at commas, keeping a method's own comma-separated numbers with it:
// "dense,a_shape=64,1024,minference" -> {"dense", "a_shape=64,1024", "minference"}.
std::vector<std::string> split_methods(const std::vector<std::string>& values);

}  // namespace longctx::eval
