// describe.h: a human-readable summary of a ModelFile, for `longctx inspect`.
//
// Format and path, metadata keys with short values (long strings cut, big arrays summarised as
// "[49152 strings]", a safetensors directory's config expanded one level), the tensor count,
// a dtype histogram and the total bytes; with list_tensors, one line per tensor.
#pragma once
#include <string>

#include "loader/model_file.h"

namespace longctx {

std::string describe_model_file(const ModelFile& mf, bool list_tensors);

// One metadata value in at most ~max_chars characters (helper of describe_model_file).
std::string short_json_value(const nlohmann::json& v, size_t max_chars = 64);

}  // namespace longctx
