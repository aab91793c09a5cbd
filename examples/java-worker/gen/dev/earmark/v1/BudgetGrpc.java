package dev.earmark.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 * <pre>
 * What workers call, on localhost, before they spend.
 * </pre>
 */
@javax.annotation.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: earmark/v1/budget.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class BudgetGrpc {

  private BudgetGrpc() {}

  public static final String SERVICE_NAME = "earmark.v1.Budget";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.ReserveRequest,
      dev.earmark.v1.ReserveResponse> getReserveMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Reserve",
      requestType = dev.earmark.v1.ReserveRequest.class,
      responseType = dev.earmark.v1.ReserveResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.ReserveRequest,
      dev.earmark.v1.ReserveResponse> getReserveMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.ReserveRequest, dev.earmark.v1.ReserveResponse> getReserveMethod;
    if ((getReserveMethod = BudgetGrpc.getReserveMethod) == null) {
      synchronized (BudgetGrpc.class) {
        if ((getReserveMethod = BudgetGrpc.getReserveMethod) == null) {
          BudgetGrpc.getReserveMethod = getReserveMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.ReserveRequest, dev.earmark.v1.ReserveResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Reserve"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ReserveRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ReserveResponse.getDefaultInstance()))
              .setSchemaDescriptor(new BudgetMethodDescriptorSupplier("Reserve"))
              .build();
        }
      }
    }
    return getReserveMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.ChargeRequest,
      dev.earmark.v1.ChargeResponse> getChargeMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Charge",
      requestType = dev.earmark.v1.ChargeRequest.class,
      responseType = dev.earmark.v1.ChargeResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.ChargeRequest,
      dev.earmark.v1.ChargeResponse> getChargeMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.ChargeRequest, dev.earmark.v1.ChargeResponse> getChargeMethod;
    if ((getChargeMethod = BudgetGrpc.getChargeMethod) == null) {
      synchronized (BudgetGrpc.class) {
        if ((getChargeMethod = BudgetGrpc.getChargeMethod) == null) {
          BudgetGrpc.getChargeMethod = getChargeMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.ChargeRequest, dev.earmark.v1.ChargeResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Charge"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ChargeRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ChargeResponse.getDefaultInstance()))
              .setSchemaDescriptor(new BudgetMethodDescriptorSupplier("Charge"))
              .build();
        }
      }
    }
    return getChargeMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.RenewRequest,
      dev.earmark.v1.RenewResponse> getRenewMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Renew",
      requestType = dev.earmark.v1.RenewRequest.class,
      responseType = dev.earmark.v1.RenewResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.RenewRequest,
      dev.earmark.v1.RenewResponse> getRenewMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.RenewRequest, dev.earmark.v1.RenewResponse> getRenewMethod;
    if ((getRenewMethod = BudgetGrpc.getRenewMethod) == null) {
      synchronized (BudgetGrpc.class) {
        if ((getRenewMethod = BudgetGrpc.getRenewMethod) == null) {
          BudgetGrpc.getRenewMethod = getRenewMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.RenewRequest, dev.earmark.v1.RenewResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Renew"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.RenewRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.RenewResponse.getDefaultInstance()))
              .setSchemaDescriptor(new BudgetMethodDescriptorSupplier("Renew"))
              .build();
        }
      }
    }
    return getRenewMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.SettleRequest,
      dev.earmark.v1.SettleResponse> getSettleMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Settle",
      requestType = dev.earmark.v1.SettleRequest.class,
      responseType = dev.earmark.v1.SettleResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.SettleRequest,
      dev.earmark.v1.SettleResponse> getSettleMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.SettleRequest, dev.earmark.v1.SettleResponse> getSettleMethod;
    if ((getSettleMethod = BudgetGrpc.getSettleMethod) == null) {
      synchronized (BudgetGrpc.class) {
        if ((getSettleMethod = BudgetGrpc.getSettleMethod) == null) {
          BudgetGrpc.getSettleMethod = getSettleMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.SettleRequest, dev.earmark.v1.SettleResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Settle"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.SettleRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.SettleResponse.getDefaultInstance()))
              .setSchemaDescriptor(new BudgetMethodDescriptorSupplier("Settle"))
              .build();
        }
      }
    }
    return getSettleMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static BudgetStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<BudgetStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<BudgetStub>() {
        @java.lang.Override
        public BudgetStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new BudgetStub(channel, callOptions);
        }
      };
    return BudgetStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static BudgetBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<BudgetBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<BudgetBlockingStub>() {
        @java.lang.Override
        public BudgetBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new BudgetBlockingStub(channel, callOptions);
        }
      };
    return BudgetBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static BudgetFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<BudgetFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<BudgetFutureStub>() {
        @java.lang.Override
        public BudgetFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new BudgetFutureStub(channel, callOptions);
        }
      };
    return BudgetFutureStub.newStub(factory, channel);
  }

  /**
   * <pre>
   * What workers call, on localhost, before they spend.
   * </pre>
   */
  public static abstract class BudgetImplBase implements io.grpc.BindableService {

    /**
     * <pre>
     * Checks and holds part of a budget in one serializable transaction.
     * A refusal is a normal response (admitted = false), not an error.
     * </pre>
     */
    public void reserve(dev.earmark.v1.ReserveRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ReserveResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getReserveMethod(), responseObserver);
    }

    /**
     * <pre>
     * Debits one step against a hold before the step runs, capped at the hold.
     * </pre>
     */
    public void charge(dev.earmark.v1.ChargeRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ChargeResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getChargeMethod(), responseObserver);
    }

    /**
     * <pre>
     * Extends a hold's lease while the worker lives.
     * </pre>
     */
    public void renew(dev.earmark.v1.RenewRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.RenewResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getRenewMethod(), responseObserver);
    }

    /**
     * <pre>
     * Charges what the job used and returns the rest of the hold, exactly once.
     * </pre>
     */
    public void settle(dev.earmark.v1.SettleRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.SettleResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getSettleMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getReserveMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.ReserveRequest,
                dev.earmark.v1.ReserveResponse>(
                  this, METHODID_RESERVE)))
          .addMethod(
            getChargeMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.ChargeRequest,
                dev.earmark.v1.ChargeResponse>(
                  this, METHODID_CHARGE)))
          .addMethod(
            getRenewMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.RenewRequest,
                dev.earmark.v1.RenewResponse>(
                  this, METHODID_RENEW)))
          .addMethod(
            getSettleMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.SettleRequest,
                dev.earmark.v1.SettleResponse>(
                  this, METHODID_SETTLE)))
          .build();
    }
  }

  /**
   * <pre>
   * What workers call, on localhost, before they spend.
   * </pre>
   */
  public static final class BudgetStub extends io.grpc.stub.AbstractAsyncStub<BudgetStub> {
    private BudgetStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected BudgetStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new BudgetStub(channel, callOptions);
    }

    /**
     * <pre>
     * Checks and holds part of a budget in one serializable transaction.
     * A refusal is a normal response (admitted = false), not an error.
     * </pre>
     */
    public void reserve(dev.earmark.v1.ReserveRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ReserveResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getReserveMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Debits one step against a hold before the step runs, capped at the hold.
     * </pre>
     */
    public void charge(dev.earmark.v1.ChargeRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ChargeResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getChargeMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Extends a hold's lease while the worker lives.
     * </pre>
     */
    public void renew(dev.earmark.v1.RenewRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.RenewResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getRenewMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Charges what the job used and returns the rest of the hold, exactly once.
     * </pre>
     */
    public void settle(dev.earmark.v1.SettleRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.SettleResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getSettleMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   * <pre>
   * What workers call, on localhost, before they spend.
   * </pre>
   */
  public static final class BudgetBlockingStub extends io.grpc.stub.AbstractBlockingStub<BudgetBlockingStub> {
    private BudgetBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected BudgetBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new BudgetBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * Checks and holds part of a budget in one serializable transaction.
     * A refusal is a normal response (admitted = false), not an error.
     * </pre>
     */
    public dev.earmark.v1.ReserveResponse reserve(dev.earmark.v1.ReserveRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getReserveMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Debits one step against a hold before the step runs, capped at the hold.
     * </pre>
     */
    public dev.earmark.v1.ChargeResponse charge(dev.earmark.v1.ChargeRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getChargeMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Extends a hold's lease while the worker lives.
     * </pre>
     */
    public dev.earmark.v1.RenewResponse renew(dev.earmark.v1.RenewRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getRenewMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Charges what the job used and returns the rest of the hold, exactly once.
     * </pre>
     */
    public dev.earmark.v1.SettleResponse settle(dev.earmark.v1.SettleRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getSettleMethod(), getCallOptions(), request);
    }
  }

  /**
   * <pre>
   * What workers call, on localhost, before they spend.
   * </pre>
   */
  public static final class BudgetFutureStub extends io.grpc.stub.AbstractFutureStub<BudgetFutureStub> {
    private BudgetFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected BudgetFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new BudgetFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * Checks and holds part of a budget in one serializable transaction.
     * A refusal is a normal response (admitted = false), not an error.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.ReserveResponse> reserve(
        dev.earmark.v1.ReserveRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getReserveMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Debits one step against a hold before the step runs, capped at the hold.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.ChargeResponse> charge(
        dev.earmark.v1.ChargeRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getChargeMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Extends a hold's lease while the worker lives.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.RenewResponse> renew(
        dev.earmark.v1.RenewRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getRenewMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Charges what the job used and returns the rest of the hold, exactly once.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.SettleResponse> settle(
        dev.earmark.v1.SettleRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getSettleMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_RESERVE = 0;
  private static final int METHODID_CHARGE = 1;
  private static final int METHODID_RENEW = 2;
  private static final int METHODID_SETTLE = 3;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final BudgetImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(BudgetImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_RESERVE:
          serviceImpl.reserve((dev.earmark.v1.ReserveRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.ReserveResponse>) responseObserver);
          break;
        case METHODID_CHARGE:
          serviceImpl.charge((dev.earmark.v1.ChargeRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.ChargeResponse>) responseObserver);
          break;
        case METHODID_RENEW:
          serviceImpl.renew((dev.earmark.v1.RenewRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.RenewResponse>) responseObserver);
          break;
        case METHODID_SETTLE:
          serviceImpl.settle((dev.earmark.v1.SettleRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.SettleResponse>) responseObserver);
          break;
        default:
          throw new AssertionError();
      }
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public io.grpc.stub.StreamObserver<Req> invoke(
        io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        default:
          throw new AssertionError();
      }
    }
  }

  private static abstract class BudgetBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    BudgetBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return dev.earmark.v1.BudgetProto.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("Budget");
    }
  }

  private static final class BudgetFileDescriptorSupplier
      extends BudgetBaseDescriptorSupplier {
    BudgetFileDescriptorSupplier() {}
  }

  private static final class BudgetMethodDescriptorSupplier
      extends BudgetBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    BudgetMethodDescriptorSupplier(String methodName) {
      this.methodName = methodName;
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.MethodDescriptor getMethodDescriptor() {
      return getServiceDescriptor().findMethodByName(methodName);
    }
  }

  private static volatile io.grpc.ServiceDescriptor serviceDescriptor;

  public static io.grpc.ServiceDescriptor getServiceDescriptor() {
    io.grpc.ServiceDescriptor result = serviceDescriptor;
    if (result == null) {
      synchronized (BudgetGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new BudgetFileDescriptorSupplier())
              .addMethod(getReserveMethod())
              .addMethod(getChargeMethod())
              .addMethod(getRenewMethod())
              .addMethod(getSettleMethod())
              .build();
        }
      }
    }
    return result;
  }
}
