// libedgefl_jni: the native half of org.edgefl.Client (java/org/edgefl/Client.java), over the C
// API (edgefl/edgefl.h). See platforms/android/README.md.
//
// - One Java Client holds one edgefl_client* (a jlong). Calls come on Java threads; the trainer
//   callbacks run on the thread that called runRound(), so they use that call's JNIEnv.
// - fit() hands the model and the delta to Java as direct ByteBuffers over the client's memory
//   (no copy of the model either way), valid during the call only.
// - A Java exception thrown by the trainer ends the round (the callback returns
//   EDGEFL_STATUS_INTERNAL) and is rethrown when runRound() returns; a failed call throws
//   Client.EdgeflException(status, name, reason).
// - Log lines go to logcat (tag "edgefl") on Android and to stderr elsewhere.
#include <jni.h>
#include <stdio.h>
#include <string.h>

#include "edgefl/edgefl.h"

#if defined(__ANDROID__)
#include <android/log.h>
#endif

namespace {

// Classes and members, resolved once in JNI_OnLoad (with the class loader of org.edgefl.Client).
struct JavaRefs {
  jclass client = nullptr;      // org.edgefl.Client
  jclass exception = nullptr;   // org.edgefl.Client$EdgeflException
  jclass task = nullptr;        // org.edgefl.Client$Task
  jclass fit_result = nullptr;  // org.edgefl.Client$FitResult
  jclass trainer = nullptr;     // org.edgefl.Client$Trainer
  jmethodID exception_init = nullptr;
  jmethodID task_init = nullptr;
  jmethodID fit_result_init = nullptr;
  jfieldID fit_result_samples = nullptr;
  jfieldID fit_result_loss = nullptr;
  jmethodID trainer_memory_bytes = nullptr;
  jmethodID trainer_prepare = nullptr;
  jmethodID fit_bridge = nullptr;
};
JavaRefs g_java;

jclass global_class(JNIEnv* env, const char* name) {
  jclass local = env->FindClass(name);
  if (local == nullptr) return nullptr;
  jclass global = static_cast<jclass>(env->NewGlobalRef(local));
  env->DeleteLocalRef(local);
  return global;
}

void log_line(void*, int level, const char* message) {
#if defined(__ANDROID__)
  const int priority = level == EDGEFL_LOG_ERROR     ? ANDROID_LOG_ERROR
                       : level == EDGEFL_LOG_WARNING ? ANDROID_LOG_WARN
                       : level == EDGEFL_LOG_INFO    ? ANDROID_LOG_INFO
                                                     : ANDROID_LOG_DEBUG;
  __android_log_write(priority, "edgefl", message);
#else
  fprintf(stderr, "[edgefl %d] %s\n", level, message);
#endif
}

void throw_edgefl(JNIEnv* env, edgefl_status status, const char* reason) {
  if (env->ExceptionCheck()) return;  // keep the first exception
  jstring name = env->NewStringUTF(edgefl_status_name(status));
  jstring message = env->NewStringUTF(reason[0] != '\0' ? reason : edgefl_status_message(status));
  if (name == nullptr || message == nullptr) return;  // OutOfMemoryError pending
  jobject e =
      env->NewObject(g_java.exception, g_java.exception_init, static_cast<jint>(status), name, message);
  if (e != nullptr) env->Throw(static_cast<jthrowable>(e));
}

// A Java string as UTF-8 for the duration of a scope (modified UTF-8: fine for paths and hosts).
class Utf8 {
 public:
  Utf8(JNIEnv* env, jstring s)
      : env_(env), s_(s), chars_(s != nullptr ? env->GetStringUTFChars(s, nullptr) : nullptr) {}
  ~Utf8() {
    if (chars_ != nullptr) env_->ReleaseStringUTFChars(s_, chars_);
  }
  Utf8(const Utf8&) = delete;
  Utf8& operator=(const Utf8&) = delete;
  const char* get() const { return chars_ != nullptr ? chars_ : ""; }

 private:
  JNIEnv* env_;
  jstring s_;
  const char* chars_;
};

// The trainer callbacks' user data: the Java trainer and the env of the runRound() call.
struct JavaTrainer {
  JNIEnv* env;
  jobject trainer;
};

jobject new_task(JNIEnv* env, const edgefl_task* t) {
  jstring spec = env->NewStringUTF(t->model_spec);
  jstring codec = env->NewStringUTF(t->codec);
  if (spec == nullptr || codec == nullptr) return nullptr;
  jobject task = env->NewObject(
      g_java.task, g_java.task_init, static_cast<jlong>(t->round_id), static_cast<jlong>(t->model_version),
      spec, static_cast<jlong>(t->parameter_count), static_cast<jint>(t->batch_size),
      static_cast<jint>(t->local_epochs), static_cast<jint>(t->max_steps), t->learning_rate, t->momentum,
      t->weight_decay, t->prox_mu, static_cast<jlong>(t->training_seed), codec,
      static_cast<jlong>(t->codec_seed), static_cast<jint>(t->deadline_ms));
  env->DeleteLocalRef(spec);
  env->DeleteLocalRef(codec);
  return task;
}

size_t memory_bytes_cb(void* user, const edgefl_task* t) {
  JavaTrainer* j = static_cast<JavaTrainer*>(user);
  JNIEnv* env = j->env;
  if (env->ExceptionCheck()) return 0;
  jobject task = new_task(env, t);
  if (task == nullptr) return 0;
  const jlong bytes = env->CallLongMethod(j->trainer, g_java.trainer_memory_bytes, task);
  env->DeleteLocalRef(task);
  return env->ExceptionCheck() || bytes < 0 ? 0 : static_cast<size_t>(bytes);
}

edgefl_status prepare_cb(void* user, const edgefl_task* t) {
  JavaTrainer* j = static_cast<JavaTrainer*>(user);
  JNIEnv* env = j->env;
  if (env->ExceptionCheck()) return EDGEFL_STATUS_INTERNAL;
  jobject task = new_task(env, t);
  if (task == nullptr) return EDGEFL_STATUS_OUT_OF_MEMORY;
  const jint status = env->CallIntMethod(j->trainer, g_java.trainer_prepare, task);
  env->DeleteLocalRef(task);
  return env->ExceptionCheck() ? EDGEFL_STATUS_INTERNAL : static_cast<edgefl_status>(status);
}

edgefl_status fit_cb(void* user, const float* global, float* delta, size_t n, uint32_t* samples,
                     float* loss) {
  JavaTrainer* j = static_cast<JavaTrainer*>(user);
  JNIEnv* env = j->env;
  if (env->ExceptionCheck()) return EDGEFL_STATUS_INTERNAL;
  // Java sees the model through a read-only view (Client.fitBridge); the cast only satisfies JNI.
  jobject g = env->NewDirectByteBuffer(const_cast<float*>(global), static_cast<jlong>(n * sizeof(float)));
  jobject d = env->NewDirectByteBuffer(delta, static_cast<jlong>(n * sizeof(float)));
  jobject r = env->NewObject(g_java.fit_result, g_java.fit_result_init);
  if (g == nullptr || d == nullptr || r == nullptr) return EDGEFL_STATUS_OUT_OF_MEMORY;
  const jint status = env->CallStaticIntMethod(g_java.client, g_java.fit_bridge, j->trainer, g, d, r);
  edgefl_status result = EDGEFL_STATUS_INTERNAL;
  if (!env->ExceptionCheck()) {
    const jint s = env->GetIntField(r, g_java.fit_result_samples);
    *samples = s > 0 ? static_cast<uint32_t>(s) : 0u;
    *loss = env->GetFloatField(r, g_java.fit_result_loss);
    result = static_cast<edgefl_status>(status);
  }
  env->DeleteLocalRef(g);
  env->DeleteLocalRef(d);
  env->DeleteLocalRef(r);
  return result;
}

edgefl_client* from_handle(jlong handle) {
  return reinterpret_cast<edgefl_client*>(static_cast<intptr_t>(handle));
}

}  // namespace

extern "C" {

JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM* vm, void*) {
  JNIEnv* env = nullptr;
  if (vm->GetEnv(reinterpret_cast<void**>(&env), JNI_VERSION_1_6) != JNI_OK) return JNI_ERR;
  g_java.client = global_class(env, "org/edgefl/Client");
  g_java.exception = global_class(env, "org/edgefl/Client$EdgeflException");
  g_java.task = global_class(env, "org/edgefl/Client$Task");
  g_java.fit_result = global_class(env, "org/edgefl/Client$FitResult");
  g_java.trainer = global_class(env, "org/edgefl/Client$Trainer");
  if (g_java.client == nullptr || g_java.exception == nullptr || g_java.task == nullptr ||
      g_java.fit_result == nullptr || g_java.trainer == nullptr) {
    return JNI_ERR;
  }
  g_java.exception_init =
      env->GetMethodID(g_java.exception, "<init>", "(ILjava/lang/String;Ljava/lang/String;)V");
  g_java.task_init =
      env->GetMethodID(g_java.task, "<init>", "(JJLjava/lang/String;JIIIFFFFJLjava/lang/String;JI)V");
  g_java.fit_result_init = env->GetMethodID(g_java.fit_result, "<init>", "()V");
  g_java.fit_result_samples = env->GetFieldID(g_java.fit_result, "samples", "I");
  g_java.fit_result_loss = env->GetFieldID(g_java.fit_result, "loss", "F");
  g_java.trainer_memory_bytes =
      env->GetMethodID(g_java.trainer, "memoryBytes", "(Lorg/edgefl/Client$Task;)J");
  g_java.trainer_prepare = env->GetMethodID(g_java.trainer, "prepare", "(Lorg/edgefl/Client$Task;)I");
  g_java.fit_bridge = env->GetStaticMethodID(g_java.client, "fitBridge",
                                             "(Lorg/edgefl/Client$Trainer;Ljava/nio/ByteBuffer;Ljava/nio/"
                                             "ByteBuffer;Lorg/edgefl/Client$FitResult;)I");
  if (env->ExceptionCheck()) return JNI_ERR;  // a signature does not match Client.java
  return JNI_VERSION_1_6;
}

JNIEXPORT jlong JNICALL Java_org_edgefl_Client_nativeCreate(JNIEnv* env, jclass, jstring host, jint port,
                                                            jstring server_name, jstring ca_file,
                                                            jstring cert_file, jstring key_file,
                                                            jlong memory_budget_bytes,
                                                            jint connect_timeout_ms, jint io_timeout_ms,
                                                            jint max_attempts, jint max_wait_ms) {
  const Utf8 host_text(env, host), name_text(env, server_name), ca_text(env, ca_file),
      cert_text(env, cert_file), key_text(env, key_file);
  if (env->ExceptionCheck()) return 0;
  edgefl_client_options o;
  edgefl_client_options_init(&o);
  o.host = host_text.get();
  o.port = static_cast<uint16_t>(port);
  o.server_name = name_text.get();
  o.ca_file = ca_text.get();
  o.cert_file = cert_text.get();
  o.key_file = key_text.get();
  o.memory_budget_bytes = static_cast<uint64_t>(memory_budget_bytes);
  o.connect_timeout_ms = static_cast<uint32_t>(connect_timeout_ms);
  o.io_timeout_ms = static_cast<uint32_t>(io_timeout_ms);
  o.max_attempts = static_cast<uint32_t>(max_attempts);
  o.max_wait_ms = static_cast<uint32_t>(max_wait_ms);
  o.log = log_line;
  o.log_level = EDGEFL_LOG_INFO;
  if (port <= 0 || port > 65535) {
    throw_edgefl(env, EDGEFL_STATUS_INVALID_ARGUMENT, "port must be in [1, 65535]");
    return 0;
  }
  edgefl_client* client = nullptr;
  char error[512];
  const edgefl_status s = edgefl_client_create(&o, &client, error, sizeof error);
  if (s != EDGEFL_STATUS_OK) {
    throw_edgefl(env, s, error);
    return 0;
  }
  return static_cast<jlong>(reinterpret_cast<intptr_t>(client));
}

JNIEXPORT void JNICALL Java_org_edgefl_Client_nativeRunRound(JNIEnv* env, jclass, jlong handle,
                                                             jobject trainer, jlongArray longs,
                                                             jdoubleArray doubles, jobjectArray text) {
  if (trainer == nullptr) {
    throw_edgefl(env, EDGEFL_STATUS_INVALID_ARGUMENT, "trainer may not be null");
    return;
  }
  JavaTrainer j{env, trainer};
  edgefl_trainer t;
  t.user = &j;
  t.memory_bytes = memory_bytes_cb;
  t.prepare = prepare_cb;
  t.fit = fit_cb;
  edgefl_round_result r;
  char error[512];
  const edgefl_status s = edgefl_client_run_round(from_handle(handle), &t, &r, error, sizeof error);
  if (env->ExceptionCheck()) return;  // the trainer threw: rethrown as is
  if (s != EDGEFL_STATUS_OK) {
    throw_edgefl(env, s, error);
    return;
  }
  const jlong l[10] = {static_cast<jlong>(r.round_id),        static_cast<jlong>(r.model_version),
                       static_cast<jlong>(r.update_bytes),    static_cast<jlong>(r.uploaded_bytes),
                       static_cast<jlong>(r.model_bytes),     static_cast<jlong>(r.wire_bytes_up),
                       static_cast<jlong>(r.wire_bytes_down), static_cast<jlong>(r.samples),
                       static_cast<jlong>(r.reconnects),      static_cast<jlong>(r.memory.total)};
  const jdouble d[5] = {r.train_loss, r.train_seconds, r.encode_seconds, r.wait_seconds, r.total_seconds};
  env->SetLongArrayRegion(longs, 0, 10, l);
  env->SetDoubleArrayRegion(doubles, 0, 5, d);
  jstring outcome = env->NewStringUTF(edgefl_round_outcome_name(r.outcome));
  jstring codec = env->NewStringUTF(r.codec);
  if (outcome == nullptr || codec == nullptr) return;
  env->SetObjectArrayElement(text, 0, outcome);
  env->SetObjectArrayElement(text, 1, codec);
}

JNIEXPORT void JNICALL Java_org_edgefl_Client_nativeCancel(JNIEnv*, jclass, jlong handle) {
  edgefl_client_cancel(from_handle(handle));
}

JNIEXPORT void JNICALL Java_org_edgefl_Client_nativeFree(JNIEnv*, jclass, jlong handle) {
  edgefl_client_free(from_handle(handle));
}

}  // extern "C"
