// null_tokenizer.h: the tokenizer of a --random-weights model, which has none.
//
// Benchmarks feed token ids directly; generation still runs (every token's text is empty and
// nothing ends generation). Anything that needs real text (encode, chat templates) throws an
// Error saying that random-weight models take token ids only.
#pragma once
#include <memory>

#include "tokenizer/tokenizer.h"

namespace longctx::gpu {

std::unique_ptr<Tokenizer> make_null_tokenizer(int32_t vocab_size);

}  // namespace longctx::gpu
