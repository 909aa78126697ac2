// words.h: the vocabulary the synthetic tasks draw from (keys, values, list words, essay text).
//
// Why: RULER draws needle keys and list words from an English word list; we ship our own small
// lists (plain common English words) so generation needs no package and no network. When a task
// needs more distinct words than the lists hold (common-words extraction at 128K tokens), it
// falls back to pronounceable pseudo-words built from syllables.
#pragma once
#include <string>
#include <vector>

#include "eval/rng.h"

namespace longctx::eval {

const std::vector<std::string>& adjectives();
const std::vector<std::string>& nouns();
const std::vector<std::string>& verbs_past();  // "walked", "found", ...
const std::vector<std::string>& cities();

// "hulking-clock"-style key: adjective-noun (RULER's needle keys).
std::string random_key(Rng& rng);
// A pronounceable lowercase pseudo-word of n_syllables consonant-vowel syllables ("tavomi").
std::string pseudo_word(Rng& rng, int n_syllables);
// An uppercase variable name of n letters ("QXVBN"), for variable tracking.
std::string random_upper(Rng& rng, int n);
// n distinct words: the shipped words in a seeded order first, then distinct pseudo-words.
std::vector<std::string> distinct_words(Rng& rng, size_t n);
// One sentence of plausible essay-like English, ending with ". " (the synthetic haystack).
std::string essay_sentence(Rng& rng);

}  // namespace longctx::eval
