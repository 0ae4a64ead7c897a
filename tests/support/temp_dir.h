#pragma once
// TempDir: a private directory under $TMPDIR for one test, removed with everything in it when
// the test ends (kept when TRIALD_TEST_KEEP is set, for post-mortems). Header-only, shared by
// every test executable.

#include <stdlib.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace triald::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "triald-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) FAIL("mkdtemp " << tmpl << " failed");
    path_ = tmpl;
  }
  ~TempDir() {
    if (std::getenv("TRIALD_TEST_KEEP") != nullptr) return;
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }
  // Writes a file and returns its path; mode 0755 for scripts.
  std::string Write(const std::string& name, const std::string& content, int mode = 0644) const {
    std::string p = File(name);
    std::ofstream(p) << content;
    ::chmod(p.c_str(), static_cast<mode_t>(mode));
    return p;
  }

 private:
  std::string path_;
};

}  // namespace triald::testing
