// The launch plan: which hosts and slots run ranks, how ranks are numbered, and the
// environment each rank receives. Pure data and functions — no processes, no I/O — so every
// rule is unit-tested (tests/unit/test_launcher_plan.cpp).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dscpp::launcher {

using EnvList = std::vector<std::pair<std::string, std::string>>;
// A process environment by name (tests build one; the launcher snapshots `environ`), so the
// planning functions never read the real environment themselves.
using Environment = std::map<std::string, std::string>;

// One host of the resource pool and its slots (device ids, or CPU rank slots), in order.
struct HostSlots {
  std::string host;
  std::vector<int> slots;
};
// Ordered as the hostfile (or SLURM node list) orders hosts: that order numbers the ranks.
using ResourcePool = std::vector<HostSlots>;

struct RankInfo {
  int rank = 0;        // global, hosts in order then their slots in order
  int local_rank = 0;  // position on its host (DeepSpeed >= 0.16.4 rotates on uneven hosts; we do not)
  int node_rank = 0;   // index of its host in the plan
  int slot = 0;        // the slot / device id it owns
  std::string host;
};

struct WorldPlan {
  ResourcePool hosts{};  // active hosts only, each with at least one slot
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool devices_are_gpus = false;  // slots are CUDA devices (sets CUDA_VISIBLE_DEVICES)

  int world_size() const;
  int node_count() const { return static_cast<int>(hosts.size()); }
  std::vector<RankInfo> ranks() const;
  std::vector<RankInfo> ranks_on(int node_rank) const;
};

// What every rank's environment is built from besides its own numbers.
struct EnvOptions {
  EnvList exported{};        // forwarded from the launcher's environment, env files, --env
  bool omp_threads = false;  // --bind_cores_to_rank: set OMP_NUM_THREADS
  int cores_per_rank = 0;
};

// RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_SIZE, LOCAL_WORLD_SIZE, CROSS_RANK, CROSS_SIZE,
// GROUP_RANK, MASTER_ADDR, MASTER_PORT, device visibility, then `exported`.
// Each name appears once. The plan's own values win: an exported CUDA_VISIBLE_DEVICES or
// OMP_NUM_THREADS is dropped when the plan sets that variable (devices_are_gpus, omp_threads),
// and within `exported` a later entry overrides an earlier one. Rank variables cannot be
// exported at all (env_export.h rejects them), so RANK & co always come from the plan.
EnvList rank_env(const WorldPlan& plan, const RankInfo& rank, const EnvOptions& options);

// The variables rank_env derives from the plan's numbering (RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_SIZE, LOCAL_WORLD_SIZE, CROSS_RANK, CROSS_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT).
bool is_rank_variable(std::string_view name);

// Sets `name` in `env`: replaces the value in place if present, else appends.
void set_env(EnvList& env, std::string_view name, std::string_view value);

// DeepSpeed's --world_info: the ordered map host -> slot ids as Python's
// json.dumps writes it (`", "` and `": "` separators, ASCII-only strings), then URL-safe
// base64 with '=' padding. Hosts keep their order: the i-th key is node rank i.
std::string world_info_json(const ResourcePool& pool);
std::string encode_world_info(const ResourcePool& pool);
// URL-safe base64 with '=' padding (the encoding of encode_world_info).
std::string base64url_encode(std::string_view bytes);
// Accepts URL-safe or standard base64 (padding optional) of any JSON object mapping host
// names to lists of distinct non-negative integers; throws dscpp::Error saying which part is wrong.
ResourcePool decode_world_info(std::string_view encoded);

}  // namespace dscpp::launcher
