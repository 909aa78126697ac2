// method_args.h: parsing helpers for the parameter text of --attn specs ("a_shape=1024,4096",
// "minference=cfg.json:dense_below=4096").
//
// Why: every method parses small integer lists and key=value options; errors must name the
// method, the option and the bad text the same way everywhere.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace longctx {

// Parses a non-negative integer; throws Error "<method>: <what> must be a non-negative integer
// (got '<text>')".
int64_t parse_count(std::string_view text, std::string_view method, std::string_view what);

// Splits text at every sep (empty text gives no pieces).
std::vector<std::string> split_spec(std::string_view text, char sep);

}  // namespace longctx
