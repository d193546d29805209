package org.edgefl;

import java.nio.FloatBuffer;
import java.nio.ReadOnlyBufferException;
import java.util.Random;

/**
 * The JNI shim on a desktop JVM, against a running edgefl-server (tests/capi/round_test.sh):
 * a missing certificate, a trainer that throws, then an accepted round.
 *
 *   java -Djava.library.path=DIR -cp edgefl_jni.jar org.edgefl.ClientSmokeTest HOST:PORT CA CERT KEY
 */
public final class ClientSmokeTest {
  private static int failures = 0;

  private static void check(boolean ok, String what) {
    if (!ok) {
      ++failures;
      System.err.println("ClientSmokeTest: FAILED: " + what);
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 4) {
      System.err.println("usage: ClientSmokeTest HOST:PORT CA CERT KEY");
      System.exit(2);
    }
    int colon = args[0].lastIndexOf(':');
    Client.Options o = new Client.Options();
    o.host = args[0].substring(0, colon);
    o.port = Integer.parseInt(args[0].substring(colon + 1));
    o.caFile = args[1];
    o.certFile = args[2];
    o.keyFile = args[3];
    o.memoryBudgetBytes = 8L << 20;

    // 1. A missing key file: IO_ERROR, with the file named.
    Client.Options missing = new Client.Options();
    missing.caFile = args[1];
    missing.certFile = args[2];
    missing.keyFile = args[3] + ".missing";
    try (Client c = new Client(missing)) {
      check(false, "a missing key file was accepted");
    } catch (Client.EdgeflException e) {
      check(e.status == Client.IO_ERROR && e.statusName.equals("io_error"), "status " + e.statusName);
      check(e.getMessage().contains(".missing"), "message names the file: " + e.getMessage());
    }

    try (Client client = new Client(o)) {
      // 2. A trainer that throws: the round ends and the exception comes back unchanged.
      try {
        client.runRound((global, delta, result) -> {
          throw new IllegalStateException("trainer broke");
        });
        check(false, "a throwing trainer completed a round");
      } catch (IllegalStateException e) {
        check(e.getMessage().equals("trainer broke"), "exception " + e);
      }

      // 3. A round: a small random delta.
      final Random random = new Random(7);
      final long[] seen = new long[1];
      Client.RoundResult r = client.runRound(new Client.Trainer() {
        @Override
        public int prepare(Client.Task task) {
          check(task.modelSpec.equals("mlp:784-16-10"), "model spec " + task.modelSpec);
          seen[0] = task.parameterCount;
          return Client.OK;
        }

        @Override
        public int fit(FloatBuffer global, FloatBuffer delta, Client.FitResult result) {
          check(global.capacity() == seen[0] && delta.capacity() == seen[0], "buffer sizes");
          try {
            global.put(0, 1.0f);
            check(false, "the global model is writable");
          } catch (ReadOnlyBufferException expected) {
            // read-only, as documented
          }
          for (int i = 0; i < delta.capacity(); ++i) delta.put(i, (random.nextFloat() - 0.5f) * 1e-3f);
          result.samples = 16;
          result.loss = 0.25f;
          return Client.OK;
        }
      });
      check(r.outcome.equals("accepted"), "outcome " + r.outcome);
      check(r.samples == 16 && r.updateBytes > 0 && r.codec.length() > 0, "result fields");
      System.out.println("ClientSmokeTest: round " + r.roundId + ": " + r.outcome + ", " + r.updateBytes +
                         " update bytes (" + r.codec + "), memory plan " + r.memoryPlanBytes + " bytes");
    }
    System.out.println("ClientSmokeTest: " + (failures == 0 ? "ok" : failures + " failed"));
    System.exit(failures == 0 ? 0 : 1);
  }
}
