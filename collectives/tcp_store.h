// The job's rendezvous store over TCP. Rank 0 hosts the server at MASTER_ADDR:MASTER_PORT;
// every rank, the host included, is a client of it. Every connection proves the job's secret
// to the server and the server proves it back (store_auth.h) before any request.
#pragma once

#include "collectives/store.h"
#include "collectives/store_auth.h"

#include <memory>
#include <string>

namespace dscpp::comm {

struct TcpStoreOptions {
  std::string addr = "127.0.0.1";
  int port = 29500;
  // This process listens on `port` and serves until the TcpStore is destroyed. port 0 picks a
  // free port (read it back with port()).
  bool host_server = false;
  // Where the server listens: "" = the address `addr` resolves to (a name that resolves to a
  // loopback address here but is not "localhost" means every interface, with a warning: other
  // hosts resolve it elsewhere); "0.0.0.0", "::" or "*" = every interface; else that address.
  std::string bind_addr;
  // The job's secret (core/job_secret.h), which both sides prove on every connection. Empty is
  // refused unless `insecure`, which uses a public key instead (DSCPP_INSECURE_STORE=1).
  std::string secret;
  bool insecure = false;
  // How this client names itself to the server, whose log shows it when refusing it ("rank 3").
  std::string name = "a rank";
  // The server drops connections that have not proven the secret within this time, and the
  // oldest unproven one beyond this many (store_auth.h).
  Millis handshake_timeout{store_auth::kHandshakeTimeout};
  size_t max_unauthenticated = store_auth::kMaxUnauthenticated;
  // Clients retry connecting this long (the host may start after them), then throw Error naming
  // addr:port and saying that rank 0 hosts it.
  Millis connect_timeout{std::chrono::seconds(60)};
  // How long a reply may take, beyond the caller-chosen get/wait times: a host that sends
  // nothing that long is stalled (stopped, swapping, wedged), the call throws, and every later
  // call fails at once. A live host answers in microseconds.
  Millis reply_timeout{std::chrono::seconds(300)};
};

class TcpStore final : public Store {
 public:
  explicit TcpStore(const TcpStoreOptions& options);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, std::string_view value) override;
  std::string get(const std::string& key, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::vector<std::string> wait(const std::vector<std::string>& keys, Millis timeout) override;
  bool check(const std::string& key) override;
  void erase(const std::string& key) override;

  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dscpp::comm
