// The CUDA part of `dscpp report`: what this build was compiled for (architectures, CUDA and
// NCCL header versions) and what the machine offers at run time (runtime, driver, NCCL library
// versions and usable devices). The run-time side loads libcudart and libnccl with dlopen, so
// the launcher never links CUDA and still runs on machines without it.
#pragma once

#include <string>

namespace dscpp::launcher {

// Indented "  key  value" lines, ending with a newline; one line saying CUDA is absent in a
// build configured without it.
std::string cuda_report();

}  // namespace dscpp::launcher
