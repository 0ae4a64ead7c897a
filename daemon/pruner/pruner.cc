#include "daemon/pruner/pruner.h"

namespace triald::pruner {

common::Result<std::unique_ptr<Pruner>> MakePruner(const config::PrunerConfig& config) {
  if (config.kind == "nop") return std::unique_ptr<Pruner>(new NopPruner());
  return common::InvalidArgument("pruner: unknown kind \"" + config.kind +
                                 "\"; expected one of: nop");
}

}  // namespace triald::pruner
