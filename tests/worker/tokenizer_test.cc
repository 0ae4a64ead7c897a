// Tests of Gpt2Tokenizer: the ids of an independent GPT-2 tokenizer (the npm package
// gpt-3-encoder, run by scripts/make_fixtures.py) for a varied text set, byte-exact round trips
// (invalid UTF-8 included), BPE's rank order on a hand-made vocabulary, and errors that name the
// file and the line or entry. A speed figure is printed, not asserted.
#include "worker/tokenizer.h"

#include <boost/json.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/temp_dir.h"
#include "tests/worker/fixtures.h"

namespace triald::worker {
namespace {

namespace json = boost::json;
using testing::FixtureDir;
using triald::testing::TempDir;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  INFO(path);
  REQUIRE(in.good());
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string VocabPath() { return FixtureDir() + "/tiny-gpt2/vocab.json"; }
std::string MergesPath() { return FixtureDir() + "/tiny-gpt2/merges.txt"; }

// GPT-2's tokenizer, loaded once for the whole executable.
const Gpt2Tokenizer& Gpt2() {
  static const Gpt2Tokenizer tokenizer = [] {
    auto loaded = Gpt2Tokenizer::Load(VocabPath(), MergesPath());
    INFO(loaded.status().message());
    REQUIRE(loaded.ok());
    return std::move(loaded).value();
  }();
  return tokenizer;
}

struct ReferenceCase {
  std::string name;
  std::string text;
  std::vector<std::string> pieces;
  std::vector<int32_t> ids;
};

const std::vector<ReferenceCase>& ReferenceCases() {
  static const std::vector<ReferenceCase> cases = [] {
    std::vector<ReferenceCase> out;
    const json::value doc = json::parse(ReadFile(FixtureDir() + "/tokenizer-reference.json"));
    for (const json::value& c : doc.at("cases").as_array()) {
      ReferenceCase rc;
      rc.name = json::value_to<std::string>(c.at("name"));
      rc.text = json::value_to<std::string>(c.at("text"));
      rc.pieces = json::value_to<std::vector<std::string>>(c.at("pieces"));
      rc.ids = json::value_to<std::vector<int32_t>>(c.at("ids"));
      out.push_back(std::move(rc));
    }
    return out;
  }();
  return cases;
}

// bytes_to_unicode() of GPT-2: how vocab.json and merges.txt spell byte b, as UTF-8.
std::string SpellByte(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
  int cp = b;
  if (!printable) {
    cp = 256;
    for (int x = 0; x < b; ++x) {
      if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) ++cp;
    }
  }
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

std::string Spell(std::string_view bytes) {
  std::string s;
  for (unsigned char b : bytes) s += SpellByte(b);
  return s;
}

// A vocabulary of the 256 bytes (ids 0..255, in byte order) followed by `extra` tokens (given as
// bytes), written as vocab.json into `dir`.
std::string WriteSmallVocab(const TempDir& dir, const std::vector<std::string>& extra) {
  json::object vocab;
  for (int b = 0; b < 256; ++b) vocab[Spell(std::string(1, static_cast<char>(b)))] = b;
  int id = 256;
  for (const auto& token : extra) vocab[Spell(token)] = id++;
  return dir.Write("vocab.json", json::serialize(vocab));
}

// merges.txt with the "#version" header and one merge per pair (given as bytes).
std::string WriteMerges(const TempDir& dir,
                        const std::vector<std::pair<std::string, std::string>>& merges) {
  std::string text = "#version: 0.2\n";
  for (const auto& [a, b] : merges) text += Spell(a) + " " + Spell(b) + "\n";
  return dir.Write("merges.txt", text);
}

int32_t VocabId(const std::string& spelled) {
  static const json::object vocab = json::parse(ReadFile(VocabPath())).as_object();
  return static_cast<int32_t>(vocab.at(spelled).as_int64());
}

TEST_CASE("GPT-2 pre-tokenization splits like the reference regex", "[worker][tokenizer]") {
  const auto& cases = ReferenceCases();
  REQUIRE(cases.size() >= 50);
  for (const auto& c : cases) {
    INFO("case " << c.name);
    const std::vector<std::string_view> pieces = SplitGpt2Pieces(c.text);
    CHECK(std::vector<std::string>(pieces.begin(), pieces.end()) == c.pieces);
  }
}

TEST_CASE("Gpt2Tokenizer gives the ids of the reference GPT-2 tokenizer", "[worker][tokenizer]") {
  const auto& cases = ReferenceCases();
  REQUIRE(cases.size() >= 50);
  size_t total_ids = 0;
  bool saw_corpus = false;
  for (const auto& c : cases) {
    INFO("case " << c.name);
    CHECK(Gpt2().Encode(c.text) == c.ids);
    total_ids += c.ids.size();
    saw_corpus = saw_corpus || c.name == "tiny_corpus_train_txt";
  }
  CHECK(saw_corpus);
  CHECK(total_ids > 10000);  // the corpus is in the set: thousands of words, not a handful
}

TEST_CASE("Gpt2Tokenizer knows GPT-2's vocabulary size and end-of-text id", "[worker][tokenizer]") {
  CHECK(Gpt2().vocab_size() == 50257);
  CHECK(Gpt2().eos_id() == 50256);
  // "<|endoftext|>" in a text is ordinary text, as in the reference.
  const std::vector<int32_t> ids = Gpt2().Encode("<|endoftext|>");
  CHECK(ids.size() > 1);
  CHECK(Gpt2().Decode(ids) == "<|endoftext|>");
  CHECK(Gpt2().Decode({Gpt2().eos_id()}) == "<|endoftext|>");
}

TEST_CASE("Decode(Encode(text)) gives back every reference text", "[worker][tokenizer]") {
  for (const auto& c : ReferenceCases()) {
    INFO("case " << c.name);
    CHECK(Gpt2().Decode(Gpt2().Encode(c.text)) == c.text);
    CHECK(Gpt2().Decode(c.ids) == c.text);
  }
}

TEST_CASE("Invalid UTF-8 is encoded byte for byte and round-trips", "[worker][tokenizer]") {
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte.push_back(static_cast<char>(b));
  const std::vector<std::string> texts = {
      "\xff",
      "abc\xff\xfe def",
      "truncated \xe4\xb8",                  // 中 cut short
      "overlong \xc0\xaf and \xe0\x80\xaf",  // overlong '/'
      "surrogate \xed\xa0\x80 half",
      "too large \xf4\x90\x80\x80",
      "stray continuation \x80\x80\xbf",
      "caf\xe9 in Latin-1",
      every_byte,
      every_byte + every_byte + "tail",
  };
  for (const auto& text : texts) {
    INFO("text " << json::serialize(json::string(text.begin(), text.end())));
    const std::vector<int32_t> ids = Gpt2().Encode(text);
    for (int32_t id : ids) {
      REQUIRE(id >= 0);
      REQUIRE(id < Gpt2().vocab_size());
    }
    CHECK(Gpt2().Decode(ids) == text);
  }
  // A lone invalid byte is the token of that byte, spelled as bytes_to_unicode spells it.
  CHECK(Gpt2().Encode("\xff") == std::vector<int32_t>{VocabId(SpellByte(0xff))});
  CHECK(Gpt2().Encode("\x80") == std::vector<int32_t>{VocabId(SpellByte(0x80))});
}

TEST_CASE("Invalid bytes are single 'other' characters to the pre-tokenizer",
          "[worker][tokenizer]") {
  using Pieces = std::vector<std::string_view>;
  // A run of "other" characters, like punctuation.
  CHECK(SplitGpt2Pieces("abc\xff\xfe"
                        "def") == Pieces{"abc", "\xff\xfe", "def"});
  CHECK(SplitGpt2Pieces("a \xff!") == Pieces{"a", " \xff!"});
  // A cut-short sequence does not swallow the letter after it.
  CHECK(SplitGpt2Pieces("\xe4\xb8"
                        "a") == Pieces{"\xe4\xb8", "a"});
  // A letter followed by a stray lead byte.
  CHECK(SplitGpt2Pieces("\xc3\xa9t\xc3") == Pieces{"\xc3\xa9t", "\xc3"});
  // Valid multi-byte letters stay whole.
  CHECK(SplitGpt2Pieces("na\xc3\xafve caf\xc3\xa9") == Pieces{"na\xc3\xafve", " caf\xc3\xa9"});
}

TEST_CASE("Pre-tokenization handles whitespace as the pattern's lookahead does",
          "[worker][tokenizer]") {
  using Pieces = std::vector<std::string_view>;
  // \s+(?!\S) leaves the last space to the word after it.
  CHECK(SplitGpt2Pieces("a   b") == Pieces{"a", "  ", " b"});
  // A lone non-space whitespace before a word is its own piece (\s+).
  CHECK(SplitGpt2Pieces("a\tb") == Pieces{"a", "\t", "b"});
  CHECK(SplitGpt2Pieces("a \n b") == Pieces{"a", " \n", " b"});
  // Trailing whitespace is one piece.
  CHECK(SplitGpt2Pieces("end  \n ") == Pieces{"end", "  \n "});
  CHECK(SplitGpt2Pieces("") == Pieces{});
  // Contractions: lower-case only, no boundary needed.
  CHECK(SplitGpt2Pieces("it's I'M 'sa") == Pieces{"it", "'s", " I", "'", "M", " '", "sa"});
}

TEST_CASE("BPE merges by rank, every occurrence of the best pair per pass", "[worker][tokenizer]") {
  TempDir dir;
  // ids: bytes 0..255, then ab=256, bc=257, abc=258, aba=259, xy=260
  const std::string vocab = WriteSmallVocab(dir, {"ab", "bc", "abc", "aba", "xy"});
  SECTION("the lower rank wins, whatever the position") {
    const std::string merges = WriteMerges(dir, {{"b", "c"}, {"a", "b"}, {"a", "bc"}});
    auto tok = Gpt2Tokenizer::Load(vocab, merges);
    REQUIRE(tok.ok());
    CHECK(tok->Encode("abc") == std::vector<int32_t>{258});  // (b,c) first, then (a,bc)
    CHECK(tok->Encode("abab") == std::vector<int32_t>{256, 256});
    CHECK(tok->Encode("cab") == std::vector<int32_t>{'c', 256});
    CHECK(tok->eos_id() == -1);
    CHECK(tok->vocab_size() == 261);
  }
  SECTION("a pass merges all occurrences before a pair it created is considered") {
    // (ab, a) has a lower rank than (a, b), which creates it. The reference merges both (a, b)
    // of "abab" in one pass, after which (ab, ab) has no rank: [ab, ab], not [aba, b].
    const std::string merges = WriteMerges(dir, {{"ab", "a"}, {"a", "b"}});
    auto tok = Gpt2Tokenizer::Load(vocab, merges);
    REQUIRE(tok.ok());
    CHECK(tok->Encode("abab") == std::vector<int32_t>{256, 256});
    // A later pass does see it: "aba" -> [ab, a] -> [aba].
    CHECK(tok->Encode("aba") == std::vector<int32_t>{259});
  }
  SECTION("overlapping occurrences merge left to right") {
    const std::string merges = WriteMerges(dir, {{"x", "y"}});
    auto tok = Gpt2Tokenizer::Load(vocab, merges);
    REQUIRE(tok.ok());
    CHECK(tok->Encode("xyxyy") == std::vector<int32_t>{260, 260, 'y'});
  }
}

TEST_CASE("Decode skips ids outside the vocabulary", "[worker][tokenizer]") {
  const std::vector<int32_t> hello = Gpt2().Encode("hello");
  std::vector<int32_t> ids = {-1, 50257, 1 << 30};
  ids.insert(ids.end(), hello.begin(), hello.end());
  CHECK(Gpt2().Decode(ids) == "hello");
}

TEST_CASE("Tokenizer errors name the file and the line or entry", "[worker][tokenizer]") {
  TempDir dir;
  const std::string good_vocab = WriteSmallVocab(dir, {"ab"});
  const std::string good_merges = WriteMerges(dir, {{"a", "b"}});
  auto message = [](const common::Result<Gpt2Tokenizer>& r) {
    REQUIRE_FALSE(r.ok());
    return r.status().message();
  };
  using Catch::Matchers::Contains;

  SECTION("missing vocabulary") {
    auto r = Gpt2Tokenizer::Load(dir.File("missing/vocab.json"), good_merges);
    CHECK(r.status().code() == common::Code::kNotFound);
    CHECK_THAT(message(r),
               Contains(dir.File("missing/vocab.json")) && Contains("No such file or directory"));
  }
  SECTION("missing merges") {
    auto r = Gpt2Tokenizer::Load(good_vocab, dir.File("nope.txt"));
    CHECK(r.status().code() == common::Code::kNotFound);
    CHECK_THAT(message(r), Contains(dir.File("nope.txt")));
  }
  SECTION("vocabulary that is not JSON: line and column") {
    const std::string bad = dir.Write("bad.json", "{\n  \"a\": 1,\n  \"b\": ,\n}\n");
    CHECK_THAT(message(Gpt2Tokenizer::Load(bad, good_merges)),
               Contains(bad + ":3:") && Contains("invalid JSON"));
  }
  SECTION("vocabulary entry with a bad id") {
    const std::string bad = dir.Write("bad.json", "{\"a\": 1, \"hello\": \"seven\"}");
    CHECK_THAT(message(Gpt2Tokenizer::Load(bad, good_merges)),
               Contains(bad) && Contains("\"hello\"") && Contains("\"seven\""));
  }
  SECTION("vocabulary entry outside the byte alphabet") {
    const std::string bad = dir.Write("bad.json", "{\"a\": 0, \"tab\\there\": 1}");
    CHECK_THAT(message(Gpt2Tokenizer::Load(bad, good_merges)), Contains(bad) && Contains("U+0009"));
  }
  SECTION("two entries with one id") {
    const std::string bad = dir.Write("bad.json", "{\"a\": 0, \"b\": 0}");
    CHECK_THAT(message(Gpt2Tokenizer::Load(bad, good_merges)),
               Contains(bad) && Contains("\"a\"") && Contains("\"b\"") && Contains("id 0"));
  }
  SECTION("vocabulary without every byte") {
    const std::string bad = dir.Write("bad.json", "{\"a\": 0, \"b\": 1}");
    CHECK_THAT(message(Gpt2Tokenizer::Load(bad, good_merges)),
               Contains(bad) && Contains("byte 0x00"));
  }
  SECTION("an id past the vocabulary's bound (the tables are sized by the largest id)") {
    // Accepted before, and then the tables asked for 2^31 entries (tens of GB) for one token.
    for (const char* id : {"2147483646", "4194304"}) {
      const std::string bad =
          dir.Write("huge-id.json", std::string("{\"a\": 0, \"hello\": ") + id + "}");
      CHECK_THAT(message(Gpt2Tokenizer::Load(bad, good_merges)),
                 Contains(bad +
                          ": entry \"hello\": the id must be an integer from 0 to 4194303, "
                          "got " +
                          id));
    }
  }
  SECTION("a token longer than 1024 bytes") {
    json::object vocab = json::parse(ReadFile(good_vocab)).as_object();
    vocab[std::string(1025, 'a')] = 300;
    const std::string bad = dir.Write("long.json", json::serialize(vocab));
    CHECK_THAT(message(Gpt2Tokenizer::Load(bad, good_merges)),
               Contains(bad) && Contains("the token is 1025 bytes long; expected at most 1024"));
    vocab.erase(std::string(1025, 'a'));
    vocab[std::string(1024, 'a')] = 300;  // at the bound: fine
    const std::string ok = dir.Write("ok.json", json::serialize(vocab));
    CHECK(Gpt2Tokenizer::Load(ok, good_merges).ok());
  }
  SECTION("malformed merges line") {
    const std::string bad = dir.Write("merges.txt", "#version: 0.2\na b\nab\n");
    CHECK_THAT(message(Gpt2Tokenizer::Load(good_vocab, bad)),
               Contains(bad + ":3:") && Contains("\"ab\""));
    const std::string three = dir.Write("merges3.txt", "#version: 0.2\na b c\n");
    CHECK_THAT(message(Gpt2Tokenizer::Load(good_vocab, three)),
               Contains(three + ":2:") && Contains("\"a b c\""));
  }
  SECTION("merge producing a token absent from the vocabulary") {
    const std::string bad = dir.Write("merges.txt", "#version: 0.2\na b\n\nb c\n");
    CHECK_THAT(message(Gpt2Tokenizer::Load(good_vocab, bad)),
               Contains(bad + ":4:") && Contains("\"bc\"") && Contains(good_vocab));
  }
  SECTION("merge of a token absent from the vocabulary") {
    const std::string bad = dir.Write("merges.txt", "#version: 0.2\na b\nxy z\n");
    CHECK_THAT(message(Gpt2Tokenizer::Load(good_vocab, bad)),
               Contains(bad + ":3:") && Contains("\"xy\""));
  }
}

TEST_CASE("Encode gives the same ids from several threads at once", "[worker][tokenizer]") {
  const auto& cases = ReferenceCases();
  // A fresh tokenizer, so that the threads fill its cache concurrently.
  auto loaded = Gpt2Tokenizer::Load(VocabPath(), MergesPath());
  REQUIRE(loaded.ok());
  const Gpt2Tokenizer tokenizer = std::move(loaded).value();
  constexpr int kThreads = 4;
  std::vector<std::vector<std::vector<int32_t>>> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread walks the cases in a different order.
      for (size_t k = 0; k < cases.size(); ++k) {
        results[t].push_back(tokenizer.Encode(cases[(k * (t + 1)) % cases.size()].text));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    for (size_t k = 0; k < cases.size(); ++k) {
      INFO("thread " << t << " case " << cases[(k * (t + 1)) % cases.size()].name);
      CHECK(results[t][k] == cases[(k * (t + 1)) % cases.size()].ids);
    }
  }
}

TEST_CASE("Tokenizer speed (printed, not asserted)", "[worker][tokenizer]") {
  // The training corpus once through a fresh tokenizer (every distinct piece goes through BPE),
  // then repeated to a few MB (pieces mostly come from the cache, the usual case when a worker
  // tokenizes a corpus of natural text), then decoded.
  const std::string corpus = ReadFile(testing::TinyCorpusDir() + "/train.txt");
  std::string text;
  while (text.size() < (4u << 20)) text += corpus;
  auto loaded = Gpt2Tokenizer::Load(VocabPath(), MergesPath());
  REQUIRE(loaded.ok());
  const Gpt2Tokenizer tokenizer = std::move(loaded).value();

  using Clock = std::chrono::steady_clock;
  auto mb_per_s = [](size_t bytes, Clock::duration d) {
    return static_cast<double>(bytes) / 1e6 / std::chrono::duration<double>(d).count();
  };
  const auto t0 = Clock::now();
  const std::vector<int32_t> first = tokenizer.Encode(corpus);
  const auto t1 = Clock::now();
  const std::vector<int32_t> ids = tokenizer.Encode(text);
  const auto t2 = Clock::now();
  const std::string decoded = tokenizer.Decode(ids);
  const auto t3 = Clock::now();
  std::printf(
      "tokenizer speed: encode %.1f MB/s (%zu KB corpus, fresh tokenizer), %.1f MB/s (%.1f MB, "
      "%zu tokens, cached pieces); decode %.1f MB/s\n",
      mb_per_s(corpus.size(), t1 - t0), corpus.size() / 1024, mb_per_s(text.size(), t2 - t1),
      static_cast<double>(text.size()) / 1e6, ids.size(), mb_per_s(text.size(), t3 - t2));
  // The repeated text's ids are the corpus's ids repeated: the cache changes nothing.
  REQUIRE(ids.size() >= first.size());
  CHECK(std::vector<int32_t>(ids.begin(), ids.begin() + first.size()) == first);
  CHECK(decoded == text);
}

TEST_CASE("Load reads the tiny checkpoint's files", "[worker][tokenizer]") {
  // The F16 and BF16 checkpoints carry the same tokenizer files as the F32 one.
  for (const char* folder : {"tiny-gpt2-f16", "tiny-gpt2-bf16"}) {
    INFO(folder);
    auto r = Gpt2Tokenizer::Load(FixtureDir() + "/" + folder + "/vocab.json",
                                 FixtureDir() + "/" + folder + "/merges.txt");
    REQUIRE(r.ok());
    CHECK(r->Encode("Hello world") == Gpt2().Encode("Hello world"));
  }
}

}  // namespace
}  // namespace triald::worker
