#pragma once
// Fuzz targets: the decoders of everything that crosses a process boundary or comes from a
// user, each checked for crashes (ASan/UBSan in the fuzz build) and for properties that must
// hold for every input:
//   report   proto::LineReader splitting a byte stream (small cap) and proto::ParseReportLine on
//            every line; an accepted line re-encodes (EncodeReportLine) to a line that parses
//            to the same message; a suggest's distribution is refused with a message or becomes
//            a valid config::Distribution (config::DistributionFromSuggest) whose stored JSON
//            reads back, and the answers (EncodeSuggestionAnswer, EncodeErrorAnswer) read back
//            with ParseAnswerLine.
//   control  proto::ParseRequest and ParseResponse; an accepted request re-encodes
//            (EncodeRequest) to one that parses to the same verb and arguments, and EncodeOk of
//            it parses back as the same result.
//   sweep    config::ParseSweep of the input as TOML text; an accepted sweep has valid
//            distributions that round-trip through their JSON, and an LM objective that
//            round-trips through LmObjectiveToJson / LmObjectiveFromJson.
// Each returns OK, or a Status naming the broken property. The libFuzzer drivers
// (fuzz_main.cc) abort on a non-OK Status; the Catch2 replay (regression_test.cc) reports it.
//
// Thread-safety: pure functions.

#include <string_view>

#include "common/status.h"

namespace triald::fuzz {

common::Status CheckReportStream(std::string_view input);
common::Status CheckControlRequest(std::string_view input);
common::Status CheckSweep(std::string_view input);

}  // namespace triald::fuzz
