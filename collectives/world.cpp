// Bringing up a job's communicators: store, placement, engine choice, groups.
#include "build_config.h"
#include "collectives/communicator.h"
#include "collectives/tcp_store.h"
#include "core/job_secret.h"
#include "core/knobs.h"
#include "core/log.h"
#include "core/rank_discovery.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <thread>

namespace dscpp::comm {
namespace {

// The address peers can reach this rank at: the source address the kernel picks for a route to
// the master (a UDP connect sends nothing). Loopback masters keep everything on loopback.
std::string reachable_address(const std::string& master) {
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  if (getaddrinfo(master.c_str(), "9", &hints, &found) != 0 || !found) return "127.0.0.1";
  std::string out = "127.0.0.1";
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    char text[INET_ADDRSTRLEN] = "";
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text)))
      out = text;
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  return out;
}

std::string host_name() {
  char name[256] = "";
  gethostname(name, sizeof(name) - 1);
  return name;
}

struct Placement {
  std::vector<int> node_of;                // per global rank
  std::vector<std::vector<int>> members;   // per node, global ranks in rank order
  std::vector<std::string> hosts;          // per node
};

// Groups ranks by the host name they report (or by rank / ranks_per_node when forced), nodes
// numbered in order of their lowest rank.
Placement find_placement(Store& store, const CommOptions& o, Millis timeout) {
  std::string me = o.ranks_per_node > 0 ? fmt::format("node{}", o.rank / o.ranks_per_node) : host_name();
  store.set(fmt::format("host/{}", o.rank), me);
  Placement p;
  std::map<std::string, int> index;
  for (int r = 0; r < o.world_size; ++r) {
    std::string h = r == o.rank ? me : store.get(fmt::format("host/{}", r), timeout);
    auto [it, fresh] = index.emplace(h, static_cast<int>(p.members.size()));
    if (fresh) {
      p.members.emplace_back();
      p.hosts.push_back(h);
    }
    p.node_of.push_back(it->second);
    p.members[it->second].push_back(r);
  }
  return p;
}

// NCCL refuses two ranks on one GPU ("Duplicate GPU detected") only once the communicator is
// being made; here every rank hears which ranks of its host share a GPU, and why that fails.
void refuse_shared_gpus(Store& store, const CommOptions& o, const Placement& p) {
  store.set(fmt::format("gpu/{}", o.rank), o.device_identity);
  const std::vector<int>& mine = p.members[p.node_of[o.rank]];
  std::map<std::string, std::vector<int>> by_gpu;
  for (int r : mine) {
    std::string id = r == o.rank ? o.device_identity : store.get(fmt::format("gpu/{}", r), o.connect_timeout);
    if (!id.empty()) by_gpu[id].push_back(r);
  }
  // Every rank has read what it needs before any fails (rank 0's failure takes the store down).
  rendezvous(store, "gpus-read", o.rank, o.world_size, o.connect_timeout);
  for (const auto& [id, ranks] : by_gpu) {
    if (ranks.size() < 2) continue;
    // The store's host stays a moment so that the others' last replies reach them.
    if (o.rank == 0) std::this_thread::sleep_for(std::chrono::seconds(1));
    fail("ranks {} on host {} share the GPU at PCI bus {}, but the nccl backend needs one GPU per rank; start at "
         "most {} rank{} on this host, or pass --comm_backend shm or --comm_backend gloo to let ranks share a GPU "
         "(their device buffers are staged through pinned host memory)",
         format_rank_list(ranks), p.hosts[p.node_of[o.rank]], id, by_gpu.size(), by_gpu.size() == 1 ? "" : "s");
  }
}

GroupContext group(const CommOptions& o, const std::shared_ptr<Store>& store, const std::string& name, int rank,
                   int size, const std::string& address) {
  GroupContext c;
  c.store = std::make_shared<PrefixStore>(name, store);
  c.rank = rank;
  c.size = size;
  c.name = name;
  c.timeout = o.timeout;
  c.address = address;
  c.device = o.device;
  c.cuda_compute_stream = o.cuda_compute_stream;
  c.device_memory = o.device_memory;
  c.host_memory = o.host_memory;
  c.staging_bytes = o.staging_bytes;
  return c;
}

std::unique_ptr<Backend> make_engine(BackendChoice engine, const GroupContext& c) {
  if (c.size == 1 && engine != BackendChoice::mpi) return make_self_backend(c);
  switch (engine) {
    case BackendChoice::shm: return make_shm_backend(c);
    case BackendChoice::gloo: return make_gloo_backend(c);
    case BackendChoice::mpi: return make_mpi_backend(c);
    case BackendChoice::nccl: return make_nccl_backend(c);
    default: fail("internal: no engine for a flat group");
  }
}

std::string_view engine_name(BackendChoice b) {
  switch (b) {
    case BackendChoice::shm: return "shm";
    case BackendChoice::gloo: return "gloo";
    case BackendChoice::mpi: return "mpi";
    case BackendChoice::nccl: return "nccl";
    case BackendChoice::hierarchical: return "hierarchical";
    case BackendChoice::automatic: return "auto";
  }
  return "?";
}

}  // namespace

Millis store_reply_timeout(Millis group_timeout) {
  return std::clamp(group_timeout / 2, Millis(2000), Millis(60000));
}

World create_world(const CommOptions& o) {
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size)
    fail("rank {} is not within a world of {} ranks", o.rank, o.world_size);
  World w;
  if (o.world_size == 1) {
    w.store = std::make_shared<MemoryStore>();  // no socket: nothing to secure
  } else {
    if (o.job_secret.empty() && !o.insecure_store) fail("rank {}: {}", o.rank, no_job_secret_message());
    if (o.job_secret.empty())
      log::warn(
          "rank {}: {}=1: the rendezvous store at {}:{} runs WITHOUT a job secret; anyone who can reach it can "
          "join this job, read and change what the ranks exchange, or stop it (docs/security.md)",
          o.rank, kInsecureStoreVar, o.master_addr, o.master_port);
    TcpStoreOptions so;
    so.addr = o.master_addr;
    so.port = o.master_port;
    so.host_server = o.rank == 0;
    so.bind_addr = o.store_bind;
    so.secret = o.job_secret;
    so.insecure = o.job_secret.empty();
    so.name = fmt::format("rank {} (pid {} on {})", o.rank, ::getpid(), host_name());
    so.connect_timeout = o.connect_timeout;
    so.reply_timeout = store_reply_timeout(o.timeout);
    w.store = std::make_shared<TcpStore>(so);
  }
  // The host (rank 0) waits a moment longer, so that every rank gets to report the missing
  // ranks itself instead of seeing the store vanish.
  rendezvous(*w.store, "arrive", o.rank, o.world_size, o.connect_timeout + Millis(o.rank == 0 ? 1000 : 0));
  Placement p = find_placement(*w.store, o, o.connect_timeout);
  w.node_count = static_cast<int>(p.members.size());
  w.node_index = p.node_of[o.rank];
  const auto& mine = p.members[w.node_index];
  w.local_size = static_cast<int>(mine.size());
  w.local_rank = static_cast<int>(std::find(mine.begin(), mine.end(), o.rank) - mine.begin());
  bool uniform = std::all_of(p.members.begin(), p.members.end(),
                             [&](const auto& m) { return static_cast<int>(m.size()) == w.local_size; });
  std::string address = o.world_size == 1 ? "127.0.0.1" : reachable_address(o.master_addr);

  BackendChoice between = o.started_by_mpi && DSCPP_HAVE_MPI ? BackendChoice::mpi : BackendChoice::gloo;
  BackendChoice choice = o.backend;
  if (choice == BackendChoice::automatic) {
    if (o.cuda_device)
      choice = BackendChoice::nccl;
    else if (w.node_count == 1)
      choice = BackendChoice::shm;
    else if (uniform && w.local_size > 1)
      choice = BackendChoice::hierarchical;
    else
      choice = between;
  }
  if (choice == BackendChoice::shm && w.node_count > 1)
    fail("the shm backend needs every rank on one host, but ranks are on {} hosts ({}...); use gloo, mpi or "
         "hierarchical", w.node_count, p.hosts[0]);
  if (choice == BackendChoice::hierarchical && !uniform)
    fail("the hierarchical backend needs the same number of ranks on every host; host {} has {} and host {} has {}",
         p.hosts[0], p.members[0].size(), p.hosts[w.node_index], w.local_size);
  if (o.cuda_device && choice != BackendChoice::nccl)
    log::info("buffers live on a CUDA device and the {} backend was chosen: they are staged through pinned host "
              "memory", engine_name(choice));

  if (choice == BackendChoice::nccl) refuse_shared_gpus(*w.store, o, p);

  GroupContext world_ctx = group(o, w.store, "world", o.rank, o.world_size, address);
  // MPI makes sub-groups by splitting its world communicator, collectively on every rank, so
  // each rank asks for the same sequence of groups (node, cross, ...) with its own color.
  std::unique_ptr<Backend> mpi_world;
  auto build = [&](BackendChoice engine, const GroupContext& c, int color, std::vector<int> members) {
    if (engine != BackendChoice::mpi) return make_engine(engine, c);
    if (!mpi_world) mpi_world = make_mpi_backend(world_ctx);
    if (c.size == o.world_size) return make_mpi_backend(c);
    SplitPlan plan{color, c.rank, std::move(members), c};
    return mpi_world->split(plan);
  };
  // The node group: the ranks of this host. The cross group: the ranks with this local index
  // on every host (only when hosts have equal rank counts; otherwise each rank alone).
  auto node_group = [&](BackendChoice engine, const std::string& name) {
    auto c = group(o, w.store, fmt::format("{}{}", name, w.node_index), w.local_rank, w.local_size, address);
    return std::pair{c, build(engine, c, w.node_index, mine)};
  };
  auto cross_group = [&](BackendChoice engine, const std::string& name) {
    std::vector<int> members;
    if (uniform)
      for (const auto& m : p.members) members.push_back(m[w.local_rank]);
    else
      members = {o.rank};
    auto c = uniform ? group(o, w.store, fmt::format("{}{}", name, w.local_rank), w.node_index, w.node_count, address)
                     : group(o, w.store, fmt::format("{}r{}", name, o.rank), 0, 1, address);
    return std::pair{c, build(engine, c, uniform ? w.local_rank : o.rank, members)};
  };
  // The hierarchical engine is a host engine throughout (device buffers are staged before it),
  // so its part inside a host is shared memory even for CUDA buffers: nccl alone is the
  // device-memory engine, and it does its own two-level routing.
  BackendChoice local_engine = BackendChoice::shm;
  BackendChoice flat = choice == BackendChoice::hierarchical ? between : choice;
  BackendChoice cross_engine = flat == BackendChoice::shm ? BackendChoice::gloo : flat;
  BackendChoice node_engine = choice == BackendChoice::hierarchical ? local_engine : flat;

  std::unique_ptr<Backend> world_backend;
  if (choice == BackendChoice::hierarchical) {
    Hierarchy h;
    h.node = w.node_index;
    h.nodes = w.node_count;
    h.local = w.local_rank;
    h.local_size = w.local_size;
    for (const auto& m : p.members) h.global_rank.insert(h.global_rank.end(), m.begin(), m.end());
    auto local = node_group(local_engine, "hier.node").second;
    auto cross = cross_group(between, "hier.cross").second;
    auto flat_backend = build(between, group(o, w.store, "hier.flat", o.rank, o.world_size, address), 0, {});
    world_backend =
        make_hierarchical_backend(world_ctx, h, std::move(local), std::move(cross), std::move(flat_backend));
  } else {
    world_backend = build(choice, world_ctx, 0, {});
  }
  w.world = std::make_unique<Communicator>(world_ctx, std::move(world_backend));
  auto [nctx, nbackend] = node_group(node_engine, "node");
  w.node = std::make_unique<Communicator>(nctx, std::move(nbackend));
  auto [cctx, cbackend] = cross_group(cross_engine, "cross");
  w.cross = std::make_unique<Communicator>(cctx, std::move(cbackend));
  // Before any operation, so every rank checks from the same point on.
  for (Communicator* c : {w.world.get(), w.node.get(), w.cross.get()}) c->set_schedule_check(o.check_schedule);
  w.description = fmt::format("{} over {} host{} ({} rank{} per host{}){}", w.world->backend_name(), w.node_count,
                              w.node_count == 1 ? "" : "s", w.local_size, w.local_size == 1 ? "" : "s",
                              uniform ? "" : ", uneven", o.check_schedule ? ", schedule check on" : "");
  return w;
}

CommOptions comm_options_from_env() {
  CommOptions o;
  const EnvGetter launcher_env = process_env();
  // dscpp's own variables through the knob table, the launchers' as they are.
  auto env = [&launcher_env](const char* name) -> std::optional<std::string> {
    if (!std::string_view(name).starts_with("DSCPP_")) return launcher_env(name);
    const char* v = knob(name);
    return v != nullptr ? std::optional<std::string>(v) : std::nullopt;
  };
  if (auto id = discover_rank(launcher_env)) {
    o.rank = id->rank;
    o.world_size = id->world_size;
  }
  if (auto v = env("MASTER_ADDR")) o.master_addr = *v;
  // A number from the variable `name`, or an error saying what was expected and found.
  auto number = [&](const char* name, double low, double high, const char* expected) -> std::optional<double> {
    auto v = env(name);
    if (!v) return std::nullopt;
    char* end = nullptr;
    double x = std::strtod(v->c_str(), &end);
    if (v->empty() || *end || !(x >= low && x <= high)) fail("{}='{}': expected {}", name, *v, expected);
    return x;
  };
  if (auto port = number("MASTER_PORT", 1, 65535, "a TCP port 1-65535")) {
    if (*port != static_cast<int>(*port)) fail("MASTER_PORT='{}': expected a TCP port 1-65535", *port);
    o.master_port = static_cast<int>(*port);
  }
  if (auto v = env("DSCPP_COMM_BACKEND")) o.backend = parse_backend_choice(*v);
  constexpr double kYear = 365.0 * 24 * 3600;
  if (auto s = number("DSCPP_COMM_TIMEOUT", 1e-3, kYear, "seconds > 0"))
    o.timeout = Millis(static_cast<int64_t>(*s * 1000));
  if (auto s = number("DSCPP_RENDEZVOUS_TIMEOUT", 1e-3, kYear, "seconds > 0"))
    o.connect_timeout = Millis(static_cast<int64_t>(*s * 1000));
  if (auto n = number("DSCPP_RANKS_PER_NODE", 1, 1 << 20, "a positive number of ranks per host")) {
    if (*n != static_cast<int>(*n)) fail("DSCPP_RANKS_PER_NODE='{}': expected a whole number of ranks", *n);
    o.ranks_per_node = static_cast<int>(*n);
  }
  if (auto b = number("DSCPP_COMM_STAGING_BYTES", 64, 1ull << 40, "a staging area of at least 64 bytes")) {
    if (*b != static_cast<double>(static_cast<size_t>(*b)))
      fail("DSCPP_COMM_STAGING_BYTES='{}': expected a whole number of bytes", *b);
    o.staging_bytes = static_cast<size_t>(*b);
  }
  if (auto v = env("DSCPP_CHECK_SCHEDULE")) {
    if (*v == "1" || *v == "true" || *v == "on")
      o.check_schedule = true;
    else if (!(v->empty() || *v == "0" || *v == "false" || *v == "off"))
      fail("DSCPP_CHECK_SCHEDULE='{}': expected 1 (check every collective across ranks) or 0", *v);
  }
  o.started_by_mpi = env("OMPI_COMM_WORLD_SIZE").has_value() || env("PMIX_RANK").has_value();
  // A rank alone keeps its store in memory: it needs no secret, and a stray one is not read.
  if (o.world_size > 1) {
    if (auto secret = job_secret_from_env()) o.job_secret = secret->value;
    o.insecure_store = insecure_store_from_env();
    if (auto v = env("DSCPP_STORE_BIND")) o.store_bind = *v;
  }
  return o;
}

}  // namespace dscpp::comm
