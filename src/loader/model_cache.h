// model_cache.h: the models scripts/fetch-model.sh installs, found by short name.
//
// `-m gemma3-270m` means the file fetch-model.sh put in $LONGCTX_CACHE/models (default
// ~/.cache/longctx/models); a path that exists always wins over a short name.
#pragma once
#include <optional>
#include <string>

namespace longctx {

// $LONGCTX_CACHE/models, ~/.cache/longctx/models, or .longctx-cache/models without HOME.
std::string model_cache_dir();

// The cached file of a short name ("smollm2-135m", "gemma3-270m"), or nullopt for any other
// string. Throws Error naming the fetch command when the name is known but not installed.
std::optional<std::string> cached_model_path(const std::string& name);

}  // namespace longctx
