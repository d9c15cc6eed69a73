// Checking a server's host key against known_hosts. Kept apart from the login state machine
// because it is the one security decision of the SSH starter, and its messages (mismatch,
// revoked, unknown host, each with its remedy) deserve to be read on their own.
#include "core/error.h"
#include "launcher/ssh/ssh_internal.h"

#include <libssh2.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace dscpp::launcher::ssh_internal {
namespace {

std::string base64(const unsigned char* data, size_t size) {  // unpadded, as OpenSSH prints SHA256 fingerprints
  static const char* digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < size; i += 3) {
    uint32_t v = data[i] << 16 | (i + 1 < size ? data[i + 1] << 8 : 0) | (i + 2 < size ? data[i + 2] : 0);
    for (size_t k = 0; k < std::min<size_t>(4, size - i + 1); ++k) out += digits[(v >> (18 - 6 * k)) & 63];
  }
  return out;
}

struct KeyKind {
  int hostkey_type, knownhost_type;
  const char *name, *keyscan;
};
const KeyKind kKeyKinds[] = {
    {LIBSSH2_HOSTKEY_TYPE_ED25519, LIBSSH2_KNOWNHOST_KEY_ED25519, "ssh-ed25519", "ed25519"},
    {LIBSSH2_HOSTKEY_TYPE_ECDSA_256, LIBSSH2_KNOWNHOST_KEY_ECDSA_256, "ecdsa-sha2-nistp256", "ecdsa"},
    {LIBSSH2_HOSTKEY_TYPE_ECDSA_384, LIBSSH2_KNOWNHOST_KEY_ECDSA_384, "ecdsa-sha2-nistp384", "ecdsa"},
    {LIBSSH2_HOSTKEY_TYPE_ECDSA_521, LIBSSH2_KNOWNHOST_KEY_ECDSA_521, "ecdsa-sha2-nistp521", "ecdsa"},
    {LIBSSH2_HOSTKEY_TYPE_RSA, LIBSSH2_KNOWNHOST_KEY_SSHRSA, "ssh-rsa", "rsa"},
    {LIBSSH2_HOSTKEY_TYPE_DSS, LIBSSH2_KNOWNHOST_KEY_SSHDSS, "ssh-dss", "dsa"},
};

}  // namespace

std::string check_host_key(LIBSSH2_SESSION* s, const SshTarget& target) {
  const std::string& host = target.host_name;
  const int port = target.port;
  size_t len = 0;
  int type = 0;
  const char* key = libssh2_session_hostkey(s, &len, &type);
  if (!key) return fmt::format("{}:{} sent no host key", host, port);
  const KeyKind* kind = std::find_if(std::begin(kKeyKinds), std::end(kKeyKinds),
                                     [&](const KeyKind& k) { return k.hostkey_type == type; });
  if (kind == std::end(kKeyKinds)) return fmt::format("{}:{} offered a host key of unknown type {}", host, port, type);
  const auto* hash = reinterpret_cast<const unsigned char*>(libssh2_hostkey_hash(s, LIBSSH2_HOSTKEY_HASH_SHA256));
  std::string offered = fmt::format("{} key SHA256:{}", kind->name, hash ? base64(hash, 32) : "?");
  std::string where = port == 22 ? host : fmt::format("[{}]:{}", host, port);
  std::vector<std::string> files = target.user_known_hosts;
  files.insert(files.end(), target.global_known_hosts.begin(), target.global_known_hosts.end());
  // New keys go to the first user file, as ssh would record them.
  std::string add_to = !target.user_known_hosts.empty() ? target.user_known_hosts.front()
                       : !files.empty()                 ? files.front()
                                                        : "~/.ssh/known_hosts";
  std::string add = fmt::format("ssh-keyscan{} -t {} {} >> {}", port == 22 ? "" : fmt::format(" -p {}", port),
                                kind->keyscan, host, add_to);
  const int plain = LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW;
  std::vector<std::string> read, unread, mismatched;
  bool other_type = false;  // the host is recorded, but only with keys of other types
  std::string unread_all;
  for (size_t f = 0; f < files.size(); ++f) {
    const std::string& file = files[f];
    std::ifstream in(file);
    if (!in) {
      std::string why = fmt::format("{} ({})", file, std::strerror(errno));
      // Files nobody named are optional: only their other failures are worth a mention.
      if (errno != ENOENT || (f < target.user_known_hosts.size() && !target.default_known_hosts)) unread.push_back(why);
      unread_all += (unread_all.empty() ? "" : ", ") + why;
      continue;
    }
    read.push_back(file);
    LIBSSH2_KNOWNHOSTS* known = libssh2_knownhost_init(s);
    LIBSSH2_KNOWNHOSTS* revoked = libssh2_knownhost_init(s);
    for (std::string line; std::getline(in, line);) {
      LIBSSH2_KNOWNHOSTS* into = known;
      if (line.rfind("@revoked", 0) == 0)
        into = revoked, line.erase(0, 8);
      else if (line.rfind("@", 0) == 0)
        continue;
      line.erase(0, line.find_first_not_of(" \t"));
      if (line.empty() || line[0] == '#') continue;
      libssh2_knownhost_readline(into, line.data(), line.size(), LIBSSH2_KNOWNHOST_FILE_OPENSSH);
    }
    int is_revoked = libssh2_knownhost_checkp(revoked, host.c_str(), port, key, len, plain, nullptr);
    int rc = libssh2_knownhost_checkp(known, host.c_str(), port, key, len, plain | kind->knownhost_type, nullptr);
    if (rc == LIBSSH2_KNOWNHOST_CHECK_NOTFOUND && libssh2_knownhost_checkp(known, host.c_str(), port, key, len, plain,
                                                                           nullptr) == LIBSSH2_KNOWNHOST_CHECK_MISMATCH)
      other_type = true;
    libssh2_knownhost_free(known);
    libssh2_knownhost_free(revoked);
    if (is_revoked == LIBSSH2_KNOWNHOST_CHECK_MATCH)
      return fmt::format("the host key of {} ({}) is marked @revoked in {}; refusing to connect", where, offered, file);
    if (rc == LIBSSH2_KNOWNHOST_CHECK_MATCH) return "";
    if (rc == LIBSSH2_KNOWNHOST_CHECK_MISMATCH) mismatched.push_back(file);
    if (rc == LIBSSH2_KNOWNHOST_CHECK_FAILURE)
      return fmt::format("could not check the host key of {} against {}: {}", where, file, last_error(s));
  }
  std::string absent;
  for (const std::string& u : unread) absent += (absent.empty() ? "" : ", ") + u;
  if (read.empty())
    return fmt::format(
        "no known_hosts file could be read ({}), so the host key of {} ({}) cannot be checked; after verifying that "
        "fingerprint, add it: {}",
        files.empty() ? "none is configured: UserKnownHostsFile and GlobalKnownHostsFile are none" : unread_all, where,
        offered, add);
  if (!mismatched.empty())
    return fmt::format(
        "HOST KEY MISMATCH for {}: the server offered its {}, which differs from the {} key recorded "
        "in {}. Someone may be intercepting the connection, or the host was reinstalled; only if you "
        "know it was, replace the entry: ssh-keygen -R {} -f {} && {}",
        where, offered, kind->name, mismatched.front(), where, mismatched.front(),
        fmt::format("ssh-keyscan{} -t {} {} >> {}", port == 22 ? "" : fmt::format(" -p {}", port), kind->keyscan, host,
                    mismatched.front()));
  std::string list;
  for (const std::string& r : read) list += (list.empty() ? "" : ", ") + r;
  std::string alias = host == target.alias ? "" : fmt::format(" (the HostName of {})", target.alias);
  return fmt::format(
      "unknown host: {}{} is not in {}{}{} (the server offered its {}); after verifying that "
      "fingerprint, add it: {}",
      where, alias, list, other_type ? " with that key type" : "",
      absent.empty() ? "" : fmt::format(" (not read: {})", absent), offered, add);
}

}  // namespace dscpp::launcher::ssh_internal
