#include "core/job_secret.h"

#include "core/error.h"
#include "core/knobs.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace dscpp {
namespace {

// The file's contents, checked as ssh checks a private key: a secret others can read is no
// secret, and one others can write could be swapped for theirs.
std::string read_secret_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) fail("{}={}: cannot open it: {}", kJobSecretFileVar, path, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail("{}={}: cannot stat it: {}", kJobSecretFileVar, path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("{}={}: not a regular file", kJobSecretFileVar, path);
  if (st.st_uid != ::geteuid())
    fail("{}={}: the file belongs to uid {}, not to this user (uid {}); the job's secret must be the user's own",
         kJobSecretFileVar, path, st.st_uid, ::geteuid());
  if ((st.st_mode & 077) != 0)
    fail("{}={}: mode {:03o} lets its group or others {} it, so they could join the job; run chmod 600 {}",
         kJobSecretFileVar, path, st.st_mode & 0777, (st.st_mode & 044) != 0 ? "read" : "change", path);
  std::string text(4096, '\0');
  size_t got = 0;
  for (ssize_t n; got < text.size() && (n = ::read(fd, text.data() + got, text.size() - got)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("{}={}: cannot read it: {}", kJobSecretFileVar, path, std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  if (got == text.size()) fail("{}={}: longer than {} bytes; expected one line", kJobSecretFileVar, path, got);
  text.resize(got);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

void check_secret(const std::string& value, const std::string& source) {
  // The value itself is never shown: a message may end up in a log.
  if (value.size() < kMinJobSecretChars)
    fail("{}: the job secret has {} characters; expected at least {} (e.g. from `openssl rand -hex 32`)", source,
         value.size(), kMinJobSecretChars);
  bool printable = std::all_of(value.begin(), value.end(), [](char c) { return c > ' ' && c != 0x7f; });
  if (!printable)
    fail(
        "{}: the job secret holds spaces or control characters; expected one word (e.g. from `openssl rand -hex "
        "32`)",
        source);
}

}  // namespace

std::string make_job_secret() {
  unsigned char bytes[32];
  for (size_t got = 0; got < sizeof bytes;) {
    ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot make the job's secret: getrandom failed: {}", std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  std::string hex;
  for (unsigned char b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

std::optional<JobSecret> job_secret_from_env() {
  if (const char* v = knob(kJobSecretVar); v != nullptr) {
    JobSecret s{v, kJobSecretVar};
    check_secret(s.value, s.source);
    return s;
  }
  const char* path = knob(kJobSecretFileVar);
  if (path == nullptr) return std::nullopt;
  if (*path == '\0') fail("{} is set but empty; expected the path of a file holding the job secret", kJobSecretFileVar);
  JobSecret s{read_secret_file(path), fmt::format("{} ({})", kJobSecretFileVar, path)};
  check_secret(s.value, s.source);
  return s;
}

bool insecure_store_from_env() {
  const char* v = knob(kInsecureStoreVar);
  if (v == nullptr || std::strcmp(v, "0") == 0 || *v == '\0') return false;
  if (std::strcmp(v, "1") == 0) return true;
  fail("{}='{}': expected 1 (run the rendezvous store without a job secret) or 0", kInsecureStoreVar, v);
}

std::string no_job_secret_message() {
  return fmt::format(
      "no job secret for the rendezvous store: ranks started by dscpp get one; ranks started by anything else "
      "(srun, mpirun, a script) need the same secret in {} or in a file named by {} (chmod 600), e.g. `export "
      "{}=$(openssl rand -hex 32)` before starting them. {}=1 runs without one, letting anyone who can reach "
      "MASTER_ADDR:MASTER_PORT join the job (docs/security.md)",
      kJobSecretVar, kJobSecretFileVar, kJobSecretVar, kInsecureStoreVar);
}

}  // namespace dscpp
