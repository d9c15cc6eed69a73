// Choosing the active resources from the pool: --include/--exclude, --num_nodes/--num_gpus,
// the local device pool from CUDA_VISIBLE_DEVICES, and --bind_core_list.
//
// Include/exclude follow the semantics DeepSpeed documents, not the ones its
// `main` has had since v0.15.2: a bare host in --include means all of its slots, and every
// slot id is checked against the pool, so `-i w1:7` on a 4-slot host is an error naming the
// host's slots instead of a world that later crashes or uses the wrong GPU.
#pragma once

#include "launcher/launch_plan.h"

#include <string>
#include <string_view>
#include <vector>

namespace dscpp::launcher {

// One NODE of `NODE[@NODE...]`, `NODE = [USER@]NAME[:SLOT[,SLOT...]]`, as written (slots unsorted).
struct NodeSpec {
  std::string host{};
  std::vector<int> slots{};  // empty = the whole host
  std::string user{};        // USER@ before NAME: only known once the pool tells hosts from users
};

// `flag` names the option in messages ("--include"). Throws on an empty NODE, a second ':',
// an empty or non-integer slot. '@' also separates NODEs (DeepSpeed's syntax), so `bob@w1`
// parses as two NODEs here; join_users() decides with the pool.
std::vector<NodeSpec> parse_node_specs(std::string_view spec, std::string_view flag);

// A NODE without slots whose NAME is no host of `pool` but is followed by one that is becomes
// that one's USER: `-i bob@w1:0@w2` on a pool of w1, w2 is w1 (as bob) and w2. Host names are
// compared without the pool's own `user@`.
std::vector<NodeSpec> join_users(std::vector<NodeSpec> nodes, const ResourcePool& pool);

struct ResourceSelection {
  // `{}` initializers keep designated initialization ({.include = "w0"}) free of
  // -Wmissing-field-initializers on g++ 12.
  std::string include{};  // -i/--include, "" = not given
  std::string exclude{};  // -e/--exclude, "" = not given
  int num_nodes = -1;     // < 0 = not given; 0 = given but a no-op (still conflicts with -i/-e)
  int num_gpus = -1;      // same
  // What the pool came from, for messages: "hostfile /job/hostfile", "CUDA_VISIBLE_DEVICES".
  std::string pool_source = "the resource pool";
  // The pool's slots are real limits (hostfile slots=, detected devices, SLURM allocation):
  // --num_gpus may not exceed them. False reproduces DeepSpeed, which never checks.
  bool slots_are_limits = true;
};

// The active resources, in pool order, hosts without slots dropped. Rules, in order:
// -i with -e, or either with --num_nodes/--num_gpus >= 0, is an error; include/exclude filter;
// --num_nodes N > 0 keeps the first N hosts (more than the pool has is an error);
// --num_gpus G > 0 keeps the first G slots of every host (= 0..G-1 for a hostfile pool).
ResourcePool select_resources(const ResourcePool& pool, const ResourceSelection& selection);

// The filters alone (used by select_resources). Hosts left without slots are dropped. A NODE
// matches a pool host by name, with or without the hostfile's `user@`; a USER@ given there must
// agree with the hostfile's, and --include's sets the login user of a host the hostfile gives
// none (--ssh_user still overrides it).
ResourcePool include_resources(const ResourcePool& pool, std::string_view spec, std::string_view pool_source);
ResourcePool exclude_resources(const ResourcePool& pool, std::string_view spec, std::string_view pool_source);

// The device pool of "localhost" when there is no hostfile. `cuda_visible_devices` is the
// variable's value ("" = unset, as DeepSpeed treats it). Unset: devices 0..device_count-1.
// Set: its integer ids, in its order, each checked against `device_count` when that is >= 0
// (pass the physical count, e.g. from NVML, or -1 when unknown). GPU UUIDs, duplicates and
// negative ids are errors: slots must be ids a rank's CUDA_VISIBLE_DEVICES can name.
ResourcePool local_device_pool(std::string_view cuda_visible_devices, int device_count);

// --bind_core_list: `a` and `a-b` items, comma-separated, ascending and non-overlapping
// (DeepSpeed's parse_range_list). Returns the cores in order.
std::vector<int> parse_core_list(std::string_view text);

// Splits `cores` among `local_ranks` ranks: cores_per_rank = size / local_ranks (must be >= 1),
// rank k gets cores [k*cpr, (k+1)*cpr); leftover cores are unused, as in DeepSpeed.
std::vector<std::vector<int>> split_cores(const std::vector<int>& cores, int local_ranks);

// "0-3,5,7-8" for messages and plan tables; "none" for an empty list. Input need not be sorted.
std::string format_id_ranges(std::vector<int> ids);

}  // namespace dscpp::launcher
