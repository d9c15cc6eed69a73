#include "runtime/observe/comms_log.h"

#include "core/error.h"

namespace dscpp::runtime {

std::shared_ptr<comm::CommsLogger> comms_logger_for(const config::CommsLoggerConfig& c, std::string_view file_name,
                                                    comm::Communicator& world) {
  if (!c.enabled) return nullptr;
  comm::CommsLoggerOptions o;
  o.verbose = c.verbose;
  o.prof_all = c.prof_all;
  for (const std::string& name : c.prof_ops) {
    auto kind = comm::comm_op_from_name(name);
    if (!kind)
      fail("{}: comms_logger.prof_ops: expected operation names from {}, found \"{}\"", file_name,
           comm::comm_op_names(), name);
    o.prof_ops.push_back(*kind);
  }
  return comm::attach_comms_logger(world, std::move(o));
}

}  // namespace dscpp::runtime
