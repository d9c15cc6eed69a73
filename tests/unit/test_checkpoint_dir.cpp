// Checkpoint commit protocol: visibility after commit, crash before commit (a real child
// process killed mid-save), replacing a tag, and error messages that name paths and errno.
#include "checkpoint/checkpoint_dir.h"
#include "core/error.h"

#include <catch2/catch.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

using namespace dscpp::ckpt;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/dscpp_ckpt_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { fs::remove_all(path); }
};

void put(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string get(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

// Saves `tag` with one file per (name, text) the way the engine does: stage, then commit.
void save(const std::string& dir, const std::string& tag, const std::string& name, const std::string& text) {
  std::string staging = checkpoint_staging_dir(dir, tag);
  put(staging + "/" + name, text);
  commit_checkpoint(dir, tag);
}

}  // namespace

TEST_CASE("a latest that names a path outside the save directory is refused") {
  TempDir t;
  const std::string dir = t.path + "/run";
  save(dir, "global_step10", "f", "10");
  fs::create_directories(t.path + "/other/global_step100");
  for (const char* bad : {"../other/global_step100", "..", "/tmp", ".global_step10.partial"}) {
    CAPTURE(bad);
    put(dir + "/latest", bad);
    CHECK_THROWS_WITH(read_latest_tag(dir), Catch::Contains("refusing to load from outside the save directory"));
  }
  put(dir + "/latest", "global_step10\n");
  CHECK(read_latest_tag(dir) == std::optional<std::string>("global_step10"));
}

TEST_CASE("commit makes the tag visible and updates latest") {
  TempDir t;
  const std::string dir = t.path + "/ckpts/run1";  // created, parents included
  CHECK_FALSE(read_latest_tag(dir));
  std::string staging = checkpoint_staging_dir(dir, "global_step10");
  CHECK(staging == dir + "/.global_step10.partial");
  CHECK(fs::is_directory(staging));
  CHECK(checkpoint_staging_dir(dir, "global_step10") == staging);  // every rank may call it
  fs::create_directories(staging + "/sub");
  put(staging + "/mp_rank_00_model_states.safetensors", "model");
  put(staging + "/sub/optim", "optim");
  CHECK_FALSE(read_latest_tag(dir));  // staged but not committed: invisible
  commit_checkpoint(dir, "global_step10");
  CHECK_FALSE(fs::exists(staging));
  CHECK(get(dir + "/global_step10/mp_rank_00_model_states.safetensors") == "model");
  CHECK(get(dir + "/global_step10/sub/optim") == "optim");
  CHECK(get(dir + "/latest") == "global_step10");  // DeepSpeed's format: the bare tag
  CHECK_FALSE(fs::exists(dir + "/latest.tmp"));
  CHECK(read_latest_tag(dir) == std::optional<std::string>("global_step10"));

  save(dir, "global_step20", "f", "20");
  CHECK(read_latest_tag(dir) == std::optional<std::string>("global_step20"));
  CHECK(fs::exists(dir + "/global_step10/sub/optim"));  // older tags stay
  CHECK(remove_stale_staging(dir).empty());
}

TEST_CASE("a save killed before commit leaves the previous checkpoint and latest untouched") {
  TempDir t;
  const std::string dir = t.path;
  save(dir, "step1", "weights", "old weights");
  for (int how : {0, 1}) {
    INFO((how == 0 ? "SIGKILL" : "_exit"));
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // Child: a rank that crashes halfway through writing its files.
      try {
        std::string staging = checkpoint_staging_dir(dir, "step2");
        put(staging + "/weights", "half writ");
      } catch (...) {
        ::_exit(4);  // never unwind into the test framework in the child
      }
      if (how == 0) ::raise(SIGKILL);
      ::_exit(3);
    }
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    if (how == 0)
      CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
    else
      CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 3));
    CHECK(read_latest_tag(dir) == std::optional<std::string>("step1"));
    CHECK(get(dir + "/step1/weights") == "old weights");
    CHECK_FALSE(fs::exists(dir + "/step2"));
    CHECK(fs::exists(dir + "/.step2.partial/weights"));
    auto removed = remove_stale_staging(dir);
    REQUIRE(removed.size() == 1);
    CHECK(removed[0] == dir + "/.step2.partial");
    CHECK_FALSE(fs::exists(dir + "/.step2.partial"));
    CHECK(fs::exists(dir + "/step1/weights"));
  }
  CHECK(remove_stale_staging(t.path + "/not_there").empty());
}

TEST_CASE("re-saving an existing tag replaces it completely") {
  TempDir t;
  save(t.path, "best", "a", "first");
  save(t.path, "other", "x", "x");
  save(t.path, "best", "b", "second");
  CHECK(get(t.path + "/best/b") == "second");
  CHECK_FALSE(fs::exists(t.path + "/best/a"));  // the old directory is gone, not merged
  CHECK(read_latest_tag(t.path) == std::optional<std::string>("best"));
  CHECK_FALSE(fs::exists(t.path + "/.best.partial"));
  CHECK_FALSE(fs::exists(t.path + "/.best.old"));
  CHECK(fs::exists(t.path + "/other/x"));
}

TEST_CASE("a tag moved aside by an interrupted replacement is restored") {
  TempDir t;
  fs::create_directories(t.path + "/.keep.old");
  put(t.path + "/.keep.old/w", "w");
  CHECK(remove_stale_staging(t.path).empty());  // restored, not removed
  CHECK(get(t.path + "/keep/w") == "w");
  fs::create_directories(t.path + "/.keep.old");  // the new one already took the name: garbage
  CHECK(remove_stale_staging(t.path) == std::vector<std::string>{t.path + "/.keep.old"});
  CHECK(get(t.path + "/keep/w") == "w");
}

TEST_CASE("latest errors and edge cases") {
  TempDir t;
  put(t.path + "/latest", "ghost\n");
  CHECK_THROWS_WITH(read_latest_tag(t.path), Catch::Contains(t.path + "/latest") &&
                                                 Catch::Contains(t.path + "/ghost") &&
                                                 Catch::Contains("does not exist"));
  fs::create_directories(t.path + "/ghost");
  CHECK(read_latest_tag(t.path) == std::optional<std::string>("ghost"));  // whitespace stripped
  put(t.path + "/latest", " \n");
  CHECK_THROWS_WITH(read_latest_tag(t.path), Catch::Contains("is empty"));
}

TEST_CASE("unusable save_dir or tag: errors name the path and the errno text") {
  TempDir t;
  put(t.path + "/file", "not a directory");
  const std::string bad = t.path + "/file/ckpts";
  // Root ignores permissions, so a path through a regular file provokes ENOTDIR.
  CHECK_THROWS_WITH(checkpoint_staging_dir(bad, "step1"),
                    Catch::Contains(t.path + "/file") && Catch::Contains("Not a directory"));
  CHECK_THROWS_WITH(read_latest_tag(bad), Catch::Contains(bad + "/latest") && Catch::Contains("Not a directory"));
  CHECK_THROWS_WITH(write_file_atomic(t.path + "/nodir/latest", "x"),
                    Catch::Contains(t.path + "/nodir/latest.tmp") && Catch::Contains("No such file or directory"));
  CHECK_THROWS_WITH(commit_checkpoint(t.path, "never_staged"), Catch::Contains(t.path + "/.never_staged.partial"));
  for (const char* tag : {"", "..", "a/b", "latest", ".hidden"})
    CHECK_THROWS_AS(checkpoint_staging_dir(t.path, tag), dscpp::Error);
  put(t.path + "/plainfile_tag", "x");
  checkpoint_staging_dir(t.path, "plainfile_tag");
  CHECK_THROWS_WITH(commit_checkpoint(t.path, "plainfile_tag"), Catch::Contains("is not a directory"));
}

TEST_CASE("write_file_atomic replaces contents") {
  TempDir t;
  write_file_atomic(t.path + "/f", "one");
  write_file_atomic(t.path + "/f", "two");
  CHECK(get(t.path + "/f") == "two");
  CHECK_FALSE(fs::exists(t.path + "/f.tmp"));
}
