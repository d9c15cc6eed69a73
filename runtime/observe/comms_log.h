// The config's comms_logger section (DeepSpeed's keys) → a CommsLogger on the world
// communicator (collectives/comms_logger.h); rank 0 prints its summary at the end of the run.
// `debug` (DeepSpeed adds the calling function's name) is accepted and has no effect: the
// runtime's collectives are issued by the engine, not by user code worth naming.
#pragma once

#include "collectives/comms_logger.h"
#include "configs/ds_config.h"

#include <memory>
#include <string_view>

namespace dscpp::runtime {

// nullptr unless comms_logger.enabled; fails on an unknown prof_ops name, naming the config
// file (`file_name`) and the key. The names are the collectives' own, so they are checked here.
std::shared_ptr<comm::CommsLogger> comms_logger_for(const config::CommsLoggerConfig& c, std::string_view file_name,
                                                    comm::Communicator& world);

}  // namespace dscpp::runtime
