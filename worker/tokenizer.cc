#include "worker/tokenizer.h"

#include <algorithm>
#include <array>
#include <boost/json/parser.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "common/utf8.h"
#include "worker/unicode_tables.h"

namespace triald::worker {
namespace {

using unicode::CharClass;

constexpr std::string_view kEndOfText = "<|endoftext|>";

// Pieces longer than this are not cached: long pieces are rare (runs of one class without a
// space) and caching them would let one odd document fill the cache.
constexpr size_t kMaxCachedPieceBytes = 64;
// The cache is emptied when it holds this many pieces, which bounds its memory (a few MB)
// whatever the worker tokenizes; natural text needs far fewer distinct pieces to hit often.
constexpr size_t kMaxCacheEntries = 1 << 17;
// Scratch space of BPE kept per thread between pieces, in symbols (bytes of a piece).
constexpr size_t kMaxKeptScratch = 1 << 16;
// Bounds on what vocab.json and merges.txt may hold (tokenizer.h): the tables are sized by the
// largest id, so one entry with id 2^31 - 2 would otherwise ask for tens of GB.
constexpr int64_t kMaxVocabularySize = int64_t{1} << 22;
constexpr size_t kMaxTokenBytes = 1024;
// BPE indexes a piece's bytes with int32_t: a longer piece is encoded in chunks of this many
// bytes, each on its own (only a run of over a GiB of one character class is ever that long).
constexpr size_t kMaxBpePieceBytes = size_t{1} << 30;

// ---------------------------------------------------------------------------------------------
// UTF-8 and character classes

CharClass ClassifyNonAscii(char32_t cp) {
  const auto* begin = unicode::kClassRanges;
  const auto* end = begin + unicode::kClassRangeCount;
  // The last range starting at or before cp.
  const auto* it = std::upper_bound(
      begin, end, cp, [](char32_t value, const unicode::ClassRange& r) { return value < r.first; });
  if (it == begin) return CharClass::kOther;
  --it;
  return cp <= it->last ? it->char_class : CharClass::kOther;
}

// ASCII is most of most texts; a table saves the binary search.
std::array<CharClass, 128> MakeAsciiClasses() {
  std::array<CharClass, 128> classes{};
  for (char32_t c = 0; c < 128; ++c) {
    classes[c] = ClassifyNonAscii(c);  // the ranges cover ASCII too
  }
  return classes;
}

struct Char {
  CharClass char_class;
  size_t length;  // bytes
};

// The character at text[i] (i < text.size()). A byte that does not start well-formed UTF-8 is
// a character of its own, of class "other".
// Initialised after kClassRanges, which is constant-initialised.
const std::array<CharClass, 128> kAsciiClasses = MakeAsciiClasses();

inline Char CharAt(std::string_view text, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + i;
  if (*p < 0x80) return {kAsciiClasses[*p], 1};
  char32_t cp = 0;
  const size_t length = common::DecodeUtf8(text, i, &cp);
  if (length == 0) return {CharClass::kOther, 1};
  return {ClassifyNonAscii(cp), length};
}

// GPT-2's pattern, alternative by alternative, with the regex engine's rule that the first
// alternative matching at a position wins:
//   's|'t|'re|'ve|'m|'ll|'d | ?\p{L}+ | ?\p{N}+ | ?[^\s\p{L}\p{N}]+ | \s+(?!\S) | \s+
// The three classes and "other" partition all characters, so every position matches something
// and the pieces cover the text. Not thread-safe: one scanner per text, on one thread.
class PieceScanner {
 public:
  explicit PieceScanner(std::string_view text) : text_(text) {}

  bool Next(std::string_view* piece) {
    const size_t n = text_.size();
    const size_t start = pos_;
    if (start >= n) return false;
    pos_ = End(start);
    *piece = text_.substr(start, pos_ - start);
    return true;
  }

 private:
  // Where the piece starting at i (< size) ends.
  size_t End(size_t i) const {
    const size_t n = text_.size();
    if (text_[i] == '\'') {
      static constexpr std::string_view kSuffixes[] = {"s", "t", "re", "ve", "m", "ll", "d"};
      const std::string_view rest = text_.substr(i + 1);
      for (std::string_view suffix : kSuffixes) {
        if (rest.substr(0, suffix.size()) == suffix) return i + 1 + suffix.size();
      }
    }
    // " ?X+" for X in letters, numbers, other: the optional space is U+0020 only.
    if (text_[i] == ' ' && i + 1 < n) {
      const Char next = CharAt(text_, i + 1);
      if (next.char_class != CharClass::kWhitespace) {
        return RunEnd(i + 1 + next.length, next.char_class);
      }
    }
    const Char first = CharAt(text_, i);
    if (first.char_class != CharClass::kWhitespace) {
      return RunEnd(i + first.length, first.char_class);
    }
    // \s+(?!\S): the whitespace run, less its last character when a non-space follows it
    // (that character then joins the next piece, e.g. " word"); \s+ when that leaves nothing.
    size_t last_start = i;
    size_t end = i + first.length;
    while (end < n) {
      const Char c = CharAt(text_, end);
      if (c.char_class != CharClass::kWhitespace) break;
      last_start = end;
      end += c.length;
    }
    if (end == n) return n;
    return last_start > i ? last_start : end;
  }

  // The end of the run of characters of class `c` continuing at j.
  size_t RunEnd(size_t j, CharClass c) const {
    while (j < text_.size()) {
      const Char next = CharAt(text_, j);
      if (next.char_class != c) break;
      j += next.length;
    }
    return j;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------------------------------------
// GPT-2's byte alphabet

// bytes_to_unicode() of GPT-2's encoder.py: printable Latin-1 bytes stand for themselves, the
// other 68 bytes (controls, space, DEL, NBSP, soft hyphen) for U+0100.. in byte order, so that
// vocab.json and merges.txt spell every token in visible characters ("Ġ" is the space).
// Immutable once built (see Alphabet()), so any thread may read it.
struct ByteAlphabet {
  std::array<char32_t, 256> symbol_of_byte{};
  std::unordered_map<char32_t, uint8_t> byte_of_symbol;

  ByteAlphabet() {
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      symbol_of_byte[b] = printable(b) ? static_cast<char32_t>(b) : next++;
      byte_of_symbol[symbol_of_byte[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteAlphabet& Alphabet() {
  static const ByteAlphabet kAlphabet;
  return kAlphabet;
}

std::string CodePointName(char32_t cp) {
  char buffer[16];
  std::snprintf(buffer, sizeof(buffer), "U+%04X", static_cast<unsigned>(cp));
  return buffer;
}

// Bytes of a token spelled in the byte alphabet, or an error naming the offending character.
common::Result<std::string> SpelledToBytes(std::string_view spelled) {
  std::string bytes;
  bytes.reserve(spelled.size());
  size_t i = 0;
  while (i < spelled.size()) {
    char32_t cp = 0;
    const size_t length = common::DecodeUtf8(spelled, i, &cp);
    if (length == 0) {
      return common::InvalidArgument("it is not valid UTF-8 (byte " + std::to_string(i) + ")");
    }
    const auto& table = Alphabet().byte_of_symbol;
    auto it = table.find(cp);
    if (it == table.end()) {
      return common::InvalidArgument("character " + CodePointName(cp) +
                                     " is not one of the 256 symbols of GPT-2's byte alphabet");
    }
    bytes.push_back(static_cast<char>(it->second));
    i += length;
  }
  return bytes;
}

// A token as the files spell it, quoted, shortened for error messages.
std::string Quote(std::string_view spelled) {
  constexpr size_t kMax = 60;
  std::string out = "\"";
  out.append(spelled.substr(0, kMax));
  if (spelled.size() > kMax) out += "...";
  out += "\"";
  return out;
}

// ---------------------------------------------------------------------------------------------
// Files

common::Result<std::string> ReadFile(const std::string& path, const char* what) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int err = errno;
    common::Status status =
        common::ErrnoError(std::string("cannot open ") + what + " " + path, err);
    if (err == ENOENT) return common::NotFound(status.message());
    return status;
  }
  std::string data;
  char buffer[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) data.append(buffer, n);
  const bool failed = std::ferror(file) != 0;
  const int err = errno;
  std::fclose(file);
  if (failed) return common::ErrnoError(std::string("cannot read ") + what + " " + path, err);
  return data;
}

// "line:column" (1-based) of byte `offset` of `text`.
std::string LineColumn(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  const std::string_view before = text.substr(0, offset);
  const size_t line = 1 + static_cast<size_t>(std::count(before.begin(), before.end(), '\n'));
  const size_t last_newline = before.rfind('\n');
  const size_t column = last_newline == std::string_view::npos ? offset + 1 : offset - last_newline;
  return std::to_string(line) + ":" + std::to_string(column);
}

uint64_t PairKey(int32_t left, int32_t right) {
  return static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
}

// vocab.json, with tokens as bytes.
struct Vocabulary {
  std::vector<std::string> tokens;  // by id; empty for ids no entry has
  std::unordered_map<std::string, int32_t> ids_by_token;
};

// vocab.json: {"token": id, ...}, tokens spelled in the byte alphabet, ids distinct and below
// 2^31 - 1; every single byte must be a token.
common::Result<Vocabulary> ReadVocabulary(const std::string& path) {
  TRIALD_ASSIGN_OR_RETURN(const std::string text, ReadFile(path, "vocabulary"));
  boost::json::parser parser;
  boost::json::error_code ec;
  // On error, the count is the offset where parsing stopped.
  const size_t consumed = parser.write(text.data(), text.size(), ec);
  if (ec) {
    return common::InvalidArgument(path + ":" + LineColumn(text, consumed) +
                                   ": invalid JSON: " + ec.message());
  }
  const boost::json::value document = parser.release();
  if (!document.is_object()) {
    return common::InvalidArgument(path + ": expected a JSON object mapping tokens to ids");
  }
  const boost::json::object& entries = document.as_object();
  Vocabulary vocab;
  std::vector<std::string_view> spelled_by_id;  // empty: no entry has the id
  vocab.ids_by_token.reserve(entries.size());
  for (const auto& entry : entries) {
    const std::string_view spelled(entry.key().data(), entry.key().size());
    const std::string where = path + ": entry " + Quote(spelled) + ": ";
    const boost::json::value& value = entry.value();
    constexpr int64_t kMaxId = kMaxVocabularySize - 1;
    const bool is_id = (value.is_int64() && value.as_int64() >= 0 && value.as_int64() <= kMaxId) ||
                       (value.is_uint64() && value.as_uint64() <= static_cast<uint64_t>(kMaxId));
    if (!is_id) {
      return common::InvalidArgument(where + "the id must be an integer from 0 to " +
                                     std::to_string(kMaxId) + ", got " +
                                     boost::json::serialize(value));
    }
    const auto id = static_cast<int32_t>(value.is_int64() ? value.as_int64() : value.as_uint64());
    if (spelled.empty()) return common::InvalidArgument(where + "the token is empty");
    common::Result<std::string> bytes = SpelledToBytes(spelled);
    if (!bytes.ok()) return common::InvalidArgument(where + bytes.status().message());
    if (bytes->size() > kMaxTokenBytes) {
      return common::InvalidArgument(where + "the token is " + std::to_string(bytes->size()) +
                                     " bytes long; expected at most " +
                                     std::to_string(kMaxTokenBytes));
    }
    if (static_cast<size_t>(id) >= spelled_by_id.size()) spelled_by_id.resize(id + 1);
    if (!spelled_by_id[id].empty()) {
      return common::InvalidArgument(where + "id " + std::to_string(id) +
                                     " is already the id of entry " + Quote(spelled_by_id[id]));
    }
    spelled_by_id[id] = spelled;
    // Distinct keys are distinct byte strings: the alphabet is a bijection.
    vocab.ids_by_token.emplace(std::move(bytes).value(), id);
  }
  vocab.tokens.resize(spelled_by_id.size());
  for (const auto& [bytes, id] : vocab.ids_by_token) vocab.tokens[id] = bytes;
  for (int b = 0; b < 256; ++b) {
    if (vocab.ids_by_token.count(std::string(1, static_cast<char>(b))) != 0) continue;
    const char32_t cp = Alphabet().symbol_of_byte[b];  // below U+0800: one or two UTF-8 bytes
    std::string spelled;
    if (cp < 0x80) {
      spelled.push_back(static_cast<char>(cp));
    } else {
      spelled.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      spelled.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    char byte_name[8];
    std::snprintf(byte_name, sizeof(byte_name), "0x%02X", b);
    return common::InvalidArgument(
        path + ": no entry for byte " + byte_name + " (spelled " + Quote(spelled) +
        "); a byte-level vocabulary needs all 256 bytes so that every text can be encoded");
  }
  return vocab;
}

struct MergeRule {
  int32_t rank;
  int32_t merged_id;
};

// merges.txt: an optional "#version" first line, then one "left right" merge per line, best
// first. Both parts and their concatenation must be tokens of `vocab`.
common::Result<std::unordered_map<uint64_t, MergeRule>> ReadMerges(const std::string& path,
                                                                   const std::string& vocab_path,
                                                                   const Vocabulary& vocab) {
  TRIALD_ASSIGN_OR_RETURN(const std::string text, ReadFile(path, "merges file"));
  std::unordered_map<uint64_t, MergeRule> merges;
  int32_t rank = 0;
  size_t line_start = 0;
  for (size_t line_number = 1; line_start < text.size(); ++line_number) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string::npos) line_end = text.size();
    std::string_view line(text.data() + line_start, line_end - line_start);
    line_start = line_end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_number == 1 && line.substr(0, 8) == "#version") continue;
    const std::string where = path + ":" + std::to_string(line_number) + ": ";
    // Fields separated by spaces or tabs, as Python's str.split() in the reference reads them.
    std::vector<std::string_view> fields;
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
      const size_t begin = i;
      while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
      if (i > begin) fields.push_back(line.substr(begin, i - begin));
    }
    if (fields.empty()) continue;  // blank lines (the final newline) carry no merge
    if (fields.size() != 2) {
      return common::InvalidArgument(where + "expected two tokens separated by a space, got " +
                                     Quote(line));
    }
    int32_t part_ids[2];
    for (int k = 0; k < 2; ++k) {
      common::Result<std::string> bytes = SpelledToBytes(fields[k]);
      if (!bytes.ok()) {
        return common::InvalidArgument(where + "token " + Quote(fields[k]) + ": " +
                                       bytes.status().message());
      }
      auto it = vocab.ids_by_token.find(*bytes);
      if (it == vocab.ids_by_token.end()) {
        return common::InvalidArgument(where + "token " + Quote(fields[k]) +
                                       " is not in the vocabulary " + vocab_path);
      }
      part_ids[k] = it->second;
    }
    auto it = vocab.ids_by_token.find(vocab.tokens[part_ids[0]] + vocab.tokens[part_ids[1]]);
    if (it == vocab.ids_by_token.end()) {
      return common::InvalidArgument(where + "merging " + Quote(fields[0]) + " and " +
                                     Quote(fields[1]) + " gives " +
                                     Quote(std::string(fields[0]) + std::string(fields[1])) +
                                     ", which is not in the vocabulary " + vocab_path);
    }
    // A pair listed twice keeps its last rank, as the reference's dict(zip(merges, ranks)) does.
    if (rank == std::numeric_limits<int32_t>::max()) {
      return common::InvalidArgument(where + "more than " + std::to_string(rank) +
                                     " merges; ranks are 32-bit");
    }
    merges[PairKey(part_ids[0], part_ids[1])] = MergeRule{rank, it->second};
    ++rank;
  }
  return merges;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct Gpt2Tokenizer::Tables {
  std::array<int32_t, 256> byte_ids{};
  std::vector<std::string> tokens;                 // bytes of each id; empty for unused ids
  std::unordered_map<uint64_t, MergeRule> merges;  // PairKey(left id, right id) -> merge
  int32_t eos_id = -1;
};

struct Gpt2Tokenizer::Cache {
  std::mutex mutex;
  std::unordered_map<std::string, std::vector<int32_t>> ids_by_piece;  // guarded by mutex
};

Gpt2Tokenizer::Gpt2Tokenizer(std::shared_ptr<const Tables> tables, std::shared_ptr<Cache> cache)
    : tables_(std::move(tables)), cache_(std::move(cache)) {}

common::Result<Gpt2Tokenizer> Gpt2Tokenizer::Load(const std::string& vocab_json_path,
                                                  const std::string& merges_txt_path) {
  TRIALD_ASSIGN_OR_RETURN(Vocabulary vocab, ReadVocabulary(vocab_json_path));
  auto tables = std::make_shared<Tables>();
  TRIALD_ASSIGN_OR_RETURN(tables->merges, ReadMerges(merges_txt_path, vocab_json_path, vocab));
  for (int b = 0; b < 256; ++b) {
    tables->byte_ids[b] = vocab.ids_by_token.at(std::string(1, static_cast<char>(b)));
  }
  if (auto it = vocab.ids_by_token.find(std::string(kEndOfText)); it != vocab.ids_by_token.end()) {
    tables->eos_id = it->second;
  }
  tables->tokens = std::move(vocab.tokens);
  return Gpt2Tokenizer(std::move(tables), std::make_shared<Cache>());
}

std::vector<int32_t> Gpt2Tokenizer::Encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  PieceScanner scanner(text);
  std::string_view piece;
  while (scanner.Next(&piece)) EncodePiece(piece, &ids);
  return ids;
}

void Gpt2Tokenizer::EncodePiece(std::string_view piece, std::vector<int32_t>* ids) const {
  while (piece.size() > kMaxBpePieceBytes) {
    EncodePiece(piece.substr(0, kMaxBpePieceBytes), ids);
    piece.remove_prefix(kMaxBpePieceBytes);
  }
  const Tables& t = *tables_;
  if (piece.size() == 1) {
    ids->push_back(t.byte_ids[static_cast<unsigned char>(piece[0])]);
    return;
  }
  const bool cacheable = piece.size() <= kMaxCachedPieceBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    auto it = cache_->ids_by_piece.find(std::string(piece));
    if (it != cache_->ids_by_piece.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }

  // BPE over a doubly linked list of symbols, one per byte to start with. The reference merges,
  // in one left-to-right pass, every occurrence of the lowest-ranked pair, then looks again. A
  // heap ordered by (rank, position) does the same in O(n log n) instead of O(n^2): all pending
  // candidates of the lowest rank are taken as one batch, in position order, and the pairs the
  // batch creates enter the heap only after it. (A merge can never recreate its own pair, since
  // the merged token is longer than either part.) A candidate is stale when its left symbol or
  // the symbol after it has changed since it was pushed: a symbol's id fixes its length, so
  // equal ids mean the same pair.
  struct Symbol {
    int32_t id;  // -1 once merged into the symbol before it
    int32_t next;
  };
  struct Candidate {
    int32_t rank;
    int32_t left;
    int32_t left_id;
    int32_t right_id;
    int32_t merged_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  const auto n = static_cast<int32_t>(piece.size());
  // Per-thread scratch space: most pieces are a few bytes, and allocating three vectors for
  // each would cost more than merging them.
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<int32_t> prev;
  thread_local std::vector<Candidate> heap;
  thread_local std::vector<int32_t> merged_at;
  symbols.resize(n);
  prev.resize(n);
  heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {t.byte_ids[static_cast<unsigned char>(piece[i])], i + 1 < n ? i + 1 : -1};
    prev[i] = i - 1;
  }
  auto push_pair = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    auto it = t.merges.find(PairKey(symbols[left].id, symbols[right].id));
    if (it == t.merges.end()) return;
    heap.push_back(
        {it->second.rank, left, symbols[left].id, symbols[right].id, it->second.merged_id});
    std::push_heap(heap.begin(), heap.end(), std::greater<>());
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const int32_t rank = heap.front().rank;
    merged_at.clear();
    while (!heap.empty() && heap.front().rank == rank) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      const Candidate c = heap.back();
      heap.pop_back();
      Symbol& left = symbols[c.left];
      if (left.id != c.left_id || left.next < 0 || symbols[left.next].id != c.right_id) continue;
      Symbol& right = symbols[left.next];
      left.id = c.merged_id;
      left.next = right.next;
      if (right.next >= 0) prev[right.next] = c.left;
      right.id = -1;
      merged_at.push_back(c.left);
    }
    for (int32_t at : merged_at) {
      if (symbols[at].id < 0) continue;
      if (prev[at] >= 0) push_pair(prev[at]);
      push_pair(at);
    }
  }

  const size_t first = ids->size();
  for (int32_t i = 0; i >= 0; i = symbols[i].next) ids->push_back(symbols[i].id);
  if (symbols.capacity() > kMaxKeptScratch) {  // one huge piece must not pin its memory
    symbols = {};
    prev = {};
    heap = {};
    merged_at = {};
  }
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    if (cache_->ids_by_piece.size() >= kMaxCacheEntries) cache_->ids_by_piece.clear();
    cache_->ids_by_piece.emplace(std::string(piece),
                                 std::vector<int32_t>(ids->begin() + first, ids->end()));
  }
}

std::string Gpt2Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string text;
  const auto& tokens = tables_->tokens;
  for (int32_t id : ids) {
    if (id >= 0 && static_cast<size_t>(id) < tokens.size()) text += tokens[id];
  }
  return text;
}

int32_t Gpt2Tokenizer::vocab_size() const { return static_cast<int32_t>(tables_->tokens.size()); }

int32_t Gpt2Tokenizer::eos_id() const { return tables_->eos_id; }

std::vector<std::string_view> SplitGpt2Pieces(std::string_view text) {
  std::vector<std::string_view> pieces;
  PieceScanner scanner(text);
  std::string_view piece;
  while (scanner.Next(&piece)) pieces.push_back(piece);
  return pieces;
}

}  // namespace triald::worker
