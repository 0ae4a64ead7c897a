// The one translation unit that compiles Boost.Asio and Boost.Process v2 (both are built with
// *_SEPARATE_COMPILATION so that every other file compiles faster).
#include <boost/asio/impl/src.hpp>

#include "common/boost_process.h"
#include <boost/process/v2/src.hpp>
