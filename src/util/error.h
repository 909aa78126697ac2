// error.h: the one exception type longctx throws for bad input and unsupported cases.
//
// Every user-facing failure (corrupt file, unknown architecture, bad flag, prompt too long, ...)
// is an longctx::Error whose message names the problem and, where it helps, what to do.
// The CLI catches it, prints "longctx: <message>" and exits non-zero; nothing aborts.
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace longctx {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// fail("tensor {} has {} dims", name, n): throw an Error with a formatted message.
// Formatting is {fmt} (header-only): GCC 12 on the build machines has no <format>.
template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> fmt, Args&&... args) {
  throw Error(fmt::format(fmt, std::forward<Args>(args)...));
}

}  // namespace longctx
