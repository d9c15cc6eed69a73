#include "runtime/zero/model_params.h"

namespace dscpp::runtime {

void ModelParams::follow_forward(int first, int end) const {
  if (!frozen_) return trained_->follow_forward(first, end);
  const int stop = end < 0 ? static_cast<int>(trained_->layer_count()) : end;
  for (int l = first; l < stop; ++l) {
    trained_->follow_forward(l, l + 1);
    frozen_->follow_forward(l, l + 1);
  }
}

}  // namespace dscpp::runtime
