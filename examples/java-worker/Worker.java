// A Java worker with no SDK: only the stubs protoc generates from protos/ (gen/), Debian's
// grpc-java and protobuf-java. It follows docs/clients.md: a key per logical Reserve, reused
// on its retries; retries of UNAVAILABLE and DEADLINE_EXCEEDED with full-jitter backoff;
// refusals are answers, not errors; the identical Settle resent until a settled answer.
//
//   java -cp "out:$(./build.sh --classpath)" Worker --target HOST:PORT --budget ID \
//       --amount N --used M
//
// Exit 0 with one JSON line once settled, 2 on a refusal, 1 on any other failure.

import com.google.protobuf.ByteString;
import com.google.protobuf.UnknownFieldSet;
import dev.earmark.v1.BudgetGrpc;
import dev.earmark.v1.Outcome;
import dev.earmark.v1.ReservationState;
import dev.earmark.v1.ReserveRequest;
import dev.earmark.v1.ReserveResponse;
import dev.earmark.v1.SettleRequest;
import dev.earmark.v1.SettleResponse;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.Status;
import io.grpc.StatusRuntimeException;
import io.grpc.netty.NettyChannelBuilder;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

public final class Worker {
  // The SDKs' defaults (docs/clients.md, Retries and Deadlines).
  static final int ATTEMPTS = 5;
  static final long BASE_MS = 50;
  static final long MAX_MS = 2000;
  static final long DEADLINE_MS = 5000;

  static final Metadata.Key<byte[]> DETAILS =
      Metadata.Key.of("grpc-status-details-bin", Metadata.BINARY_BYTE_MARSHALLER);

  public static void main(String[] argv) throws Exception {
    Map<String, String> args = new HashMap<>();
    for (int i = 0; i + 1 < argv.length; i += 2) args.put(argv[i], argv[i + 1]);
    String target = args.getOrDefault("--target", "127.0.0.1:50051");
    String budget = args.get("--budget");
    long amount = Long.parseLong(args.getOrDefault("--amount", "1000"));
    long used = Long.parseLong(args.getOrDefault("--used", "0"));
    if (budget == null) {
      System.err.println("usage: Worker --target HOST:PORT --budget ID --amount N --used M");
      System.exit(64);
    }

    // Netty is the transport Debian's grpc-java carries (no grpc-okhttp); plaintext because
    // the sidecar listens on loopback beside the worker.
    ManagedChannel channel = NettyChannelBuilder.forTarget(target).usePlaintext().build();
    int code = 1;
    try {
      BudgetGrpc.BudgetBlockingStub stub = BudgetGrpc.newBlockingStub(channel);
      // One key for this logical Reserve, built once so every retry sends the same request:
      // a retry after a lost answer then gets the same hold back instead of a second one.
      ReserveRequest reserve =
          ReserveRequest.newBuilder()
              .setBudgetId(budget)
              .setAmount(amount)
              .setIdempotencyKey(UUID.randomUUID().toString())
              .build();
      ReserveResponse held = call(() -> deadlined(stub).reserve(reserve));
      if (!held.getAdmitted()) {
        // A refusal is an answer (it holds nothing, so nothing to settle): never retried.
        System.out.printf(
            "{\"admitted\":false,\"reason\":\"%s\",\"message\":%s}%n",
            held.getReason(), quote(held.getMessage()));
        code = 2;
        return;
      }

      // ... the work the hold pays for would run here, charging before each step ...

      // Settle carries no key: the reservation id and `used` identify it, so the identical
      // request is resent, and a repeat answers the same and charges nothing twice.
      SettleRequest settle =
          SettleRequest.newBuilder()
              .setReservationId(held.getReservationId())
              .setUsed(used)
              .setOutcome(Outcome.OUTCOME_SUCCEEDED)
              .build();
      SettleResponse settled = call(() -> deadlined(stub).settle(settle));
      ReservationState state = settled.getState();
      if (state != ReservationState.RESERVATION_STATE_SETTLED
          && state != ReservationState.RESERVATION_STATE_EXPIRED
          && state != ReservationState.RESERVATION_STATE_IN_DOUBT) {
        // Any other OK answer is not settled (docs/clients.md, Settlement).
        System.err.println("settle answered without settling: " + state);
        return;
      }
      System.out.printf(
          "{\"reservation_id\":\"%s\",\"admitted\":true,\"state\":\"%s\",\"used\":%d,"
              + "\"charged\":%d,\"released\":%d}%n",
          held.getReservationId(), state, used, settled.getCharged(), settled.getReleased());
      code = 0;
    } catch (StatusRuntimeException e) {
      // Final codes (and retryable ones past the last attempt) end the call; a real worker
      // would keep the Settle in a journal and send it again later.
      System.err.printf(
          "{\"code\":\"%s\",\"reason\":\"%s\",\"description\":%s}%n",
          e.getStatus().getCode(), reason(e), quote(e.getStatus().getDescription()));
    } finally {
      channel.shutdownNow().awaitTermination(5, TimeUnit.SECONDS);
      System.exit(code);
    }
  }

  // A deadline per attempt, so one attempt stuck on a dead peer cannot eat the others.
  static BudgetGrpc.BudgetBlockingStub deadlined(BudgetGrpc.BudgetBlockingStub stub) {
    return stub.withDeadlineAfter(DEADLINE_MS, TimeUnit.MILLISECONDS);
  }

  // Retries the same request on UNAVAILABLE and DEADLINE_EXCEEDED (it may have been decided,
  // and its key or identity makes the retry answer the same), with full-jitter backoff so
  // workers that failed together do not come back together. Every other code is final.
  static <T> T call(Supplier<T> attempt) throws InterruptedException {
    for (int n = 0; ; n++) {
      try {
        return attempt.get();
      } catch (StatusRuntimeException e) {
        Status.Code c = e.getStatus().getCode();
        boolean retryable = c == Status.Code.UNAVAILABLE || c == Status.Code.DEADLINE_EXCEEDED;
        if (!retryable || n + 1 >= ATTEMPTS) throw e;
        long cap = Math.min(MAX_MS, BASE_MS << n);
        Thread.sleep(ThreadLocalRandom.current().nextLong(cap + 1));
      }
    }
  }

  // The reason of the google.rpc.ErrorInfo in the status details, "" when there is none.
  // Debian ships no proto-google-common-protos (no com.google.rpc classes, so grpc-protobuf's
  // StatusProto cannot load), so the trailer is read field by field with protobuf-java:
  // Status.details (3) is a repeated Any {type_url = 1, value = 2}; ErrorInfo.reason is 1.
  static String reason(StatusRuntimeException e) {
    Metadata trailers = e.getTrailers();
    byte[] bytes = trailers == null ? null : trailers.get(DETAILS);
    if (bytes == null) return "";
    try {
      UnknownFieldSet status = UnknownFieldSet.parseFrom(bytes);
      // Trust the details only when they describe this status (docs/clients.md, Retries).
      List<Long> code = status.getField(1).getVarintList();
      if (code.isEmpty() || code.get(0) != e.getStatus().getCode().value()) return "";
      for (ByteString any : status.getField(3).getLengthDelimitedList()) {
        UnknownFieldSet fields = UnknownFieldSet.parseFrom(any);
        List<ByteString> url = fields.getField(1).getLengthDelimitedList();
        if (url.isEmpty() || !url.get(0).toStringUtf8().endsWith("/google.rpc.ErrorInfo")) {
          continue;
        }
        for (ByteString info : fields.getField(2).getLengthDelimitedList()) {
          List<ByteString> reason =
              UnknownFieldSet.parseFrom(info).getField(1).getLengthDelimitedList();
          if (!reason.isEmpty()) return reason.get(0).toStringUtf8();
        }
      }
    } catch (Exception malformed) {
      // Details are advisory: a status without readable ones still has its code.
    }
    return "";
  }

  static String quote(String s) {
    if (s == null) return "null";
    StringBuilder out = new StringBuilder("\"");
    for (char ch : s.toCharArray()) {
      if (ch == '"' || ch == '\\') out.append('\\').append(ch);
      else if (ch < 0x20) out.append(String.format("\\u%04x", (int) ch));
      else out.append(ch);
    }
    return out.append('"').toString();
  }
}
