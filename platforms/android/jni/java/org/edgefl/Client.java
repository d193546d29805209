package org.edgefl;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;

/**
 * A federated-learning device: rounds against edgefl-server over mutual TLS. A thin Java layer
 * over the C API (edgefl/edgefl.h) through libedgefl_jni (platforms/android/jni/edgefl_jni.cpp).
 *
 * <pre>
 *   Client.Options o = new Client.Options();
 *   o.host = "fl.example.com"; o.port = 7443; o.serverName = "fl.example.com";
 *   o.caFile = dir + "/ca.crt"; o.certFile = dir + "/device.crt"; o.keyFile = dir + "/device.key";
 *   try (Client client = new Client(o)) {
 *     Client.RoundResult r = client.runRound(myTrainer);   // blocks: one round (not on the UI thread)
 *   } catch (Client.EdgeflException e) { ... e.statusName ... }
 * </pre>
 *
 * Threading: one thread at a time calls runRound(); cancel() may be called from any thread;
 * close() not while runRound() runs. The trainer is called on the thread that called runRound().
 */
public final class Client implements AutoCloseable {
  static {
    System.loadLibrary("edgefl_jni");
  }

  /** Status codes (edgefl_status in edgefl.h); a trainer returns OK or one of these. */
  public static final int OK = 0;
  public static final int INVALID_ARGUMENT = 1;
  public static final int INVALID_SPEC = 2;
  public static final int IO_ERROR = 80;
  public static final int CONNECTION_FAILED = 81;
  public static final int TIMEOUT = 82;
  public static final int TLS_HANDSHAKE_FAILED = 83;
  public static final int TLS_ERROR = 84;
  public static final int UNAUTHORIZED = 85;
  public static final int MEMORY_BUDGET_EXCEEDED = 88;
  public static final int CANCELLED = 89;
  public static final int UNSUPPORTED = 100;
  public static final int OUT_OF_MEMORY = 101;
  public static final int INTERNAL = 102;

  /** edgefl_client_options: the defaults of edgefl_client_options_init(). */
  public static final class Options {
    public String host = "127.0.0.1";
    public int port = 7443;
    public String serverName = "localhost";
    public String caFile = "";
    public String certFile = "";
    public String keyFile = "";
    public long memoryBudgetBytes = 64L << 20;
    public int connectTimeoutMs = 10000;
    public int ioTimeoutMs = 30000;
    public int maxAttempts = 20;
    public int maxWaitMs = 3600000;
  }

  /** A round's task as the server offered it (edgefl_task). */
  public static final class Task {
    public final long roundId, modelVersion;
    public final String modelSpec;
    public final long parameterCount;
    public final int batchSize, localEpochs, maxSteps;
    public final float learningRate, momentum, weightDecay, proxMu;
    public final long trainingSeed;
    public final String codec;
    public final long codecSeed;
    public final int deadlineMs;

    Task(long roundId, long modelVersion, String modelSpec, long parameterCount, int batchSize, int localEpochs,
         int maxSteps, float learningRate, float momentum, float weightDecay, float proxMu, long trainingSeed,
         String codec, long codecSeed, int deadlineMs) {
      this.roundId = roundId;
      this.modelVersion = modelVersion;
      this.modelSpec = modelSpec;
      this.parameterCount = parameterCount;
      this.batchSize = batchSize;
      this.localEpochs = localEpochs;
      this.maxSteps = maxSteps;
      this.learningRate = learningRate;
      this.momentum = momentum;
      this.weightDecay = weightDecay;
      this.proxMu = proxMu;
      this.trainingSeed = trainingSeed;
      this.codec = codec;
      this.codecSeed = codecSeed;
      this.deadlineMs = deadlineMs;
    }
  }

  /** What fit() reports besides the delta. */
  public static final class FitResult {
    public int samples;  // examples used: the update's weight (> 0)
    public float loss;   // mean training loss
  }

  /** The app's training engine (edgefl_trainer). Exceptions end the round and propagate. */
  public interface Trainer {
    /** Bytes the trainer holds for the task, counted against the memory budget. */
    default long memoryBytes(Task task) {
      return 0;
    }

    /** Binds to the task; INVALID_SPEC if this trainer cannot train the model. */
    default int prepare(Task task) {
      return OK;
    }

    /**
     * global: the model (read-only); delta: zeroed, receives local - global. Both are views of
     * native memory, valid only during this call: never keep them.
     */
    int fit(FloatBuffer global, FloatBuffer delta, FitResult result);
  }

  /** edgefl_round_result (the main fields). */
  public static final class RoundResult {
    public final String outcome;  // "accepted", "duplicate", "straggler", "late", "rejected", "server_draining"
    public final long roundId, modelVersion, updateBytes, uploadedBytes, modelBytes, wireBytesUp, wireBytesDown;
    public final long samples, reconnects, memoryPlanBytes;
    public final String codec;
    public final double trainLoss, trainSeconds, encodeSeconds, waitSeconds, totalSeconds;

    RoundResult(String outcome, String codec, long[] l, double[] d) {
      this.outcome = outcome;
      this.codec = codec;
      roundId = l[0];
      modelVersion = l[1];
      updateBytes = l[2];
      uploadedBytes = l[3];
      modelBytes = l[4];
      wireBytesUp = l[5];
      wireBytesDown = l[6];
      samples = l[7];
      reconnects = l[8];
      memoryPlanBytes = l[9];
      trainLoss = d[0];
      trainSeconds = d[1];
      encodeSeconds = d[2];
      waitSeconds = d[3];
      totalSeconds = d[4];
    }
  }

  /** A failed call: the edgefl_status, its name and the library's one-line reason. */
  public static final class EdgeflException extends Exception {
    private static final long serialVersionUID = 1L;
    public final int status;
    public final String statusName;

    EdgeflException(int status, String statusName, String message) {
      super(statusName + ": " + message);
      this.status = status;
      this.statusName = statusName;
    }
  }

  private long handle;

  /** Creates the client and loads its credentials (no network I/O). */
  public Client(Options o) throws EdgeflException {
    handle = nativeCreate(o.host, o.port, o.serverName, o.caFile, o.certFile, o.keyFile, o.memoryBudgetBytes,
                          o.connectTimeoutMs, o.ioTimeoutMs, o.maxAttempts, o.maxWaitMs);
  }

  /** One round, start to ack (edgefl_client_run_round). Blocks. */
  public RoundResult runRound(Trainer trainer) throws EdgeflException {
    if (handle == 0) throw new IllegalStateException("closed");
    long[] l = new long[10];
    double[] d = new double[5];
    String[] text = new String[2];
    nativeRunRound(handle, trainer, l, d, text);
    return new RoundResult(text[0], text[1], l, d);
  }

  /** Makes the round in progress, and every later one, fail with CANCELLED. Any thread. */
  public void cancel() {
    if (handle != 0) nativeCancel(handle);
  }

  @Override
  public void close() {
    if (handle != 0) {
      nativeFree(handle);
      handle = 0;
    }
  }

  // Called by the native fit callback: wraps native memory as float views for the trainer.
  private static int fitBridge(Trainer trainer, ByteBuffer global, ByteBuffer delta, FitResult result) {
    FloatBuffer g = global.order(ByteOrder.nativeOrder()).asFloatBuffer().asReadOnlyBuffer();
    FloatBuffer out = delta.order(ByteOrder.nativeOrder()).asFloatBuffer();
    return trainer.fit(g, out, result);
  }

  private static native long nativeCreate(String host, int port, String serverName, String caFile, String certFile,
                                          String keyFile, long memoryBudgetBytes, int connectTimeoutMs,
                                          int ioTimeoutMs, int maxAttempts, int maxWaitMs) throws EdgeflException;
  private static native void nativeRunRound(long handle, Trainer trainer, long[] longs, double[] doubles,
                                            String[] text) throws EdgeflException;
  private static native void nativeCancel(long handle);
  private static native void nativeFree(long handle);
}
