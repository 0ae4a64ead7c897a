// The one translation unit that compiles Boost.Asio and Boost.Process v2 (both are built with
// *_SEPARATE_COMPILATION so that every other file compiles faster).
#include <boost/asio/impl/src.hpp>

// boost_process.h must come first: it supplies includes Boost.Process v2 forgets.
#include "common/boost_process.h"
// clang-format off
#include <boost/process/v2/src.hpp>
// clang-format on
