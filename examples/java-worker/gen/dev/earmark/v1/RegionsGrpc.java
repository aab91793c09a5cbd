package dev.earmark.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 * <pre>
 * What a region's sidecars call on the home of the budgets they admit from (issue 48,
 * docs/regions.md), on the home's region listener. A region holds a share of each budget:
 * an escrow with a lease that it admits from alone.
 * </pre>
 */
@javax.annotation.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: earmark/v1/budget.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class RegionsGrpc {

  private RegionsGrpc() {}

  public static final String SERVICE_NAME = "earmark.v1.Regions";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.ShareRequest,
      dev.earmark.v1.ShareResponse> getShareMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "Share",
      requestType = dev.earmark.v1.ShareRequest.class,
      responseType = dev.earmark.v1.ShareResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.ShareRequest,
      dev.earmark.v1.ShareResponse> getShareMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.ShareRequest, dev.earmark.v1.ShareResponse> getShareMethod;
    if ((getShareMethod = RegionsGrpc.getShareMethod) == null) {
      synchronized (RegionsGrpc.class) {
        if ((getShareMethod = RegionsGrpc.getShareMethod) == null) {
          RegionsGrpc.getShareMethod = getShareMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.ShareRequest, dev.earmark.v1.ShareResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "Share"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ShareRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ShareResponse.getDefaultInstance()))
              .setSchemaDescriptor(new RegionsMethodDescriptorSupplier("Share"))
              .build();
        }
      }
    }
    return getShareMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static RegionsStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<RegionsStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<RegionsStub>() {
        @java.lang.Override
        public RegionsStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new RegionsStub(channel, callOptions);
        }
      };
    return RegionsStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static RegionsBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<RegionsBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<RegionsBlockingStub>() {
        @java.lang.Override
        public RegionsBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new RegionsBlockingStub(channel, callOptions);
        }
      };
    return RegionsBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static RegionsFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<RegionsFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<RegionsFutureStub>() {
        @java.lang.Override
        public RegionsFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new RegionsFutureStub(channel, callOptions);
        }
      };
    return RegionsFutureStub.newStub(factory, channel);
  }

  /**
   * <pre>
   * What a region's sidecars call on the home of the budgets they admit from (issue 48,
   * docs/regions.md), on the home's region listener. A region holds a share of each budget:
   * an escrow with a lease that it admits from alone.
   * </pre>
   */
  public static abstract class RegionsImplBase implements io.grpc.BindableService {

    /**
     * <pre>
     * Reports a region's use and returns of its shares, renews their leases and asks for
     * more; every count is cumulative, so a lost or repeated call is harmless.
     * </pre>
     */
    public void share(dev.earmark.v1.ShareRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ShareResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getShareMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getShareMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.ShareRequest,
                dev.earmark.v1.ShareResponse>(
                  this, METHODID_SHARE)))
          .build();
    }
  }

  /**
   * <pre>
   * What a region's sidecars call on the home of the budgets they admit from (issue 48,
   * docs/regions.md), on the home's region listener. A region holds a share of each budget:
   * an escrow with a lease that it admits from alone.
   * </pre>
   */
  public static final class RegionsStub extends io.grpc.stub.AbstractAsyncStub<RegionsStub> {
    private RegionsStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected RegionsStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new RegionsStub(channel, callOptions);
    }

    /**
     * <pre>
     * Reports a region's use and returns of its shares, renews their leases and asks for
     * more; every count is cumulative, so a lost or repeated call is harmless.
     * </pre>
     */
    public void share(dev.earmark.v1.ShareRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ShareResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getShareMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   * <pre>
   * What a region's sidecars call on the home of the budgets they admit from (issue 48,
   * docs/regions.md), on the home's region listener. A region holds a share of each budget:
   * an escrow with a lease that it admits from alone.
   * </pre>
   */
  public static final class RegionsBlockingStub extends io.grpc.stub.AbstractBlockingStub<RegionsBlockingStub> {
    private RegionsBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected RegionsBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new RegionsBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * Reports a region's use and returns of its shares, renews their leases and asks for
     * more; every count is cumulative, so a lost or repeated call is harmless.
     * </pre>
     */
    public dev.earmark.v1.ShareResponse share(dev.earmark.v1.ShareRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getShareMethod(), getCallOptions(), request);
    }
  }

  /**
   * <pre>
   * What a region's sidecars call on the home of the budgets they admit from (issue 48,
   * docs/regions.md), on the home's region listener. A region holds a share of each budget:
   * an escrow with a lease that it admits from alone.
   * </pre>
   */
  public static final class RegionsFutureStub extends io.grpc.stub.AbstractFutureStub<RegionsFutureStub> {
    private RegionsFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected RegionsFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new RegionsFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * Reports a region's use and returns of its shares, renews their leases and asks for
     * more; every count is cumulative, so a lost or repeated call is harmless.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.ShareResponse> share(
        dev.earmark.v1.ShareRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getShareMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_SHARE = 0;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final RegionsImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(RegionsImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_SHARE:
          serviceImpl.share((dev.earmark.v1.ShareRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.ShareResponse>) responseObserver);
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

  private static abstract class RegionsBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    RegionsBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return dev.earmark.v1.BudgetProto.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("Regions");
    }
  }

  private static final class RegionsFileDescriptorSupplier
      extends RegionsBaseDescriptorSupplier {
    RegionsFileDescriptorSupplier() {}
  }

  private static final class RegionsMethodDescriptorSupplier
      extends RegionsBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    RegionsMethodDescriptorSupplier(String methodName) {
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
      synchronized (RegionsGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new RegionsFileDescriptorSupplier())
              .addMethod(getShareMethod())
              .build();
        }
      }
    }
    return result;
  }
}
