#include "daemon/sampler/nsga2_sampler.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <utility>

namespace triald::sampler {
namespace {

// The trial's values as the selection compares them; false when it has none to compare (not
// COMPLETE, or not one value per objective).
bool CompleteValues(const model::TrialRecord& t, const std::vector<config::Direction>& directions,
                    pareto::Point* point) {
  if (t.state != model::TrialState::kComplete || directions.empty()) return false;
  if (t.values.size() == directions.size()) {
    *point = pareto::Minimized(t.values, directions);
    return true;
  }
  // A single-objective trial stored with `value` only.
  if (t.values.empty() && t.value && directions.size() == 1) {
    *point = pareto::Minimized({*t.value}, directions);
    return true;
  }
  return false;
}

}  // namespace

common::Result<std::unique_ptr<Nsga2Sampler>> Nsga2Sampler::Create(
    uint64_t seed, const config::Nsga2Config& config) {
  if (config.population_size < 2) {
    return common::InvalidArgument(
        "sampler: population_size = " + std::to_string(config.population_size) +
        "; expected an integer >= 2 (a crossover needs two parents)");
  }
  auto check_probability = [](const char* name, double p) {
    if (p >= 0 && p <= 1) return common::Status::Ok();
    return common::InvalidArgument(std::string("sampler: ") + name + " = " + config::DoubleRepr(p) +
                                   "; expected a number in [0, 1]");
  };
  if (config.mutation_prob) {
    TRIALD_RETURN_IF_ERROR(check_probability("mutation_prob", *config.mutation_prob));
  }
  TRIALD_RETURN_IF_ERROR(check_probability("crossover_prob", config.crossover_prob));
  TRIALD_RETURN_IF_ERROR(check_probability("swapping_prob", config.swapping_prob));
  return std::unique_ptr<Nsga2Sampler>(new Nsga2Sampler(seed, config));
}

config::SearchSpace Nsga2Sampler::InferRelativeSearchSpace(const StudyView& study,
                                                           int trial_number) {
  config::SearchSpace space;
  if (study.trials == nullptr) return space;
  for (config::ParamSpec& p : IntersectionSearchSpace(*study.trials, trial_number)) {
    if (!SingleValued(p.dist)) space.push_back(std::move(p));
  }
  return space;
}

std::vector<Nsga2Sampler::Member> Nsga2Sampler::Complete(const StudyView& study,
                                                         int trial_number) const {
  std::vector<Member> members;
  if (study.trials == nullptr) return members;
  for (const model::TrialRecord& t : *study.trials) {
    if (t.number >= trial_number) continue;
    Member m;
    m.trial = &t;
    if (CompleteValues(t, study.directions, &m.point)) members.push_back(std::move(m));
  }
  std::stable_sort(members.begin(), members.end(), [](const Member& a, const Member& b) {
    return a.trial->number < b.trial->number;
  });
  return members;
}

std::vector<Nsga2Sampler::Member> Nsga2Sampler::SelectElite(std::vector<Member> population) const {
  const size_t size = static_cast<size_t>(config_.population_size);
  std::vector<pareto::Point> points;
  std::vector<std::vector<double>> constraints;
  for (const Member& m : population) {
    points.push_back(m.point);
    constraints.push_back(m.trial->constraints);
  }
  const std::vector<int> rank = pareto::NonDominatedRanks(points, constraints);
  const int max_rank = rank.empty() ? -1 : *std::max_element(rank.begin(), rank.end());
  std::vector<Member> elite;
  for (int r = 0; r <= max_rank && elite.size() < size; ++r) {
    std::vector<size_t> front;  // population order
    for (size_t i = 0; i < population.size(); ++i) {
      if (rank[i] == r) front.push_back(i);
    }
    if (elite.size() + front.size() > size) {
      // The front that overflows: the least crowded first (Optuna's _crowding_distance_sort).
      std::vector<pareto::Point> front_points;
      for (size_t i : front) front_points.push_back(points[i]);
      const std::vector<double> distance = pareto::CrowdingDistance(front_points);
      std::vector<size_t> order(front.size());
      std::iota(order.begin(), order.end(), size_t{0});
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return distance[a] > distance[b]; });
      std::vector<size_t> taken;
      for (size_t k = 0; k < order.size() && elite.size() + taken.size() < size; ++k) {
        taken.push_back(front[order[k]]);
      }
      front = std::move(taken);
    }
    for (size_t i : front) elite.push_back(std::move(population[i]));
  }
  return elite;
}

std::vector<Nsga2Sampler::Member> Nsga2Sampler::ParentMembers(const std::vector<Member>& members,
                                                              int* generation) {
  const size_t size = static_cast<size_t>(config_.population_size);
  const size_t blocks = members.size() / size;
  *generation = static_cast<int>(blocks);
  // Members by number, to turn cached elite numbers back into members.
  auto find = [&](int number) -> const Member& {
    auto it = std::lower_bound(members.begin(), members.end(), number,
                               [](const Member& m, int n) { return m.trial->number < n; });
    return *it;
  };
  std::vector<Member> parents;
  for (size_t g = 0; g < blocks; ++g) {
    const auto begin = members.begin() + static_cast<std::ptrdiff_t>(g * size);
    const auto end = begin + static_cast<std::ptrdiff_t>(size);
    CachedElite key;
    for (auto it = begin; it != end; ++it) {
      key.block.push_back(it->trial->number);
      key.points.push_back(it->point);
      key.constraints.push_back(it->trial->constraints);
    }
    // A cached elite is reused when its block is unchanged and so is every block before it
    // (the entries after a changed block were dropped below).
    if (g < cache_.size() && cache_[g].block == key.block && cache_[g].points == key.points &&
        cache_[g].constraints == key.constraints) {
      std::vector<Member> elite;
      for (int number : cache_[g].elite) elite.push_back(find(number));
      parents = std::move(elite);
      continue;
    }
    cache_.resize(g);
    std::vector<Member> population(begin, end);
    population.insert(population.end(), parents.begin(), parents.end());
    parents = SelectElite(std::move(population));
    for (const Member& m : parents) key.elite.push_back(m.trial->number);
    cache_.push_back(std::move(key));
  }
  return parents;
}

Nsga2Sampler::Parents Nsga2Sampler::ParentPopulation(const StudyView& study, int trial_number) {
  Parents out;
  const std::vector<Member> members = Complete(study, trial_number);
  for (const Member& m : ParentMembers(members, &out.generation)) {
    out.numbers.push_back(m.trial->number);
  }
  return out;
}

common::Result<config::ParamValues> Nsga2Sampler::SampleRelative(
    const StudyView& study, int trial_number, const config::SearchSpace& relative_space) {
  config::ParamValues child;
  if (relative_space.empty()) return child;
  const std::vector<Member> members = Complete(study, trial_number);
  int generation = 0;
  const std::vector<Member> parents = ParentMembers(members, &generation);
  if (generation == 0 || parents.empty()) return child;  // the first generation: uniform

  std::mt19937_64 rng = TrialRng(seed_, trial_number, "nsga2");
  auto tournament = [&](const std::vector<const Member*>& pool) -> const Member* {
    const Member* a = pool[UniformIndex(rng, pool.size())];
    const Member* b = pool[UniformIndex(rng, pool.size())];
    return pareto::ConstrainedDominates(a->point, a->trial->constraints, b->point,
                                        b->trial->constraints)
               ? a
               : b;
  };
  std::vector<const Member*> pool;
  for (const Member& m : parents) pool.push_back(&m);

  // The value each parameter takes from the chosen parent(s); a parent lacking the parameter
  // (or holding it with another distribution) leaves it to SampleIndependent.
  auto value_of = [](const Member* parent, const config::ParamSpec& p, double* v) {
    auto it = parent->trial->params.find(p.name);
    if (it == parent->trial->params.end() || it->second.dist != p.dist) return false;
    if (!p.dist.Contains(it->second.internal)) return false;
    *v = it->second.internal;
    return true;
  };
  std::vector<std::pair<const config::ParamSpec*, double>> genes;
  if (UniformUnit(rng) < config_.crossover_prob) {
    const Member* first = tournament(pool);
    std::vector<const Member*> rest;
    for (const Member* m : pool) {
      if (m != first) rest.push_back(m);
    }
    const Member* second = tournament(rest);
    for (const config::ParamSpec& p : relative_space) {
      const Member* from = UniformUnit(rng) >= config_.swapping_prob ? second : first;
      double v = 0;
      if (value_of(from, p, &v)) genes.emplace_back(&p, v);
    }
  } else {
    const Member* parent = pool[UniformIndex(rng, pool.size())];
    for (const config::ParamSpec& p : relative_space) {
      double v = 0;
      if (value_of(parent, p, &v)) genes.emplace_back(&p, v);
    }
  }

  const double mutation_prob = config_.mutation_prob
                                   ? *config_.mutation_prob
                                   : 1.0 / std::max<double>(1.0, static_cast<double>(genes.size()));
  for (const auto& [param, v] : genes) {
    if (UniformUnit(rng) >= mutation_prob) child[param->name] = v;
  }
  return child;
}

common::Result<double> Nsga2Sampler::SampleIndependent(const StudyView& study, int trial_number,
                                                       const config::ParamSpec& param) {
  return random_.SampleIndependent(study, trial_number, param);
}

}  // namespace triald::sampler
