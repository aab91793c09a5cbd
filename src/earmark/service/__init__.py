"""grpc.aio servicers: validate, call the store, build the reply."""
