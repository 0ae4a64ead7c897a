#pragma once
// Giving freed heap memory back to the system. glibc keeps freed blocks for reuse; after a burst
// of many small allocations (a large study's trials, a large reply) the daemon's RSS would stay
// at its peak. Called where such a burst has just been freed: a finished study leaving the
// scheduler, a large control reply written.
//
// Thread-safety: safe from any thread (malloc_trim locks the arenas).

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace triald::common {

inline void ReturnFreedMemory() {
#if defined(__GLIBC__)
  ::malloc_trim(0);
#endif
}

}  // namespace triald::common
