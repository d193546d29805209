/* A device in C: one federated round against edgefl-server through the C API (edgefl/edgefl.h).
 *
 *   edgefl certs --out pki --devices 1
 *   edgefl-server --state-dir state --ca pki/ca.crt --cert pki/server.crt --key pki/server.key \
 *                 --model mlp:784-16-10 --rounds 1 --cohort 1 &
 *   edgefl_example_c_client 127.0.0.1:7443 pki/ca.crt pki/devices/device-0001.crt pki/devices/device-0001.key
 *
 * The "trainer" trains nothing: it answers each round with a small random delta, which is enough
 * to exercise download, encoding, upload and commit. A real app puts its training engine in fit().
 * Exit status: 0 when the server accepted the update (or is draining), 1 otherwise. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "edgefl/edgefl.h"

/* The trainer's state: a xorshift64* generator. */
typedef struct random_trainer {
  uint64_t state;
  unsigned rounds;
} random_trainer;

static size_t trainer_memory_bytes(void* user, const edgefl_task* task) {
  (void)user;
  (void)task;
  return 0; /* fit() allocates nothing */
}

static edgefl_status trainer_prepare(void* user, const edgefl_task* task) {
  random_trainer* t = (random_trainer*)user;
  t->state ^= task->training_seed * 0x9E3779B97F4A7C15ull;
  if (t->state == 0) t->state = 1;
  printf("task: round %llu, model %s (%lu parameters), codec %s, lr %g\n", (unsigned long long)task->round_id,
         task->model_spec, (unsigned long)task->parameter_count, task->codec, (double)task->learning_rate);
  return EDGEFL_STATUS_OK;
}

static edgefl_status trainer_fit(void* user, const float* global, float* delta, size_t n, uint32_t* samples,
                                 float* loss) {
  random_trainer* t = (random_trainer*)user;
  size_t i;
  (void)global;
  for (i = 0; i < n; ++i) {
    uint64_t x = t->state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    t->state = x;
    /* uniform in [-1e-3, 1e-3) */
    delta[i] = (float)((double)((x * 0x2545F4914F6CDD1Dull) >> 11) * 0x1.0p-53 * 2e-3 - 1e-3);
  }
  *samples = 32;
  *loss = 0.0f;
  ++t->rounds;
  return EDGEFL_STATUS_OK;
}

static void log_line(void* user, int level, const char* message) {
  static const char* const names[] = {"?", "error", "warning", "info", "debug"};
  (void)user;
  fprintf(stderr, "[edgefl %s] %s\n", names[level >= 1 && level <= 4 ? level : 0], message);
}

int main(int argc, char** argv) {
  edgefl_client_options options;
  edgefl_client* client = NULL;
  random_trainer state = {0x853C49E6748FEA9Bull, 0};
  edgefl_trainer trainer;
  edgefl_round_result result;
  edgefl_status s;
  char error[512];
  char host[256];
  const char* colon;
  size_t host_len;

  if (argc != 5) {
    fprintf(stderr, "usage: %s HOST:PORT CA_FILE CERT_FILE KEY_FILE\n", argv[0]);
    return 2;
  }
  colon = strrchr(argv[1], ':');
  host_len = colon != NULL ? (size_t)(colon - argv[1]) : 0;
  if (colon == NULL || host_len == 0 || host_len >= sizeof host || atoi(colon + 1) <= 0 ||
      atoi(colon + 1) > 65535) {
    fprintf(stderr, "%s: expected HOST:PORT, got '%s'\n", argv[0], argv[1]);
    return 2;
  }
  memcpy(host, argv[1], host_len);
  host[host_len] = '\0';

  edgefl_client_options_init(&options);
  options.host = host;
  options.port = (uint16_t)atoi(colon + 1);
  options.server_name = "localhost"; /* the name `edgefl certs` puts in the server certificate */
  options.ca_file = argv[2];
  options.cert_file = argv[3];
  options.key_file = argv[4];
  options.memory_budget_bytes = 8u << 20;
  options.log = log_line;
  options.log_level = EDGEFL_LOG_INFO;

  s = edgefl_client_create(&options, &client, error, sizeof error);
  if (s != EDGEFL_STATUS_OK) {
    fprintf(stderr, "cannot create the client: %s: %s\n", edgefl_status_name(s), error);
    return 1;
  }

  trainer.user = &state;
  trainer.memory_bytes = trainer_memory_bytes;
  trainer.prepare = trainer_prepare;
  trainer.fit = trainer_fit;
  s = edgefl_client_run_round(client, &trainer, &result, error, sizeof error);
  edgefl_client_free(client);
  if (s != EDGEFL_STATUS_OK) {
    fprintf(stderr, "round failed: %s (%s): %s\n", edgefl_status_name(s), edgefl_status_message(s), error);
    return 1;
  }
  printf("round %llu: %s; sent %llu update bytes (%s), received %llu model bytes; memory plan %lu bytes\n",
         (unsigned long long)result.round_id, edgefl_round_outcome_name(result.outcome),
         (unsigned long long)result.update_bytes, result.codec, (unsigned long long)result.model_bytes,
         (unsigned long)result.memory.total);
  return result.outcome == EDGEFL_ROUND_ACCEPTED || result.outcome == EDGEFL_ROUND_SERVER_DRAINING ? 0 : 1;
}
