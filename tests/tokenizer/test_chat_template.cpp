// test_chat_template.cpp: C++ chat template rendering equals jinja2's rendering of the real
// template strings (golden: tests/data/tokenizer/chat_golden.json), errors included.
#include <gtest/gtest.h>

#include "model_paths.h"
#include "tokenizer/chat_template.h"
#include "util/error.h"

namespace longctx {
namespace {

using nlohmann::json;

std::vector<ChatMessage> to_messages(const json& conv) {
  std::vector<ChatMessage> out;
  for (const auto& m : conv) out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  return out;
}

TEST(ChatTemplate, MatchesJinja) {
  const json g = testing::load_json(testing::golden_path("chat_golden.json"));
  const json& convs = g["conversations"];
  int checked = 0;
  for (const auto& r : g["renders"]) {
    const std::string name = r["template"].get<std::string>();
    const json& t = g["templates"][name];
    auto chat = tok::ChatTemplate::detect(t["template"].get<std::string>(), t["bos"].get<std::string>(),
                                          t["eos"].get<std::string>());
    // The golden renderings fix strftime_now's date.
    if (t["template"].get<std::string>().find("strftime_now") != std::string::npos) {
      chat.set_date_string(g["today"].get<std::string>());
    }
    const auto msgs = to_messages(convs[r["conversation"].get<size_t>()]);
    const bool gen = r["add_generation_prompt"].get<bool>();
    const std::string where = name + " conversation " + std::to_string(r["conversation"].get<int>()) +
                              (gen ? " +gen" : "");
    if (r.contains("error")) {
      EXPECT_THROW(chat.render(msgs, gen), Error) << where;
    } else {
      try {
        EXPECT_EQ(chat.render(msgs, gen), r["text"].get<std::string>()) << where;
      } catch (const Error& e) {
        ADD_FAILURE() << where << ": " << e.what();
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 100);
}

TEST(ChatTemplate, DetectsFamilies) {
  const json g = testing::load_json(testing::golden_path("chat_golden.json"));
  auto family = [&](const char* name) {
    return tok::ChatTemplate::detect(g["templates"][name]["template"].get<std::string>(), "", "").family_name();
  };
  EXPECT_EQ(family("smollm2"), "chatml");
  EXPECT_EQ(family("qwen2.5"), "chatml");
  EXPECT_EQ(family("chatml"), "chatml");
  EXPECT_EQ(family("llama3"), "llama3");
  EXPECT_EQ(family("llama3.1"), "llama3.1");
  EXPECT_EQ(family("llama3.2"), "llama3.1");
  EXPECT_EQ(family("llama2"), "llama2");
  EXPECT_EQ(family("mistral"), "mistral");
  EXPECT_EQ(family("gemma3"), "gemma");
  EXPECT_EQ(tok::ChatTemplate::detect(g["templates"]["qwen2.5"]["template"].get<std::string>(), "", "")
                .default_system(),
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  EXPECT_EQ(tok::ChatTemplate::detect(g["templates"]["smollm2"]["template"].get<std::string>(), "", "")
                .default_system(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
}

TEST(ChatTemplate, Llama31Dates) {
  const json g = testing::load_json(testing::golden_path("chat_golden.json"));
  auto t31 = tok::ChatTemplate::detect(g["templates"]["llama3.1"]["template"].get<std::string>(), "", "");
  EXPECT_EQ(t31.date_string(), "26 Jul 2024");
  auto t32 = tok::ChatTemplate::detect(g["templates"]["llama3.2"]["template"].get<std::string>(), "", "");
  EXPECT_EQ(t32.date_string().size(), 11u);  // today, "dd Mon yyyy"
}

TEST(ChatTemplate, UnknownTemplateListsFamilies) {
  try {
    tok::ChatTemplate::detect("{% for m in messages %}<|user|>{{ m.content }}<|end|>{% endfor %}", "", "");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unsupported chat template"), std::string::npos) << msg;
    EXPECT_NE(msg.find("chatml"), std::string::npos) << msg;
    EXPECT_NE(msg.find("llama3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("gemma"), std::string::npos) << msg;
  }
}

TEST(ChatTemplate, PythonStrip) {
  EXPECT_EQ(tok::python_strip("  a b \n\t"), "a b");
  EXPECT_EQ(tok::python_strip("\xC2\xA0x\xE3\x80\x80"), "x");  // NBSP, ideographic space
  EXPECT_EQ(tok::python_strip(" \xFF "), "\xFF");               // invalid UTF-8 is kept
  EXPECT_EQ(tok::python_strip(""), "");
}

}  // namespace
}  // namespace longctx
