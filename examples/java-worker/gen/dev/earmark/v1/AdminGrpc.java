package dev.earmark.v1;

import static io.grpc.MethodDescriptor.generateFullMethodName;

/**
 * <pre>
 * What operators call.
 * </pre>
 */
@javax.annotation.Generated(
    value = "by gRPC proto compiler",
    comments = "Source: earmark/v1/budget.proto")
@io.grpc.stub.annotations.GrpcGenerated
public final class AdminGrpc {

  private AdminGrpc() {}

  public static final String SERVICE_NAME = "earmark.v1.Admin";

  // Static method descriptors that strictly reflect the proto.
  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.PutBudgetRequest,
      dev.earmark.v1.BudgetState> getPutBudgetMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "PutBudget",
      requestType = dev.earmark.v1.PutBudgetRequest.class,
      responseType = dev.earmark.v1.BudgetState.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.PutBudgetRequest,
      dev.earmark.v1.BudgetState> getPutBudgetMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.PutBudgetRequest, dev.earmark.v1.BudgetState> getPutBudgetMethod;
    if ((getPutBudgetMethod = AdminGrpc.getPutBudgetMethod) == null) {
      synchronized (AdminGrpc.class) {
        if ((getPutBudgetMethod = AdminGrpc.getPutBudgetMethod) == null) {
          AdminGrpc.getPutBudgetMethod = getPutBudgetMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.PutBudgetRequest, dev.earmark.v1.BudgetState>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "PutBudget"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.PutBudgetRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.BudgetState.getDefaultInstance()))
              .setSchemaDescriptor(new AdminMethodDescriptorSupplier("PutBudget"))
              .build();
        }
      }
    }
    return getPutBudgetMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.GetBudgetRequest,
      dev.earmark.v1.BudgetState> getGetBudgetMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "GetBudget",
      requestType = dev.earmark.v1.GetBudgetRequest.class,
      responseType = dev.earmark.v1.BudgetState.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.GetBudgetRequest,
      dev.earmark.v1.BudgetState> getGetBudgetMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.GetBudgetRequest, dev.earmark.v1.BudgetState> getGetBudgetMethod;
    if ((getGetBudgetMethod = AdminGrpc.getGetBudgetMethod) == null) {
      synchronized (AdminGrpc.class) {
        if ((getGetBudgetMethod = AdminGrpc.getGetBudgetMethod) == null) {
          AdminGrpc.getGetBudgetMethod = getGetBudgetMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.GetBudgetRequest, dev.earmark.v1.BudgetState>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "GetBudget"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.GetBudgetRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.BudgetState.getDefaultInstance()))
              .setSchemaDescriptor(new AdminMethodDescriptorSupplier("GetBudget"))
              .build();
        }
      }
    }
    return getGetBudgetMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.PutPriceRequest,
      dev.earmark.v1.Price> getPutPriceMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "PutPrice",
      requestType = dev.earmark.v1.PutPriceRequest.class,
      responseType = dev.earmark.v1.Price.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.PutPriceRequest,
      dev.earmark.v1.Price> getPutPriceMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.PutPriceRequest, dev.earmark.v1.Price> getPutPriceMethod;
    if ((getPutPriceMethod = AdminGrpc.getPutPriceMethod) == null) {
      synchronized (AdminGrpc.class) {
        if ((getPutPriceMethod = AdminGrpc.getPutPriceMethod) == null) {
          AdminGrpc.getPutPriceMethod = getPutPriceMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.PutPriceRequest, dev.earmark.v1.Price>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "PutPrice"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.PutPriceRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.Price.getDefaultInstance()))
              .setSchemaDescriptor(new AdminMethodDescriptorSupplier("PutPrice"))
              .build();
        }
      }
    }
    return getPutPriceMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.ListPricesRequest,
      dev.earmark.v1.ListPricesResponse> getListPricesMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListPrices",
      requestType = dev.earmark.v1.ListPricesRequest.class,
      responseType = dev.earmark.v1.ListPricesResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.ListPricesRequest,
      dev.earmark.v1.ListPricesResponse> getListPricesMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.ListPricesRequest, dev.earmark.v1.ListPricesResponse> getListPricesMethod;
    if ((getListPricesMethod = AdminGrpc.getListPricesMethod) == null) {
      synchronized (AdminGrpc.class) {
        if ((getListPricesMethod = AdminGrpc.getListPricesMethod) == null) {
          AdminGrpc.getListPricesMethod = getListPricesMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.ListPricesRequest, dev.earmark.v1.ListPricesResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListPrices"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ListPricesRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ListPricesResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminMethodDescriptorSupplier("ListPrices"))
              .build();
        }
      }
    }
    return getListPricesMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.ListCyclesRequest,
      dev.earmark.v1.ListCyclesResponse> getListCyclesMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListCycles",
      requestType = dev.earmark.v1.ListCyclesRequest.class,
      responseType = dev.earmark.v1.ListCyclesResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.ListCyclesRequest,
      dev.earmark.v1.ListCyclesResponse> getListCyclesMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.ListCyclesRequest, dev.earmark.v1.ListCyclesResponse> getListCyclesMethod;
    if ((getListCyclesMethod = AdminGrpc.getListCyclesMethod) == null) {
      synchronized (AdminGrpc.class) {
        if ((getListCyclesMethod = AdminGrpc.getListCyclesMethod) == null) {
          AdminGrpc.getListCyclesMethod = getListCyclesMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.ListCyclesRequest, dev.earmark.v1.ListCyclesResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListCycles"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ListCyclesRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ListCyclesResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminMethodDescriptorSupplier("ListCycles"))
              .build();
        }
      }
    }
    return getListCyclesMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.RefreshLimitsRequest,
      dev.earmark.v1.ListCyclesResponse> getRefreshLimitsMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "RefreshLimits",
      requestType = dev.earmark.v1.RefreshLimitsRequest.class,
      responseType = dev.earmark.v1.ListCyclesResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.RefreshLimitsRequest,
      dev.earmark.v1.ListCyclesResponse> getRefreshLimitsMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.RefreshLimitsRequest, dev.earmark.v1.ListCyclesResponse> getRefreshLimitsMethod;
    if ((getRefreshLimitsMethod = AdminGrpc.getRefreshLimitsMethod) == null) {
      synchronized (AdminGrpc.class) {
        if ((getRefreshLimitsMethod = AdminGrpc.getRefreshLimitsMethod) == null) {
          AdminGrpc.getRefreshLimitsMethod = getRefreshLimitsMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.RefreshLimitsRequest, dev.earmark.v1.ListCyclesResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "RefreshLimits"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.RefreshLimitsRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ListCyclesResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminMethodDescriptorSupplier("RefreshLimits"))
              .build();
        }
      }
    }
    return getRefreshLimitsMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.ListHoldsRequest,
      dev.earmark.v1.ListHoldsResponse> getListHoldsMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListHolds",
      requestType = dev.earmark.v1.ListHoldsRequest.class,
      responseType = dev.earmark.v1.ListHoldsResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.ListHoldsRequest,
      dev.earmark.v1.ListHoldsResponse> getListHoldsMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.ListHoldsRequest, dev.earmark.v1.ListHoldsResponse> getListHoldsMethod;
    if ((getListHoldsMethod = AdminGrpc.getListHoldsMethod) == null) {
      synchronized (AdminGrpc.class) {
        if ((getListHoldsMethod = AdminGrpc.getListHoldsMethod) == null) {
          AdminGrpc.getListHoldsMethod = getListHoldsMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.ListHoldsRequest, dev.earmark.v1.ListHoldsResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListHolds"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ListHoldsRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ListHoldsResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminMethodDescriptorSupplier("ListHolds"))
              .build();
        }
      }
    }
    return getListHoldsMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.ListLedgerRequest,
      dev.earmark.v1.ListLedgerResponse> getListLedgerMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListLedger",
      requestType = dev.earmark.v1.ListLedgerRequest.class,
      responseType = dev.earmark.v1.ListLedgerResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.ListLedgerRequest,
      dev.earmark.v1.ListLedgerResponse> getListLedgerMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.ListLedgerRequest, dev.earmark.v1.ListLedgerResponse> getListLedgerMethod;
    if ((getListLedgerMethod = AdminGrpc.getListLedgerMethod) == null) {
      synchronized (AdminGrpc.class) {
        if ((getListLedgerMethod = AdminGrpc.getListLedgerMethod) == null) {
          AdminGrpc.getListLedgerMethod = getListLedgerMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.ListLedgerRequest, dev.earmark.v1.ListLedgerResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListLedger"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ListLedgerRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ListLedgerResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminMethodDescriptorSupplier("ListLedger"))
              .build();
        }
      }
    }
    return getListLedgerMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.ResolveHoldRequest,
      dev.earmark.v1.SettleResponse> getResolveHoldMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ResolveHold",
      requestType = dev.earmark.v1.ResolveHoldRequest.class,
      responseType = dev.earmark.v1.SettleResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.ResolveHoldRequest,
      dev.earmark.v1.SettleResponse> getResolveHoldMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.ResolveHoldRequest, dev.earmark.v1.SettleResponse> getResolveHoldMethod;
    if ((getResolveHoldMethod = AdminGrpc.getResolveHoldMethod) == null) {
      synchronized (AdminGrpc.class) {
        if ((getResolveHoldMethod = AdminGrpc.getResolveHoldMethod) == null) {
          AdminGrpc.getResolveHoldMethod = getResolveHoldMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.ResolveHoldRequest, dev.earmark.v1.SettleResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ResolveHold"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ResolveHoldRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.SettleResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminMethodDescriptorSupplier("ResolveHold"))
              .build();
        }
      }
    }
    return getResolveHoldMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.ReleaseHoldRequest,
      dev.earmark.v1.SettleResponse> getReleaseHoldMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ReleaseHold",
      requestType = dev.earmark.v1.ReleaseHoldRequest.class,
      responseType = dev.earmark.v1.SettleResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.ReleaseHoldRequest,
      dev.earmark.v1.SettleResponse> getReleaseHoldMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.ReleaseHoldRequest, dev.earmark.v1.SettleResponse> getReleaseHoldMethod;
    if ((getReleaseHoldMethod = AdminGrpc.getReleaseHoldMethod) == null) {
      synchronized (AdminGrpc.class) {
        if ((getReleaseHoldMethod = AdminGrpc.getReleaseHoldMethod) == null) {
          AdminGrpc.getReleaseHoldMethod = getReleaseHoldMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.ReleaseHoldRequest, dev.earmark.v1.SettleResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ReleaseHold"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ReleaseHoldRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.SettleResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminMethodDescriptorSupplier("ReleaseHold"))
              .build();
        }
      }
    }
    return getReleaseHoldMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.DeleteBudgetRequest,
      dev.earmark.v1.BudgetState> getDeleteBudgetMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "DeleteBudget",
      requestType = dev.earmark.v1.DeleteBudgetRequest.class,
      responseType = dev.earmark.v1.BudgetState.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.DeleteBudgetRequest,
      dev.earmark.v1.BudgetState> getDeleteBudgetMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.DeleteBudgetRequest, dev.earmark.v1.BudgetState> getDeleteBudgetMethod;
    if ((getDeleteBudgetMethod = AdminGrpc.getDeleteBudgetMethod) == null) {
      synchronized (AdminGrpc.class) {
        if ((getDeleteBudgetMethod = AdminGrpc.getDeleteBudgetMethod) == null) {
          AdminGrpc.getDeleteBudgetMethod = getDeleteBudgetMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.DeleteBudgetRequest, dev.earmark.v1.BudgetState>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "DeleteBudget"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.DeleteBudgetRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.BudgetState.getDefaultInstance()))
              .setSchemaDescriptor(new AdminMethodDescriptorSupplier("DeleteBudget"))
              .build();
        }
      }
    }
    return getDeleteBudgetMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.ListBudgetsRequest,
      dev.earmark.v1.ListBudgetsResponse> getListBudgetsMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListBudgets",
      requestType = dev.earmark.v1.ListBudgetsRequest.class,
      responseType = dev.earmark.v1.ListBudgetsResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.ListBudgetsRequest,
      dev.earmark.v1.ListBudgetsResponse> getListBudgetsMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.ListBudgetsRequest, dev.earmark.v1.ListBudgetsResponse> getListBudgetsMethod;
    if ((getListBudgetsMethod = AdminGrpc.getListBudgetsMethod) == null) {
      synchronized (AdminGrpc.class) {
        if ((getListBudgetsMethod = AdminGrpc.getListBudgetsMethod) == null) {
          AdminGrpc.getListBudgetsMethod = getListBudgetsMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.ListBudgetsRequest, dev.earmark.v1.ListBudgetsResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListBudgets"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ListBudgetsRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ListBudgetsResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminMethodDescriptorSupplier("ListBudgets"))
              .build();
        }
      }
    }
    return getListBudgetsMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.ListCallsRequest,
      dev.earmark.v1.ListCallsResponse> getListCallsMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListCalls",
      requestType = dev.earmark.v1.ListCallsRequest.class,
      responseType = dev.earmark.v1.ListCallsResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.ListCallsRequest,
      dev.earmark.v1.ListCallsResponse> getListCallsMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.ListCallsRequest, dev.earmark.v1.ListCallsResponse> getListCallsMethod;
    if ((getListCallsMethod = AdminGrpc.getListCallsMethod) == null) {
      synchronized (AdminGrpc.class) {
        if ((getListCallsMethod = AdminGrpc.getListCallsMethod) == null) {
          AdminGrpc.getListCallsMethod = getListCallsMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.ListCallsRequest, dev.earmark.v1.ListCallsResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListCalls"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ListCallsRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ListCallsResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminMethodDescriptorSupplier("ListCalls"))
              .build();
        }
      }
    }
    return getListCallsMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.GetSpendRequest,
      dev.earmark.v1.GetSpendResponse> getGetSpendMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "GetSpend",
      requestType = dev.earmark.v1.GetSpendRequest.class,
      responseType = dev.earmark.v1.GetSpendResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.GetSpendRequest,
      dev.earmark.v1.GetSpendResponse> getGetSpendMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.GetSpendRequest, dev.earmark.v1.GetSpendResponse> getGetSpendMethod;
    if ((getGetSpendMethod = AdminGrpc.getGetSpendMethod) == null) {
      synchronized (AdminGrpc.class) {
        if ((getGetSpendMethod = AdminGrpc.getGetSpendMethod) == null) {
          AdminGrpc.getGetSpendMethod = getGetSpendMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.GetSpendRequest, dev.earmark.v1.GetSpendResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "GetSpend"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.GetSpendRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.GetSpendResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminMethodDescriptorSupplier("GetSpend"))
              .build();
        }
      }
    }
    return getGetSpendMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.UpdateBudgetRequest,
      dev.earmark.v1.BudgetState> getUpdateBudgetMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "UpdateBudget",
      requestType = dev.earmark.v1.UpdateBudgetRequest.class,
      responseType = dev.earmark.v1.BudgetState.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.UpdateBudgetRequest,
      dev.earmark.v1.BudgetState> getUpdateBudgetMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.UpdateBudgetRequest, dev.earmark.v1.BudgetState> getUpdateBudgetMethod;
    if ((getUpdateBudgetMethod = AdminGrpc.getUpdateBudgetMethod) == null) {
      synchronized (AdminGrpc.class) {
        if ((getUpdateBudgetMethod = AdminGrpc.getUpdateBudgetMethod) == null) {
          AdminGrpc.getUpdateBudgetMethod = getUpdateBudgetMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.UpdateBudgetRequest, dev.earmark.v1.BudgetState>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "UpdateBudget"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.UpdateBudgetRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.BudgetState.getDefaultInstance()))
              .setSchemaDescriptor(new AdminMethodDescriptorSupplier("UpdateBudget"))
              .build();
        }
      }
    }
    return getUpdateBudgetMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.PutBudgetTemplateRequest,
      dev.earmark.v1.BudgetTemplate> getPutBudgetTemplateMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "PutBudgetTemplate",
      requestType = dev.earmark.v1.PutBudgetTemplateRequest.class,
      responseType = dev.earmark.v1.BudgetTemplate.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.PutBudgetTemplateRequest,
      dev.earmark.v1.BudgetTemplate> getPutBudgetTemplateMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.PutBudgetTemplateRequest, dev.earmark.v1.BudgetTemplate> getPutBudgetTemplateMethod;
    if ((getPutBudgetTemplateMethod = AdminGrpc.getPutBudgetTemplateMethod) == null) {
      synchronized (AdminGrpc.class) {
        if ((getPutBudgetTemplateMethod = AdminGrpc.getPutBudgetTemplateMethod) == null) {
          AdminGrpc.getPutBudgetTemplateMethod = getPutBudgetTemplateMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.PutBudgetTemplateRequest, dev.earmark.v1.BudgetTemplate>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "PutBudgetTemplate"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.PutBudgetTemplateRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.BudgetTemplate.getDefaultInstance()))
              .setSchemaDescriptor(new AdminMethodDescriptorSupplier("PutBudgetTemplate"))
              .build();
        }
      }
    }
    return getPutBudgetTemplateMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.ListBudgetTemplatesRequest,
      dev.earmark.v1.ListBudgetTemplatesResponse> getListBudgetTemplatesMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListBudgetTemplates",
      requestType = dev.earmark.v1.ListBudgetTemplatesRequest.class,
      responseType = dev.earmark.v1.ListBudgetTemplatesResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.ListBudgetTemplatesRequest,
      dev.earmark.v1.ListBudgetTemplatesResponse> getListBudgetTemplatesMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.ListBudgetTemplatesRequest, dev.earmark.v1.ListBudgetTemplatesResponse> getListBudgetTemplatesMethod;
    if ((getListBudgetTemplatesMethod = AdminGrpc.getListBudgetTemplatesMethod) == null) {
      synchronized (AdminGrpc.class) {
        if ((getListBudgetTemplatesMethod = AdminGrpc.getListBudgetTemplatesMethod) == null) {
          AdminGrpc.getListBudgetTemplatesMethod = getListBudgetTemplatesMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.ListBudgetTemplatesRequest, dev.earmark.v1.ListBudgetTemplatesResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListBudgetTemplates"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ListBudgetTemplatesRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ListBudgetTemplatesResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminMethodDescriptorSupplier("ListBudgetTemplates"))
              .build();
        }
      }
    }
    return getListBudgetTemplatesMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.DeleteBudgetTemplateRequest,
      dev.earmark.v1.BudgetTemplate> getDeleteBudgetTemplateMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "DeleteBudgetTemplate",
      requestType = dev.earmark.v1.DeleteBudgetTemplateRequest.class,
      responseType = dev.earmark.v1.BudgetTemplate.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.DeleteBudgetTemplateRequest,
      dev.earmark.v1.BudgetTemplate> getDeleteBudgetTemplateMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.DeleteBudgetTemplateRequest, dev.earmark.v1.BudgetTemplate> getDeleteBudgetTemplateMethod;
    if ((getDeleteBudgetTemplateMethod = AdminGrpc.getDeleteBudgetTemplateMethod) == null) {
      synchronized (AdminGrpc.class) {
        if ((getDeleteBudgetTemplateMethod = AdminGrpc.getDeleteBudgetTemplateMethod) == null) {
          AdminGrpc.getDeleteBudgetTemplateMethod = getDeleteBudgetTemplateMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.DeleteBudgetTemplateRequest, dev.earmark.v1.BudgetTemplate>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "DeleteBudgetTemplate"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.DeleteBudgetTemplateRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.BudgetTemplate.getDefaultInstance()))
              .setSchemaDescriptor(new AdminMethodDescriptorSupplier("DeleteBudgetTemplate"))
              .build();
        }
      }
    }
    return getDeleteBudgetTemplateMethod;
  }

  private static volatile io.grpc.MethodDescriptor<dev.earmark.v1.ListSharesRequest,
      dev.earmark.v1.ListSharesResponse> getListSharesMethod;

  @io.grpc.stub.annotations.RpcMethod(
      fullMethodName = SERVICE_NAME + '/' + "ListShares",
      requestType = dev.earmark.v1.ListSharesRequest.class,
      responseType = dev.earmark.v1.ListSharesResponse.class,
      methodType = io.grpc.MethodDescriptor.MethodType.UNARY)
  public static io.grpc.MethodDescriptor<dev.earmark.v1.ListSharesRequest,
      dev.earmark.v1.ListSharesResponse> getListSharesMethod() {
    io.grpc.MethodDescriptor<dev.earmark.v1.ListSharesRequest, dev.earmark.v1.ListSharesResponse> getListSharesMethod;
    if ((getListSharesMethod = AdminGrpc.getListSharesMethod) == null) {
      synchronized (AdminGrpc.class) {
        if ((getListSharesMethod = AdminGrpc.getListSharesMethod) == null) {
          AdminGrpc.getListSharesMethod = getListSharesMethod =
              io.grpc.MethodDescriptor.<dev.earmark.v1.ListSharesRequest, dev.earmark.v1.ListSharesResponse>newBuilder()
              .setType(io.grpc.MethodDescriptor.MethodType.UNARY)
              .setFullMethodName(generateFullMethodName(SERVICE_NAME, "ListShares"))
              .setSampledToLocalTracing(true)
              .setRequestMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ListSharesRequest.getDefaultInstance()))
              .setResponseMarshaller(io.grpc.protobuf.ProtoUtils.marshaller(
                  dev.earmark.v1.ListSharesResponse.getDefaultInstance()))
              .setSchemaDescriptor(new AdminMethodDescriptorSupplier("ListShares"))
              .build();
        }
      }
    }
    return getListSharesMethod;
  }

  /**
   * Creates a new async stub that supports all call types for the service
   */
  public static AdminStub newStub(io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<AdminStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<AdminStub>() {
        @java.lang.Override
        public AdminStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new AdminStub(channel, callOptions);
        }
      };
    return AdminStub.newStub(factory, channel);
  }

  /**
   * Creates a new blocking-style stub that supports unary and streaming output calls on the service
   */
  public static AdminBlockingStub newBlockingStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<AdminBlockingStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<AdminBlockingStub>() {
        @java.lang.Override
        public AdminBlockingStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new AdminBlockingStub(channel, callOptions);
        }
      };
    return AdminBlockingStub.newStub(factory, channel);
  }

  /**
   * Creates a new ListenableFuture-style stub that supports unary calls on the service
   */
  public static AdminFutureStub newFutureStub(
      io.grpc.Channel channel) {
    io.grpc.stub.AbstractStub.StubFactory<AdminFutureStub> factory =
      new io.grpc.stub.AbstractStub.StubFactory<AdminFutureStub>() {
        @java.lang.Override
        public AdminFutureStub newStub(io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
          return new AdminFutureStub(channel, callOptions);
        }
      };
    return AdminFutureStub.newStub(factory, channel);
  }

  /**
   * <pre>
   * What operators call.
   * </pre>
   */
  public static abstract class AdminImplBase implements io.grpc.BindableService {

    /**
     * <pre>
     * Creates or updates a budget. A new limit applies to the next Reserve.
     * </pre>
     */
    public void putBudget(dev.earmark.v1.PutBudgetRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.BudgetState> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getPutBudgetMethod(), responseObserver);
    }

    /**
     */
    public void getBudget(dev.earmark.v1.GetBudgetRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.BudgetState> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGetBudgetMethod(), responseObserver);
    }

    /**
     * <pre>
     * Appends a price version for a provider's model; versions are never changed or deleted.
     * </pre>
     */
    public void putPrice(dev.earmark.v1.PutPriceRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.Price> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getPutPriceMethod(), responseObserver);
    }

    /**
     * <pre>
     * Every version of every price, or of one provider's (and one model's), oldest first.
     * </pre>
     */
    public void listPrices(dev.earmark.v1.ListPricesRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ListPricesResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListPricesMethod(), responseObserver);
    }

    /**
     * <pre>
     * An account's billing-cycle budgets, newest cycle first.
     * </pre>
     */
    public void listCycles(dev.earmark.v1.ListCyclesRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ListCyclesResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListCyclesMethod(), responseObserver);
    }

    /**
     * <pre>
     * Reads an account's limits from the limits provider now, whatever the cache holds, and
     * applies them to its current cycle's budgets (running holds keep their amounts).
     * </pre>
     */
    public void refreshLimits(dev.earmark.v1.RefreshLimitsRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ListCyclesResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getRefreshLimitsMethod(), responseObserver);
    }

    /**
     * <pre>
     * A budget's holds (those it is the budget_id of, and those that name it in
     * also_budget_ids), in one state or in all, a page at a time in reservation id order.
     * </pre>
     */
    public void listHolds(dev.earmark.v1.ListHoldsRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ListHoldsResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListHoldsMethod(), responseObserver);
    }

    /**
     * <pre>
     * A budget's ledger, oldest entry first, a page at a time.
     * </pre>
     */
    public void listLedger(dev.earmark.v1.ListLedgerRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ListLedgerResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListLedgerMethod(), responseObserver);
    }

    /**
     * <pre>
     * Settles an in-doubt hold at what the operator says was spent; the rest returns to
     * every budget of the hold.
     * </pre>
     */
    public void resolveHold(dev.earmark.v1.ResolveHoldRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.SettleResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getResolveHoldMethod(), responseObserver);
    }

    /**
     * <pre>
     * Closes a held or in-doubt hold that nobody will settle: it keeps what was charged and
     * the rest returns. A worker's late Settle is still recorded, as after an expiry.
     * </pre>
     */
    public void releaseHold(dev.earmark.v1.ReleaseHoldRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.SettleResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getReleaseHoldMethod(), responseObserver);
    }

    /**
     * <pre>
     * Archives a budget with no open holds: it takes no Reserves and no PutBudget any more;
     * its holds and ledger stay readable.
     * </pre>
     */
    public void deleteBudget(dev.earmark.v1.DeleteBudgetRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.BudgetState> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getDeleteBudgetMethod(), responseObserver);
    }

    /**
     * <pre>
     * Every budget (archived ones too), or those whose id starts with a prefix, a page at a
     * time in budget id order.
     * </pre>
     */
    public void listBudgets(dev.earmark.v1.ListBudgetsRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ListBudgetsResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListBudgetsMethod(), responseObserver);
    }

    /**
     * <pre>
     * The provider calls sent in a time range, oldest first, paged: what each was sent to,
     * with which key or project, and the usage it was settled with (earmark reconcile).
     * </pre>
     */
    public void listCalls(dev.earmark.v1.ListCallsRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ListCallsResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListCallsMethod(), responseObserver);
    }

    /**
     * <pre>
     * What a budget spent, from its ledger: the used its entries moved over a time range,
     * summed by the model its holds' calls went to, by the holds' job, or by UTC day.
     * </pre>
     */
    public void getSpend(dev.earmark.v1.GetSpendRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.GetSpendResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getGetSpendMethod(), responseObserver);
    }

    /**
     * <pre>
     * Changes only the fields update_mask names of an existing budget (AIP-134): its other
     * settings stay as they are. Without a mask, the fields budget sets (non-default) are
     * named; "*" names them all, as PutBudget. A budget that does not exist is NOT_FOUND.
     * </pre>
     */
    public void updateBudget(dev.earmark.v1.UpdateBudgetRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.BudgetState> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getUpdateBudgetMethod(), responseObserver);
    }

    /**
     * <pre>
     * Creates or replaces a template: a Reserve (or a gated or metered call) naming a budget
     * that does not exist but whose id matches the pattern creates it from the template, in
     * the transaction that decides the admission. A changed template reaches the budgets made
     * from it at their next period, unless an operator changed them by hand.
     * </pre>
     */
    public void putBudgetTemplate(dev.earmark.v1.PutBudgetTemplateRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.BudgetTemplate> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getPutBudgetTemplateMethod(), responseObserver);
    }

    /**
     * <pre>
     * Every template, in template id order (at most 100 exist).
     * </pre>
     */
    public void listBudgetTemplates(dev.earmark.v1.ListBudgetTemplatesRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ListBudgetTemplatesResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListBudgetTemplatesMethod(), responseObserver);
    }

    /**
     * <pre>
     * Removes a template: no budget is made from it any more; those made stay as they are.
     * </pre>
     */
    public void deleteBudgetTemplate(dev.earmark.v1.DeleteBudgetTemplateRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.BudgetTemplate> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getDeleteBudgetTemplateMethod(), responseObserver);
    }

    /**
     * <pre>
     * Budgets across regions (issue 48, docs/regions.md): at a budget's home, each region's
     * share of it; in a region, its shares of budgets homed elsewhere. By budget id, then
     * region; at most 1,000 a call (next_budget_id pages on).
     * </pre>
     */
    public void listShares(dev.earmark.v1.ListSharesRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ListSharesResponse> responseObserver) {
      io.grpc.stub.ServerCalls.asyncUnimplementedUnaryCall(getListSharesMethod(), responseObserver);
    }

    @java.lang.Override public final io.grpc.ServerServiceDefinition bindService() {
      return io.grpc.ServerServiceDefinition.builder(getServiceDescriptor())
          .addMethod(
            getPutBudgetMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.PutBudgetRequest,
                dev.earmark.v1.BudgetState>(
                  this, METHODID_PUT_BUDGET)))
          .addMethod(
            getGetBudgetMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.GetBudgetRequest,
                dev.earmark.v1.BudgetState>(
                  this, METHODID_GET_BUDGET)))
          .addMethod(
            getPutPriceMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.PutPriceRequest,
                dev.earmark.v1.Price>(
                  this, METHODID_PUT_PRICE)))
          .addMethod(
            getListPricesMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.ListPricesRequest,
                dev.earmark.v1.ListPricesResponse>(
                  this, METHODID_LIST_PRICES)))
          .addMethod(
            getListCyclesMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.ListCyclesRequest,
                dev.earmark.v1.ListCyclesResponse>(
                  this, METHODID_LIST_CYCLES)))
          .addMethod(
            getRefreshLimitsMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.RefreshLimitsRequest,
                dev.earmark.v1.ListCyclesResponse>(
                  this, METHODID_REFRESH_LIMITS)))
          .addMethod(
            getListHoldsMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.ListHoldsRequest,
                dev.earmark.v1.ListHoldsResponse>(
                  this, METHODID_LIST_HOLDS)))
          .addMethod(
            getListLedgerMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.ListLedgerRequest,
                dev.earmark.v1.ListLedgerResponse>(
                  this, METHODID_LIST_LEDGER)))
          .addMethod(
            getResolveHoldMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.ResolveHoldRequest,
                dev.earmark.v1.SettleResponse>(
                  this, METHODID_RESOLVE_HOLD)))
          .addMethod(
            getReleaseHoldMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.ReleaseHoldRequest,
                dev.earmark.v1.SettleResponse>(
                  this, METHODID_RELEASE_HOLD)))
          .addMethod(
            getDeleteBudgetMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.DeleteBudgetRequest,
                dev.earmark.v1.BudgetState>(
                  this, METHODID_DELETE_BUDGET)))
          .addMethod(
            getListBudgetsMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.ListBudgetsRequest,
                dev.earmark.v1.ListBudgetsResponse>(
                  this, METHODID_LIST_BUDGETS)))
          .addMethod(
            getListCallsMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.ListCallsRequest,
                dev.earmark.v1.ListCallsResponse>(
                  this, METHODID_LIST_CALLS)))
          .addMethod(
            getGetSpendMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.GetSpendRequest,
                dev.earmark.v1.GetSpendResponse>(
                  this, METHODID_GET_SPEND)))
          .addMethod(
            getUpdateBudgetMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.UpdateBudgetRequest,
                dev.earmark.v1.BudgetState>(
                  this, METHODID_UPDATE_BUDGET)))
          .addMethod(
            getPutBudgetTemplateMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.PutBudgetTemplateRequest,
                dev.earmark.v1.BudgetTemplate>(
                  this, METHODID_PUT_BUDGET_TEMPLATE)))
          .addMethod(
            getListBudgetTemplatesMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.ListBudgetTemplatesRequest,
                dev.earmark.v1.ListBudgetTemplatesResponse>(
                  this, METHODID_LIST_BUDGET_TEMPLATES)))
          .addMethod(
            getDeleteBudgetTemplateMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.DeleteBudgetTemplateRequest,
                dev.earmark.v1.BudgetTemplate>(
                  this, METHODID_DELETE_BUDGET_TEMPLATE)))
          .addMethod(
            getListSharesMethod(),
            io.grpc.stub.ServerCalls.asyncUnaryCall(
              new MethodHandlers<
                dev.earmark.v1.ListSharesRequest,
                dev.earmark.v1.ListSharesResponse>(
                  this, METHODID_LIST_SHARES)))
          .build();
    }
  }

  /**
   * <pre>
   * What operators call.
   * </pre>
   */
  public static final class AdminStub extends io.grpc.stub.AbstractAsyncStub<AdminStub> {
    private AdminStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected AdminStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new AdminStub(channel, callOptions);
    }

    /**
     * <pre>
     * Creates or updates a budget. A new limit applies to the next Reserve.
     * </pre>
     */
    public void putBudget(dev.earmark.v1.PutBudgetRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.BudgetState> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getPutBudgetMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     */
    public void getBudget(dev.earmark.v1.GetBudgetRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.BudgetState> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getGetBudgetMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Appends a price version for a provider's model; versions are never changed or deleted.
     * </pre>
     */
    public void putPrice(dev.earmark.v1.PutPriceRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.Price> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getPutPriceMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Every version of every price, or of one provider's (and one model's), oldest first.
     * </pre>
     */
    public void listPrices(dev.earmark.v1.ListPricesRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ListPricesResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListPricesMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * An account's billing-cycle budgets, newest cycle first.
     * </pre>
     */
    public void listCycles(dev.earmark.v1.ListCyclesRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ListCyclesResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListCyclesMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Reads an account's limits from the limits provider now, whatever the cache holds, and
     * applies them to its current cycle's budgets (running holds keep their amounts).
     * </pre>
     */
    public void refreshLimits(dev.earmark.v1.RefreshLimitsRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ListCyclesResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getRefreshLimitsMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * A budget's holds (those it is the budget_id of, and those that name it in
     * also_budget_ids), in one state or in all, a page at a time in reservation id order.
     * </pre>
     */
    public void listHolds(dev.earmark.v1.ListHoldsRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ListHoldsResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListHoldsMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * A budget's ledger, oldest entry first, a page at a time.
     * </pre>
     */
    public void listLedger(dev.earmark.v1.ListLedgerRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ListLedgerResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListLedgerMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Settles an in-doubt hold at what the operator says was spent; the rest returns to
     * every budget of the hold.
     * </pre>
     */
    public void resolveHold(dev.earmark.v1.ResolveHoldRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.SettleResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getResolveHoldMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Closes a held or in-doubt hold that nobody will settle: it keeps what was charged and
     * the rest returns. A worker's late Settle is still recorded, as after an expiry.
     * </pre>
     */
    public void releaseHold(dev.earmark.v1.ReleaseHoldRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.SettleResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getReleaseHoldMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Archives a budget with no open holds: it takes no Reserves and no PutBudget any more;
     * its holds and ledger stay readable.
     * </pre>
     */
    public void deleteBudget(dev.earmark.v1.DeleteBudgetRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.BudgetState> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getDeleteBudgetMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Every budget (archived ones too), or those whose id starts with a prefix, a page at a
     * time in budget id order.
     * </pre>
     */
    public void listBudgets(dev.earmark.v1.ListBudgetsRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ListBudgetsResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListBudgetsMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * The provider calls sent in a time range, oldest first, paged: what each was sent to,
     * with which key or project, and the usage it was settled with (earmark reconcile).
     * </pre>
     */
    public void listCalls(dev.earmark.v1.ListCallsRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ListCallsResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListCallsMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * What a budget spent, from its ledger: the used its entries moved over a time range,
     * summed by the model its holds' calls went to, by the holds' job, or by UTC day.
     * </pre>
     */
    public void getSpend(dev.earmark.v1.GetSpendRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.GetSpendResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getGetSpendMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Changes only the fields update_mask names of an existing budget (AIP-134): its other
     * settings stay as they are. Without a mask, the fields budget sets (non-default) are
     * named; "*" names them all, as PutBudget. A budget that does not exist is NOT_FOUND.
     * </pre>
     */
    public void updateBudget(dev.earmark.v1.UpdateBudgetRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.BudgetState> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getUpdateBudgetMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Creates or replaces a template: a Reserve (or a gated or metered call) naming a budget
     * that does not exist but whose id matches the pattern creates it from the template, in
     * the transaction that decides the admission. A changed template reaches the budgets made
     * from it at their next period, unless an operator changed them by hand.
     * </pre>
     */
    public void putBudgetTemplate(dev.earmark.v1.PutBudgetTemplateRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.BudgetTemplate> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getPutBudgetTemplateMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Every template, in template id order (at most 100 exist).
     * </pre>
     */
    public void listBudgetTemplates(dev.earmark.v1.ListBudgetTemplatesRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ListBudgetTemplatesResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListBudgetTemplatesMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Removes a template: no budget is made from it any more; those made stay as they are.
     * </pre>
     */
    public void deleteBudgetTemplate(dev.earmark.v1.DeleteBudgetTemplateRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.BudgetTemplate> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getDeleteBudgetTemplateMethod(), getCallOptions()), request, responseObserver);
    }

    /**
     * <pre>
     * Budgets across regions (issue 48, docs/regions.md): at a budget's home, each region's
     * share of it; in a region, its shares of budgets homed elsewhere. By budget id, then
     * region; at most 1,000 a call (next_budget_id pages on).
     * </pre>
     */
    public void listShares(dev.earmark.v1.ListSharesRequest request,
        io.grpc.stub.StreamObserver<dev.earmark.v1.ListSharesResponse> responseObserver) {
      io.grpc.stub.ClientCalls.asyncUnaryCall(
          getChannel().newCall(getListSharesMethod(), getCallOptions()), request, responseObserver);
    }
  }

  /**
   * <pre>
   * What operators call.
   * </pre>
   */
  public static final class AdminBlockingStub extends io.grpc.stub.AbstractBlockingStub<AdminBlockingStub> {
    private AdminBlockingStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected AdminBlockingStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new AdminBlockingStub(channel, callOptions);
    }

    /**
     * <pre>
     * Creates or updates a budget. A new limit applies to the next Reserve.
     * </pre>
     */
    public dev.earmark.v1.BudgetState putBudget(dev.earmark.v1.PutBudgetRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getPutBudgetMethod(), getCallOptions(), request);
    }

    /**
     */
    public dev.earmark.v1.BudgetState getBudget(dev.earmark.v1.GetBudgetRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getGetBudgetMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Appends a price version for a provider's model; versions are never changed or deleted.
     * </pre>
     */
    public dev.earmark.v1.Price putPrice(dev.earmark.v1.PutPriceRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getPutPriceMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Every version of every price, or of one provider's (and one model's), oldest first.
     * </pre>
     */
    public dev.earmark.v1.ListPricesResponse listPrices(dev.earmark.v1.ListPricesRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListPricesMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * An account's billing-cycle budgets, newest cycle first.
     * </pre>
     */
    public dev.earmark.v1.ListCyclesResponse listCycles(dev.earmark.v1.ListCyclesRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListCyclesMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Reads an account's limits from the limits provider now, whatever the cache holds, and
     * applies them to its current cycle's budgets (running holds keep their amounts).
     * </pre>
     */
    public dev.earmark.v1.ListCyclesResponse refreshLimits(dev.earmark.v1.RefreshLimitsRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getRefreshLimitsMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * A budget's holds (those it is the budget_id of, and those that name it in
     * also_budget_ids), in one state or in all, a page at a time in reservation id order.
     * </pre>
     */
    public dev.earmark.v1.ListHoldsResponse listHolds(dev.earmark.v1.ListHoldsRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListHoldsMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * A budget's ledger, oldest entry first, a page at a time.
     * </pre>
     */
    public dev.earmark.v1.ListLedgerResponse listLedger(dev.earmark.v1.ListLedgerRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListLedgerMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Settles an in-doubt hold at what the operator says was spent; the rest returns to
     * every budget of the hold.
     * </pre>
     */
    public dev.earmark.v1.SettleResponse resolveHold(dev.earmark.v1.ResolveHoldRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getResolveHoldMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Closes a held or in-doubt hold that nobody will settle: it keeps what was charged and
     * the rest returns. A worker's late Settle is still recorded, as after an expiry.
     * </pre>
     */
    public dev.earmark.v1.SettleResponse releaseHold(dev.earmark.v1.ReleaseHoldRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getReleaseHoldMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Archives a budget with no open holds: it takes no Reserves and no PutBudget any more;
     * its holds and ledger stay readable.
     * </pre>
     */
    public dev.earmark.v1.BudgetState deleteBudget(dev.earmark.v1.DeleteBudgetRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getDeleteBudgetMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Every budget (archived ones too), or those whose id starts with a prefix, a page at a
     * time in budget id order.
     * </pre>
     */
    public dev.earmark.v1.ListBudgetsResponse listBudgets(dev.earmark.v1.ListBudgetsRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListBudgetsMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * The provider calls sent in a time range, oldest first, paged: what each was sent to,
     * with which key or project, and the usage it was settled with (earmark reconcile).
     * </pre>
     */
    public dev.earmark.v1.ListCallsResponse listCalls(dev.earmark.v1.ListCallsRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListCallsMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * What a budget spent, from its ledger: the used its entries moved over a time range,
     * summed by the model its holds' calls went to, by the holds' job, or by UTC day.
     * </pre>
     */
    public dev.earmark.v1.GetSpendResponse getSpend(dev.earmark.v1.GetSpendRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getGetSpendMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Changes only the fields update_mask names of an existing budget (AIP-134): its other
     * settings stay as they are. Without a mask, the fields budget sets (non-default) are
     * named; "*" names them all, as PutBudget. A budget that does not exist is NOT_FOUND.
     * </pre>
     */
    public dev.earmark.v1.BudgetState updateBudget(dev.earmark.v1.UpdateBudgetRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getUpdateBudgetMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Creates or replaces a template: a Reserve (or a gated or metered call) naming a budget
     * that does not exist but whose id matches the pattern creates it from the template, in
     * the transaction that decides the admission. A changed template reaches the budgets made
     * from it at their next period, unless an operator changed them by hand.
     * </pre>
     */
    public dev.earmark.v1.BudgetTemplate putBudgetTemplate(dev.earmark.v1.PutBudgetTemplateRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getPutBudgetTemplateMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Every template, in template id order (at most 100 exist).
     * </pre>
     */
    public dev.earmark.v1.ListBudgetTemplatesResponse listBudgetTemplates(dev.earmark.v1.ListBudgetTemplatesRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListBudgetTemplatesMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Removes a template: no budget is made from it any more; those made stay as they are.
     * </pre>
     */
    public dev.earmark.v1.BudgetTemplate deleteBudgetTemplate(dev.earmark.v1.DeleteBudgetTemplateRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getDeleteBudgetTemplateMethod(), getCallOptions(), request);
    }

    /**
     * <pre>
     * Budgets across regions (issue 48, docs/regions.md): at a budget's home, each region's
     * share of it; in a region, its shares of budgets homed elsewhere. By budget id, then
     * region; at most 1,000 a call (next_budget_id pages on).
     * </pre>
     */
    public dev.earmark.v1.ListSharesResponse listShares(dev.earmark.v1.ListSharesRequest request) {
      return io.grpc.stub.ClientCalls.blockingUnaryCall(
          getChannel(), getListSharesMethod(), getCallOptions(), request);
    }
  }

  /**
   * <pre>
   * What operators call.
   * </pre>
   */
  public static final class AdminFutureStub extends io.grpc.stub.AbstractFutureStub<AdminFutureStub> {
    private AdminFutureStub(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      super(channel, callOptions);
    }

    @java.lang.Override
    protected AdminFutureStub build(
        io.grpc.Channel channel, io.grpc.CallOptions callOptions) {
      return new AdminFutureStub(channel, callOptions);
    }

    /**
     * <pre>
     * Creates or updates a budget. A new limit applies to the next Reserve.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.BudgetState> putBudget(
        dev.earmark.v1.PutBudgetRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getPutBudgetMethod(), getCallOptions()), request);
    }

    /**
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.BudgetState> getBudget(
        dev.earmark.v1.GetBudgetRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getGetBudgetMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Appends a price version for a provider's model; versions are never changed or deleted.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.Price> putPrice(
        dev.earmark.v1.PutPriceRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getPutPriceMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Every version of every price, or of one provider's (and one model's), oldest first.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.ListPricesResponse> listPrices(
        dev.earmark.v1.ListPricesRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListPricesMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * An account's billing-cycle budgets, newest cycle first.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.ListCyclesResponse> listCycles(
        dev.earmark.v1.ListCyclesRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListCyclesMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Reads an account's limits from the limits provider now, whatever the cache holds, and
     * applies them to its current cycle's budgets (running holds keep their amounts).
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.ListCyclesResponse> refreshLimits(
        dev.earmark.v1.RefreshLimitsRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getRefreshLimitsMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * A budget's holds (those it is the budget_id of, and those that name it in
     * also_budget_ids), in one state or in all, a page at a time in reservation id order.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.ListHoldsResponse> listHolds(
        dev.earmark.v1.ListHoldsRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListHoldsMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * A budget's ledger, oldest entry first, a page at a time.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.ListLedgerResponse> listLedger(
        dev.earmark.v1.ListLedgerRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListLedgerMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Settles an in-doubt hold at what the operator says was spent; the rest returns to
     * every budget of the hold.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.SettleResponse> resolveHold(
        dev.earmark.v1.ResolveHoldRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getResolveHoldMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Closes a held or in-doubt hold that nobody will settle: it keeps what was charged and
     * the rest returns. A worker's late Settle is still recorded, as after an expiry.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.SettleResponse> releaseHold(
        dev.earmark.v1.ReleaseHoldRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getReleaseHoldMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Archives a budget with no open holds: it takes no Reserves and no PutBudget any more;
     * its holds and ledger stay readable.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.BudgetState> deleteBudget(
        dev.earmark.v1.DeleteBudgetRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getDeleteBudgetMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Every budget (archived ones too), or those whose id starts with a prefix, a page at a
     * time in budget id order.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.ListBudgetsResponse> listBudgets(
        dev.earmark.v1.ListBudgetsRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListBudgetsMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * The provider calls sent in a time range, oldest first, paged: what each was sent to,
     * with which key or project, and the usage it was settled with (earmark reconcile).
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.ListCallsResponse> listCalls(
        dev.earmark.v1.ListCallsRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListCallsMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * What a budget spent, from its ledger: the used its entries moved over a time range,
     * summed by the model its holds' calls went to, by the holds' job, or by UTC day.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.GetSpendResponse> getSpend(
        dev.earmark.v1.GetSpendRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getGetSpendMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Changes only the fields update_mask names of an existing budget (AIP-134): its other
     * settings stay as they are. Without a mask, the fields budget sets (non-default) are
     * named; "*" names them all, as PutBudget. A budget that does not exist is NOT_FOUND.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.BudgetState> updateBudget(
        dev.earmark.v1.UpdateBudgetRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getUpdateBudgetMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Creates or replaces a template: a Reserve (or a gated or metered call) naming a budget
     * that does not exist but whose id matches the pattern creates it from the template, in
     * the transaction that decides the admission. A changed template reaches the budgets made
     * from it at their next period, unless an operator changed them by hand.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.BudgetTemplate> putBudgetTemplate(
        dev.earmark.v1.PutBudgetTemplateRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getPutBudgetTemplateMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Every template, in template id order (at most 100 exist).
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.ListBudgetTemplatesResponse> listBudgetTemplates(
        dev.earmark.v1.ListBudgetTemplatesRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListBudgetTemplatesMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Removes a template: no budget is made from it any more; those made stay as they are.
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.BudgetTemplate> deleteBudgetTemplate(
        dev.earmark.v1.DeleteBudgetTemplateRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getDeleteBudgetTemplateMethod(), getCallOptions()), request);
    }

    /**
     * <pre>
     * Budgets across regions (issue 48, docs/regions.md): at a budget's home, each region's
     * share of it; in a region, its shares of budgets homed elsewhere. By budget id, then
     * region; at most 1,000 a call (next_budget_id pages on).
     * </pre>
     */
    public com.google.common.util.concurrent.ListenableFuture<dev.earmark.v1.ListSharesResponse> listShares(
        dev.earmark.v1.ListSharesRequest request) {
      return io.grpc.stub.ClientCalls.futureUnaryCall(
          getChannel().newCall(getListSharesMethod(), getCallOptions()), request);
    }
  }

  private static final int METHODID_PUT_BUDGET = 0;
  private static final int METHODID_GET_BUDGET = 1;
  private static final int METHODID_PUT_PRICE = 2;
  private static final int METHODID_LIST_PRICES = 3;
  private static final int METHODID_LIST_CYCLES = 4;
  private static final int METHODID_REFRESH_LIMITS = 5;
  private static final int METHODID_LIST_HOLDS = 6;
  private static final int METHODID_LIST_LEDGER = 7;
  private static final int METHODID_RESOLVE_HOLD = 8;
  private static final int METHODID_RELEASE_HOLD = 9;
  private static final int METHODID_DELETE_BUDGET = 10;
  private static final int METHODID_LIST_BUDGETS = 11;
  private static final int METHODID_LIST_CALLS = 12;
  private static final int METHODID_GET_SPEND = 13;
  private static final int METHODID_UPDATE_BUDGET = 14;
  private static final int METHODID_PUT_BUDGET_TEMPLATE = 15;
  private static final int METHODID_LIST_BUDGET_TEMPLATES = 16;
  private static final int METHODID_DELETE_BUDGET_TEMPLATE = 17;
  private static final int METHODID_LIST_SHARES = 18;

  private static final class MethodHandlers<Req, Resp> implements
      io.grpc.stub.ServerCalls.UnaryMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ServerStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.ClientStreamingMethod<Req, Resp>,
      io.grpc.stub.ServerCalls.BidiStreamingMethod<Req, Resp> {
    private final AdminImplBase serviceImpl;
    private final int methodId;

    MethodHandlers(AdminImplBase serviceImpl, int methodId) {
      this.serviceImpl = serviceImpl;
      this.methodId = methodId;
    }

    @java.lang.Override
    @java.lang.SuppressWarnings("unchecked")
    public void invoke(Req request, io.grpc.stub.StreamObserver<Resp> responseObserver) {
      switch (methodId) {
        case METHODID_PUT_BUDGET:
          serviceImpl.putBudget((dev.earmark.v1.PutBudgetRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.BudgetState>) responseObserver);
          break;
        case METHODID_GET_BUDGET:
          serviceImpl.getBudget((dev.earmark.v1.GetBudgetRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.BudgetState>) responseObserver);
          break;
        case METHODID_PUT_PRICE:
          serviceImpl.putPrice((dev.earmark.v1.PutPriceRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.Price>) responseObserver);
          break;
        case METHODID_LIST_PRICES:
          serviceImpl.listPrices((dev.earmark.v1.ListPricesRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.ListPricesResponse>) responseObserver);
          break;
        case METHODID_LIST_CYCLES:
          serviceImpl.listCycles((dev.earmark.v1.ListCyclesRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.ListCyclesResponse>) responseObserver);
          break;
        case METHODID_REFRESH_LIMITS:
          serviceImpl.refreshLimits((dev.earmark.v1.RefreshLimitsRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.ListCyclesResponse>) responseObserver);
          break;
        case METHODID_LIST_HOLDS:
          serviceImpl.listHolds((dev.earmark.v1.ListHoldsRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.ListHoldsResponse>) responseObserver);
          break;
        case METHODID_LIST_LEDGER:
          serviceImpl.listLedger((dev.earmark.v1.ListLedgerRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.ListLedgerResponse>) responseObserver);
          break;
        case METHODID_RESOLVE_HOLD:
          serviceImpl.resolveHold((dev.earmark.v1.ResolveHoldRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.SettleResponse>) responseObserver);
          break;
        case METHODID_RELEASE_HOLD:
          serviceImpl.releaseHold((dev.earmark.v1.ReleaseHoldRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.SettleResponse>) responseObserver);
          break;
        case METHODID_DELETE_BUDGET:
          serviceImpl.deleteBudget((dev.earmark.v1.DeleteBudgetRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.BudgetState>) responseObserver);
          break;
        case METHODID_LIST_BUDGETS:
          serviceImpl.listBudgets((dev.earmark.v1.ListBudgetsRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.ListBudgetsResponse>) responseObserver);
          break;
        case METHODID_LIST_CALLS:
          serviceImpl.listCalls((dev.earmark.v1.ListCallsRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.ListCallsResponse>) responseObserver);
          break;
        case METHODID_GET_SPEND:
          serviceImpl.getSpend((dev.earmark.v1.GetSpendRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.GetSpendResponse>) responseObserver);
          break;
        case METHODID_UPDATE_BUDGET:
          serviceImpl.updateBudget((dev.earmark.v1.UpdateBudgetRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.BudgetState>) responseObserver);
          break;
        case METHODID_PUT_BUDGET_TEMPLATE:
          serviceImpl.putBudgetTemplate((dev.earmark.v1.PutBudgetTemplateRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.BudgetTemplate>) responseObserver);
          break;
        case METHODID_LIST_BUDGET_TEMPLATES:
          serviceImpl.listBudgetTemplates((dev.earmark.v1.ListBudgetTemplatesRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.ListBudgetTemplatesResponse>) responseObserver);
          break;
        case METHODID_DELETE_BUDGET_TEMPLATE:
          serviceImpl.deleteBudgetTemplate((dev.earmark.v1.DeleteBudgetTemplateRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.BudgetTemplate>) responseObserver);
          break;
        case METHODID_LIST_SHARES:
          serviceImpl.listShares((dev.earmark.v1.ListSharesRequest) request,
              (io.grpc.stub.StreamObserver<dev.earmark.v1.ListSharesResponse>) responseObserver);
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

  private static abstract class AdminBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoFileDescriptorSupplier, io.grpc.protobuf.ProtoServiceDescriptorSupplier {
    AdminBaseDescriptorSupplier() {}

    @java.lang.Override
    public com.google.protobuf.Descriptors.FileDescriptor getFileDescriptor() {
      return dev.earmark.v1.BudgetProto.getDescriptor();
    }

    @java.lang.Override
    public com.google.protobuf.Descriptors.ServiceDescriptor getServiceDescriptor() {
      return getFileDescriptor().findServiceByName("Admin");
    }
  }

  private static final class AdminFileDescriptorSupplier
      extends AdminBaseDescriptorSupplier {
    AdminFileDescriptorSupplier() {}
  }

  private static final class AdminMethodDescriptorSupplier
      extends AdminBaseDescriptorSupplier
      implements io.grpc.protobuf.ProtoMethodDescriptorSupplier {
    private final String methodName;

    AdminMethodDescriptorSupplier(String methodName) {
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
      synchronized (AdminGrpc.class) {
        result = serviceDescriptor;
        if (result == null) {
          serviceDescriptor = result = io.grpc.ServiceDescriptor.newBuilder(SERVICE_NAME)
              .setSchemaDescriptor(new AdminFileDescriptorSupplier())
              .addMethod(getPutBudgetMethod())
              .addMethod(getGetBudgetMethod())
              .addMethod(getPutPriceMethod())
              .addMethod(getListPricesMethod())
              .addMethod(getListCyclesMethod())
              .addMethod(getRefreshLimitsMethod())
              .addMethod(getListHoldsMethod())
              .addMethod(getListLedgerMethod())
              .addMethod(getResolveHoldMethod())
              .addMethod(getReleaseHoldMethod())
              .addMethod(getDeleteBudgetMethod())
              .addMethod(getListBudgetsMethod())
              .addMethod(getListCallsMethod())
              .addMethod(getGetSpendMethod())
              .addMethod(getUpdateBudgetMethod())
              .addMethod(getPutBudgetTemplateMethod())
              .addMethod(getListBudgetTemplatesMethod())
              .addMethod(getDeleteBudgetTemplateMethod())
              .addMethod(getListSharesMethod())
              .build();
        }
      }
    }
    return result;
  }
}
