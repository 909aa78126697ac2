// error_of.h: the message of the longctx Error that f throws ("" when it throws none), for tests
// that check what a bad input is told. Other exceptions propagate (the test then fails).
#pragma once
#include <string>

#include "util/error.h"

namespace longctx::test_common {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace longctx::test_common
