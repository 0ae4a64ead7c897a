#pragma once
// GPT-2's byte-level BPE tokenizer, giving exactly the ids of the reference implementation
// (OpenAI's encoder.py, and the npm package gpt-3-encoder the tests compare against):
//
//   1. The text is split into pieces by GPT-2's pattern
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      implemented as a hand-written scanner over UTF-8 (SplitGpt2Pieces), with the character
//      classes of worker/unicode_tables.h and JavaScript's \s. Bytes that are not part of valid
//      UTF-8 count as single "other" characters, so any byte string can be encoded.
//   2. Each piece's bytes are merged by BPE: repeatedly, every occurrence of the adjacent pair
//      with the lowest rank in merges.txt is merged, left to right, until no pair has a rank.
//   3. Each resulting token is looked up in vocab.json.
//
// vocab.json and merges.txt spell tokens through GPT-2's bytes_to_unicode table (byte 0x20 is
// "Ġ", ...); Load converts them back to bytes, so the tokenizer works on bytes throughout and
// Decode(Encode(s)) == s for every byte string s, valid UTF-8 or not.
//
// The files are those of any GPT-2-family checkpoint (Hugging Face vocab.json and merges.txt,
// or OpenAI's encoder.json and vocab.bpe). Load checks them: every one of the 256 bytes must be
// a token, every merge must join two tokens into a token of the vocabulary, ids are below 2^22
// (4194304; the tables are sized by the largest id) and tokens at most 1024 bytes long. Errors
// name the file and the line (merges) or entry (vocab). A piece longer than 1 GiB (a run of one
// character class) is encoded in 1 GiB chunks, where the reference would merge across them.
//
// Thread-safety: immutable after Load; const methods may be called from several threads at once
// (the BPE cache they share is guarded by a mutex). Copies share the tables and the cache.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace triald::worker {

class Gpt2Tokenizer {
 public:
  static common::Result<Gpt2Tokenizer> Load(const std::string& vocab_json_path,
                                            const std::string& merges_txt_path);

  std::vector<int32_t> Encode(std::string_view text) const;

  // The bytes of the tokens, concatenated. Ids outside the vocabulary (negative, >= vocab_size()
  // or a gap in vocab.json's ids) contribute nothing. The result is the bytes that were encoded,
  // so it may be invalid UTF-8 when a sequence of ids ends inside a multi-byte character.
  std::string Decode(const std::vector<int32_t>& ids) const;

  // One more than the largest id of vocab.json (50257 for GPT-2).
  int32_t vocab_size() const;
  // The id of "<|endoftext|>" (50256 in GPT-2's vocabulary); -1 if the vocabulary has none.
  // Encode never produces it from text: "<|endoftext|>" in a text is encoded as ordinary text,
  // as the reference does.
  int32_t eos_id() const;

 private:
  struct Tables;
  struct Cache;

  Gpt2Tokenizer(std::shared_ptr<const Tables> tables, std::shared_ptr<Cache> cache);

  // Appends the ids of one piece of the pre-tokenizer's output.
  void EncodePiece(std::string_view piece, std::vector<int32_t>* ids) const;

  std::shared_ptr<const Tables> tables_;
  std::shared_ptr<Cache> cache_;
};

// The pieces GPT-2's pre-tokenization pattern splits `text` into, in order; views into `text`.
// Their concatenation is `text`. Exposed for tests and for tools that show token boundaries.
std::vector<std::string_view> SplitGpt2Pieces(std::string_view text);

}  // namespace triald::worker
