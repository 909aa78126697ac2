// text_table.h: a plain aligned text table for the end-of-run summaries.
#pragma once
#include <ostream>
#include <string>
#include <vector>

namespace longctx::eval {

class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header) : rows_{std::move(header)} {}
  void row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  // First column left-aligned, the others right-aligned; a rule under the header.
  void print(std::ostream& os) const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace longctx::eval
