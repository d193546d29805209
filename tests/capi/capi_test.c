/* Tests of the C API (edgefl/edgefl.h), written in C99 against the header as apps see it.
 *
 *   edgefl_capi_tests offline SCRATCH_DIR
 *       options, status names, argument checks, credential failures, the allocator
 *   edgefl_capi_tests round HOST:PORT CA CERT KEY
 *       against a running edgefl-server (tests/capi/round_test.sh starts one): the trainer
 *       callbacks, a failing trainer's status, the memory budget, an accepted round, cancel
 *   edgefl_capi_tests transport HOST:PORT CA CERT KEY
 *       the same server, through the app's transport: one over POSIX sockets carries an accepted
 *       round (TLS on top), one whose connect fails gives up after max_attempts; the client's
 *       own log lines (reconnects) reach the C log callback
 *
 * Prints one line per failed check and a summary; exit status 0 when every check passed. */
#define _POSIX_C_SOURCE 200809L /* the socket transport: getaddrinfo, poll, fcntl, TCP_NODELAY */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include "edgefl/edgefl.h"

static int g_checks = 0;
static int g_failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    ++g_checks;                                                                \
    if (!(cond)) {                                                             \
      ++g_failures;                                                            \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
    }                                                                          \
  } while (0)

#define CHECK_STATUS(expr, want)                                                         \
  do {                                                                                   \
    edgefl_status got_ = (expr);                                                         \
    ++g_checks;                                                                          \
    if (got_ != (want)) {                                                                \
      ++g_failures;                                                                      \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s\n", __FILE__, __LINE__, #expr, \
              edgefl_status_name(got_), edgefl_status_name(want));                       \
    }                                                                                    \
  } while (0)

/* ---- Fakes ------------------------------------------------------------------------------- */

/* Log lines, counted by level; the last line of each level kept. */
typedef struct log_sink {
  int lines[5];
  char last[5][512];
} log_sink;

static void sink_log(void* user, int level, const char* message) {
  log_sink* sink = (log_sink*)user;
  if (level < 1 || level > 4) {
    ++sink->lines[0]; /* out of range: counted as a failure below */
    return;
  }
  ++sink->lines[level];
  strncpy(sink->last[level], message, sizeof sink->last[level] - 1);
  sink->last[level][sizeof sink->last[level] - 1] = '\0';
}

/* An allocator that counts, and fails on request. */
typedef struct counting_allocator {
  int allocations;
  int frees;
  size_t bytes_in_use;
  int fail;
} counting_allocator;

static void* counting_alloc(void* user, size_t size, size_t align) {
  counting_allocator* a = (counting_allocator*)user;
  void* p;
  if (a->fail || align > 16) return NULL;
  p = malloc(size);
  if (p != NULL) {
    ++a->allocations;
    a->bytes_in_use += size;
  }
  return p;
}

static void counting_free(void* user, void* ptr, size_t size) {
  counting_allocator* a = (counting_allocator*)user;
  ++a->frees;
  a->bytes_in_use -= size;
  free(ptr);
}

/* ---- Offline ----------------------------------------------------------------------------- */

static void test_options_init(void) {
  edgefl_client_options o;
  memset(&o, 0xA5, sizeof o);
  edgefl_client_options_init(&o);
  CHECK(o.struct_size == sizeof o);
  CHECK(strcmp(o.host, "127.0.0.1") == 0);
  CHECK(o.port == 7443);
  CHECK(strcmp(o.server_name, "localhost") == 0);
  CHECK(o.ca_file != NULL && o.ca_file[0] == '\0');
  CHECK(o.memory_budget_bytes == (uint64_t)64 << 20);
  CHECK(o.upload_chunk_bytes == 65536);
  CHECK(o.connect_timeout_ms == 10000 && o.io_timeout_ms == 30000);
  CHECK(o.max_attempts == 20);
  CHECK(o.error_feedback == 1 && o.residual_bf16 == 0);
  CHECK(o.log == NULL && o.log_user == NULL && o.log_level == EDGEFL_LOG_INFO);
  CHECK(o.allocator == NULL && o.transport == NULL);
  edgefl_client_options_init(NULL); /* ignored */
}

static void test_status_names(void) {
  static const edgefl_status all[] = {EDGEFL_STATUS_OK,
                                      EDGEFL_STATUS_INVALID_ARGUMENT,
                                      EDGEFL_STATUS_INVALID_SPEC,
                                      EDGEFL_STATUS_BUFFER_TOO_SMALL,
                                      EDGEFL_STATUS_WORKSPACE_TOO_SMALL,
                                      EDGEFL_STATUS_NON_FINITE_INPUT,
                                      EDGEFL_STATUS_VALUE_OUT_OF_RANGE,
                                      EDGEFL_STATUS_DIMENSION_TOO_LARGE,
                                      EDGEFL_STATUS_TRUNCATED,
                                      EDGEFL_STATUS_BAD_MAGIC,
                                      EDGEFL_STATUS_UNSUPPORTED_VERSION,
                                      EDGEFL_STATUS_UNKNOWN_CODEC,
                                      EDGEFL_STATUS_BAD_PARAMETERS,
                                      EDGEFL_STATUS_CHECKSUM_MISMATCH,
                                      EDGEFL_STATUS_SIZE_MISMATCH,
                                      EDGEFL_STATUS_INDEX_OUT_OF_RANGE,
                                      EDGEFL_STATUS_INDICES_NOT_SORTED,
                                      EDGEFL_STATUS_CORRUPT_PAYLOAD,
                                      EDGEFL_STATUS_DIMENSION_MISMATCH,
                                      EDGEFL_STATUS_NOT_SUMMABLE,
                                      EDGEFL_STATUS_INCOMPATIBLE,
                                      EDGEFL_STATUS_OVERFLOW,
                                      EDGEFL_STATUS_FRAME_TOO_LARGE,
                                      EDGEFL_STATUS_UNKNOWN_MESSAGE_TYPE,
                                      EDGEFL_STATUS_PROTOCOL_VERSION_MISMATCH,
                                      EDGEFL_STATUS_MALFORMED_MESSAGE,
                                      EDGEFL_STATUS_INVALID_MESSAGE,
                                      EDGEFL_STATUS_MESSAGE_TYPE_MISMATCH,
                                      EDGEFL_STATUS_IO_ERROR,
                                      EDGEFL_STATUS_CONNECTION_FAILED,
                                      EDGEFL_STATUS_TIMEOUT,
                                      EDGEFL_STATUS_TLS_HANDSHAKE_FAILED,
                                      EDGEFL_STATUS_TLS_ERROR,
                                      EDGEFL_STATUS_UNAUTHORIZED,
                                      EDGEFL_STATUS_SERVER_ERROR,
                                      EDGEFL_STATUS_PROTOCOL_ERROR,
                                      EDGEFL_STATUS_MEMORY_BUDGET_EXCEEDED,
                                      EDGEFL_STATUS_CANCELLED,
                                      EDGEFL_STATUS_UPDATE_NOT_ACCEPTED,
                                      EDGEFL_STATUS_UNSUPPORTED,
                                      EDGEFL_STATUS_OUT_OF_MEMORY,
                                      EDGEFL_STATUS_INTERNAL,
                                      EDGEFL_STATUS_AUTHENTICATION_FAILED,
                                      EDGEFL_STATUS_BAD_SHARE,
                                      EDGEFL_STATUS_TOO_FEW_SURVIVORS,
                                      EDGEFL_STATUS_SECAGG_REFUSED,
                                      EDGEFL_STATUS_KEY_REUSE,
                                      EDGEFL_STATUS_UNSAFE_CONFIGURATION,
                                      EDGEFL_STATUS_CRYPTO_ERROR};
  const size_t count = sizeof all / sizeof all[0];
  size_t i, j;
  CHECK(strcmp(edgefl_status_name(EDGEFL_STATUS_OK), "ok") == 0);
  CHECK(strcmp(edgefl_status_name(EDGEFL_STATUS_IO_ERROR), "io_error") == 0);
  CHECK(strcmp(edgefl_status_name(EDGEFL_STATUS_TLS_HANDSHAKE_FAILED), "tls_handshake_failed") == 0);
  CHECK(strcmp(edgefl_status_name(EDGEFL_STATUS_MEMORY_BUDGET_EXCEEDED), "memory_budget_exceeded") == 0);
  CHECK(strcmp(edgefl_status_name(EDGEFL_STATUS_UNSUPPORTED), "unsupported") == 0);
  CHECK(strcmp(edgefl_status_name(EDGEFL_STATUS_OUT_OF_MEMORY), "out_of_memory") == 0);
  CHECK(strcmp(edgefl_status_name(EDGEFL_STATUS_INTERNAL), "internal") == 0);
  CHECK(strcmp(edgefl_status_name((edgefl_status)12345), "unknown_status") == 0);
  CHECK(edgefl_status_message((edgefl_status)12345) != NULL);
  for (i = 0; i < count; ++i) {
    const char* name = edgefl_status_name(all[i]);
    CHECK(name != NULL && strcmp(name, "unknown_status") != 0);
    CHECK(edgefl_status_message(all[i]) != NULL);
#if !defined(EDGEFL_STRIP_ERROR_STRINGS)
    CHECK(edgefl_status_message(all[i])[0] != '\0');
#endif
    for (j = 0; j < i; ++j) CHECK(strcmp(name, edgefl_status_name(all[j])) != 0); /* names are distinct */
  }
  CHECK(strcmp(edgefl_round_outcome_name(EDGEFL_ROUND_NONE), "none") == 0);
  CHECK(strcmp(edgefl_round_outcome_name(EDGEFL_ROUND_ACCEPTED), "accepted") == 0);
  CHECK(strcmp(edgefl_round_outcome_name(EDGEFL_ROUND_SERVER_DRAINING), "server_draining") == 0);
  CHECK(strcmp(edgefl_round_outcome_name(EDGEFL_ROUND_ABANDONED), "abandoned") == 0);
  CHECK(strcmp(edgefl_round_outcome_name((edgefl_round_outcome)77), "unknown") == 0);
}

static void test_argument_checks(void) {
  edgefl_client_options o;
  edgefl_client* client = (edgefl_client*)&o; /* must be reset to NULL on failure */
  edgefl_trainer trainer;
  edgefl_round_result result;
  char error[256];
  edgefl_client_options_init(&o);
  CHECK_STATUS(edgefl_client_create(NULL, &client, error, sizeof error), EDGEFL_STATUS_INVALID_ARGUMENT);
  CHECK(client == NULL);
  CHECK(strlen(error) > 0);
  CHECK_STATUS(edgefl_client_create(&o, NULL, error, sizeof error), EDGEFL_STATUS_INVALID_ARGUMENT);
  /* An options struct edgefl_client_options_init() never saw. */
  o.struct_size = 0;
  CHECK_STATUS(edgefl_client_create(&o, &client, error, sizeof error), EDGEFL_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(error, "edgefl_client_options_init") != NULL);
  /* NULL error buffers and zero capacities are fine. */
  CHECK_STATUS(edgefl_client_create(NULL, &client, NULL, 0), EDGEFL_STATUS_INVALID_ARGUMENT);
  error[0] = 'x';
  CHECK_STATUS(edgefl_client_create(NULL, &client, error, 0), EDGEFL_STATUS_INVALID_ARGUMENT);
  CHECK(error[0] == 'x');
  /* Truncation keeps the terminator. */
  CHECK_STATUS(edgefl_client_create(NULL, &client, error, 8), EDGEFL_STATUS_INVALID_ARGUMENT);
  CHECK(strlen(error) == 7);

  memset(&trainer, 0, sizeof trainer);
  CHECK_STATUS(edgefl_client_run_round(NULL, &trainer, &result, error, sizeof error),
               EDGEFL_STATUS_INVALID_ARGUMENT);
  edgefl_client_cancel(NULL);
  edgefl_client_free(NULL);
}

static void test_missing_cert_file(const char* dir) {
  edgefl_client_options o;
  edgefl_client* client = NULL;
  log_sink sink;
  counting_allocator allocator_state = {0, 0, 0, 0};
  edgefl_allocator allocator;
  char missing[1024];
  char error[512];
  memset(&sink, 0, sizeof sink);
  snprintf(missing, sizeof missing, "%s/no-such-device.crt", dir);
  allocator.user = &allocator_state;
  allocator.alloc = counting_alloc;
  allocator.free = counting_free;

  edgefl_client_options_init(&o);
  o.ca_file = missing;
  o.cert_file = missing;
  o.key_file = missing;
  o.log = sink_log;
  o.log_user = &sink;
  o.allocator = &allocator;
  CHECK_STATUS(edgefl_client_create(&o, &client, error, sizeof error), EDGEFL_STATUS_IO_ERROR);
  CHECK(client == NULL);
  CHECK(strstr(error, "no-such-device.crt") != NULL); /* the message names the file */
  printf("missing file: %s\n", error);
  CHECK(sink.lines[EDGEFL_LOG_ERROR] == 1);
  CHECK(strstr(sink.last[EDGEFL_LOG_ERROR], "io_error") != NULL);
  /* The handle was allocated from the caller's allocator and given back. */
  CHECK(allocator_state.allocations == 1 && allocator_state.frees == 1 && allocator_state.bytes_in_use == 0);

  /* An allocator that fails: out of memory, nothing else touched. */
  allocator_state.fail = 1;
  CHECK_STATUS(edgefl_client_create(&o, &client, error, sizeof error), EDGEFL_STATUS_OUT_OF_MEMORY);
  CHECK(client == NULL && allocator_state.allocations == 1);
}

static void test_garbage_cert_file(const char* dir) {
  edgefl_client_options o;
  edgefl_client* client = NULL;
  char path[1024];
  char error[512];
  edgefl_status s;
  FILE* f;
  snprintf(path, sizeof path, "%s/capi-garbage.pem", dir);
  f = fopen(path, "wb");
  CHECK(f != NULL);
  if (f == NULL) return;
  fputs("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n", f);
  fclose(f);
  edgefl_client_options_init(&o);
  o.ca_file = path;
  o.cert_file = path;
  o.key_file = path;
  s = edgefl_client_create(&o, &client, error, sizeof error);
  CHECK_STATUS(s, EDGEFL_STATUS_TLS_ERROR);
  CHECK(client == NULL && strlen(error) > 0);
  printf("garbage file: %s\n", error);
  remove(path);
}

static edgefl_status dummy_connect(void* user, const char* host, uint16_t port, uint32_t timeout_ms) {
  (void)user;
  (void)host;
  (void)port;
  (void)timeout_ms;
  return EDGEFL_STATUS_OK;
}
static edgefl_status dummy_send(void* user, const uint8_t* data, size_t size, size_t* sent,
                                uint32_t timeout_ms) {
  (void)user;
  (void)data;
  (void)timeout_ms;
  *sent = size;
  return EDGEFL_STATUS_OK;
}
static edgefl_status dummy_recv(void* user, uint8_t* buffer, size_t capacity, size_t* received,
                                uint32_t timeout_ms) {
  (void)user;
  (void)buffer;
  (void)capacity;
  (void)timeout_ms;
  *received = 0;
  return EDGEFL_STATUS_TIMEOUT;
}
static void dummy_close(void* user) {
  (void)user;
}

/* A transport needs all four callbacks: anything less is refused by create, before the handle is
 * allocated or a file is read. */
static void test_incomplete_transport(const char* dir) {
  edgefl_client_options o;
  edgefl_transport transport;
  edgefl_client* client = (edgefl_client*)&o;
  counting_allocator allocator_state = {0, 0, 0, 0};
  edgefl_allocator allocator;
  log_sink sink;
  char missing[1024];
  char error[512];
  memset(&sink, 0, sizeof sink);
  snprintf(missing, sizeof missing, "%s/no-such-device.crt", dir);
  allocator.user = &allocator_state;
  allocator.alloc = counting_alloc;
  allocator.free = counting_free;
  edgefl_client_options_init(&o);
  o.ca_file = missing;
  o.cert_file = missing;
  o.key_file = missing;
  o.allocator = &allocator;
  o.log = sink_log;
  o.log_user = &sink;
  o.transport = &transport;

  /* Only connect. */
  memset(&transport, 0, sizeof transport);
  transport.connect = dummy_connect;
  CHECK_STATUS(edgefl_client_create(&o, &client, error, sizeof error), EDGEFL_STATUS_INVALID_ARGUMENT);
  CHECK(client == NULL);
  CHECK(strstr(error, "transport") != NULL && strstr(error, "send, recv, close") != NULL);
  printf("incomplete transport: %s\n", error);
  CHECK(sink.lines[EDGEFL_LOG_ERROR] == 1 && strstr(sink.last[EDGEFL_LOG_ERROR], "invalid_argument") != NULL);

  /* Everything but close. */
  transport.send = dummy_send;
  transport.recv = dummy_recv;
  CHECK_STATUS(edgefl_client_create(&o, &client, error, sizeof error), EDGEFL_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(error, "(NULL: close)") != NULL);

  /* Set but empty: also a mistake (NULL, not an empty struct, selects TCP). */
  memset(&transport, 0, sizeof transport);
  CHECK_STATUS(edgefl_client_create(&o, &client, error, sizeof error), EDGEFL_STATUS_INVALID_ARGUMENT);
  CHECK(strstr(error, "connect, send, recv, close") != NULL);
  CHECK(allocator_state.allocations == 0); /* refused before the handle */

  /* All four: accepted; create gets as far as the (missing) certificate. */
  transport.connect = dummy_connect;
  transport.send = dummy_send;
  transport.recv = dummy_recv;
  transport.close = dummy_close;
  CHECK_STATUS(edgefl_client_create(&o, &client, error, sizeof error), EDGEFL_STATUS_IO_ERROR);
  CHECK(client == NULL && strstr(error, "no-such-device.crt") != NULL);
  CHECK(allocator_state.allocations == 1 && allocator_state.frees == 1 && allocator_state.bytes_in_use == 0);
}

/* ---- Against a server -------------------------------------------------------------------- */

typedef struct test_trainer {
  int memory_calls, prepare_calls, fit_calls;
  edgefl_status prepare_returns, fit_returns;
  edgefl_client* cancel_in_fit; /* if set, fit() cancels this client (and succeeds) */
  size_t parameter_count;
  char model_spec[160];
  char codec[160];
  size_t tensor_count;
  char first_tensor[64];
  uint64_t first_shape[2];
  uint64_t rng;
} test_trainer;

static size_t tt_memory_bytes(void* user, const edgefl_task* task) {
  test_trainer* t = (test_trainer*)user;
  (void)task;
  ++t->memory_calls;
  return 1000;
}

static edgefl_status tt_prepare(void* user, const edgefl_task* task) {
  test_trainer* t = (test_trainer*)user;
  ++t->prepare_calls;
  t->parameter_count = task->parameter_count;
  strncpy(t->model_spec, task->model_spec, sizeof t->model_spec - 1);
  strncpy(t->codec, task->codec, sizeof t->codec - 1);
  t->tensor_count = task->tensor_count;
  if (task->tensor_count > 0) {
    strncpy(t->first_tensor, task->tensors[0].name, sizeof t->first_tensor - 1);
    t->first_shape[0] = task->tensors[0].rank == 2 ? task->tensors[0].shape[0] : 0;
    t->first_shape[1] = task->tensors[0].rank == 2 ? task->tensors[0].shape[1] : 0;
  }
  return t->prepare_returns;
}

static edgefl_status tt_fit(void* user, const float* global, float* delta, size_t n, uint32_t* samples,
                            float* loss) {
  test_trainer* t = (test_trainer*)user;
  size_t i;
  ++t->fit_calls;
  if (t->cancel_in_fit != NULL) edgefl_client_cancel(t->cancel_in_fit);
  if (t->fit_returns != EDGEFL_STATUS_OK) return t->fit_returns;
  if (global == NULL || delta == NULL || n != t->parameter_count) return EDGEFL_STATUS_INVALID_ARGUMENT;
  for (i = 0; i < n; ++i) {
    if (delta[i] != 0.0f) return EDGEFL_STATUS_INVALID_ARGUMENT; /* handed over zeroed */
    t->rng = t->rng * 6364136223846793005ull + 1442695040888963407ull;
    delta[i] = (float)((double)(t->rng >> 40) / 16777216.0 - 0.5) * 1e-3f;
  }
  *samples = 10;
  *loss = 1.5f;
  return EDGEFL_STATUS_OK;
}

static int split_host_port(const char* text, char* host, size_t cap, uint16_t* port) {
  const char* colon = strrchr(text, ':');
  size_t n = colon != NULL ? (size_t)(colon - text) : 0;
  if (colon == NULL || n == 0 || n >= cap) return 0;
  memcpy(host, text, n);
  host[n] = '\0';
  *port = (uint16_t)atoi(colon + 1);
  return *port != 0;
}

static void run_round_tests(const char* server, const char* ca, const char* cert, const char* key) {
  edgefl_client_options o;
  edgefl_client* client = NULL;
  edgefl_trainer trainer;
  test_trainer t;
  edgefl_round_result result;
  log_sink sink;
  counting_allocator allocator_state = {0, 0, 0, 0};
  edgefl_allocator allocator;
  char host[256];
  char error[1024];
  uint16_t port = 0;
  if (!split_host_port(server, host, sizeof host, &port)) {
    CHECK(!"HOST:PORT");
    return;
  }
  memset(&sink, 0, sizeof sink);
  memset(&t, 0, sizeof t);
  t.rng = 42;
  allocator.user = &allocator_state;
  allocator.alloc = counting_alloc;
  allocator.free = counting_free;
  edgefl_client_options_init(&o);
  o.host = host;
  o.port = port;
  o.ca_file = ca;
  o.cert_file = cert;
  o.key_file = key;
  o.log = sink_log;
  o.log_user = &sink;
  o.log_level = EDGEFL_LOG_DEBUG;
  o.allocator = &allocator;
  o.max_wait_ms = 60000;
  trainer.user = &t;
  trainer.memory_bytes = tt_memory_bytes;
  trainer.prepare = tt_prepare;
  trainer.fit = tt_fit;

  /* 1. A budget the round cannot fit: refused before training, with the plan. */
  o.memory_budget_bytes = 4096;
  CHECK_STATUS(edgefl_client_create(&o, &client, error, sizeof error), EDGEFL_STATUS_OK);
  if (client == NULL) {
    fprintf(stderr, "create: %s\n", error);
    return;
  }
  CHECK(allocator_state.allocations == 1 && allocator_state.bytes_in_use > 0);
  printf("client handle: %lu bytes from the caller's allocator\n",
         (unsigned long)allocator_state.bytes_in_use);
  CHECK_STATUS(edgefl_client_run_round(client, &trainer, &result, error, sizeof error),
               EDGEFL_STATUS_MEMORY_BUDGET_EXCEEDED);
  printf("budget: %s\n", error);
  CHECK(strstr(error, "memory budget") != NULL);
  CHECK(result.outcome == EDGEFL_ROUND_NONE); /* no update was answered: not "accepted" */
  CHECK(t.memory_calls >= 1 && t.prepare_calls == 0 && t.fit_calls == 0);
  CHECK(result.memory.trainer == 1000);
  CHECK(result.memory.total > 4096 && result.memory.model == result.memory.delta);
  edgefl_client_free(client);
  CHECK(allocator_state.frees == 1 && allocator_state.bytes_in_use == 0);

  o.memory_budget_bytes = 64u << 20;
  CHECK_STATUS(edgefl_client_create(&o, &client, error, sizeof error), EDGEFL_STATUS_OK);
  if (client == NULL) return;

  /* 2. prepare() refuses the model: its status ends the round. */
  t.prepare_returns = EDGEFL_STATUS_INVALID_SPEC;
  CHECK_STATUS(edgefl_client_run_round(client, &trainer, &result, error, sizeof error),
               EDGEFL_STATUS_INVALID_SPEC);
  CHECK(strstr(error, "trainer prepare() returned invalid_spec") != NULL);
  CHECK(t.prepare_calls == 1 && t.fit_calls == 0);
  CHECK(strcmp(t.model_spec, "mlp:784-16-10") == 0);
  /* The tensor table: fc1.weight [16, 784], fc1.bias, fc2.weight, fc2.bias. */
  CHECK(t.tensor_count == 4);
  CHECK(strcmp(t.first_tensor, "fc1.weight") == 0);
  CHECK(t.first_shape[0] == 16 && t.first_shape[1] == 784);
  CHECK(t.parameter_count == 784 * 16 + 16 + 16 * 10 + 10);
  CHECK(strlen(t.codec) > 0);

  /* 3. fit() fails with a code only the C layer has: that code comes back, not a stand-in. */
  t.prepare_returns = EDGEFL_STATUS_OK;
  t.fit_returns = EDGEFL_STATUS_OUT_OF_MEMORY;
  CHECK_STATUS(edgefl_client_run_round(client, &trainer, &result, error, sizeof error),
               EDGEFL_STATUS_OUT_OF_MEMORY);
  CHECK(strstr(error, "trainer fit() returned out_of_memory") != NULL);
  CHECK(t.fit_calls == 1);

  /* 4. Cancelled during the round (from the trainer; the call is thread-safe too): the round
   *    stops at its next step. Another client of the same device, so that this one stays usable. */
  t.fit_returns = EDGEFL_STATUS_OK;
  {
    edgefl_client* other = NULL;
    CHECK_STATUS(edgefl_client_create(&o, &other, error, sizeof error), EDGEFL_STATUS_OK);
    t.cancel_in_fit = other;
    if (other != NULL) {
      CHECK_STATUS(edgefl_client_run_round(other, &trainer, &result, error, sizeof error),
                   EDGEFL_STATUS_CANCELLED);
      CHECK(t.fit_calls == 2 && result.update_bytes == 0);
    }
    t.cancel_in_fit = NULL;
    edgefl_client_free(other);
  }

  /* 5. A round that completes. */
  sink.lines[EDGEFL_LOG_INFO] = 0;
  CHECK_STATUS(edgefl_client_run_round(client, &trainer, &result, error, sizeof error), EDGEFL_STATUS_OK);
  CHECK(error[0] == '\0');
  CHECK(t.fit_calls == 3);
  CHECK(result.outcome == EDGEFL_ROUND_ACCEPTED);
  CHECK(result.round_id >= 1);
  CHECK(result.samples == 10 && result.train_loss == 1.5f);
  CHECK(result.update_bytes > 0 && result.uploaded_bytes >= result.update_bytes);
  CHECK(result.wire_bytes_up > result.update_bytes && result.wire_bytes_down > 0);
  CHECK(strcmp(result.codec, t.codec) == 0);
  CHECK(result.memory.model == 4 * t.parameter_count && result.memory.total >= result.memory.model);
  /* The task, training, upload, the round's summary line, and a connection attempt before the
   * Hello and the upload (training runs disconnected). */
  CHECK(sink.lines[EDGEFL_LOG_INFO] >= 4 && sink.lines[EDGEFL_LOG_INFO] <= 6);
  CHECK(strncmp(sink.last[EDGEFL_LOG_INFO], "round ", 6) == 0);
  printf("round %llu: %s, %llu update bytes (%s), %llu model bytes (this round), memory plan %lu bytes\n",
         (unsigned long long)result.round_id, edgefl_round_outcome_name(result.outcome),
         (unsigned long long)result.update_bytes, result.codec, (unsigned long long)result.model_bytes,
         (unsigned long)result.memory.total);

  /* 6. Cancelled before the round: this round and every later one. */
  edgefl_client_cancel(client);
  CHECK_STATUS(edgefl_client_run_round(client, &trainer, &result, error, sizeof error),
               EDGEFL_STATUS_CANCELLED);
  CHECK_STATUS(edgefl_client_run_round(client, &trainer, &result, error, sizeof error),
               EDGEFL_STATUS_CANCELLED);
  edgefl_client_free(client);
  CHECK(allocator_state.allocations == allocator_state.frees && allocator_state.bytes_in_use == 0);
}

/* ---- Through the app's transport ---------------------------------------------------------- */

/* edgefl_transport over POSIX sockets: a non-blocking TCP socket, each wait bounded by poll(). It
 * counts what it carried and checks the client keeps the contract (edgefl.h). */
typedef struct socket_transport {
  int fd;                     /* -1: no connection */
  int connects, closes;       /* calls (connects: every call, successful or not) */
  int opened;                 /* successful connects */
  int misuse;                 /* calls that break the contract: connect while open, I/O while closed */
  edgefl_status fail_connect; /* not OK: connect returns this without touching the network */
  uint64_t bytes_sent, bytes_received;
  uint32_t max_io_timeout_ms; /* the longest timeout_ms given to send or recv */
  int timeouts;               /* TIMEOUT returns of send and recv */
} socket_transport;

/* poll() for `events` on fd: 1 ready, 0 timed out, -1 failed. */
static int wait_fd(int fd, short events, uint32_t timeout_ms) {
  struct pollfd p;
  int r;
  p.fd = fd;
  p.events = events;
  p.revents = 0;
  do {
    r = poll(&p, 1, timeout_ms > (uint32_t)INT_MAX ? INT_MAX : (int)timeout_ms);
  } while (r < 0 && errno == EINTR);
  return r < 0 ? -1 : r;
}

static edgefl_status st_connect(void* user, const char* host, uint16_t port, uint32_t timeout_ms) {
  socket_transport* t = (socket_transport*)user;
  struct addrinfo hints;
  struct addrinfo* list = NULL;
  const struct addrinfo* ai;
  char service[16];
  edgefl_status s = EDGEFL_STATUS_CONNECTION_FAILED;
  ++t->connects;
  if (t->fd >= 0) ++t->misuse;
  if (t->fail_connect != EDGEFL_STATUS_OK) return t->fail_connect;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  snprintf(service, sizeof service, "%u", (unsigned)port);
  if (getaddrinfo(host, service, &hints, &list) != 0) return EDGEFL_STATUS_CONNECTION_FAILED;
  for (ai = list; ai != NULL; ai = ai->ai_next) {
    int ready;
    int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) continue;
    if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
      close(fd);
      continue;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      ready = 1;
    } else if (errno == EINPROGRESS) {
      ready = wait_fd(fd, POLLOUT, timeout_ms);
      if (ready == 1) {
        int so_error = 0;
        socklen_t len = sizeof so_error;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0 || so_error != 0) ready = -1;
      }
    } else {
      ready = -1;
    }
    if (ready == 1) {
      const int on = 1; /* request/response traffic: no Nagle delay (the built-in socket does the same) */
      (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
      t->fd = fd;
      ++t->opened;
      s = EDGEFL_STATUS_OK;
      break;
    }
    close(fd);
    if (ready == 0) s = EDGEFL_STATUS_TIMEOUT;
  }
  freeaddrinfo(list);
  return s;
}

static void st_note_timeout(socket_transport* t, uint32_t timeout_ms) {
  if (timeout_ms > t->max_io_timeout_ms) t->max_io_timeout_ms = timeout_ms;
}

static edgefl_status st_send(void* user, const uint8_t* data, size_t size, size_t* sent,
                             uint32_t timeout_ms) {
  socket_transport* t = (socket_transport*)user;
  ssize_t n;
  int ready;
  *sent = 0;
  st_note_timeout(t, timeout_ms);
  if (t->fd < 0) {
    ++t->misuse;
    return EDGEFL_STATUS_CONNECTION_FAILED;
  }
  ready = wait_fd(t->fd, POLLOUT, timeout_ms);
  if (ready == 0) {
    ++t->timeouts;
    return EDGEFL_STATUS_TIMEOUT;
  }
  if (ready < 0) return EDGEFL_STATUS_CONNECTION_FAILED;
  n = send(t->fd, data, size, MSG_NOSIGNAL);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      ++t->timeouts;
      return EDGEFL_STATUS_TIMEOUT;
    }
    return EDGEFL_STATUS_CONNECTION_FAILED;
  }
  *sent = (size_t)n;
  t->bytes_sent += (uint64_t)n;
  return EDGEFL_STATUS_OK;
}

static edgefl_status st_recv(void* user, uint8_t* buffer, size_t capacity, size_t* received,
                             uint32_t timeout_ms) {
  socket_transport* t = (socket_transport*)user;
  ssize_t n;
  int ready;
  *received = 0;
  st_note_timeout(t, timeout_ms);
  if (t->fd < 0) {
    ++t->misuse;
    return EDGEFL_STATUS_CONNECTION_FAILED;
  }
  ready = wait_fd(t->fd, POLLIN, timeout_ms);
  if (ready == 0) {
    ++t->timeouts;
    return EDGEFL_STATUS_TIMEOUT;
  }
  if (ready < 0) return EDGEFL_STATUS_CONNECTION_FAILED;
  n = recv(t->fd, buffer, capacity, 0);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      ++t->timeouts;
      return EDGEFL_STATUS_TIMEOUT;
    }
    return EDGEFL_STATUS_CONNECTION_FAILED;
  }
  *received = (size_t)n; /* 0: the peer closed */
  t->bytes_received += (uint64_t)n;
  return EDGEFL_STATUS_OK;
}

static void st_close(void* user) {
  socket_transport* t = (socket_transport*)user;
  ++t->closes;
  if (t->fd < 0) {
    ++t->misuse;
    return;
  }
  close(t->fd);
  t->fd = -1;
}

static void socket_transport_init(socket_transport* state, edgefl_transport* transport) {
  memset(state, 0, sizeof *state);
  state->fd = -1;
  state->fail_connect = EDGEFL_STATUS_OK;
  transport->user = state;
  transport->connect = st_connect;
  transport->send = st_send;
  transport->recv = st_recv;
  transport->close = st_close;
}

static void run_transport_tests(const char* server, const char* ca, const char* cert, const char* key) {
  edgefl_client_options o;
  edgefl_client* client = NULL;
  edgefl_transport transport;
  socket_transport st;
  edgefl_trainer trainer;
  test_trainer t;
  edgefl_round_result result;
  log_sink sink;
  char host[256];
  char error[1024];
  uint16_t port = 0;
  if (!split_host_port(server, host, sizeof host, &port)) {
    CHECK(!"HOST:PORT");
    return;
  }
  memset(&sink, 0, sizeof sink);
  memset(&t, 0, sizeof t);
  t.rng = 7;
  trainer.user = &t;
  trainer.memory_bytes = tt_memory_bytes;
  trainer.prepare = tt_prepare;
  trainer.fit = tt_fit;
  socket_transport_init(&st, &transport);
  edgefl_client_options_init(&o);
  o.host = host;
  o.port = port;
  o.ca_file = ca;
  o.cert_file = cert;
  o.key_file = key;
  o.log = sink_log;
  o.log_user = &sink;
  o.log_level = EDGEFL_LOG_DEBUG;
  o.max_wait_ms = 60000;
  o.transport = &transport;

  /* 1. connect fails (with a code only C has): two attempts, a backoff between them, then a
   *    connection failure; nothing trained. The client's own lines reach the C log callback. */
  st.fail_connect = EDGEFL_STATUS_INTERNAL;
  o.max_attempts = 2;
  o.backoff_initial_ms = 5;
  o.backoff_max_ms = 20;
  CHECK_STATUS(edgefl_client_create(&o, &client, error, sizeof error), EDGEFL_STATUS_OK);
  if (client == NULL) {
    fprintf(stderr, "create: %s\n", error);
    return;
  }
  CHECK(st.connects == 0); /* create does no I/O */
  CHECK_STATUS(edgefl_client_run_round(client, &trainer, &result, error, sizeof error),
               EDGEFL_STATUS_CONNECTION_FAILED);
  printf("failing transport: %s\n", error);
  CHECK(strstr(error, "2 connection attempts") != NULL);
  CHECK(st.connects == 2 && st.opened == 0 && st.closes == 0 && st.misuse == 0);
  CHECK(t.memory_calls == 0 && t.fit_calls == 0);
  CHECK(result.reconnects == 1);
  CHECK(sink.lines[EDGEFL_LOG_WARNING] == 2); /* "connect failed: ..." per attempt */
  CHECK(strstr(sink.last[EDGEFL_LOG_WARNING], "connect failed") != NULL);
  CHECK(sink.lines[EDGEFL_LOG_INFO] >= 1 && sink.lines[0] == 0);
  printf("  log: warning \"%s\"\n", sink.last[EDGEFL_LOG_WARNING]);
  edgefl_client_free(client);
  CHECK(st.closes == 0); /* never connected: nothing to close */

  /* 1b. An unknown value is a failure too; the log level filters the client's lines. */
  memset(&sink, 0, sizeof sink);
  st.connects = 0;
  st.fail_connect = (edgefl_status)12345;
  o.log_level = EDGEFL_LOG_ERROR;
  CHECK_STATUS(edgefl_client_create(&o, &client, error, sizeof error), EDGEFL_STATUS_OK);
  if (client == NULL) return;
  CHECK_STATUS(edgefl_client_run_round(client, &trainer, &result, error, sizeof error),
               EDGEFL_STATUS_CONNECTION_FAILED);
  CHECK(st.connects == 2);
  CHECK(sink.lines[EDGEFL_LOG_WARNING] == 0 && sink.lines[EDGEFL_LOG_INFO] == 0 &&
        sink.lines[EDGEFL_LOG_DEBUG] == 0);
  CHECK(sink.lines[EDGEFL_LOG_ERROR] == 1); /* the round's failure */
  edgefl_client_free(client);

  /* 2. A round over POSIX sockets, TLS on top: accepted, and every byte went through here. */
  memset(&sink, 0, sizeof sink);
  socket_transport_init(&st, &transport);
  o.log_level = EDGEFL_LOG_DEBUG;
  o.max_attempts = 5;
  o.backoff_initial_ms = 50;
  o.backoff_max_ms = 500;
  CHECK_STATUS(edgefl_client_create(&o, &client, error, sizeof error), EDGEFL_STATUS_OK);
  if (client == NULL) return;
  CHECK_STATUS(edgefl_client_run_round(client, &trainer, &result, error, sizeof error), EDGEFL_STATUS_OK);
  if (error[0] != '\0') fprintf(stderr, "round: %s\n", error);
  CHECK(result.outcome == EDGEFL_ROUND_ACCEPTED);
  CHECK(t.fit_calls == 1 && result.samples == 10);
  CHECK(result.update_bytes > 0);
  CHECK(st.opened >= 1 && st.connects == st.opened && st.misuse == 0);
  CHECK(st.fd >= 0 && st.closes == st.opened - 1); /* kept open for the next round */
  /* TLS records around the frames: more than the update, more than the frames each way. */
  CHECK(st.bytes_sent > result.update_bytes);
  CHECK(st.bytes_sent > result.wire_bytes_up && st.bytes_received > result.wire_bytes_down);
  CHECK(st.bytes_received > result.model_bytes && result.model_bytes > 0);
  CHECK(st.max_io_timeout_ms > 0 && st.max_io_timeout_ms <= 50);
  printf(
      "transport round %llu: %s, update %llu B; transport carried %llu B up / %llu B down "
      "(frames %llu / %llu), %d connect(s), %d timeouts, longest wait %u ms\n",
      (unsigned long long)result.round_id, edgefl_round_outcome_name(result.outcome),
      (unsigned long long)result.update_bytes, (unsigned long long)st.bytes_sent,
      (unsigned long long)st.bytes_received, (unsigned long long)result.wire_bytes_up,
      (unsigned long long)result.wire_bytes_down, st.opened, st.timeouts, (unsigned)st.max_io_timeout_ms);
  edgefl_client_free(client);
  CHECK(st.fd < 0 && st.closes == st.opened && st.misuse == 0); /* free closed the connection */
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "offline") == 0) {
    test_options_init();
    test_status_names();
    test_argument_checks();
    test_missing_cert_file(argv[2]);
    test_garbage_cert_file(argv[2]);
    test_incomplete_transport(argv[2]);
  } else if (argc == 6 && strcmp(argv[1], "round") == 0) {
    run_round_tests(argv[2], argv[3], argv[4], argv[5]);
  } else if (argc == 6 && strcmp(argv[1], "transport") == 0) {
    run_transport_tests(argv[2], argv[3], argv[4], argv[5]);
  } else {
    fprintf(stderr, "usage: %s offline SCRATCH_DIR | round|transport HOST:PORT CA CERT KEY\n", argv[0]);
    return 2;
  }
  printf("%s: %d checks, %d failed\n", argv[1], g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}
