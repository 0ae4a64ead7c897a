#pragma once
// Shared by the sampler tests (sampler_contract_test.cc, tpe_test.cc, dynamic_space_test.cc):
// builds a seeded sampler of a kind, failing the test case with the factory's message.

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "config/space.h"
#include "config/sweep.h"
#include "daemon/sampler/sampler.h"

namespace triald::testing {

inline std::unique_ptr<sampler::Sampler> MakeSeededSampler(const std::string& kind,
                                                           const config::SearchSpace& space,
                                                           uint64_t seed,
                                                           const config::TpeConfig& tpe = {}) {
  config::SamplerConfig config;
  config.kind = kind;
  config.seed = seed;
  config.seed_given = true;
  config.tpe = tpe;
  auto made = sampler::MakeSampler(config, space);
  INFO(made.status().message());
  REQUIRE(made.ok());
  return std::move(made).value();
}

}  // namespace triald::testing
