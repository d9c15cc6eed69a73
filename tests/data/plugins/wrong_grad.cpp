// A model plugin on the layer library with one layer of its own whose backward is wrong on
// purpose (its bias gradient counted twice), for `dscpp gradcheck` to catch
// (tests/system/gradcheck.sh); with --overrun its forward also writes one element past the
// workspace it declares, for the runtime's buffer guards to catch. Also the smallest example of
// a custom Layer.
#include "causal_lm.h"

namespace {

using namespace dscpp::layers;

// y = x + b over every row (b [hidden]).
class Shift final : public Layer {
 public:
  Shift(const Env& env, int64_t hidden, bool overrun)
      : Layer(env, "shift", env.context * hidden), hidden_(hidden), overrun_(overrun) {
    bias_ = add_param({Name("bias"), {hidden}, normal(0.1f), "", false});
    work_ = fwd_work.add(env.context * hidden * static_cast<int64_t>(env.elem));
  }
  void forward(const Call& c) override {
    // Scratch it does not need: exactly the declared workspace, or one element more.
    DSCPP_CALL(c.ops(), fill, c.fwd_work(work_), 1.0f, rows(c) * hidden_ + (overrun_ ? 1 : 0));
    DSCPP_CALL(c.ops(), copy, c.ctx.input, c.ctx.output, rows(c) * hidden_);
    DSCPP_CALL(c.ops(), bias_add, c.ctx.output, c.param(bias_), rows(c), hidden_);
  }
  void backward(const Call& c) override {
    DSCPP_CALL(c.ops(), copy, c.ctx.grad_output, c.ctx.grad_input, rows(c) * hidden_);
    DSCPP_CALL(c.ops(), bias_grad, c.ctx.grad_output, c.grad(bias_), rows(c), hidden_);
    DSCPP_CALL(c.ops(), bias_grad, c.ctx.grad_output, c.grad(bias_), rows(c), hidden_);  // the mistake
  }

 private:
  int64_t rows(const Call& c) const { return c.batch() * env().context; }
  int64_t hidden_;
  bool overrun_;
  int bias_ = -1, work_ = -1;
};

std::unique_ptr<Model> make(const std::vector<std::string>& args, const dscpp_host_info& host) {
  auto m = std::make_unique<dscpp::models::CausalLM>("wrong_grad", args, host, std::vector<std::string>{"--overrun"});
  const int64_t V = m->config().integer("vocab_size"), C = m->config().integer("hidden_size");
  const Env env = m->env(64);
  m->add<TokenEmbedding>(env, "embed", V, C, Name("weight"), normal(0.1f));
  m->add<Shift>(env, C, m->args().has("--overrun"));
  m->add<LmHead>(env, "head", C, V, NormKind::rms, 1e-5f, Name("norm.weight"), Name{}, Name("weight"), normal(0.1f));
  m->data_from(V);
  return m;
}

}  // namespace

DSCPP_EXPORT_MODEL("wrong_grad", make)
