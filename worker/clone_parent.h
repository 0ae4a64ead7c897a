#pragma once
// CloneParent: a fork whose child is the caller's parent's child, for the fork server (one copy
// of the server instead of two; proto/README.md, "One fork, step by step").
//
// A fork server is triald's child and a trial must be triald's child too (its reaper waits for
// it). fork() cannot give a child away, so a server used to fork a middle process that forked
// the trial and exited; clone(2) with CLONE_PARENT makes the trial triald's child directly. It
// is fork() with the raw system call, so it also does the two parts of glibc's child set-up a
// process that goes on running needs: the kernel writes the child's thread id into glibc's
// thread descriptor (CLONE_CHILD_SETTID at the field that `_thread_db_pthread_tid`, glibc's
// description for libthread_db, names), and the child registers the robust-futex list again,
// empty, at the address the caller registered. The C libraries' pthread_atfork handlers do not
// run: they repair what other threads held at a fork, and a fork server forks only while it
// has one thread and CUDA is not initialised (its safety check). The Python fork server does
// the same (proto/client/python/triald/_clone.py).
//
// Thread-safety: call from a process with one thread (the fork server's safety check).

#include <sys/types.h>

#include <cstddef>
#include <optional>
#include <string>

namespace triald::worker {

class CloneParent {
 public:
  // A CloneParent for this process, or nullopt with `*why` saying why it cannot have one (not
  // x86_64 or aarch64, not glibc, an unexpected thread descriptor): fork twice then.
  static std::optional<CloneParent> Probe(std::string* why);

  // Whether this thread holds no robust mutex (the child's list starts empty, as after fork).
  bool RobustListEmpty() const;

  // As fork(): 0 in the child, the child's pid in the caller, -1 with errno when clone failed.
  // EINVAL, ENOSYS or EPERM mean it never will here (Unsupported()).
  pid_t operator()() const;
  static bool Unsupported(int error);

 private:
  CloneParent(void* tid_field, void* robust_head, size_t robust_len)
      : tid_field_(tid_field), robust_head_(robust_head), robust_len_(robust_len) {}
  void* tid_field_;
  void* robust_head_;
  size_t robust_len_;
};

// Backs this process's private anonymous memory (the [heap] and unnamed writable private
// mappings, each from its first to its last whole huge page) with transparent huge pages where
// the kernel can: madvise(MADV_COLLAPSE), Linux 6.1, whatever the system's THP setting is. A fork
// then copies one page-table entry per huge page instead of 512, and a trial's exit drops them as
// fast. Call it before the first fork: the kernel does not collapse pages a child still shares.
// The mappings' flags are left alone (memory allocated later gets the pages it would have had);
// a kernel without it, or a range it cannot collapse, is not an error. Returns the bytes of
// anonymous memory in huge pages afterwards (the Python server does the same: _clone.py).
size_t CollapseToHugePages();

}  // namespace triald::worker
