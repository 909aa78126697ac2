// text_table.cpp: aligned text tables (see text_table.h).
#include "eval/text_table.h"

#include <algorithm>

namespace longctx::eval {

void TextTable::print(std::ostream& os) const {
  std::vector<size_t> w;
  for (const auto& r : rows_)
    for (size_t i = 0; i < r.size(); ++i) {
      if (w.size() <= i) w.push_back(0);
      w[i] = std::max(w[i], r[i].size());
    }
  for (size_t ri = 0; ri < rows_.size(); ++ri) {
    const auto& r = rows_[ri];
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      const std::string pad(w[i] - r[i].size(), ' ');
      line += (i ? "  " : "") + (i == 0 ? r[i] + pad : pad + r[i]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    os << line << '\n';
    if (ri == 0) {
      size_t total = 0;
      for (size_t x : w) total += x;
      os << std::string(total + 2 * (w.empty() ? 0 : w.size() - 1), '-') << '\n';
    }
  }
}

}  // namespace longctx::eval
