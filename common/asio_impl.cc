// The one translation unit that compiles Boost.Asio (built with BOOST_ASIO_SEPARATE_COMPILATION
// so that every other file compiles faster).
#include <boost/asio/impl/src.hpp>
