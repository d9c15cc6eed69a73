// The plans the runtime runs from (configs/plans.h: a checked config resolved once), named in
// dscpp::runtime, where the engine and its parts take them.
#pragma once

#include "configs/plans.h"

namespace dscpp::runtime {

using config::GradReduction;
using config::LossScalePlan;
using config::LossScaleRule;
using config::offload_device_name;
using config::OffloadDevice;
using config::OptimizerGroupsPlan;
using config::OptimizerOffloadPlan;
using config::ParamOffloadPlan;
using config::PrecisionPlan;
using config::rule_name;
using config::Stage3Plan;
using config::TrainPlan;
using config::ZeroPlan;

}  // namespace dscpp::runtime
