/* Deliberately broken model plugins for the runtime's error tests, one per BAD_VARIANT:
 *   1  no entry point at all                  (the runtime says it is not a dscpp plugin)
 *   2  built for another ABI version          (both versions named)
 *   3  forward of layer "broken" fails        (code + message printed with the layer name)
 */
#include "dscpp/model.h"

#include <stdio.h>
#include <string.h>

#if BAD_VARIANT != 1

static dscpp_param_desc params[1] = {
    {"weight", 2, {4, 2, 0, 0}, DSCPP_INIT_NORMAL, 0.1f, NULL, NULL, 0, DSCPP_ROLE_WEIGHT, 0, 0}};

static int create(int argc, const char* const* argv, const dscpp_host_info* host, void** model, dscpp_error* err) {
  (void)argc; (void)argv; (void)host; (void)err;
  static int dummy;
  *model = &dummy;
  return DSCPP_OK;
}
static void destroy(void* model) { (void)model; }
static int describe(void* model, dscpp_model_desc* out, dscpp_error* err) {
  (void)model; (void)err;
  out->num_layers = 1;
  out->data.train_size = 8;
  out->data.eval_size = 0;
  out->data.input_dtype = DSCPP_F32;
  out->data.input_numel = 4;
  out->data.target_dtype = DSCPP_I32;
  out->data.target_numel = 1;
  return DSCPP_OK;
}
static int layer(void* model, int32_t index, dscpp_layer_desc* out, dscpp_error* err) {
  (void)model; (void)index; (void)err;
  out->name = "broken";
  out->num_params = 1;
  out->params = params;
  out->output_numel = 2;
  return DSCPP_OK;
}
static int forward(void* model, int32_t l, const dscpp_layer_ctx* ctx, dscpp_error* err) {
  (void)model; (void)l; (void)ctx;
  snprintf(err->message, sizeof(err->message), "matrix shapes disagree: 4 vs 5");
  return DSCPP_E_INVALID_ARGUMENT;
}
static int backward(void* model, int32_t l, const dscpp_layer_ctx* ctx, dscpp_error* err) {
  (void)model; (void)l; (void)ctx; (void)err;
  return DSCPP_OK;
}
static int load_sample(void* model, int32_t split, int64_t index, void* input, int32_t* target, dscpp_error* err) {
  (void)model; (void)split; (void)err;
  memset(input, 0, 16);
  *target = (int32_t)(index % 2);
  return DSCPP_OK;
}

const dscpp_model_api* dscpp_model_entry(void) {
  static dscpp_model_api api;
  dscpp_model_api_stamp(&api);
#if BAD_VARIANT == 2
  api.abi_version = 999u; /* no dscpp has it */
#endif
  api.name = "bad";
  api.create = create;
  api.destroy = destroy;
  api.describe = describe;
  api.layer = layer;
  api.forward = forward;
  api.backward = backward;
  api.load_sample = load_sample;
  return &api;
}

#else
int not_a_plugin(void) { return 1; }
#endif
