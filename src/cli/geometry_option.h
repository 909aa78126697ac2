// geometry_option.h: --random-weights NAME[:N], checked against the known geometries while the
// command line is parsed ("unknown geometry 'x' (known: ...)"), before the device is looked at.
// gpu/geometry.cpp is linked into the longctx binary in every build (src/cli/CMakeLists.txt).
#pragma once
#include <CLI/CLI.hpp>

#include <string>

#include "cli/options.h"
#include "gpu/geometry.h"

namespace longctx::cli {

inline CLI::Validator known_geometry() {
  return detail::quiet_validator([](std::string& s) -> std::string {
    try {
      (void)gpu::geometry_config(s);
    } catch (const Error& e) {
      std::string m = e.what();  // CLI11 already prefixes the option's name
      if (m.rfind("unknown --random-weights geometry", 0) == 0) m.replace(8, 17, "");
      return m;
    }
    return "";
  });
}

}  // namespace longctx::cli
