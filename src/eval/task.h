// task.h: the retrieval tasks (passkey, niah, RULER) and their registry.
//
// A Task turns a SampleSpec (target length, token budget, depth, seed) into a Sample: the
// prompt (already rendered and tokenized for the model), the expected answer items and the
// scoring rule. Everything is a pure function of the spec's seed and the tokenizer, so the same
// seed gives the same prompts on every run and platform.
// Names: passkey, niah, and the RULER tasks niah_single, niah_multikey, niah_multivalue,
// niah_multiquery, vt, cwe, fwe ("ruler" expands to all of them).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "eval/haystack.h"
#include "eval/prompt_fit.h"
#include "eval/scoring.h"

namespace longctx::eval {

struct SampleSpec {
  int64_t length = 0;  // requested context length (tokens), for reporting
  int64_t budget = 0;  // most tokens the prompt may have (length less room for the answer)
  double depth = -1;   // needle depth in [0, 1] for depth-grid tasks; -1: the task chooses
  int index = 0;       // sample number within its (length, depth) cell
  uint64_t seed = 0;   // this sample's own seed (see sample_seed)
};

struct Sample {
  std::string task, id;      // id: "passkey/L4096/d50/s3"
  int64_t length = 0;        // requested length
  int64_t prompt_tokens = 0;
  double depth = -1;         // depth of the (first queried) needle, -1 if none
  std::string prompt;
  std::vector<int32_t> tokens;
  std::vector<std::string> expected;
  Metric metric = Metric::MatchAll;
};

// What tasks need besides the spec: the tokenizer (through the renderer), the fit tolerance,
// and an optional book whose lines replace the synthetic essay haystack.
struct TaskContext {
  const PromptRenderer& renderer;
  FitParams fit;
  std::shared_ptr<const BookText> book;  // may be null
};

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  // true: evaluated over a depth x length grid (passkey, niah); false: depths are random.
  virtual bool depth_grid() const { return false; }
  virtual std::vector<double> default_depths() const { return {}; }
  virtual int default_max_new_tokens() const = 0;
  virtual Sample make(const TaskContext& ctx, const SampleSpec& spec) const = 0;
};

// The seed of one sample: independent of which other lengths, depths or samples are run.
uint64_t sample_seed(uint64_t seed, std::string_view task, int64_t length, double depth, int index);

// The single retrieval task names, in display order.
const std::vector<std::string>& retrieval_task_names();
const std::vector<std::string>& ruler_task_names();
// Every name `longctx eval` accepts (retrieval tasks, "ruler", "ppl", "attention").
std::vector<std::string> all_task_names();
// "ruler" -> its tasks, a single name -> itself; throws Error listing the valid names otherwise.
std::vector<std::string> expand_task(std::string_view name);
std::unique_ptr<Task> make_task(std::string_view name);  // throws Error for an unknown name

// Factories, one per task file.
std::unique_ptr<Task> make_passkey_task();
std::unique_ptr<Task> make_niah_task();
std::unique_ptr<Task> make_ruler_niah_task(std::string_view variant);  // niah_single, ...
std::unique_ptr<Task> make_vt_task();
std::unique_ptr<Task> make_cwe_task();
std::unique_ptr<Task> make_fwe_task();

// Shared helper: "<task>/L<length>/d<depth%>/s<index>".
std::string sample_id(std::string_view task, int64_t length, double depth, int index);
// The Sample every task returns: id from (task, spec, id_depth; -1 = no depth in the id), the
// reported needle depth, the fitted prompt and the expected answers (scored by MatchAll).
Sample make_sample(std::string_view task, const SampleSpec& spec, double id_depth, double depth,
                   FittedPrompt fitted, std::vector<std::string> expected);
// The essay haystack, or the book when the context has one.
std::unique_ptr<Haystack> essay_or_book(const TaskContext& ctx, uint64_t seed);

}  // namespace longctx::eval
