// words.cpp: word lists and generators for synthetic task text (see words.h).
#include "eval/words.h"

#include <unordered_set>

namespace longctx::eval {

const std::vector<std::string>& adjectives() {
  static const std::vector<std::string> v = {
      "ancient", "bitter", "bold", "brave", "bright", "broad", "busy", "calm", "careful", "cheerful",
      "clever", "cold", "crisp", "curious", "damp", "dark", "deep", "distant", "dry", "dusty",
      "eager", "early", "empty", "faint", "famous", "fierce", "fresh", "friendly", "gentle", "giant",
      "golden", "grand", "green", "grim", "happy", "heavy", "hidden", "hollow", "honest", "huge",
      "humble", "hungry", "icy", "idle", "jolly", "keen", "kind", "large", "lazy", "little",
      "lively", "lonely", "loud", "lucky", "mellow", "mighty", "modern", "narrow", "neat", "noisy",
      "odd", "old", "pale", "patient", "plain", "polite", "proud", "quick", "quiet", "rapid",
      "rare", "rough", "round", "rusty", "sandy", "scarlet", "sharp", "shiny", "short", "silent",
      "silver", "simple", "sleepy", "slow", "small", "smooth", "soft", "solid", "steady", "steep",
      "strange", "strong", "sudden", "sunny", "swift", "tall", "tender", "tiny", "wild", "wise"};
  return v;
}

const std::vector<std::string>& nouns() {
  static const std::vector<std::string> v = {
      "anchor", "apple", "arrow", "badge", "basket", "beacon", "bell", "bicycle", "blanket", "boat",
      "bottle", "bridge", "brush", "bucket", "cabin", "camera", "candle", "canyon", "carpet", "castle",
      "chair", "cloud", "clock", "coat", "comet", "compass", "cottage", "crown", "desk", "diamond",
      "dragon", "drum", "eagle", "engine", "feather", "fence", "fiddle", "forest", "fountain", "garden",
      "glove", "guitar", "hammer", "harbor", "helmet", "island", "jacket", "kettle", "kitten", "ladder",
      "lantern", "lemon", "library", "lighthouse", "meadow", "mirror", "mountain", "needle", "notebook", "ocean",
      "orchard", "otter", "owl", "paddle", "palace", "pencil", "piano", "pillow", "planet", "pocket",
      "pond", "puzzle", "rabbit", "river", "rocket", "saddle", "sailor", "shell", "shovel", "spoon",
      "statue", "stone", "storm", "street", "sweater", "table", "teapot", "tiger", "tower", "tractor",
      "trumpet", "tunnel", "umbrella", "valley", "violin", "wagon", "wallet", "window", "wizard", "zebra"};
  return v;
}

const std::vector<std::string>& verbs_past() {
  static const std::vector<std::string> v = {
      "admired", "built", "carried", "chased", "cleaned", "collected", "crossed", "described", "discovered",
      "drew", "examined", "filled", "followed", "found", "guarded", "helped", "imagined", "lifted",
      "measured", "mended", "moved", "noticed", "opened", "painted", "passed", "planted", "pulled",
      "remembered", "repaired", "searched", "shared", "studied", "touched", "visited", "watched", "wrote"};
  return v;
}

const std::vector<std::string>& cities() {
  static const std::vector<std::string> v = {
      "Amsterdam", "Athens", "Bangkok", "Barcelona", "Berlin", "Boston", "Brussels", "Budapest", "Cairo",
      "Chicago", "Copenhagen", "Dublin", "Edinburgh", "Florence", "Geneva", "Hamburg", "Helsinki", "Istanbul",
      "Jakarta", "Kyoto", "Lagos", "Lima", "Lisbon", "London", "Madrid", "Manila", "Melbourne", "Montreal",
      "Moscow", "Mumbai", "Munich", "Nairobi", "Naples", "Oslo", "Paris", "Prague", "Quebec", "Rome",
      "Santiago", "Seattle", "Seoul", "Singapore", "Stockholm", "Sydney", "Tokyo", "Toronto", "Vienna",
      "Warsaw", "Zurich"};
  return v;
}

std::string random_key(Rng& rng) { return rng.pick(adjectives()) + "-" + rng.pick(nouns()); }

std::string pseudo_word(Rng& rng, int n_syllables) {
  static constexpr char kConsonants[] = "bdfgklmnprstvz";
  static constexpr char kVowels[] = "aeiou";
  std::string w;
  for (int i = 0; i < n_syllables; ++i) {
    w += kConsonants[rng.below(sizeof(kConsonants) - 1)];
    w += kVowels[rng.below(sizeof(kVowels) - 1)];
  }
  return w;
}

std::string random_upper(Rng& rng, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += char('A' + rng.below(26));
  return s;
}

std::vector<std::string> distinct_words(Rng& rng, size_t n) {
  std::vector<std::string> pool = nouns();
  pool.insert(pool.end(), adjectives().begin(), adjectives().end());
  pool.insert(pool.end(), verbs_past().begin(), verbs_past().end());
  rng.shuffle(pool);
  if (pool.size() >= n) {
    pool.resize(n);
    return pool;
  }
  std::unordered_set<std::string> seen(pool.begin(), pool.end());
  while (pool.size() < n) {
    std::string w = pseudo_word(rng, 3);
    if (seen.insert(w).second) pool.push_back(std::move(w));
  }
  return pool;
}

std::string essay_sentence(Rng& rng) {
  auto cap = [](std::string s) {
    if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = char(s[0] - 'a' + 'A');
    return s;
  };
  const std::string& a1 = rng.pick(adjectives());
  const std::string& n1 = rng.pick(nouns());
  const std::string& v = rng.pick(verbs_past());
  const std::string& a2 = rng.pick(adjectives());
  const std::string& n2 = rng.pick(nouns());
  const std::string& c = rng.pick(cities());
  switch (rng.below(6)) {
    case 0: return "The " + a1 + " " + n1 + " " + v + " the " + a2 + " " + n2 + ". ";
    case 1: return "In " + c + ", a " + a1 + " " + n1 + " was " + v + " near the " + n2 + ". ";
    case 2: return cap(a1) + " days passed before anyone " + v + " the " + n1 + " again. ";
    case 3: return "Nobody expected the " + n1 + " to be so " + a1 + ", yet it " + v + " the " + n2 + ". ";
    case 4: return "Later that year the " + a1 + " " + n2 + " of " + c + " was " + v + " once more. ";
    default: return "Some say the " + n1 + " is " + a1 + ", while others think it is " + a2 + ". ";
  }
}

}  // namespace longctx::eval
