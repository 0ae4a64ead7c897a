// The key reference of config/README.md ("Every key"), made from the tables' rows.

#include <algorithm>

#include "config/sweep/tables.h"

namespace triald::config::sweep {

namespace {

template <typename C>
void AddRows(const std::string& table, const std::vector<Key<C>>& keys, std::vector<KeyDoc>* out) {
  for (const Key<C>& k : keys) out->push_back(KeyDoc{table, k.name, "", k.doc});
}

// One line per (key, text); its kinds are those whose rows have it, "all" when every kind does.
template <typename C>
void AddKindRows(const std::string& table, const std::vector<Kind<C>>& kinds,
                 std::vector<KeyDoc>* out) {
  struct Group {
    std::string key;
    std::string doc;
    std::vector<const char*> kinds;
  };
  std::vector<Group> groups;
  for (const Kind<C>& kind : kinds) {
    for (const Key<C>& k : kind.keys) {
      auto g = std::find_if(groups.begin(), groups.end(),
                            [&](const Group& x) { return x.key == k.name && x.doc == k.doc; });
      if (g == groups.end()) {
        groups.push_back(Group{k.name, k.doc, {}});
        g = groups.end() - 1;
      }
      g->kinds.push_back(kind.name);
    }
  }
  for (const Group& g : groups) {
    out->push_back(
        KeyDoc{table, g.key, g.kinds.size() == kinds.size() ? "all" : JoinList(g.kinds), g.doc});
  }
}

std::string Cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::vector<KeyDoc> SweepKeyReference() {
  std::vector<KeyDoc> docs;
  AddRows("[study]", StudyKeys(), &docs);
  AddKindRows("[objective]", ObjectiveKinds(), &docs);
  AddKindRows("[space.NAME]", ParamTypes(), &docs);
  AddKindRows("[sampler]", SamplerKinds(), &docs);
  AddKindRows("[pruner]", PrunerKinds(), &docs);
  AddKindRows("[executor]", ExecutorKinds(), &docs);
  return docs;
}

std::string SweepKeyReferenceMarkdown() {
  std::string out =
      "| table | key | kinds (types) | value |\n"
      "|---|---|---|---|\n";
  for (const KeyDoc& d : SweepKeyReference()) {
    out +=
        "| `" + d.table + "` | `" + d.key + "` | " + Cell(d.kinds) + " | " + Cell(d.doc) + " |\n";
  }
  return out;
}

}  // namespace triald::config::sweep
