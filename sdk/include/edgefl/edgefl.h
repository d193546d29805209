/* edgefl/edgefl.h: the C ABI of the edgefl client (C99; callable from C, JNI, Swift, Rust, ...).
 *
 *   edgefl_client_options o;
 *   edgefl_client_options_init(&o);                       // defaults; never fails
 *   o.host = "fl.example.com"; o.port = 7443; o.server_name = "fl.example.com";
 *   o.ca_file = "ca.crt"; o.cert_file = "device.crt"; o.key_file = "device.key";
 *   char error[256];
 *   edgefl_client* client = NULL;
 *   if (edgefl_client_create(&o, &client, error, sizeof error) != EDGEFL_STATUS_OK) { ... }
 *   edgefl_trainer t = { &my_state, my_memory_bytes, my_prepare, my_fit };
 *   edgefl_round_result r;
 *   edgefl_status s = edgefl_client_run_round(client, &t, &r, error, sizeof error);  // one round
 *   edgefl_client_free(client);                          // NULL is fine
 *
 * A thin layer over edgefl::Client (edgefl/client.h): the same round (Hello, wait, model download,
 * memory check, train, encode, resumable upload, commit), the same mutual TLS, the same statuses.
 * No C++ exception crosses this ABI: allocation failures become EDGEFL_STATUS_OUT_OF_MEMORY and any
 * other exception EDGEFL_STATUS_INTERNAL.
 *
 * Memory. The handle (about 700 bytes on 64-bit targets) comes from edgefl_client_options.allocator when one
 * is set, else from malloc(). What a round needs (the model, the delta, the error-feedback residual, the
 * codec workspace, the encoded update, the TLS session: edgefl_memory_plan) comes from the C++ heap (operator
 * new and mbedTLS's calloc), is checked against memory_budget_bytes before a round starts
 * (EDGEFL_STATUS_MEMORY_BUDGET_EXCEEDED, nothing trained or sent), is kept between rounds and is released by
 * edgefl_client_free(). The trainer's own memory is the caller's (and is counted through
 * edgefl_trainer.memory_bytes).
 *
 * Errors. Every function that can fail returns an edgefl_status and, given a buffer, writes one
 * NUL-terminated line saying why into error[0..error_cap) (truncated to fit; "" on success).
 *
 * Threading. A client is used from one thread at a time; edgefl_client_cancel() may be called from
 * any thread while the client exists. Distinct clients are independent.
 */
#ifndef EDGEFL_EDGEFL_H_
#define EDGEFL_EDGEFL_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32) && defined(EDGEFL_C_SHARED)
#if defined(EDGEFL_C_BUILDING)
#define EDGEFL_C_API __declspec(dllexport)
#else
#define EDGEFL_C_API __declspec(dllimport)
#endif
#elif defined(__GNUC__) || defined(__clang__)
#define EDGEFL_C_API __attribute__((visibility("default")))
#else
#define EDGEFL_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped when a struct of this header grows or a function changes meaning.
 * 2: edgefl_client_options.transport is used (it was refused with EDGEFL_STATUS_UNSUPPORTED). */
#define EDGEFL_C_API_VERSION 2

/* ---- Status ------------------------------------------------------------------------------ */

/* The values of edgefl::Status (edgefl/status.h), one for one, plus a few the C layer adds
 * (100 and up). Values never change; new ones may be added. */
typedef enum edgefl_status {
  EDGEFL_STATUS_OK = 0,
  /* Caller errors. */
  EDGEFL_STATUS_INVALID_ARGUMENT = 1,
  EDGEFL_STATUS_INVALID_SPEC = 2,
  EDGEFL_STATUS_BUFFER_TOO_SMALL = 3,
  EDGEFL_STATUS_WORKSPACE_TOO_SMALL = 4,
  EDGEFL_STATUS_NON_FINITE_INPUT = 5,
  EDGEFL_STATUS_VALUE_OUT_OF_RANGE = 6,
  EDGEFL_STATUS_DIMENSION_TOO_LARGE = 7,
  /* Malformed encodings (untrusted bytes). */
  EDGEFL_STATUS_TRUNCATED = 20,
  EDGEFL_STATUS_BAD_MAGIC = 21,
  EDGEFL_STATUS_UNSUPPORTED_VERSION = 22,
  EDGEFL_STATUS_UNKNOWN_CODEC = 23,
  EDGEFL_STATUS_BAD_PARAMETERS = 24,
  EDGEFL_STATUS_CHECKSUM_MISMATCH = 25,
  EDGEFL_STATUS_SIZE_MISMATCH = 26,
  EDGEFL_STATUS_INDEX_OUT_OF_RANGE = 27,
  EDGEFL_STATUS_INDICES_NOT_SORTED = 28,
  EDGEFL_STATUS_CORRUPT_PAYLOAD = 29,
  EDGEFL_STATUS_DIMENSION_MISMATCH = 30,
  /* Combining encodings. */
  EDGEFL_STATUS_NOT_SUMMABLE = 40,
  EDGEFL_STATUS_INCOMPATIBLE = 41,
  EDGEFL_STATUS_OVERFLOW = 42,
  /* Wire protocol. */
  EDGEFL_STATUS_FRAME_TOO_LARGE = 60,
  EDGEFL_STATUS_UNKNOWN_MESSAGE_TYPE = 61,
  EDGEFL_STATUS_PROTOCOL_VERSION_MISMATCH = 62,
  EDGEFL_STATUS_MALFORMED_MESSAGE = 63,
  EDGEFL_STATUS_INVALID_MESSAGE = 64,
  EDGEFL_STATUS_MESSAGE_TYPE_MISMATCH = 65,
  /* Files, network, TLS and rounds. */
  EDGEFL_STATUS_IO_ERROR = 80,          /* a certificate or key file could not be read */
  EDGEFL_STATUS_CONNECTION_FAILED = 81, /* after max_attempts connection attempts */
  EDGEFL_STATUS_TIMEOUT = 82,
  EDGEFL_STATUS_TLS_HANDSHAKE_FAILED = 83, /* untrusted/expired certificate: not retried */
  EDGEFL_STATUS_TLS_ERROR = 84,            /* a bad key or certificate, or a TLS record error */
  EDGEFL_STATUS_UNAUTHORIZED = 85,         /* the server refused this device */
  EDGEFL_STATUS_SERVER_ERROR = 86,
  EDGEFL_STATUS_PROTOCOL_ERROR = 87,
  EDGEFL_STATUS_MEMORY_BUDGET_EXCEEDED = 88, /* the round's edgefl_memory_plan is above the budget */
  EDGEFL_STATUS_CANCELLED = 89,              /* edgefl_client_cancel() */
  EDGEFL_STATUS_UPDATE_NOT_ACCEPTED = 90,
  /* Added by the C layer. */
  EDGEFL_STATUS_UNSUPPORTED = 100,   /* a feature this build does not provide */
  EDGEFL_STATUS_OUT_OF_MEMORY = 101, /* std::bad_alloc, or the caller's allocator returned NULL */
  EDGEFL_STATUS_INTERNAL = 102,      /* an unexpected C++ exception, stopped at this boundary */
  /* Secure aggregation (SecAgg+) and its cryptography. */
  EDGEFL_STATUS_AUTHENTICATION_FAILED = 110,
  EDGEFL_STATUS_BAD_SHARE = 111,
  EDGEFL_STATUS_TOO_FEW_SURVIVORS = 112,
  EDGEFL_STATUS_SECAGG_REFUSED = 113,
  EDGEFL_STATUS_KEY_REUSE = 114,
  EDGEFL_STATUS_UNSAFE_CONFIGURATION = 115,
  EDGEFL_STATUS_CRYPTO_ERROR = 116,
  EDGEFL_STATUS_MAX_ENUM = 0x7FFFFFFF /* not a status: keeps the type 32 bits wide in C and C++ */
} edgefl_status;

/* A stable snake_case name ("ok", "tls_handshake_failed", ...); "unknown_status" for other values.
 * Never NULL; static storage. */
EDGEFL_C_API const char* edgefl_status_name(edgefl_status status);

/* One sentence describing `status`. Never NULL; static storage; "" when the library was built with
 * EDGEFL_STRIP_ERROR_STRINGS. */
EDGEFL_C_API const char* edgefl_status_message(edgefl_status status);

/* ---- Callbacks: logging and memory -------------------------------------------------------- */

enum { EDGEFL_LOG_ERROR = 1, EDGEFL_LOG_WARNING = 2, EDGEFL_LOG_INFO = 3, EDGEFL_LOG_DEBUG = 4 };

/* Receives one line (no trailing newline; valid during the call only) at `level` (EDGEFL_LOG_*).
 * Called on the thread that called into the library. Today: client creation, the start and the
 * end of each round (outcome, bytes, times), every failure with its reason, and within a round
 * failed connects and lost connections (WARNING), reconnects with their backoff and the server's
 * retry windows (INFO). */
typedef void (*edgefl_log_fn)(void* user, int level, const char* message);

/* The allocator for the C layer's own allocations (the client handle). alloc returns memory
 * aligned to `align` (a power of two <= 64) or NULL; free gets the same size back. Both are
 * called from the thread that calls edgefl_client_create / edgefl_client_free. */
typedef struct edgefl_allocator {
  void* user;
  void* (*alloc)(void* user, size_t size, size_t align);
  void (*free)(void* user, void* ptr, size_t size);
} edgefl_allocator;

/* ---- Transport ---------------------------------------------------------------------------- */

/* A byte stream the client runs TLS over instead of its own TCP socket (a platform socket API, a
 * proxy, a test pipe). TLS, the certificates and the protocol are unchanged on top of it.
 * Optional: edgefl_client_options.transport = NULL uses the built-in TCP socket. When it is set,
 * all four callbacks are required (else edgefl_client_create() returns
 * EDGEFL_STATUS_INVALID_ARGUMENT); edgefl_client_create() copies the struct, and `user` must stay
 * valid until edgefl_client_free() returns.
 *
 * One connection at a time: connect, then any number of send and recv, then close.
 *   connect  Opens a stream to host:port (edgefl_client_options.host and .port, not resolved by
 *            the client) within timeout_ms (connect_timeout_ms). Over TCP, set TCP_NODELAY as the
 *            built-in socket does: the protocol is request/response. Any status but OK or
 *            CANCELLED is a failed attempt: the client backs off and tries again, up to
 *            max_attempts per round, then fails with EDGEFL_STATUS_CONNECTION_FAILED. close is not
 *            called after a failed connect.
 *   send     Writes up to `size` bytes and sets *sent to how many it took (fewer is fine). *sent
 *            is read after OK and after TIMEOUT (set it to 0 when nothing was written).
 *   recv     Reads up to `capacity` bytes into `buffer` and sets *received. OK with *received = 0
 *            means the peer closed the stream. *received is ignored after TIMEOUT.
 *   close    Ends the stream of the last successful connect; called exactly once for each
 *            successful connect: when the connection is dropped or fails, before a reconnect, or
 *            by edgefl_client_free(). Just before it, the client may make one last send with
 *            timeout_ms = 0 (the TLS close_notify; its result is ignored).
 * send and recv are called with timeout_ms <= 50 (so that edgefl_client_cancel() is noticed
 * promptly) and must not block longer; the client's own deadlines (connect_timeout_ms for the TLS
 * handshake, io_timeout_ms per message) span many calls.
 *
 * Statuses: EDGEFL_STATUS_OK; EDGEFL_STATUS_TIMEOUT, "nothing yet, call again" (from connect: a
 * failed attempt); EDGEFL_STATUS_CANCELLED ends the round as cancelled; anything else is a broken
 * stream, reported as EDGEFL_STATUS_CONNECTION_FAILED (return that one), after which the client
 * closes the stream and reconnects within max_attempts (an interrupted upload resumes). The
 * C-only codes (UNSUPPORTED, OUT_OF_MEMORY, INTERNAL) and unknown values count as
 * CONNECTION_FAILED too.
 *
 * Threading: the callbacks run on the thread that calls edgefl_client_run_round() (close also on
 * the one that calls edgefl_client_free()), one at a time for a client. They must return (no
 * longjmp, no exception) and may not call into the client, except edgefl_client_cancel(). */
typedef struct edgefl_transport {
  void* user;
  edgefl_status (*connect)(void* user, const char* host, uint16_t port, uint32_t timeout_ms);
  edgefl_status (*send)(void* user, const uint8_t* data, size_t size, size_t* sent, uint32_t timeout_ms);
  edgefl_status (*recv)(void* user, uint8_t* buffer, size_t capacity, size_t* received, uint32_t timeout_ms);
  void (*close)(void* user);
} edgefl_transport;

/* ---- Client options ----------------------------------------------------------------------- */

typedef struct edgefl_client_options {
  size_t struct_size; /* sizeof(edgefl_client_options): set by edgefl_client_options_init() */

  /* The server. Strings are copied by edgefl_client_create(); NULL means "". */
  const char* host;        /* "127.0.0.1" */
  uint16_t port;           /* 7443 */
  const char* server_name; /* "localhost": must match the server certificate ("" = no check: unsafe) */
  const char* ca_file;     /* PEM: the CA that issued the server's certificate */
  const char* cert_file;   /* PEM: this device's certificate (its CN is the device id) */
  const char* key_file;    /* PEM: its private key */

  uint64_t memory_budget_bytes; /* 64 MiB: a round that needs more is refused up front */
  uint32_t upload_chunk_bytes;  /* 65536: capped by the server's offer */
  uint32_t connect_timeout_ms;  /* 10000 */
  uint32_t io_timeout_ms;       /* 30000: per message */
  uint32_t backoff_initial_ms;  /* 200: reconnect delay min(max, initial x 2^attempt) x U[0.5, 1] */
  uint32_t backoff_max_ms;      /* 10000 */
  uint32_t max_attempts;        /* 20: connection attempts per round */
  uint32_t max_wait_ms;         /* 3600000: longest total wait for a task in one round */
  int error_feedback;           /* 1: keep the residual of biased codecs across rounds */
  int residual_bf16;            /* 0: residual in float32; 1: in bfloat16 (half the memory) */
  uint64_t seed;                /* 0: from the OS (jitter and upload ids) */

  edgefl_log_fn log; /* NULL: no logging */
  void* log_user;
  int log_level; /* EDGEFL_LOG_INFO: lines above this level are not formatted */

  const edgefl_allocator* allocator; /* NULL: malloc/free. Copied by create (user must stay valid) */
  const edgefl_transport* transport; /* NULL: built-in TCP. Copied by create (user must stay valid) */
} edgefl_client_options;

/* Sets every field to its default (above). Never fails; NULL is ignored. */
EDGEFL_C_API void edgefl_client_options_init(edgefl_client_options* options);

/* ---- The trainer -------------------------------------------------------------------------- */

/* How a tensor was stored in the model file the server started from (devices always train and
 * exchange float32). */
typedef enum edgefl_tensor_dtype {
  EDGEFL_TENSOR_F32 = 1,
  EDGEFL_TENSOR_F16 = 2,
  EDGEFL_TENSOR_BF16 = 3
} edgefl_tensor_dtype;

#define EDGEFL_MAX_TENSOR_RANK 8

/* One tensor of the model (edgefl/tensor_table.h): the flat vector fit() gets is the task's
 * tensors in order, each row-major. */
typedef struct edgefl_tensor {
  const char* name;                       /* "conv1.weight"; unique in the model */
  uint32_t rank;                          /* 0 (a scalar) .. EDGEFL_MAX_TENSOR_RANK */
  uint64_t shape[EDGEFL_MAX_TENSOR_RANK]; /* outermost first; entries past rank are 0 */
  edgefl_tensor_dtype dtype;
} edgefl_tensor;

/* A round's task as the server offered it. Strings, arrays and the struct are valid during the
 * callback only. */
typedef struct edgefl_task {
  uint64_t round_id;
  uint64_t model_version;
  const char* model_spec; /* edgefl/model.h grammar, e.g. "mlp:784-16-10" */
  size_t parameter_count;
  uint32_t batch_size;
  uint32_t local_epochs;
  uint32_t max_steps; /* 0 = no cap */
  float learning_rate;
  float momentum;
  float weight_decay;
  float prox_mu;
  uint64_t training_seed;
  const char* codec; /* the uplink codec spec (edgefl/codec.h grammar) */
  uint64_t codec_seed;
  uint32_t deadline_ms;
  /* The model's tensors (a trainer for a model of its own checks names and shapes in prepare()
   * and returns EDGEFL_STATUS_INVALID_SPEC if they are not its model's). model_spec is "" for a
   * model that is not built-in. */
  size_t tensor_count;
  const edgefl_tensor* tensors;
} edgefl_task;

/* The app's training engine, called from edgefl_client_run_round() on the caller's thread. The
 * callbacks must return (no longjmp, no exception) and may not call into the client, except
 * edgefl_client_cancel(). */
typedef struct edgefl_trainer {
  void* user;
  /* Bytes the trainer holds for `task` besides the model and delta the client owns; counted
   * against memory_budget_bytes before the round starts. NULL: 0. */
  size_t (*memory_bytes)(void* user, const edgefl_task* task);
  /* Binds to the task. EDGEFL_STATUS_INVALID_SPEC if this trainer cannot train the model.
   * NULL: always EDGEFL_STATUS_OK. */
  edgefl_status (*prepare)(void* user, const edgefl_task* task);
  /* Required. global: the model (n floats, read-only); delta: n floats, zeroed, to receive
   * local - global; *samples: examples used (> 0, the update's weight); *loss: mean training
   * loss. Pointers are valid during the call only. Any status but OK ends the round with it. */
  edgefl_status (*fit)(void* user, const float* global, float* delta, size_t n, uint32_t* samples,
                       float* loss);
} edgefl_trainer;

/* ---- Rounds ------------------------------------------------------------------------------- */

typedef enum edgefl_round_outcome {
  EDGEFL_ROUND_NONE = 0,             /* no answer about an update: the round failed (its status says why) */
  EDGEFL_ROUND_ACCEPTED = 1,         /* counted once in the round's aggregate */
  EDGEFL_ROUND_DUPLICATE = 2,        /* was accepted before (a retried commit) */
  EDGEFL_ROUND_STRAGGLER = 3,        /* the round had closed with its quorum */
  EDGEFL_ROUND_LATE = 4,             /* after the deadline */
  EDGEFL_ROUND_REJECTED = 5,         /* the server refused the update */
  EDGEFL_ROUND_SERVER_DRAINING = 6,  /* the server is shutting down: no task */
  EDGEFL_ROUND_ABANDONED = 7,        /* a secure round ended without counting the acked update;
                                        with error feedback the next update carries it */
  EDGEFL_ROUND_MAX_ENUM = 0x7FFFFFFF /* not an outcome: keeps the type 32 bits wide */
} edgefl_round_outcome;

/* "accepted", "duplicate", ...; "unknown" for other values. Never NULL. */
EDGEFL_C_API const char* edgefl_round_outcome_name(edgefl_round_outcome outcome);

/* Memory a round needs, in bytes, as planned before it starts (edgefl::MemoryPlan). */
typedef struct edgefl_memory_plan {
  size_t model, delta, residual, codec_workspace, encoded, trainer, tls;
  size_t total;
} edgefl_memory_plan;

typedef struct edgefl_round_result {
  edgefl_round_outcome outcome;
  uint64_t round_id;
  uint64_t model_version;
  char codec[129];          /* the uplink codec spec, NUL-terminated (at most 128 characters) */
  uint64_t update_bytes;    /* the encoded update */
  uint64_t uploaded_bytes;  /* update bytes sent (more than update_bytes if chunks were resent) */
  uint64_t model_bytes;     /* model bytes downloaded this round */
  uint64_t wire_bytes_up;   /* frames sent */
  uint64_t wire_bytes_down; /* frames received */
  uint32_t samples;
  float train_loss;
  double train_seconds, encode_seconds, wait_seconds, total_seconds;
  uint32_t reconnects;
  uint64_t resumed_at; /* offset an interrupted upload resumed from (0: none) */
  edgefl_memory_plan memory;
} edgefl_round_result;

/* ---- The client --------------------------------------------------------------------------- */

typedef struct edgefl_client edgefl_client; /* opaque */

/* Creates a client and loads its credentials (no network I/O). On success *out is the client;
 * on failure *out is NULL and nothing is kept. Fails: EDGEFL_STATUS_INVALID_ARGUMENT (NULL
 * options/out, options not from edgefl_client_options_init, a transport without all four
 * callbacks), EDGEFL_STATUS_IO_ERROR (a PEM file missing or unreadable), EDGEFL_STATUS_TLS_ERROR
 * (a file that is not a valid certificate or key, or a key that does not match the certificate),
 * EDGEFL_STATUS_OUT_OF_MEMORY. */
EDGEFL_C_API edgefl_status edgefl_client_create(const edgefl_client_options* options, edgefl_client** out,
                                                char* error, size_t error_cap);

/* One round, start to ack ("step"): blocks until the server acknowledges the update, the server
 * drains, or the round fails (see edgefl/client.h). EDGEFL_STATUS_OK with *result filled for every
 * answer of the server (result->outcome, including EDGEFL_ROUND_SERVER_DRAINING). Fails with the
 * network, TLS and round statuses above, EDGEFL_STATUS_MEMORY_BUDGET_EXCEEDED (the plan is in
 * result->memory and error), EDGEFL_STATUS_CANCELLED, or the status a trainer callback returned.
 * An interrupted upload is resumed by the next call. `result` is filled (as far as the round got)
 * on failure too. After EDGEFL_STATUS_OUT_OF_MEMORY or EDGEFL_STATUS_INTERNAL, free the client. */
EDGEFL_C_API edgefl_status edgefl_client_run_round(edgefl_client* client, const edgefl_trainer* trainer,
                                                   edgefl_round_result* result, char* error,
                                                   size_t error_cap);

/* Makes the edgefl_client_run_round() in progress (within about 50 ms of a network wait) and
 * every later one return EDGEFL_STATUS_CANCELLED: a cancelled client stays cancelled (free it).
 * Thread-safe; async-signal-unsafe; NULL is ignored. */
EDGEFL_C_API void edgefl_client_cancel(edgefl_client* client);

/* Closes the connection and releases everything the client holds. NULL is ignored. Not while
 * another thread is inside edgefl_client_run_round() for this client. */
EDGEFL_C_API void edgefl_client_free(edgefl_client* client);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* EDGEFL_EDGEFL_H_ */
