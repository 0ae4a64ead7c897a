#pragma once
// Includes Boost.Process v2 the way this project builds it: with std::filesystem (so that no
// compiled Boost.Filesystem is needed). Boost 1.81's v2 then forgets two includes of its own
// (boost::optional and the type traits), which are supplied here first.

// The order matters.
// clang-format off
#include <boost/optional.hpp>
#include <boost/type_traits.hpp>
#include <type_traits>

#include <boost/process/v2/default_launcher.hpp>
#include <boost/process/v2/process.hpp>
#include <boost/process/v2/stdio.hpp>
#include <boost/process/v2/posix/vfork_launcher.hpp>
// clang-format on
