/* edgefl/edgefl.h is C99: this file is compiled with -std=c99 -pedantic -Werror -Wall -Wextra
 * (and more; tests/capi.cmake) and never run. Included twice to check the include guard. */
#include "edgefl/edgefl.h"

/* C99 has no _Static_assert: a negative array size fails the build. */
#define EDGEFL_C99_CHECK(name, cond) typedef char edgefl_c99_check_##name[(cond) ? 1 : -1]

EDGEFL_C99_CHECK(status_ok_is_zero, EDGEFL_STATUS_OK == 0);
EDGEFL_C99_CHECK(status_values_stable, EDGEFL_STATUS_IO_ERROR == 80 && EDGEFL_STATUS_CANCELLED == 89 &&
                                           EDGEFL_STATUS_UNSUPPORTED == 100);
EDGEFL_C99_CHECK(api_version, EDGEFL_C_API_VERSION >= 1);
EDGEFL_C99_CHECK(codec_field, sizeof(((edgefl_round_result*)0)->codec) == 129);

/* Every callback type, spelled as an app would. */
static size_t memory_bytes(void* user, const edgefl_task* task) {
  (void)user;
  return task->parameter_count * sizeof(float);
}
static edgefl_status prepare(void* user, const edgefl_task* task) {
  (void)user;
  return task->model_spec != NULL ? EDGEFL_STATUS_OK : EDGEFL_STATUS_INVALID_SPEC;
}
static edgefl_status fit(void* user, const float* global, float* delta, size_t n, uint32_t* samples,
                         float* loss) {
  size_t i;
  (void)user;
  for (i = 0; i < n; ++i) delta[i] = -0.01f * global[i];
  *samples = 1;
  *loss = 0.0f;
  return EDGEFL_STATUS_OK;
}
static void log_fn(void* user, int level, const char* message) {
  (void)user;
  (void)level;
  (void)message;
}
static void* alloc_fn(void* user, size_t size, size_t align) {
  (void)user;
  (void)size;
  (void)align;
  return NULL;
}
static void free_fn(void* user, void* ptr, size_t size) {
  (void)user;
  (void)ptr;
  (void)size;
}

static edgefl_status transport_connect(void* user, const char* host, uint16_t port, uint32_t timeout_ms) {
  (void)user;
  (void)timeout_ms;
  return host != NULL && port != 0 ? EDGEFL_STATUS_CONNECTION_FAILED : EDGEFL_STATUS_TIMEOUT;
}
static edgefl_status transport_send(void* user, const uint8_t* data, size_t size, size_t* sent,
                                    uint32_t timeout_ms) {
  (void)user;
  (void)data;
  (void)timeout_ms;
  *sent = size;
  return EDGEFL_STATUS_OK;
}
static edgefl_status transport_recv(void* user, uint8_t* buffer, size_t capacity, size_t* received,
                                    uint32_t timeout_ms) {
  (void)user;
  (void)buffer;
  (void)capacity;
  (void)timeout_ms;
  *received = 0;
  return EDGEFL_STATUS_TIMEOUT;
}
static void transport_close(void* user) {
  (void)user;
}

/* Declared (not static) so that nothing is unused; never called. */
edgefl_status edgefl_c99_header_check(void);
edgefl_status edgefl_c99_header_check(void) {
  edgefl_client_options o;
  edgefl_allocator allocator;
  edgefl_transport transport;
  edgefl_trainer trainer;
  edgefl_round_result result;
  edgefl_client* client = NULL;
  edgefl_status s;
  char error[128];
  edgefl_client_options_init(&o);
  allocator.user = NULL;
  allocator.alloc = alloc_fn;
  allocator.free = free_fn;
  o.allocator = &allocator;
  transport.user = NULL;
  transport.connect = transport_connect;
  transport.send = transport_send;
  transport.recv = transport_recv;
  transport.close = transport_close;
  o.transport = &transport;
  o.log = log_fn;
  trainer.user = NULL;
  trainer.memory_bytes = memory_bytes;
  trainer.prepare = prepare;
  trainer.fit = fit;
  s = edgefl_client_create(&o, &client, error, sizeof error);
  if (s == EDGEFL_STATUS_OK) s = edgefl_client_run_round(client, &trainer, &result, error, sizeof error);
  edgefl_client_cancel(client);
  edgefl_client_free(client);
  (void)edgefl_status_name(s);
  (void)edgefl_status_message(s);
  (void)edgefl_round_outcome_name(result.outcome);
  return s;
}
